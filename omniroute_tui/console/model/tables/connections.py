"""The connections pane: a row a key, its cooldown, backoff level and last error."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....engine.kinds import FailureKind
from ..history_lines import history_line
from ..text import COOLDOWN_KINDS, LONGEST_DURATION, countdown_text, level_gauge, longest

if TYPE_CHECKING:
    from ..console_model import ConsoleModel

__all__ = ["COLUMNS", "SORTS", "detail", "order", "rows"]

COLUMNS: tuple[tuple[str, int | None], ...] = (
    ("provider", None), ("connection", None),
    ("cooldown", 2 + LONGEST_DURATION + 1 + longest([*COOLDOWN_KINDS, "disabled"])),
    ("backoff", None),
    ("last error", longest(FailureKind) + len(" (429)")),
    ("key", None),
)
NAMES = tuple(name for name, _ in COLUMNS)
SORTS = ("config order", "cooldown left", "backoff level")


def rows(model: ConsoleModel, now: int) -> dict[str, tuple[str, ...]]:
    rows: dict[str, tuple[str, ...]] = {}
    for (provider, conn), v in model.connections.items():
        if v.disabled:
            state = "✗ disabled"
        elif v.cooling_until > now:
            state = f"◷ {countdown_text(v.cooling_until - now)} {v.cooling_kind}"
        else:
            state = "✓ ready"
        rows[f"{provider}/{conn}"] = (
            provider, conn, state, level_gauge(v.level, v.max_level),
            v.last_error or "–", v.masked_key,
        )
    return rows


def order(model: ConsoleModel, sort: str, now: int) -> list[str]:
    conns = list(model.connections.values())
    if sort == "cooldown left":
        conns.sort(key=lambda c: -max(0, c.cooling_until - now))
    else:
        conns.sort(key=lambda c: -c.level)
    return [f"{c.provider}/{c.connection}" for c in conns]


def detail(model: ConsoleModel, key: str, now: int
           ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    provider, conn = key.split("/", 1)
    cview = model.connections.get((provider, conn))
    if cview is None:
        return None
    row = rows(model, now)[key]
    return key, list(zip(NAMES, row, strict=True)), [history_line(e) for e in cview.history]
