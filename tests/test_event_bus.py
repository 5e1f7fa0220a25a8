"""The event bus: typed subscriptions, nothing built for nobody, one total order."""

from __future__ import annotations

import json

import pytest

from omniroute_tui.engine import BreakerState, Classification, Event, EventBus, FailureKind
from omniroute_tui.engine.events import (
    BreakerEvent,
    FaultEvent,
    OperatorEvent,
    RequestEvent,
    ResultEvent,
    event_from_dict,
)

from .helpers import make_engine, make_router


def test_subscribers_get_the_types_they_name_or_all() -> None:
    bus = EventBus()
    breakers: list[Event] = []
    everything: list[Event] = []
    bus.subscribe(breakers.append, BreakerEvent)
    unsubscribe = bus.subscribe(everything.append)
    events = [RequestEvent(1, "r1", "r"), BreakerEvent(2, "p", "CLOSED", "OPEN", "x", 5, 30),
              FaultEvent(3, "f", "start", "*")]
    for event in events:
        bus.emit(event)
    assert breakers == [events[1]] and everything == events
    assert bus.wants(BreakerEvent) and bus.wants(FaultEvent)
    unsubscribe()
    assert bus.wants(BreakerEvent) and not bus.wants(FaultEvent)
    assert not EventBus().wants(RequestEvent)


def test_events_nobody_asked_for_are_not_built() -> None:
    engine, clock, _ = make_engine()
    engine.bus = bus = EventBus()  # a bus with only an operator listener
    router = make_router(engine)
    seen: list[Event] = []
    bus.subscribe(seen.append, OperatorEvent)
    built = []
    original = RequestEvent.__init__

    def counting(self: RequestEvent, *args: object, **kwargs: object) -> None:
        built.append(1)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    RequestEvent.__init__ = counting  # type: ignore[method-assign]
    try:
        router.start("r1", "r")
    finally:
        RequestEvent.__init__ = original  # type: ignore[method-assign]
    assert built == [] and seen == []


def test_an_event_emitted_during_delivery_follows_it_for_every_subscriber() -> None:
    bus = EventBus()
    first: list[str] = []
    second: list[str] = []

    def reacting(event: Event) -> None:
        first.append(event.TYPE)
        if isinstance(event, RequestEvent):
            bus.emit(FaultEvent(2, "f", "start", "*"))

    bus.subscribe(reacting)
    bus.subscribe(lambda e: second.append(e.TYPE), RequestEvent, FaultEvent)
    bus.emit(RequestEvent(1, "r1", "r"))
    assert first == second == ["request", "fault"]


def test_events_carry_the_engines_enums_and_read_back_as_them() -> None:
    engine, _, _ = make_engine()
    seen: list[Event] = []
    engine.bus.subscribe(seen.append)
    routing = make_router(engine).start("r1", "r")
    routing.next_step()
    routing.record(0, Classification(FailureKind.TIMEOUT))
    result = next(e for e in seen if isinstance(e, ResultEvent))
    assert result.kind is FailureKind.TIMEOUT
    line = result.to_json()
    assert '"kind":"timeout"' in line  # the trace holds the word, as before
    back = event_from_dict(json.loads(line))
    assert back == result and back.kind is FailureKind.TIMEOUT  # type: ignore[attr-defined]
    breaker = event_from_dict({"t": 1, "type": "breaker", "provider": "p", "from": "OPEN",
                               "to": "HALF_OPEN", "reason": "reset_timeout", "failures": 0,
                               "retry_after_ms": None})
    assert breaker.to is BreakerState.HALF_OPEN  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        event_from_dict({"t": 1, "type": "skip", "request": "r", "provider": "p",
                         "model": "m", "reason": "bored", "retry_after_ms": None})
