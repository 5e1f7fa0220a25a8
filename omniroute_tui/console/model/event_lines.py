"""The events log: an entry a state change, none for the per-request noise, each written
out as one human line only when shown (no Textual here)."""

from __future__ import annotations

from typing import NamedTuple

from ...engine.events import (
    AttemptEvent,
    BreakerEvent,
    CooldownEvent,
    DedupEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    FaultEvent,
    LockoutEvent,
    OperatorEvent,
    ReloadEvent,
    ResultEvent,
    SkipEvent,
)
from ...engine.kinds import CooldownReason
from ...engine.reload import ReloadSummary
from .text import clock_text

__all__ = ["LogEntry", "describe", "lifted", "logged", "streamed"]

#: the events that always have a line in the log
_STATE_CHANGES = (BreakerEvent, CooldownEvent, LockoutEvent, DisabledEvent, EnabledEvent,
                  DedupEvent, OperatorEvent, FaultEvent, ReloadEvent)


class LogEntry(NamedTuple):
    """An entry of the events log: the event (or a note of the console's own, `kind`
    `console`) and, in a fleet, the replica that emitted it."""

    t: int
    kind: str
    what: Event | str
    replica: str | None = None

    @property
    def line(self) -> str:
        text = self.what if isinstance(self.what, str) else describe(self.what) or ""
        return text if self.replica is None else f"{self.replica} · {text}"


def logged(event: Event) -> bool:
    """Whether `event` has a line in the log (`describe` gives it): a state change, an
    attempt on a key cooling for backoff, a failure."""
    if isinstance(event, AttemptEvent):
        return event.cooling_until is not None
    if isinstance(event, ResultEvent):
        return event.kind is not None
    return isinstance(event, _STATE_CHANGES)


def lifted(event: CooldownEvent) -> str:
    """A cooldown event without a kind: lifted, or only its backoff level reset (a success
    elsewhere while a quota wait goes on is not a lift), or freed by a probe."""
    if event.reason is CooldownReason.PROBE_FREED:
        return f"freed by the breaker's successful probe (backoff), level {event.level}"
    if event.reason is CooldownReason.CARRIER_SERVED:
        return f"freed by a carried request's success (backoff), level {event.level}"
    if event.until > event.t:
        return (f"backoff level reset to {event.level}, still cooling until "
                f"{clock_text(event.until)}")
    return f"lifted, level {event.level}"


def describe(event: Event) -> str | None:
    """One human line for the events pane; None for the per-request noise."""
    if isinstance(event, BreakerEvent):
        return (f"breaker {event.provider}: {event.from_} → {event.to} ({event.reason}, "
                f"{event.failures} failures)")
    if isinstance(event, CooldownEvent):
        if event.kind is None:
            return f"cooldown {event.provider}/{event.connection}: {lifted(event)}"
        return (f"cooldown {event.provider}/{event.connection}: {event.kind}, level "
                f"{event.level}, until {clock_text(event.until)}")
    if isinstance(event, LockoutEvent):
        target = f"{event.provider}/{event.connection}/{event.model}"
        if event.kind is None:
            return f"lockout {target}: {event.failures} failures left"
        return f"lockout {target}: {event.kind}, until {clock_text(event.until)}"
    if isinstance(event, DisabledEvent | EnabledEvent):
        return f"{event.TYPE} {event.provider}/{event.connection}: {event.reason}"
    if isinstance(event, DedupEvent):
        return (f"dedup {event.provider}/{event.connection}: {event.kind} inside the "
                f"{event.window} window")
    if isinstance(event, OperatorEvent):
        return f"operator {event.actor}: {event.action} {event.target} → {event.result}"
    if isinstance(event, FaultEvent):
        return f"fault {event.name} {event.phase} on {event.target}"
    if isinstance(event, ReloadEvent):
        summary = ReloadSummary(event.providers_added, event.providers_removed,
                                event.providers_changed, event.connections_added,
                                event.connections_removed)
        return f"reload: config {event.version}, {summary.describe()}"
    if isinstance(event, SkipEvent):
        return None
    if isinstance(event, AttemptEvent) and event.cooling_until is not None:
        return (f"{'probe' if event.probe else 'carried'} {event.provider}/{event.connection}/"
                f"{event.model} on a key cooling for backoff until "
                f"{clock_text(event.cooling_until)} (every key was cooling) for {event.request}")
    if isinstance(event, ResultEvent) and event.kind is not None:
        reason = f" {event.reason}" if event.reason is not None else ""
        return (f"failure {event.provider}/{event.connection}/{event.model}: {event.kind}"
                f"{reason} ({event.status}) for {event.request}{streamed(event)}")
    return None


def streamed(event: ResultEvent) -> str:
    """What a streamed answer relayed before it ended, for its step in the why view and
    its line in the events pane."""
    if event.relayed_bytes is None:
        return ""
    return f", streamed {event.relayed_chunks} chunk(s), {event.relayed_bytes:,} bytes"
