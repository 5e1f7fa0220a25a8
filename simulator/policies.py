"""The policies a scenario is run under, each built around the same clock and bus."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from omniroute_tui.clock import Clock
from omniroute_tui.config.router_config import RouterConfig
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.classify import Classification
from omniroute_tui.engine.kinds import StreamCut
from omniroute_tui.router.rate_limits import RateLimitInfo
from omniroute_tui.router.steps import Step

from .baselines import BaselineRouter
from .scenario import POLICIES, Policy, Scenario

__all__ = ["POLICIES", "PolicyRouter", "Routing", "build_policy"]


class Routing(Protocol):
    def next_step(self) -> Step: ...

    def record(self, status: int, outcome: Classification,
               rate_limits: RateLimitInfo | None = None, *, stream: bool = False,
               reason: StreamCut | None = None) -> None: ...

    def end_stream(self, cut: StreamCut | None = None, *, cancelled: bool = False,
                   relayed_bytes: int = 0, relayed_chunks: int = 0) -> None: ...


class PolicyRouter(Protocol):
    def start(self, request_id: str, model: str) -> Routing: ...


def _without_dedup(config: RouterConfig) -> RouterConfig:
    providers = {
        name: replace(p, settings=replace(p.settings, dedup=replace(
            p.settings.dedup, connection_window_ms=0, network_window_ms=0)))
        for name, p in config.providers.items()
    }
    return replace(config, providers=providers)


def build_policy(scenario: Scenario, policy: Policy, clock: Clock, bus: EventBus
                 ) -> PolicyRouter:
    """A router for `policy`: the engine (`resilient`, `no-dedup`) or a baseline."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    config = scenario.config
    if policy in (Policy.RESILIENT, Policy.NO_DEDUP):
        if policy == Policy.NO_DEDUP:
            config = _without_dedup(config)
        return config.build(clock, bus=bus, seed=scenario.seed)
    return BaselineRouter(
        config.routes,
        {name: tuple(c.id for c in p.connections) for name, p in config.providers.items()},
        {name: p.settings.request.timeout_ms for name, p in config.providers.items()},
        clock, bus, backoff=policy == Policy.BACKOFF, seed=scenario.seed,
    )
