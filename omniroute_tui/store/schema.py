"""The SQLite schema and the row <-> snapshot mapping."""

from __future__ import annotations

from typing import Any

from ..engine.breaker import BreakerSnapshot
from ..engine.cooldown import ConnectionSnapshot
from ..engine.events import STATE_CHANGE_CLASSES
from ..engine.kinds import BreakerState, FailureKind
from ..engine.lockout import LockoutSnapshot

__all__ = [
    "APPLICATION_ID",
    "FORMER_TABLES",
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STATE_CHANGE_TYPES",
    "TABLES",
    "breaker_from_row",
    "breaker_row",
    "connection_from_row",
    "connection_row",
    "lockout_from_row",
    "lockout_row",
]

#: `PRAGMA application_id` of our files ("OMNR"): a file without it is not ours to touch
APPLICATION_ID = 0x4F4D4E52
#: `PRAGMA user_version`; each step in MIGRATIONS takes a file one version up
SCHEMA_VERSION = 4

TABLES = frozenset({"meta", "breakers", "connections", "lockouts", "audit", "history",
                    "requests", "records"})
#: tables of earlier versions, gone since (a file that has them may still be ours)
FORMER_TABLES = frozenset({"events"})
#: the event types of the `history` table; every other type goes to `requests`
STATE_CHANGE_TYPES = frozenset(cls.TYPE for cls in STATE_CHANGE_CLASSES)

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
CREATE INDEX IF NOT EXISTS audit_t ON audit (t);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, type TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_t ON history (t);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, type TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_t ON requests (t);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, request TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_t ON records (t);
CREATE INDEX IF NOT EXISTS records_request ON records (request);
"""
# `history` holds the state changes (STATE_CHANGE_TYPES), `requests` every other event;
# `body` is the event's JSON line. Each log is trimmed by age (the index on `t`) and by
# count (the id, which only grows), docs/design.md §10. `records` holds one decision
# record a request (`GET /api/requests/{id}`), compressed, found by the request's id.

#: the state changes as version 3 defined them, written out: a migration says what it
#: did then, whatever later releases call a state change
_V3_STATE_TYPES = "'breaker', 'cooldown', 'disabled', 'enabled', 'fault', 'lockout', 'operator'"

#: version -> the SQL that takes a file from that version to the next (run in one
#: transaction with the rest of the upgrade). Version 1 files (our first release) carried
#: the version in `meta` and no application id; version 2 adds both pragmas, so a file
#: that is not ours can be told apart before anything is written; version 3 splits the one
#: `events` log into `history` (state changes) and `requests`, in their order; version 4
#: adds the `records` table (SCHEMA, run after every step, creates it).
MIGRATIONS: dict[int, str] = {
    1: "DELETE FROM meta WHERE key = 'schema_version';",
    2: SCHEMA + f"""
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, type TEXT NOT NULL,
    body TEXT NOT NULL
);
INSERT INTO history (t, type, body)
    SELECT t, type, body FROM events WHERE type IN ({_V3_STATE_TYPES}) ORDER BY id;
INSERT INTO requests (t, type, body)
    SELECT t, type, body FROM events WHERE type NOT IN ({_V3_STATE_TYPES}) ORDER BY id;
DROP TABLE events;
""",
    3: "",
}

BREAKER_COLUMNS = ("provider", "state", "failures", "last_failure_at", "opened_at",
                   "open_for_ms", "cycles", "epoch", "forced_until")
CONNECTION_COLUMNS = ("provider", "connection", "level", "cooling_until", "disabled",
                      "disabled_reason", "last_error", "last_error_at")
LOCKOUT_COLUMNS = ("provider", "connection", "model", "kind", "failures", "last_failure_at",
                   "until")


def breaker_row(s: BreakerSnapshot) -> tuple[Any, ...]:
    return (s.provider, s.state.value, s.failures, s.last_failure_at, s.opened_at,
            s.open_for_ms, s.cycles, s.epoch, s.forced_until)


# A database file is an entry point like any other: rows are checked before the engine
# sees them, and a row that fails raises ValueError saying which field is wrong.
_MAX_INT = 2**62


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 1024:
        raise ValueError(f"{field} is not a name: {value!r:.80}")
    return value


def _count(value: Any, field: str, maximum: int = _MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValueError(f"{field} is not a number from 0 to {maximum}: {value!r:.80}")
    return value


def _opt_count(value: Any, field: str) -> int | None:
    return None if value is None else _count(value, field)


def _opt_text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 4096:
        raise ValueError(f"{field} is not text: {value!r:.80}")
    return value


def _kind(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if value not in FailureKind.__members__.values():
        raise ValueError(f"{field} is not a failure kind: {value!r:.80}")
    return str(value)


def breaker_from_row(row: tuple[Any, ...]) -> BreakerSnapshot:
    provider, state, failures, last_failure_at, opened_at, open_for, cycles, epoch, forced = row
    if state not in BreakerState.__members__.values():
        raise ValueError(f"state is not a breaker state: {state!r:.80}")
    return BreakerSnapshot(
        provider=_text(provider, "provider"), state=BreakerState(state),
        failures=_count(failures, "failures"),
        last_failure_at=_opt_count(last_failure_at, "last_failure_at"),
        opened_at=_opt_count(opened_at, "opened_at"), open_for_ms=_count(open_for, "open_for_ms"),
        cycles=_count(cycles, "cycles", 1000), epoch=_count(epoch, "epoch"),
        forced_until=_opt_count(forced, "forced_until"), probes_in_flight=0, retry_after_ms=None,
    )


def connection_row(s: ConnectionSnapshot) -> tuple[Any, ...]:
    return (s.provider, s.connection, s.level, s.cooling_until, int(s.disabled),
            s.disabled_reason, s.last_error, s.last_error_at)


def connection_from_row(row: tuple[Any, ...]) -> ConnectionSnapshot:
    provider, connection, level, until, disabled, reason, last_error, last_error_at = row
    return ConnectionSnapshot(
        provider=_text(provider, "provider"), connection=_text(connection, "connection"),
        level=_count(level, "level", 64), cooling_until=_count(until, "cooling_until"),
        disabled=bool(_count(disabled, "disabled", 1)),
        disabled_reason=_opt_text(reason, "disabled_reason"),
        last_error=_kind(last_error, "last_error"),
        last_error_at=_opt_count(last_error_at, "last_error_at"),
    )


def lockout_row(s: LockoutSnapshot) -> tuple[Any, ...]:
    return (s.provider, s.connection, s.model, s.kind, s.failures, s.last_failure_at, s.until)


def lockout_from_row(row: tuple[Any, ...]) -> LockoutSnapshot:
    provider, connection, model, kind, failures, last_failure_at, until = row
    return LockoutSnapshot(
        provider=_text(provider, "provider"), connection=_text(connection, "connection"),
        model=_text(model, "model"), kind=_kind(kind, "kind"),
        failures=_count(failures, "failures"),
        last_failure_at=_count(last_failure_at, "last_failure_at"),
        until=_count(until, "until"),
    )

