"""The requests pane: a row a recent request, and its "why", every step of its routing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....config.durations import format_ms
from ..request_steps import request_steps
from ..text import clock_text

if TYPE_CHECKING:
    from ..console_model import ConsoleModel

__all__ = ["COLUMNS", "REQUEST_ID_CELL", "SORTS", "detail", "order", "rows"]

COLUMNS: tuple[tuple[str, int | None], ...] = (
    ("request", None), ("route", None), ("status", None), ("attempts", None),
    ("waited", None), ("latency", None), ("why", None), ("served by", None),
)
NAMES = tuple(name for name, _ in COLUMNS)
SORTS = ("newest first", "slowest", "most attempts")
#: a request id's cell at most (a client's may be 128 characters); the detail has it whole
REQUEST_ID_CELL = 24


def rows(model: ConsoleModel, now: int) -> dict[str, tuple[str, ...]]:
    """The recent requests, newest first."""
    rows: dict[str, tuple[str, ...]] = {}
    for trail in reversed(model.requests.values()):
        why = ", ".join(f"{provider} ({reason})" for provider, reason in trail.skipped[:2]) \
            + ("…" if len(trail.skipped) > 2 else "")
        if trail.waited_ms:
            why = f"{why}; waited" if why else "waited"
        shown = trail.id if len(trail.id) <= REQUEST_ID_CELL else (
            trail.id[:REQUEST_ID_CELL - 1] + "…")
        rows[trail.id] = (
            shown, trail.route, "…" if trail.status is None else str(trail.status),
            str(trail.attempts), format_ms(trail.waited_ms) if trail.waited_ms else "–",
            "…" if trail.latency_ms is None else format_ms(trail.latency_ms),
            why or "–", trail.served_by or "–",
        )
    return rows


def order(model: ConsoleModel, sort: str, now: int) -> list[str]:
    trails = list(reversed(model.requests.values()))
    if sort == "slowest":
        trails.sort(key=lambda r: -(r.latency_ms or 0))
    else:
        trails.sort(key=lambda r: -r.attempts)
    return [r.id for r in trails]


def detail(model: ConsoleModel, key: str, now: int
           ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    trail = model.requests.get(key)
    if trail is None:
        return None
    cells = rows(model, now)[key]
    steps = [f"{clock_text(t)}  {layer:>12}  {what}"
             for t, layer, what in request_steps(trail.events)]
    return f"request {key}", list(zip(NAMES, cells, strict=True)), steps
