"""What the console runs: a paced virtual-time scenario, a scenario's fakes on real time, a
router from a config file, or (in `attach.py`) a gateway over its management API.

Every backend speaks one protocol. What differs is said by plain attributes, never found
out by probing: `replay` is the scenario controls (None on real time), `scenario` what is
being played (None for a router), `operator` the async operator actions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ...clock import SystemClock
from ...config.router_config import ProviderConfig, RouterConfig
from ...engine.bus import EventBus
from ...engine.engine import ResilienceEngine
from ...engine.events import AttemptEvent, Event
from .views import AttemptSeries

if TYPE_CHECKING:
    from simulator.scenario import Scenario

    from ...router.core import Router

__all__ = [
    "SPEEDS", "Backend", "EngineOperator", "LiveBackend", "Operator", "RealTimeBackend",
    "RouterBackend", "Served", "SimulationBackend",
]

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


class Operator(Protocol):
    """The operator actions, the same whether the engine is in this process or a
    gateway's; each raises ValueError (or an I/O error) with the reason it failed."""

    async def reset_breaker(self, provider: str, *, actor: str) -> None: ...

    async def force_open(self, provider: str, duration_ms: int, *, actor: str) -> None: ...

    async def clear_cooldown(self, provider: str, connection: str, *, actor: str) -> None: ...

    async def set_enabled(self, provider: str, connection: str, enabled: bool, *,
                          actor: str) -> None: ...

    async def clear_lockouts(self, provider: str | None = None, connection: str | None = None,
                             model: str | None = None, *, actor: str) -> None: ...


class EngineOperator:
    """The operator actions on an engine in this process (done at once, before the await
    returns: the next paint already shows them)."""

    def __init__(self, engine: ResilienceEngine) -> None:
        self._engine = engine

    async def reset_breaker(self, provider: str, *, actor: str) -> None:
        self._engine.reset_breaker(provider, actor=actor)

    async def force_open(self, provider: str, duration_ms: int, *, actor: str) -> None:
        self._engine.force_open(provider, duration_ms, actor=actor)

    async def clear_cooldown(self, provider: str, connection: str, *, actor: str) -> None:
        self._engine.clear_cooldown(provider, connection, actor=actor)

    async def set_enabled(self, provider: str, connection: str, enabled: bool, *,
                          actor: str) -> None:
        self._engine.set_enabled(provider, connection, enabled, actor=actor)

    async def clear_lockouts(self, provider: str | None = None, connection: str | None = None,
                             model: str | None = None, *, actor: str) -> None:
        self._engine.clear_lockouts(provider, connection, model, actor=actor)


class Served:
    """What a gateway started from the console (`--listen`) serves: this console's router
    and its state database, if any."""

    def __init__(self, router: Router, store: Any = None) -> None:
        self.router = router
        self.store = store


class Backend(Protocol):
    mode: str  # virtual | live | router | attached
    title: str
    providers: Mapping[str, ProviderConfig]
    operator: Operator
    scenario: Scenario | None
    replay: SimulationBackend | None  # pause, speed, step and restart; None on real time
    #: the naive policy's attempts on the same scenario, run alongside (a replay only)
    comparison: AttemptSeries | None

    def now_ms(self) -> int: ...

    def tick(self, wall_s: float) -> None: ...

    def status(self) -> str:
        """The mode as the status bar says it (`attached`, `DISCONNECTED, retry in 2s`)."""
        ...

    def store_failing_since(self) -> int | None:
        """Epoch ms since the state database has been failing writes; None if it is not."""
        ...

    def served(self) -> Served | None:
        """The router a `--listen` gateway would serve; None when there is none here."""
        ...

    async def start(self, *, recover: bool = False) -> None:
        """Bring up what the backend needs; `recover` sets a corrupt state file aside."""
        ...

    async def stop(self) -> None: ...


