"""Typed events (SPEC §9) and the bus that delivers them in order.

Every state change in the engine and every routing step is announced as one of these
frozen dataclasses. The console, the store, the simulator's trace and the gateway's
event stream all consume the same objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, ClassVar

from .values import value

__all__ = [
    "AttemptEvent",
    "BreakerEvent",
    "CooldownEvent",
    "DedupEvent",
    "DisabledEvent",
    "EnabledEvent",
    "Event",
    "EventBus",
    "FaultEvent",
    "LockoutEvent",
    "OperatorEvent",
    "RequestEvent",
    "ResponseEvent",
    "ResultEvent",
    "SkipEvent",
    "Subscriber",
]


@value
class Event:
    """Base of all events: `t` is the clock's time in ms when it happened."""

    TYPE: ClassVar[str] = "event"
    t: int

    def to_dict(self) -> dict[str, Any]:
        """The event as one trace line's object: `t`, `type`, then the fields in order."""
        data: dict[str, Any] = {"t": self.t, "type": self.TYPE}
        for name in self._field_names():
            data[name] = getattr(self, name)
        return data

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        cached: tuple[str, ...] | None = cls.__dict__.get("_FIELD_NAMES")
        if cached is None:
            cached = tuple(f.name for f in fields(cls) if f.name != "t")
            setattr(cls, "_FIELD_NAMES", cached)  # noqa: B010 - per-class cache
        return cached


@value
class RequestEvent(Event):
    TYPE: ClassVar[str] = "request"
    id: str
    route: str


@value
class AttemptEvent(Event):
    TYPE: ClassVar[str] = "attempt"
    request: str
    n: int
    provider: str
    connection: str
    model: str
    probe: bool


@value
class ResultEvent(Event):
    TYPE: ClassVar[str] = "result"
    request: str
    n: int
    provider: str
    connection: str
    model: str
    status: int
    kind: str | None
    latency_ms: int


@value
class SkipEvent(Event):
    TYPE: ClassVar[str] = "skip"
    request: str
    provider: str
    model: str
    reason: str
    retry_after_ms: int | None


@value
class ResponseEvent(Event):
    TYPE: ClassVar[str] = "response"
    request: str
    status: int
    attempts: int
    latency_ms: int
    waited_ms: int
    served_by: str | None


@value
class BreakerEvent(Event):
    TYPE: ClassVar[str] = "breaker"
    provider: str
    from_: str
    to: str
    reason: str
    failures: int
    retry_after_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        data = Event.to_dict(self)  # slotted dataclasses cannot use bare super()
        data["from"] = data.pop("from_")
        # keep the documented field order: provider, from, to, ...
        return {k: data[k] for k in ("t", "type", "provider", "from", "to", "reason",
                                     "failures", "retry_after_ms")}


@value
class CooldownEvent(Event):
    """A connection's cooldown changed; `kind` is None when it was lifted (success, operator)."""

    TYPE: ClassVar[str] = "cooldown"
    provider: str
    connection: str
    kind: str | None
    level: int
    until: int
    hint_ms: int | None


@value
class DisabledEvent(Event):
    TYPE: ClassVar[str] = "disabled"
    provider: str
    connection: str
    reason: str


@value
class EnabledEvent(Event):
    TYPE: ClassVar[str] = "enabled"
    provider: str
    connection: str
    reason: str


@value
class LockoutEvent(Event):
    """A model lockout changed; `kind` is None when failures decayed or it was cleared."""

    TYPE: ClassVar[str] = "lockout"
    provider: str
    connection: str
    model: str
    kind: str | None
    failures: int
    until: int


@value
class DedupEvent(Event):
    TYPE: ClassVar[str] = "dedup"
    provider: str
    connection: str
    kind: str
    window: str


@value
class OperatorEvent(Event):
    TYPE: ClassVar[str] = "operator"
    action: str
    target: str
    actor: str
    result: str


@value
class FaultEvent(Event):
    TYPE: ClassVar[str] = "fault"
    name: str
    phase: str
    target: str


Subscriber = Callable[[Event], None]


class EventBus:
    """Delivers each event to every subscriber, in emission order.

    An event emitted while another is being delivered (a subscriber that reads the engine
    can trigger a lazy transition) is queued and delivered after it, so every subscriber
    sees one total order.
    """

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._pending: list[Event] = []
        self._delivering = False

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: Event) -> None:
        if not self._subscribers:
            return
        self._pending.append(event)
        if self._delivering:
            return
        self._delivering = True
        try:
            index = 0
            while index < len(self._pending):
                current = self._pending[index]
                for subscriber in tuple(self._subscribers):
                    subscriber(current)
                index += 1
        finally:
            self._pending.clear()
            self._delivering = False
