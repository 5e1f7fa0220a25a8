"""The lockouts pane: a row a model locked on a key, its kind and time left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....engine.kinds import FailureKind
from ..history_lines import history_line
from ..row_keys import LockoutKey, key_text
from ..text import LONGEST_DURATION, countdown_text, longest

if TYPE_CHECKING:
    from ..console_model import ConsoleModel

__all__ = ["COLUMNS", "SORTS", "detail", "order", "rows"]

COLUMNS: tuple[tuple[str, int | None], ...] = (
    ("provider", None), ("connection", None), ("model", None),
    ("kind", longest(FailureKind)), ("failures", None),
    ("remaining", LONGEST_DURATION),
)
NAMES = tuple(name for name, _ in COLUMNS)
SORTS = ("name", "time left", "failures")


def rows(model: ConsoleModel, now: int) -> dict[LockoutKey, tuple[str, ...]]:
    rows: dict[LockoutKey, tuple[str, ...]] = {}
    for (provider, conn, name), v in sorted(model.lockouts.items()):
        if v.until <= now:
            continue
        rows[provider, conn, name] = (
            provider, conn, name, v.kind, str(v.failures), countdown_text(v.until - now))
    return rows


def order(model: ConsoleModel, sort: str, now: int) -> list[LockoutKey]:
    locks = sorted(model.lockouts.values(),
                   key=lambda lk: -lk.until if sort == "time left" else -lk.failures)
    return [(lk.provider, lk.connection, lk.model) for lk in locks]


def detail(model: ConsoleModel, key: LockoutKey, now: int
           ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    lockout = model.lockouts.get(key)
    found = rows(model, now).get(key)
    if lockout is None or found is None:
        return None
    return (key_text(key), list(zip(NAMES, found, strict=True)),
            [history_line(e) for e in lockout.history])
