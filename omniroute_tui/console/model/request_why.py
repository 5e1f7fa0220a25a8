"""The "why" of a request read back from a gateway's records (`GET /api/requests/{id}`),
in the words the requests pane's detail uses for the requests it saw itself: the events
of each record go through a model of their own, which reads them as the live one does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...engine.events import event_from_dict
from .console_model import ConsoleModel
from .panes import Pane

__all__ = ["recorded_why"]

Detail = tuple[str, list[tuple[str, str]], list[str]]


def _record_steps(request_id: str, events: object) -> tuple[list[tuple[str, str]], list[str]]:
    """One record's row fields and steps; an event this console cannot read is said."""
    model = ConsoleModel({}, lambda: 0)
    skipped = 0
    for data in events if isinstance(events, list) else ():
        try:
            model.on_event(event_from_dict(data))
        except (ValueError, TypeError, AttributeError):
            skipped += 1
    detail = model.detail(Pane.REQUESTS, request_id, 0)
    pairs, steps = ([], []) if detail is None else (detail[1], detail[2])
    if skipped:
        steps.append(f"({skipped} event(s) of a newer release left out)")
    return pairs, steps


def recorded_why(request_id: str, found: Mapping[str, Any]) -> Detail | None:
    """The detail view of what a gateway keeps of `request_id`: each of its records
    (a client may reuse an id), oldest first, headed by the replica that served it, then
    what is in flight. None: the answer holds nothing to show."""
    records = found.get("records")
    parts: list[tuple[str, object, object]] = [
        ("served by", r.get("replica"), r.get("events"))
        for r in (records if isinstance(records, list) else ()) if isinstance(r, Mapping)]
    in_flight = found.get("in_flight")
    if isinstance(in_flight, Mapping):
        parts.append(("in flight on", in_flight.get("replica"), in_flight.get("events")))
    if not parts:
        return None
    pairs: list[tuple[str, str]] = []
    lines: list[str] = []
    for how, replica, events in parts:
        pairs, steps = _record_steps(request_id, events)
        where = f"replica {replica}" if isinstance(replica, str) else "this gateway"
        if len(parts) > 1:
            lines.append(f"── {how} {where}")
        lines.extend(steps)
        pairs = [*pairs, ("replica", where)]
    pairs.append(("kept in", str(found.get("kept_in", "?"))))
    if found.get("unreadable_records"):
        pairs.append(("unreadable", f"{found['unreadable_records']} record(s)"))
    return f"request {request_id}", pairs, lines
