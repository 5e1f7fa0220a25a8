"""The audit pane: who did what and when, newest first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..text import clock_text

if TYPE_CHECKING:
    from ..console_model import ConsoleModel

__all__ = ["COLUMNS", "SORTS", "detail", "order", "rows"]

COLUMNS: tuple[tuple[str, int | None], ...] = (
    ("time", None), ("actor", None), ("action", None), ("target", None), ("result", None))
NAMES = tuple(name for name, _ in COLUMNS)
#: an entry: its time in ms, actor, action, target and result
AuditKey = tuple[str, str, str, str, str]
SORTS = ("newest first",)


def rows(model: ConsoleModel, now: int) -> dict[AuditKey, tuple[str, ...]]:
    """Who did what and when, newest first (an entry repeated in the same millisecond is
    one row)."""
    rows: dict[AuditKey, tuple[str, ...]] = {}
    for t, actor, action, target, result in reversed(model.audit):
        rows.setdefault((str(t), actor, action, target, result),
                        (clock_text(t), actor, action, target, result))
    return rows


def order(model: ConsoleModel, sort: str, now: int) -> list[AuditKey]:
    return list(rows(model, now))  # one order: the rows' own


def detail(model: ConsoleModel, key: AuditKey, now: int
           ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    row = rows(model, now).get(key)
    if row is None:
        return None
    return f"{row[1]}: {row[2]} {row[3]}", list(zip(NAMES, row, strict=True)), []
