"""Builders shared by the tests: engines and routers on a manual clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import load_router_config
from omniroute_tui.drivers import AsyncDriver, UpstreamClient
from omniroute_tui.engine import (
    BreakerAdmission,
    Classification,
    Event,
    EventBus,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.engine.settings import AuthKind, ResilienceSettings
from omniroute_tui.router import (
    Attempt,
    RequestRouting,
    Response,
    Route,
    Router,
    Strategy,
    Target,
    Wait,
)
from omniroute_tui.router.rate_limits import RateLimitInfo

#: how an attempt is answered: after how long (ms), its HTTP status, class and rate limits
Answer = tuple[int, int, Classification, RateLimitInfo | None]


class Recorder:
    """Collects events from a bus."""

    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        bus.subscribe(self.events.append)

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.events if type_ == e.TYPE]

    def clear(self) -> None:
        self.events.clear()


def settings(auth: AuthKind = AuthKind.APIKEY, **sections: dict[str, Any]) -> ResilienceSettings:
    """Defaults with some fields of some sections replaced: settings(breaker={...})."""
    base = default_settings(auth)
    for name, changes in sections.items():
        if name == "jitter":
            base = replace(base, jitter=changes)  # type: ignore[arg-type]
        else:
            base = replace(base, **{name: replace(getattr(base, name), **changes)})
    return base


def make_engine(
    providers: dict[str, tuple[str, ...]] | None = None,
    *,
    per_model_quota: bool = False,
    clock: ManualClock | None = None,
    settings_: ResilienceSettings | None = None,
    seed: int = 0,
) -> tuple[ResilienceEngine, ManualClock, Recorder]:
    clock = clock or ManualClock()
    providers = providers or {"alpha": ("a", "b"), "beta": ("x",)}
    specs = [
        ProviderSpec(name, conns, settings_ or default_settings(), per_model_quota)
        for name, conns in providers.items()
    ]
    engine = ResilienceEngine(specs, clock, seed=seed)
    return engine, clock, Recorder(engine.bus)


def make_router(
    engine: ResilienceEngine,
    targets: tuple[str, ...] = ("alpha/m", "beta/m"),
    strategy: Strategy = Strategy.PRIORITY,
    **options: Any,
) -> Router:
    route = Route("r", tuple(Target(*t.split("/")) for t in targets), strategy)
    return Router(engine, {"r": route}, **options)


def fail(kind: FailureKind, hint_ms: int | None = None) -> Classification:
    return Classification(kind, hint_ms)


OK = Classification(None)
ADMIT = BreakerAdmission(True, 0)


def play(routing: RequestRouting, clock: ManualClock,
         answer: Callable[[Attempt], Answer | None]) -> Attempt | None:
    """Drive one request on the manual clock: its waits pass on the clock, each attempt
    gets `answer(attempt)`, asked before any time passes; None leaves that attempt in
    flight and ends the driving. Returns that attempt (None: the request got its
    response)."""
    while True:
        step = routing.next_step()
        if isinstance(step, Response):
            return None
        if isinstance(step, Wait):
            clock.advance(step.delay_ms)
            continue
        assert isinstance(step, Attempt)
        answered = answer(step)
        if answered is None:
            return step
        latency, status, outcome, limits = answered
        clock.advance(latency)
        routing.record(status, outcome, limits)


#: providers alpha (connections a and b) and beta (x) serving model m at fake addresses,
#: and route r over alpha/m then beta/m: `{strategy}` is the route's strategy field or ""
ALPHA_BETA_YAML = """\
providers:
  alpha:
    base_url: http://alpha.test/v1
    models: [m]
    connections: [{{id: a, api_key: sk-alpha-key-0001}}, {{id: b, api_key: sk-alpha-key-0002}}]
  beta:
    base_url: http://beta.test/v1
    models: [m]
    connections: [{{id: x, api_key: sk-beta-key-0003}}]
routes:
  r: {{{strategy}targets: [alpha/m, beta/m]}}
"""


def alpha_beta_driver(client: UpstreamClient, strategy: str | None = None
                      ) -> tuple[Router, AsyncDriver, Recorder]:
    """ALPHA_BETA_YAML's router on a manual clock, its driver sending through `client`,
    and a recorder of its events."""
    text = ALPHA_BETA_YAML.format(strategy=f"strategy: {strategy}, " if strategy else "")
    config = load_router_config("r.yaml", text=text)
    router = config.build(ManualClock())
    return router, AsyncDriver(router, config.providers, client), Recorder(router.engine.bus)
