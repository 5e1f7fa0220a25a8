"""An entity's history in words: each state change the model kept of a provider, a
connection or a lockout, as its row's detail lists it (oldest first)."""

from __future__ import annotations

from ...config.durations import format_ms
from ...engine.events import (
    BreakerEvent,
    CooldownEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
    ResultEvent,
)
from .event_lines import lifted
from .text import clock_text
from .views import Failure

__all__ = ["history_line"]


def history_line(event: Event) -> str:
    """`01:12.4 CLOSED → OPEN (threshold, 5 failures)` and the like."""
    at = clock_text(event.t)
    if isinstance(event, ResultEvent):
        return f"{at} {Failure.of(event).text} on {event.model}"
    if isinstance(event, BreakerEvent):
        return (f"{at} {event.from_} → {event.to} ({event.reason}, "
                f"{event.failures} failures)")
    if isinstance(event, CooldownEvent):
        if event.reason is not None or event.kind is None:
            return f"{at} {lifted(event)}"
        hint = f", server said {format_ms(event.hint_ms)}" if event.hint_ms else ""
        return (f"{at} cooling {format_ms(max(0, event.until - event.t))} "
                f"at level {event.level} ({event.kind}{hint})")
    if isinstance(event, DisabledEvent | EnabledEvent):
        return f"{at} {event.TYPE}: {event.reason}"
    if isinstance(event, LockoutEvent):
        return (f"{at} {event.kind or 'decay'}: {event.failures} failures, until "
                f"{clock_text(event.until)}")
    return f"{at} {event.TYPE}"
