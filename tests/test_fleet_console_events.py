"""A fleet's events reach an attached console once, named by the replica that emitted
them: the echo a replica's merge makes of another's event is not streamed again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from omniroute_tui.clock import ManualClock
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.engine.events import BreakerEvent
from omniroute_tui.engine.kinds import BreakerReason, BreakerState

from .gateway_helpers import TOKEN, read_events, running_gateway
from .redis_helpers import REDIS_URL
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}"}


async def test_another_replicas_breaker_is_streamed_once_with_its_name(
        tmp_path: Path, prefix: str) -> None:
    async with running_gateway(tmp_path / "a", redis=(REDIS_URL, prefix)) as one, \
            running_gateway(tmp_path / "b", redis=(REDIS_URL, prefix)) as two, \
            httpx.AsyncClient(base_url=two.url, headers=AUTH, timeout=10) as watch, \
            httpx.AsyncClient(base_url=one.url, headers=AUTH, timeout=10) as act:
        assert one.gateway.fleet is not None and two.gateway.fleet is not None
        seen: list[dict[str, object]] = []

        def closed(events: list[dict[str, object]]) -> bool:
            return any(e["type"] == "breaker" and e["to"] == "CLOSED" for e in events)

        reading = asyncio.create_task(read_events(watch, seen, closed))
        await eventually(lambda: two.gateway.events.subscribers == 1, what="the stream")
        assert (await act.post("/api/resilience/breakers/healthy/force-open",
                               json={"for": "5m"})).status_code == 200
        assert (await act.post("/api/resilience/breakers/healthy/reset")).status_code == 200
        await asyncio.wait_for(reading, 10)
        breakers = [(e["to"], e["replica"]) for e in seen if e["type"] == "breaker"]
        assert breakers == [("OPEN", one.gateway.fleet.replica),
                            ("CLOSED", one.gateway.fleet.replica)]
        assert two.gateway.engine.breaker_snapshot("healthy").state is BreakerState.CLOSED


def test_the_events_log_names_the_replica() -> None:
    model = ConsoleModel({}, ManualClock().now_ms)
    model.on_event(BreakerEvent(5, "alpha", BreakerState.CLOSED, BreakerState.OPEN,
                                BreakerReason.THRESHOLD, 5, 30_000), "gw-a")
    [entry] = list(model.events)
    kind, line = entry.kind, entry.line
    assert kind == "breaker" and line.startswith("gw-a · breaker alpha: CLOSED → OPEN")
