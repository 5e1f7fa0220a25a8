"""The connections pane: a row a key, its cooldown, backoff level and last error."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....engine.kinds import FailureKind
from ..history_lines import history_line
from ..row_keys import ConnectionKey, key_text
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


def rows(model: ConsoleModel, now: int) -> dict[ConnectionKey, tuple[str, ...]]:
    rows: dict[ConnectionKey, tuple[str, ...]] = {}
    for key, v in model.connections.items():
        if v.disabled:
            state = "✗ disabled"
        elif v.cooling_until > now:
            state = f"◷ {countdown_text(v.cooling_until - now)} {v.cooling_kind}"
        else:
            state = "✓ ready"
        rows[key] = (
            v.provider, v.connection, state, level_gauge(v.level, v.max_level),
            "–" if v.last_error is None else v.last_error.text, v.masked_key,
        )
    return rows


def order(model: ConsoleModel, sort: str, now: int) -> list[ConnectionKey]:
    conns = list(model.connections.values())
    if sort == "cooldown left":
        conns.sort(key=lambda c: -max(0, c.cooling_until - now))
    else:
        conns.sort(key=lambda c: -c.level)
    return [(c.provider, c.connection) for c in conns]


def detail(model: ConsoleModel, key: ConnectionKey, now: int
           ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    cview = model.connections.get(key)
    if cview is None:
        return None
    row = rows(model, now)[key]
    return (key_text(key), list(zip(NAMES, row, strict=True)),
            [history_line(e) for e in cview.history])