class SimulationBackend:
    """A scenario replayed in virtual time, `speed` virtual seconds per wall second.

    The naive policy replays the same scenario alongside, in lockstep, for the herd chart:
    its attempts are counted, nothing else of it is kept.
    """

    mode = "virtual"

    def __init__(
        self, scenario: Scenario, *, speed: float = 2.0, paused: bool = False,
        subscribers: tuple[Callable[[Event], None], ...] = (),
    ) -> None:
        from simulator.scenario import Policy
        from simulator.virtual import VirtualRun

        self.scenario: Scenario | None = scenario
        self._scenario = scenario
        self.title = scenario.name
        self.providers = scenario.providers
        self.speed = speed
        self.paused = paused
        self.replay: SimulationBackend | None = self
        self.run = VirtualRun(scenario, Policy.RESILIENT, subscribers=subscribers)
        router: Any = self.run.router
        # a fleet's panes show every replica's events; an operator acts on the first one
        # (with a shared state, the others follow it)
        replicas = getattr(router, "replicas", None)
        self.engine: ResilienceEngine = (replicas[0] if replicas else router).engine
        self.operator: Operator = EngineOperator(self.engine)
        self.comparison: AttemptSeries | None = AttemptSeries()
        self._naive = VirtualRun(scenario, Policy.NAIVE)
        self._naive.bus.subscribe(self.comparison.on_event, AttemptEvent)
        self._scorecard: tuple[str, list[tuple[str, str]], list[str]] | None = None

    def scorecard(self) -> tuple[str, list[tuple[str, str]], list[str]] | None:
        """The finished run's scorecard against the compared policy (None before the
        end: the reports close the runs' open windows, so they are read once, at it)."""
        if not self.finished:
            return None
        if self._scorecard is None:
            from .scorecard import scorecard

            compared = self._naive
            compared.advance_to(self.run.now_ms)
            self._scorecard = scorecard(self._scenario.name, self.run.finish(),
                                        compared.finish(), str(compared.policy))
        return self._scorecard

    def compare_with(self, policy: str) -> None:
        """Draw the herd chart against `policy` (a lesson's step chooses it): its replay
        starts again and catches up with this one."""
        from simulator.scenario import Policy
        from simulator.virtual import VirtualRun

        if self.comparison is not None and self.comparison.policy == policy:
            return
        self.comparison = AttemptSeries(policy=policy)
        self._naive = VirtualRun(self._scenario, Policy(policy))
        self._naive.bus.subscribe(self.comparison.on_event, AttemptEvent)
        self._naive.advance_to(self.run.now_ms)

    @property
    def duration_ms(self) -> int:
        return self._scenario.duration_ms

    @property
    def finished(self) -> bool:
        return self.run.now_ms >= self._scenario.duration_ms and self.run.done

    def now_ms(self) -> int:
        return self.run.now_ms

    def tick(self, wall_s: float) -> None:
        if not self.paused and not self.finished:
            self.advance(round(wall_s * self.speed * 1000))

    def advance(self, virtual_ms: int) -> None:
        """Play on by `virtual_ms`; past the scenario's end only the requests still in
        flight are left, and the replay is finished once they have answered."""
        if not self.run.done:
            target = self.run.now_ms + max(0, virtual_ms)
            self.run.advance_to(target)
            if not self._naive.done:
                self._naive.advance_to(target)

    def step(self, virtual_ms: int = 1000) -> None:
        self.advance(virtual_ms)

    def jump(self) -> str:
        """Play on to the next fault's start, and pause there (a trainer's "look what
        happens now"); what it reached, said in words."""
        from .text import clock_text

        now = self.now_ms()
        ahead = [(t, fault) for t, fault, phase in self._scenario.fault_edges(
            self._scenario.duration_ms) if phase == "start" and t > now]
        self.paused = True
        if not ahead:
            return "no fault ahead in this run"
        at, fault = ahead[0]
        self.advance(at - now)
        return f"{clock_text(at)}: fault {fault.name} starts on {fault.target}"

    def status(self) -> str:
        from .text import clock_text

        if self.finished:
            return f"sim {clock_text(self._scenario.duration_ms)} finished (R replays)"
        state = "paused" if self.paused else f"×{self.speed:g}"
        return f"sim {clock_text(self.now_ms())} {state}"

    def store_failing_since(self) -> int | None:
        return None  # a replay keeps no state database

    def served(self) -> Served | None:
        return None  # virtual time: nothing to serve over HTTP

    async def start(self, *, recover: bool = False) -> None:
        """A replay needs nothing started: it advances on the console's ticks."""

    async def stop(self) -> None:
        """Nothing to stop."""

    def faster(self) -> None:
        self.speed = next((s for s in SPEEDS if s > self.speed), self.speed)

    def slower(self) -> None:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), self.speed)

    def restarted(self, subscribers: tuple[Callable[[Event], None], ...]
                  ) -> SimulationBackend:
        """The same scenario from its start, at the same speed, paused if this one is."""
        return SimulationBackend(self._scenario, speed=self.speed, paused=self.paused,
                                 subscribers=subscribers)


class RealTimeBackend:
    """What every real-time backend shares: time passes by itself, nothing to replay."""

    replay: SimulationBackend | None = None
    scenario: Scenario | None = None
    comparison: AttemptSeries | None = None

    def tick(self, wall_s: float) -> None:
        """Real time passes by itself."""

    def status(self) -> str:
        return "live"

    def store_failing_since(self) -> int | None:
        return None

    def served(self) -> Served | None:
        return None


class LiveBackend(RealTimeBackend):
    """A scenario in real time: its fakes over HTTP, the router calling them with httpx."""

    mode = "live"

    def __init__(self, scenario: Scenario, *,
                 subscribers: tuple[Callable[[Event], None], ...] = ()) -> None:
        from simulator.live import LiveRun

        self.scenario = scenario
        self._scenario = scenario
        self.title = f"{scenario.name} (live)"
        self.providers = scenario.providers
        self.run = LiveRun(scenario, subscribers=subscribers)
        self.engine: ResilienceEngine = self.run.router.engine  # type: ignore[attr-defined]
        self.operator: Operator = EngineOperator(self.engine)

    @property
    def duration_ms(self) -> int:
        return self._scenario.duration_ms

    def now_ms(self) -> int:
        return self.run.clock.now_ms()

    def served(self) -> Served | None:
        from ...router.core import Router

        router = self.run.router
        assert isinstance(router, Router)  # a live console runs the resilient policy
        return Served(router)

    async def start(self, *, recover: bool = False) -> None:
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
        self.operator: Operator = EngineOperator(self.engine)
        self.db = db
        self.recover = recover
        self.retention = config.store_retention
        self.store: Any = None

    def now_ms(self) -> int:
        return self.engine.now()

    def store_failing_since(self) -> int | None:
        return None if self.store is None else self.store.health().failing_since

    def served(self) -> Served | None:
        return Served(self.router, self.store)

    async def start(self, *, recover: bool = False) -> None:
        """Open the state database (raises StoreError for a locked or corrupt file; with
        `recover`, a corrupt one is set aside and the router starts empty)."""
        if self.db is None:
            return
        from ...store import Recovery, SqliteStore

        store = await SqliteStore.open(
            self.db, recover=Recovery.SET_ASIDE if recover or self.recover else Recovery.FAIL,
            retention=self.retention)
        await store.attach(self.engine)
        self.store = store

    async def stop(self) -> None:
        if self.store is not None:
            await self.store.close()
