"""Live mode: the scenario's fakes over HTTP and the router calling them with httpx.

Time is real, counted from launch; arrivals and faults follow the scenario's timeline.
Only the engine's policies (`resilient`, `no-dedup`) run live: the baselines exist to be
compared in virtual time.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from typing import IO, Any

from omniroute_tui.clock import ElapsedClock
from omniroute_tui.config.secrets import Secret
from omniroute_tui.drivers import AsyncDriver, UpstreamClient
from omniroute_tui.engine.events import Event, EventBus, FaultEvent

from .http_fakes import fake_api_keys, start_fakes, stop_fakes
from .metrics import MetricsCollector
from .policies import build_policy
from .scenario import Scenario
from .virtual import TraceWriter, _arrival_seed

__all__ = ["LIVE_POLICIES", "run_live"]

LIVE_POLICIES = ("resilient", "no-dedup")


async def run_live(
    scenario: Scenario,
    policy: str = "resilient",
    *,
    trace: IO[str] | None = None,
    subscribers: tuple[Any, ...] = (),
) -> dict[str, Any]:
    """Run `scenario` in real time against HTTP fakes; returns the policy's metrics."""
    if policy not in LIVE_POLICIES:
        raise ValueError(f"policy {policy!r} runs in virtual time only; live mode runs "
                         f"{' and '.join(LIVE_POLICIES)}")
    clock = ElapsedClock()
    servers = await start_fakes(scenario, clock)
    client = UpstreamClient()
    try:
        keys = fake_api_keys(scenario)
        urls = {s.provider: s.base_url for s in servers}
        providers = {}
        for name, provider in scenario.providers.items():
            by_conn = {conn: key for key, conn in keys[name].items()}
            providers[name] = replace(provider, base_url=urls[name], connections=tuple(
                replace(c, api_key=Secret(by_conn[c.id])) for c in provider.connections))
        live = replace(scenario, config=replace(scenario.config, providers=providers))
        bus = EventBus()
        metrics = MetricsCollector(live)
        bus.subscribe(metrics.on_event)
        writer = TraceWriter(trace, batch=1) if trace is not None else None
        if writer is not None:
            bus.subscribe(writer)
        for subscriber in subscribers:
            bus.subscribe(subscriber)
        router = build_policy(live, policy, clock, bus)
        driver = AsyncDriver(router, providers, client)  # type: ignore[arg-type]
        clock.restart()  # scenario time starts once the fakes are listening
        started = time.perf_counter()
        tasks = [asyncio.create_task(_faults(live, clock, bus.emit))]
        for index, item in enumerate(live.traffic):
            rng = random.Random(_arrival_seed(live.seed, index))
            for at in item.arrivals(rng):
                tasks.append(asyncio.create_task(_request(driver, clock, at, item.route,
                                                          item.stream)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
        return metrics.report(max(clock.now_ms(), live.duration_ms), wall)
    finally:
        await client.aclose()
        await stop_fakes(servers)


async def _request(driver: AsyncDriver, clock: ElapsedClock, at: int, route: str,
                   stream: bool) -> None:
    await asyncio.sleep(max(0, at - clock.now_ms()) / 1000)
    body = {"model": route, "messages": [{"role": "user", "content": "hello"}]}
    if stream:
        body["stream"] = True
    await driver.complete(body)


async def _faults(scenario: Scenario, clock: ElapsedClock, emit: Any) -> None:
    edges = sorted([(f.at_ms, 0, f, "start") for f in scenario.faults]
                   + [(f.until_ms, 1, f, "end") for f in scenario.faults
                      if f.until_ms <= scenario.duration_ms], key=lambda e: e[:2])
    for at, _, fault, phase in edges:
        await asyncio.sleep(max(0, at - clock.now_ms()) / 1000)
        event: Event = FaultEvent(clock.now_ms(), fault.name, phase, str(fault.target))
        emit(event)
