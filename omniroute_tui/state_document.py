"""The engine's state as plain JSON values (secrets masked): what the management API
serves and what the console takes over on attach or after a restore."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config.router_config import ProviderConfig
from .engine.engine import ResilienceEngine
from .router.routes import Route

__all__ = ["routes_document", "state_document"]


def routes_document(routes: Mapping[str, Route]) -> list[dict[str, Any]]:
    """The routes in force, each with its strategy, targets and weights (null: each
    weighs 1): what an attached console shows of them."""
    return [{"name": name, "strategy": route.strategy.value,
             "targets": [str(t) for t in route.targets],
             "weights": None if route.weights is None else list(route.weights)}
            for name, route in routes.items()]


def state_document(engine: ResilienceEngine, providers: Mapping[str, ProviderConfig],
                   routes: Mapping[str, Route] | None = None) -> dict[str, Any]:
    """With `routes` (the router's, which a reload replaces), a `routes` part too."""
    now = engine.now()
    snapshot = engine.snapshot()
    keys = {(name, c.id): (c.api_key.masked if c.api_key is not None else None)
            for name, p in providers.items() for c in p.connections}
    document: dict[str, Any] = {
        "now": now,
        "breakers": [
            {"provider": b.provider, "state": b.state.value, "failures": b.failures,
             "threshold": engine.spec(b.provider).settings.breaker.failure_threshold,
             "cycles": b.cycles, "opened_at": b.opened_at, "open_for_ms": b.open_for_ms,
             "retry_after_ms": b.retry_after_ms, "forced_until": b.forced_until,
             "forced_by": b.forced_by, "probes_in_flight": b.probes_in_flight}
            for b in snapshot.breakers
        ],
        "connections": [
            {"provider": c.provider, "connection": c.connection, "level": c.level,
             "max_level": engine.spec(c.provider).settings.cooldown.max_level,
             "cooling_until": c.cooling_until, "cooling": c.cooling_until > now,
             "disabled": c.disabled, "disabled_reason": c.disabled_reason,
             "last_error": c.last_error, "key": keys.get((c.provider, c.connection))}
            for c in snapshot.connections
        ],
        "lockouts": [
            {"provider": lk.provider, "connection": lk.connection, "model": lk.model,
             "kind": lk.kind, "failures": lk.failures, "until": lk.until}
            for lk in snapshot.lockouts if lk.until > now
        ],
    }
    if routes is not None:
        document["routes"] = routes_document(routes)
    return document
