"""The bus that delivers the engine's events, in order, to subscribers that cannot hurt it.

A subscriber is a consumer (the store, the fleet link, the event stream, the console, a
trace): a bug in one must never fail the request whose step it was told about, nor keep
the subscribers after it from hearing the event (docs/design.md §9). The bus catches what
a subscriber raises, counts it, reports it, and keeps the subscriber subscribed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast

from .events import EVENT_CLASSES, Event

__all__ = ["EventBus", "Subscriber", "SubscriberFault", "SubscriberFaultLog"]

Subscriber = Callable[[Event], None]
E = TypeVar("E", bound=Event)

log = logging.getLogger("omniroute.events")


def subscriber_name(subscriber: Subscriber) -> str:
    """A stable, readable name for a subscriber (`module.Class.method`)."""
    module = getattr(subscriber, "__module__", None) or type(subscriber).__module__
    qualname = getattr(subscriber, "__qualname__", None) or type(subscriber).__qualname__
    return f"{module}.{qualname}"


@dataclass(frozen=True, slots=True)
class SubscriberFault:
    """One exception a subscriber raised while it was handed `event`."""

    subscriber: str
    event: Event
    error: Exception
    #: how many times this subscriber has failed since the bus started
    total: int


class SubscriberFaultLog:
    """Logs a failing subscriber at most once per `every_s` seconds, with the count since.

    The first fault of a subscriber is logged with its traceback (it is a bug to fix); the
    later lines of the same subscriber say how many more failed meanwhile. The clock is a
    monotonic one for log volume only: it never touches the engine's state.
    """

    def __init__(self, every_s: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._monotonic = monotonic
        #: per subscriber: when it was last logged, and the faults not logged since
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, fault: SubscriberFault) -> None:
        now = self._monotonic()
        seen = self._last.get(fault.subscriber)
        if seen is not None and now - seen[0] < self._every_s:
            self._last[fault.subscriber] = (seen[0], seen[1] + 1)
            return
        unlogged = seen[1] if seen is not None else 0
        self._last[fault.subscriber] = (now, 0)
        log.error(
            "event subscriber %s failed on a %s event: %s: %s (%d failures in all, %d since "
            "the last report; it stays subscribed)",
            fault.subscriber, fault.event.TYPE, type(fault.error).__name__, fault.error,
            fault.total, unlogged + 1, exc_info=fault.error if seen is None else None)


class EventBus:
    """Delivers each event to the subscribers of its type, in emission order.

    A subscriber names the event types it handles (none: all of them), and an emitter
    asks `wants(EventType)` before building an event, so an event nobody asked for costs
    one dictionary lookup instead of an object. An event emitted while another is being
    delivered (a subscriber that reads the engine can trigger a lazy transition) is
    queued and delivered after it, so every subscriber sees one total order.

    A subscriber that raises is isolated: the exception goes to `on_fault` (by default a
    rate-limited log line), is counted in `faults`, and delivery goes on with the next
    subscriber; neither the emitter nor the other subscribers see it.
    """

    def __init__(self, on_fault: Callable[[SubscriberFault], None] | None = None) -> None:
        self._subscriptions: tuple[tuple[Subscriber, frozenset[type[Event]] | None], ...] = ()
        self._by_type: dict[type[Event], tuple[Subscriber, ...]] = {}
        #: whether anyone would receive an event of a type (truthy: its subscribers)
        self.wants: Callable[[type[Event]], tuple[Subscriber, ...] | None] = self._by_type.get
        self._index()
        self._pending: deque[Event] = deque()
        self._delivering = False
        self._on_fault = on_fault or SubscriberFaultLog()
        self._faults: dict[str, int] = {}

    @property
    def faults(self) -> Mapping[str, int]:
        """Exceptions raised by each subscriber that ever failed (by subscriber name)."""
        return self._faults

    def _index(self) -> None:
        self._by_type = {
            kind: tuple(s for s, types in self._subscriptions if types is None or kind in types)
            for kind in EVENT_CLASSES
        }
        # `wants` is asked several times per request: the dict's own `get` answers it
        # without a Python call (the subscribers, truthy, or an empty tuple)
        self.wants = self._by_type.get

    def subscribe(self, subscriber: Subscriber, *types: type[Event]) -> Callable[[], None]:
        """Add a subscriber for `types` (all events if none); returns its removal."""
        entry = (subscriber, frozenset(types) if types else None)
        self._subscriptions = (*self._subscriptions, entry)
        self._index()

        def unsubscribe() -> None:
            self._subscriptions = tuple(e for e in self._subscriptions if e is not entry)
            self._index()

        return unsubscribe

    def on(self, kind: type[E], handler: Callable[[E], None]) -> Callable[[], None]:
        """Subscribe `handler` to the events of `kind` alone (the bus hands it no other),
        typed as it takes them; returns its removal."""
        return self.subscribe(cast(Subscriber, handler), kind)

    def emit(self, event: Event) -> None:
        if self._delivering:
            self._pending.append(event)
            return
        subscribers = self._by_type.get(type(event))
        if not subscribers:
            return
        self._delivering = True
        try:  # the first event's delivery inline: emit runs several times a request
            for subscriber in subscribers:
                try:
                    subscriber(event)
                except Exception as error:
                    self._fault(subscriber, event, error)
            if self._pending:
                self._deliver_pending()
        finally:
            self._delivering = False

    def _deliver_pending(self) -> None:
        by_type, pending = self._by_type, self._pending
        try:
            while pending:
                queued = pending.popleft()
                self._deliver(by_type.get(type(queued), ()), queued)
        finally:
            pending.clear()

    def _deliver(self, subscribers: tuple[Subscriber, ...], event: Event) -> None:
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception as error:
                self._fault(subscriber, event, error)

    def _fault(self, subscriber: Subscriber, event: Event, error: Exception) -> None:
        name = subscriber_name(subscriber)
        total = self._faults[name] = self._faults.get(name, 0) + 1
        try:
            self._on_fault(SubscriberFault(name, event, error, total))
        except Exception:
            log.exception("reporting a failed event subscriber failed")
