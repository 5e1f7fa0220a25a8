"""The engine's state as plain JSON values (secrets masked): what the management API
serves and what the console takes over on attach or after a restore."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config.router_config import ProviderConfig
from .engine.engine import ResilienceEngine

__all__ = ["state_document"]


def state_document(engine: ResilienceEngine, providers: Mapping[str, ProviderConfig]
               ) -> dict[str, Any]:
    now = engine.now()
    snapshot = engine.snapshot()
    keys = {(name, c.id): (c.api_key.masked if c.api_key is not None else None)
            for name, p in providers.items() for c in p.connections}
    return {
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
