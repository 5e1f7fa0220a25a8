"""Live mode: the scenario's fakes over HTTP and the router calling them with httpx.

Time is real, counted from launch; arrivals and faults follow the scenario's timeline.
Only the engine's policies (`resilient`, `no-dedup`) run live: the baselines exist to be
compared in virtual time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import IO, Any

from omniroute_tui.clock import ElapsedClock, SystemClock
from omniroute_tui.config.secrets import Secret
from omniroute_tui.drivers import AsyncDriver, UpstreamClient
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import Event, FaultEvent

from .http_fakes import fake_api_keys, start_fakes, stop_fakes
from .metrics import MetricsCollector
from .policies import build_policy
from .scenario import Policy, Scenario
from .timeline import Timeline
from .virtual import TraceWriter

__all__ = ["LIVE_POLICIES", "LiveRun", "run_live"]

LIVE_POLICIES = (Policy.RESILIENT, Policy.NO_DEDUP)


class LiveRun:
    """A scenario run in real time: fakes over HTTP, the router calling them with httpx.

    The engine exists from construction (the console shows it before the servers are
    up); `start()` brings up the fakes and schedules the traffic and faults.
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy = Policy.RESILIENT,
        *,
        trace: IO[str] | None = None,
        subscribers: tuple[Any, ...] = (),
        timeline: Timeline | None = None,
    ) -> None:
        if policy not in LIVE_POLICIES:
            raise ValueError(f"policy {policy!r} runs in virtual time only; live mode runs "
                             f"{' and '.join(LIVE_POLICIES)}")
        self.scenario = scenario
        self.clock = ElapsedClock()
        self.bus = EventBus()
        self.metrics = MetricsCollector(scenario)
        self.metrics.subscribe(self.bus)
        if trace is not None:
            TraceWriter(trace, batch=1).subscribe(self.bus)
        for subscriber in subscribers:
            self.bus.subscribe(subscriber)
        if timeline is not None:
            timeline.subscribe(self.bus)
        self.router = build_policy(scenario, policy, self.clock, self.bus)
        self._client = UpstreamClient()
        self._servers: list[Any] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._started = 0.0

    async def start(self) -> None:
        scenario = self.scenario
        self._servers = await start_fakes(scenario, self.clock)
        keys = fake_api_keys(scenario)
        urls = {s.provider: s.base_url for s in self._servers}
        providers = {
            name: replace(provider, base_url=urls[name], connections=tuple(
                replace(c, api_key=Secret(keys[name][c.id])) for c in provider.connections))
            for name, provider in scenario.providers.items()
        }
        driver = AsyncDriver(self.router, providers, self._client,  # type: ignore[arg-type]
                             wall=SystemClock())  # self.clock counts from the run's start
        self.clock.restart()  # scenario time starts once the fakes are listening
        self._started = time.perf_counter()
        self._tasks = [asyncio.create_task(_faults(scenario, self.clock, self.bus.emit))]
        for index, item in enumerate(scenario.traffic):
            for at in scenario.arrivals(index):
                self._tasks.append(asyncio.create_task(
                    _request(driver, self.clock, at, item.route, item.stream)))

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()
        await stop_fakes(self._servers)

    def report(self) -> dict[str, Any]:
        wall = time.perf_counter() - self._started
        return self.metrics.report(max(self.clock.now_ms(), self.scenario.duration_ms), wall)


async def run_live(
    scenario: Scenario,
    policy: Policy = Policy.RESILIENT,
    *,
    trace: IO[str] | None = None,
    subscribers: tuple[Any, ...] = (),
    timeline: Timeline | None = None,
) -> dict[str, Any]:
    """Run `scenario` in real time against HTTP fakes; returns the policy's metrics."""
    run = LiveRun(scenario, policy, trace=trace, subscribers=subscribers, timeline=timeline)
    try:
        await run.start()
        await run.wait()
        return run.report()
    finally:
        await run.stop()


async def _request(driver: AsyncDriver, clock: ElapsedClock, at: int, route: str,
                   stream: bool) -> None:
    await asyncio.sleep(max(0, at - clock.now_ms()) / 1000)
    body: dict[str, Any] = {"model": route,
                            "messages": [{"role": "user", "content": "hello"}]}
    if stream:
        body["stream"] = True
    completion = await driver.complete(body)
    relay = completion.relay
    if relay is not None:  # read to its end, as a client would: its result comes then
        try:
            async for _ in relay.relay():
                pass
        finally:
            await completion.finish()


async def _faults(scenario: Scenario, clock: ElapsedClock, emit: Any) -> None:
    for at, fault, phase in scenario.fault_edges(scenario.duration_ms):
        await asyncio.sleep(max(0, at - clock.now_ms()) / 1000)
        event: Event = FaultEvent(clock.now_ms(), fault.name, phase, str(fault.target))
        emit(event)
