"""What the console runs: a paced virtual-time scenario, or a router on real time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from ...clock import SystemClock
from ...config.router_config import ProviderConfig, RouterConfig
from ...engine.engine import ResilienceEngine
from ...engine.events import Event, EventBus

__all__ = [
    "SPEEDS", "Backend", "LiveBackend", "RealTimeBackend", "RouterBackend", "SimulationBackend",
]

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

    def store_failing_since(self) -> int | None:
        """Epoch ms since the state database has been failing writes; None if it is not."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


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
        self.run = VirtualRun(scenario, "resilient", subscribers=subscribers)
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

    def store_failing_since(self) -> int | None:
        return None  # a replay keeps no state database

    async def start(self) -> None:
        """A replay needs nothing started: it advances on the console's ticks."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def faster(self) -> None:
        self.speed = next((s for s in SPEEDS if s > self.speed), self.speed)

    def slower(self) -> None:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), self.speed)


class RealTimeBackend:
    """What every real-time backend shares: time passes by itself, nothing to step."""

    paused = False
    speed = 1.0

    def tick(self, wall_s: float) -> None:
        """Real time passes by itself."""

    def step(self, virtual_ms: int = 1000) -> None:
        """Nothing to step on real time."""

    def store_failing_since(self) -> int | None:
        return None


class LiveBackend(RealTimeBackend):
    """A scenario in real time: its fakes over HTTP, the router calling them with httpx."""

    mode = "live"

    def __init__(self, scenario: object, *,
                 subscribers: tuple[Callable[[Event], None], ...] = ()) -> None:
        from simulator.live import LiveRun
        from simulator.scenario import Scenario

        assert isinstance(scenario, Scenario)
        self.scenario = scenario
        self.title = f"{scenario.name} (live)"
        self.providers = scenario.providers
        self.run = LiveRun(scenario, subscribers=subscribers)
        self.engine: ResilienceEngine = self.run.router.engine  # type: ignore[attr-defined]

    @property
    def duration_ms(self) -> int:
        return self.scenario.duration_ms

    def now_ms(self) -> int:
        return self.run.clock.now_ms()

    async def start(self) -> None:
        await self.run.start()

    async def stop(self) -> None:
        await self.run.stop()


class RouterBackend(RealTimeBackend):
    """A router from a config file on real time: state and operator actions, no replay.

    With a state database, the engine is restored from it on start and every change is
    written back; `stop()` flushes.
    """

    mode = "router"

    def __init__(self, config: RouterConfig, bus: EventBus, *, db: str | None = None,
                 recover: bool = False) -> None:
        self.title = config.source
        self.providers = config.providers
        self.router = config.build(SystemClock(), bus=bus)
        self.engine = self.router.engine
        self.db = db
        self.recover = recover
        self.store: object | None = None

    def now_ms(self) -> int:
        return self.engine.now()

    def store_failing_since(self) -> int | None:
        from ...store import SqliteStore

        if isinstance(self.store, SqliteStore):
            return self.store.health().failing_since
        return None

    async def start(self) -> None:
        """Open the state database (raises StoreError for a locked or corrupt file)."""
        if self.db is None:
            return
        from ...store import Recovery, SqliteStore

        store = await SqliteStore.open(
            self.db, recover=Recovery.SET_ASIDE if self.recover else Recovery.FAIL)
        await store.attach(self.engine)
        self.store = store

    async def stop(self) -> None:
        from ...store import SqliteStore

        if isinstance(self.store, SqliteStore):
            await self.store.close()
