"""Faults that see no traffic: a fault whose target got no attempts under the resilient
policy shows nothing, and a scenario that ships one teaches nothing by it.

`silent_faults()` names each such fault with its line and the likely reason, read from
the routes and the traffic: the target is in no route, only a fallback (a later target
of a route that tries its targets in order), or no traffic runs while the fault does; and
each stream fault while no streamed traffic runs, whose attempts it leaves unharmed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omniroute_tui.router.routes import Strategy

from .scenario import STREAM_FAULTS, Fault, Scenario

__all__ = ["silent_faults"]

#: the strategies that try a route's targets in order: a later target is only a fallback
_IN_ORDER = frozenset({Strategy.PRIORITY, Strategy.ROUND_ROBIN})


def _unstreamed(scenario: Scenario, fault: Fault) -> bool:
    """A stream fault while no streamed traffic runs: its attempts are all unharmed."""
    return fault.action in STREAM_FAULTS and not any(
        t.stream is not None and t.from_ms < fault.until_ms and t.to_ms > fault.at_ms
        for t in scenario.traffic)


def _reason(scenario: Scenario, fault: Fault) -> str:
    aim = fault.target
    if _unstreamed(scenario, fault):
        return "no streamed traffic runs while it does (it acts on `stream:` traffic only)"
    if aim.provider is None:
        return "no traffic runs while it does"
    what = aim.provider if aim.model is None else f"{aim.provider}/{aim.model}"
    live = {t.route for t in scenario.traffic
            if t.from_ms < fault.until_ms and t.to_ms > fault.at_ms}
    routes = scenario.config.routes

    def hit(provider: str, model: str) -> bool:
        return provider == aim.provider and aim.model in (None, model)

    holding = {name for name, route in routes.items()
               if any(hit(t.provider, t.model) for t in route.targets)}
    holding |= {r for r in (t.route for t in scenario.traffic) if r not in routes
                and hit(*r.partition("/")[::2])}  # `provider/model` asked for directly
    if not holding:
        return f"no route sends requests to {what}"
    if not holding & live:
        return f"no traffic runs on a route to {what} while it does"
    fallback_of = sorted(name for name in holding & live if name in routes
                         and routes[name].strategy in _IN_ORDER
                         and not hit(routes[name].targets[0].provider,
                                     routes[name].targets[0].model))
    if len(fallback_of) == len(holding & live):
        plural = "s" if len(fallback_of) > 1 else ""
        return f"{what} is only a fallback of route{plural} {', '.join(fallback_of)}"
    return f"no attempt reached {aim} while it was on"


def silent_faults(scenario: Scenario, resilient: Mapping[str, Any]) -> list[str]:
    """A warning for every fault its target saw no attempts of in the `resilient` run's
    metrics: "file:line: fault 'x' saw no traffic: anthropic is only a fallback of route
    fast"."""
    warnings = []
    for fault in scenario.faults:
        if resilient["faults"][fault.name]["attempts"] and not _unstreamed(scenario, fault):
            continue
        where = f"{scenario.source}:{fault.line}" if fault.line else scenario.source
        warnings.append(f"{where}: fault {fault.name!r} saw no traffic: "
                        f"{_reason(scenario, fault)}")
    return warnings
