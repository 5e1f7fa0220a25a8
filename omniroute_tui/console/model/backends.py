"""What the console runs: a paced virtual-time scenario, or a router on real time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from ...clock import SystemClock
from ...config.router_config import ProviderConfig, RouterConfig
from ...engine.engine import ResilienceEngine
from ...engine.events import Event, EventBus

__all__ = ["SPEEDS", "Backend", "RouterBackend", "SimulationBackend"]

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


class Backend(Protocol):
    mode: str
    title: str
    engine: ResilienceEngine
    providers: Mapping[str, ProviderConfig]
    paused: bool
    speed: float

    def now_ms(self) -> int: ...

    def tick(self, wall_s: float) -> None: ...

    def step(self, virtual_ms: int = 1000) -> None: ...


class SimulationBackend:
    """A scenario replayed in virtual time, `speed` virtual seconds per wall second."""

    mode = "virtual"

    def __init__(
        self, scenario: object, *, speed: float = 2.0,
        subscribers: tuple[Callable[[Event], None], ...] = (),
    ) -> None:
        from simulator.scenario import Scenario
        from simulator.virtual import VirtualRun

        assert isinstance(scenario, Scenario)
        self.scenario = scenario
        self.title = scenario.name
        self.providers = scenario.providers
        self.speed = speed
        self.paused = False
        self._subscribers = subscribers
        self._make_run = lambda: VirtualRun(scenario, "resilient", subscribers=subscribers)
        self.run = self._make_run()
        self.engine: ResilienceEngine = self.run.router.engine  # type: ignore[attr-defined]

    @property
    def duration_ms(self) -> int:
        return self.scenario.duration_ms

    @property
    def finished(self) -> bool:
        return self.run.now_ms >= self.scenario.duration_ms and self.run.done

    def now_ms(self) -> int:
        return self.run.now_ms

    def tick(self, wall_s: float) -> None:
        if not self.paused and not self.finished:
            self.advance(round(wall_s * self.speed * 1000))

    def advance(self, virtual_ms: int) -> None:
        target = min(self.run.now_ms + virtual_ms, self.scenario.duration_ms)
        if target >= self.scenario.duration_ms:
            target = 2**62 if self.run.done else self.scenario.duration_ms
        self.run.advance_to(max(target, self.run.now_ms))

    def step(self, virtual_ms: int = 1000) -> None:
        self.advance(virtual_ms)

    def faster(self) -> None:
        self.speed = next((s for s in SPEEDS if s > self.speed), self.speed)

    def slower(self) -> None:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), self.speed)


class RouterBackend:
    """A router from a config file on real time: state and operator actions, no replay."""

    mode = "router"
    paused = False
    speed = 1.0

    def __init__(self, config: RouterConfig, bus: EventBus) -> None:
        self.title = config.source
        self.providers = config.providers
        self.router = config.build(SystemClock(), bus=bus)
        self.engine = self.router.engine

    def now_ms(self) -> int:
        return self.engine.now()

    def tick(self, wall_s: float) -> None:
        """Real time passes by itself."""

    def step(self, virtual_ms: int = 1000) -> None:
        """Nothing to step on real time."""
