"""A subscriber that raises never reaches routing nor the subscribers after it."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from omniroute_tui.engine import Event, EventBus
from omniroute_tui.engine.bus import SubscriberFault, SubscriberFaultLog
from omniroute_tui.engine.events import FaultEvent, OperatorEvent, RequestEvent
from simulator.scenario import SCENARIOS_DIR, load_scenario
from simulator.virtual import run_virtual

from .gateway_helpers import TOKEN, read_events, running_gateway
from .test_trace_pins import PINNED
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}"}


def explode(event: Event) -> None:
    raise RuntimeError(f"bug in a consumer of {event.TYPE}")


def test_a_raising_subscriber_does_not_reach_the_emitter_or_the_others() -> None:
    faults: list[SubscriberFault] = []
    bus = EventBus(on_fault=faults.append)
    seen: list[Event] = []
    bus.subscribe(explode)
    bus.subscribe(seen.append)
    first, second = RequestEvent(1, "r1", "r"), FaultEvent(2, "f", "start", "*")
    bus.emit(first)
    bus.emit(second)
    assert seen == [first, second]  # the one after the raiser heard both
    name = f"{__name__}.explode"
    assert bus.faults == {name: 2}  # and the raiser stays subscribed: it failed twice
    assert [(f.subscriber, f.event, f.total) for f in faults] == [
        (name, first, 1), (name, second, 2)]


def test_an_event_queued_during_delivery_reaches_everyone_despite_a_raiser() -> None:
    bus = EventBus(on_fault=lambda fault: None)
    seen: list[Event] = []
    follow_up = OperatorEvent(2, "reset", "p", "x", "ok")

    def emits_then_raises(event: Event) -> None:
        if isinstance(event, RequestEvent):
            bus.emit(follow_up)
        raise ValueError("late bug")

    bus.subscribe(emits_then_raises)
    bus.subscribe(seen.append)
    request = RequestEvent(1, "r1", "r")
    bus.emit(request)
    assert seen == [request, follow_up]


def test_a_broken_fault_reporter_does_not_fail_routing_either(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken_reporter(fault: SubscriberFault) -> None:
        raise OSError("log disk full")

    bus = EventBus(on_fault=broken_reporter)
    seen: list[Event] = []
    bus.subscribe(explode)
    bus.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="omniroute.events"):
        bus.emit(RequestEvent(1, "r1", "r"))
    assert len(seen) == 1
    assert "reporting a failed event subscriber failed" in caplog.text


def test_faults_are_logged_once_a_minute_per_subscriber_with_the_count(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    bus = EventBus(on_fault=SubscriberFaultLog(monotonic=lambda: now[0]))

    def also_broken(event: Event) -> None:
        raise KeyError("other")

    bus.subscribe(explode)
    bus.subscribe(also_broken)
    with caplog.at_level(logging.ERROR, logger="omniroute.events"):
        for t in range(5):  # five events within a minute
            now[0] = 1000.0 + t
            bus.emit(RequestEvent(t, f"r{t}", "r"))
        lines = [r for r in caplog.records if r.name == "omniroute.events"]
        assert len(lines) == 2  # one per subscriber, with the traceback of the first fault
        assert all(r.exc_info for r in lines)
        now[0] = 1061.0
        bus.emit(RequestEvent(9, "r9", "r"))
    lines = [r.getMessage() for r in caplog.records if r.name == "omniroute.events"]
    assert len(lines) == 4
    assert lines[2] == (
        f"event subscriber {__name__}.explode failed on a request event: RuntimeError: bug in "
        "a consumer of request (6 failures in all, 5 since the last report; it stays "
        "subscribed)")
    assert not caplog.records[-1].exc_info  # the traceback was logged once, with the first


@pytest.fixture
def raiser_in_front_of_every_subscriber(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every subscription anyone makes gets a subscriber that raises just before it."""
    calls = [0]
    subscribe = EventBus.subscribe

    def with_raiser(self: EventBus, subscriber: Callable[[Event], None],
                    *types: type[Event]) -> Callable[[], None]:
        def raiser(event: Event) -> None:
            calls[0] += 1
            raise RuntimeError("a subscriber's bug")

        remove_raiser = subscribe(self, raiser, *types)
        remove = subscribe(self, subscriber, *types)

        def both() -> None:
            remove()
            remove_raiser()

        return both

    monkeypatch.setattr(EventBus, "subscribe", with_raiser)
    yield calls


@pytest.mark.parametrize("name", ["429-storm", "vpn-blip"])
def test_a_replay_is_byte_identical_with_a_raiser_before_every_subscriber(
        name: str, raiser_in_front_of_every_subscriber: list[int]) -> None:
    out = io.StringIO()
    run_virtual(load_scenario(SCENARIOS_DIR / f"{name}.yaml"), "resilient", trace=out)
    assert raiser_in_front_of_every_subscriber[0] > 1000
    assert hashlib.sha256(out.getvalue().encode()).hexdigest() == PINNED[name]


async def test_a_gateway_serves_stores_and_streams_with_a_raiser_before_every_subscriber(
        tmp_path: Path, raiser_in_front_of_every_subscriber: list[int]) -> None:
    async with running_gateway(tmp_path, db=True) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH, timeout=10) as http:
        streamed: list[dict[str, object]] = []

        reader = asyncio.create_task(read_events(
            http, streamed, lambda seen: sum(e["type"] == "cooldown" for e in seen) == 2))
        await eventually(lambda: gw.gateway.events.subscribers == 1, what="the subscription")
        body = {"model": "fallback", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(2):  # broken fails on each key in turn, healthy answers
            reply = await http.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
        await asyncio.wait_for(reader, timeout=10)
        store = gw.gateway.store
        assert store is not None
        await store.flush()
        restored = await store.load()
        cooling = {c.connection for c in restored.connections if c.cooling_until}
        assert cooling == {"x1", "x2"}  # the store heard every cooldown
        health = (await http.get("/health")).json()
        assert sum(health["subscriber_faults"].values()) == (
            raiser_in_front_of_every_subscriber[0])

