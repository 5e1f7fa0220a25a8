"""Builders shared by the tests: engines and routers on a manual clock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omniroute_tui.clock import ManualClock
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
from omniroute_tui.router import Route, Router, Strategy, Target


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
