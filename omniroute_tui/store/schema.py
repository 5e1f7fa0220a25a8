"""The SQLite schema and the row <-> snapshot mapping."""

from __future__ import annotations

import json
from typing import Any

from ..engine.breaker import BreakerSnapshot
from ..engine.cooldown import ConnectionSnapshot
from ..engine.kinds import BreakerState
from ..engine.lockout import LockoutSnapshot

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "breaker_from_row",
    "breaker_row",
    "connection_from_row",
    "connection_row",
    "lockout_from_row",
    "lockout_row",
]

SCHEMA_VERSION = "1"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS breakers (
    provider TEXT PRIMARY KEY, state TEXT NOT NULL, failures INTEGER NOT NULL,
    last_failure_at INTEGER, opened_at INTEGER, open_for_ms INTEGER NOT NULL,
    cycles INTEGER NOT NULL, epoch INTEGER NOT NULL, forced_until INTEGER
);
CREATE TABLE IF NOT EXISTS connections (
    provider TEXT NOT NULL, connection TEXT NOT NULL, level INTEGER NOT NULL,
    cooling_until INTEGER NOT NULL, disabled INTEGER NOT NULL, disabled_reason TEXT,
    last_error TEXT, last_error_at INTEGER, PRIMARY KEY (provider, connection)
);
CREATE TABLE IF NOT EXISTS lockouts (
    provider TEXT NOT NULL, connection TEXT NOT NULL, model TEXT NOT NULL, kind TEXT,
    failures INTEGER NOT NULL, last_failure_at INTEGER NOT NULL, until INTEGER NOT NULL,
    PRIMARY KEY (provider, connection, model)
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, target TEXT NOT NULL, result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, type TEXT NOT NULL,
    body TEXT NOT NULL
);
"""

BREAKER_COLUMNS = ("provider", "state", "failures", "last_failure_at", "opened_at",
                   "open_for_ms", "cycles", "epoch", "forced_until")
CONNECTION_COLUMNS = ("provider", "connection", "level", "cooling_until", "disabled",
                      "disabled_reason", "last_error", "last_error_at")
LOCKOUT_COLUMNS = ("provider", "connection", "model", "kind", "failures", "last_failure_at",
                   "until")


def breaker_row(s: BreakerSnapshot) -> tuple[Any, ...]:
    return (s.provider, s.state.value, s.failures, s.last_failure_at, s.opened_at,
            s.open_for_ms, s.cycles, s.epoch, s.forced_until)


def breaker_from_row(row: tuple[Any, ...]) -> BreakerSnapshot:
    provider, state, failures, last_failure_at, opened_at, open_for, cycles, epoch, forced = row
    return BreakerSnapshot(
        provider=provider, state=BreakerState(state), failures=failures,
        last_failure_at=last_failure_at, opened_at=opened_at, open_for_ms=open_for,
        cycles=cycles, epoch=epoch, forced_until=forced, probes_in_flight=0,
        retry_after_ms=None,
    )


def connection_row(s: ConnectionSnapshot) -> tuple[Any, ...]:
    return (s.provider, s.connection, s.level, s.cooling_until, int(s.disabled),
            s.disabled_reason, s.last_error, s.last_error_at)


def connection_from_row(row: tuple[Any, ...]) -> ConnectionSnapshot:
    provider, connection, level, until, disabled, reason, last_error, last_error_at = row
    return ConnectionSnapshot(
        provider=provider, connection=connection, level=level, cooling_until=until,
        disabled=bool(disabled), disabled_reason=reason, last_error=last_error,
        last_error_at=last_error_at,
    )


def lockout_row(s: LockoutSnapshot) -> tuple[Any, ...]:
    return (s.provider, s.connection, s.model, s.kind, s.failures, s.last_failure_at, s.until)


def lockout_from_row(row: tuple[Any, ...]) -> LockoutSnapshot:
    provider, connection, model, kind, failures, last_failure_at, until = row
    return LockoutSnapshot(
        provider=provider, connection=connection, model=model, kind=kind, failures=failures,
        last_failure_at=last_failure_at, until=until,
    )


def event_body(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"))
