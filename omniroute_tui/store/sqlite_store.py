"""The SQLite state store: write-behind persistence of the engine's state (docs/design.md §10).

The store is an event consumer. Each event marks the entities it touched as dirty (a set
insert, cheap and synchronous, so routing never waits); a flusher task wakes within
`flush_interval_ms`, reads the current snapshots of the dirty entities through the engine's
public API and writes them in one transaction. A write that fails leaves its entities dirty
and is retried with backoff, so a change is never dropped: the retry reads the snapshots
again, merged with whatever changed meanwhile. `close()` makes one last bounded attempt.

Events go to two logs: `history` (state changes, kept for days) and `requests` (the
per-request events, kept for the last hour); the audit is a third, and the gateway's
decision records (one a request, `put_record`) a fourth. Each is trimmed by age
and count (`StoreRetention`) every `TRIM_EVERY_MS` of the engine's clock, inside a flush,
a bounded number of rows at a time (docs/design.md §10).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import aiosqlite

from ..config.limits import StoreRetention
from ..engine.engine import EngineSnapshot, ProviderSpec, ResilienceEngine
from ..engine.events import (
    STATE_CHANGE_CLASSES,
    BreakerEvent,
    CooldownEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
    OperatorEvent,
    ReloadEvent,
    ResultEvent,
)
from ..tasks import watch
from . import schema
from .errors import Recovery, StoreError, StoreProblem, set_aside

__all__ = ["AuditEntry", "SqliteStore", "StoreHealth"]

log = logging.getLogger("omniroute.store")

#: errors a write can meet that say nothing is wrong with the data: retry them
_WRITE_ERRORS = (sqlite3.Error, OSError, OverflowError, ValueError)
_RETRY_FIRST_MS = 50
_RETRY_MAX_MS = 5000
_MAX_PENDING_AUDIT = 100_000
#: how often (engine clock) each log is trimmed to its bounds; also after TRIM_AFTER_ROWS
#: rows were written, so a burst in one instant stays bounded too
TRIM_EVERY_MS = 10_000
TRIM_AFTER_ROWS = 20_000
#: the most rows one trim deletes from one log (about 10 ms): the backlog of a burst, a
#: lowered bound or a migrated log is spread over flushes, each one still on disk within
#: the 100 ms a state change has (docs/design.md §10); the steady state is ~1,000 a trim
TRIM_BATCH = 5_000
_STATE_CHANGES = frozenset(STATE_CHANGE_CLASSES)


@dataclass(frozen=True)
class AuditEntry:
    t: int
    actor: str
    action: str
    target: str
    result: str


@dataclass(frozen=True)
class StoreHealth:
    """Whether writes reach the file; `failing_since` is epoch ms of the first failure."""

    ok: bool
    failing_since: int | None = None
    error: str | None = None
    pending: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Batch:
    breakers: set[str]
    connections: set[tuple[str, str]]
    lockouts: set[tuple[str, str, str]]
    audit: list[AuditEntry]
    state_changes: list[Event]
    requests: list[Event]
    records: list[tuple[int, str, bytes]] = field(default_factory=list)  # (t, request, body)
    #: a reload removed providers, connections or models: their rows are deleted
    forget: bool = False

    def size(self) -> int:
        return (len(self.breakers) + len(self.connections) + len(self.lockouts)
                + len(self.audit) + len(self.state_changes) + len(self.requests)
                + len(self.records) + self.forget)

    def __bool__(self) -> bool:
        return self.size() > 0

    def describe(self) -> str:
        counts = ((len(self.breakers), "breaker(s)"), (len(self.connections), "connection(s)"),
                  (len(self.lockouts), "lockout(s)"), (len(self.audit), "audit entries"),
                  (len(self.state_changes) + len(self.requests), "event(s)"),
                  (len(self.records), "request record(s)"))
        return ", ".join(f"{n} {what}" for n, what in counts if n) or "nothing"


def _empty() -> _Batch:
    return _Batch(set(), set(), set(), [], [], [])


class SqliteStore:
    """One database file, used by one router process at a time (a lock file says so)."""

    def __init__(
        self,
        path: Path,
        db: aiosqlite.Connection,
        lock: IO[str],
        *,
        flush_interval_ms: int = 20,
        retention: StoreRetention | None = None,
        set_aside_from: Path | None = None,
        migrated_from: int | None = None,
    ) -> None:
        self.path = path
        self._db = db
        self._lock = lock
        self.flush_interval_ms = flush_interval_ms
        self.retention = retention = retention or StoreRetention()
        #: where a bad file was moved when the store was opened with Recovery.SET_ASIDE
        self.set_aside_from = set_aside_from
        #: the schema version the file had when it was opened, if it was migrated
        self.migrated_from = migrated_from
        self._engine: ResilienceEngine | None = None
        self._known_specs: tuple[ProviderSpec, ...] | None = None
        self._known_connections: dict[str, frozenset[str]] = {}
        self._unsubscribe: Any = None
        self._dirty = _empty()
        self._writing = _empty()  # the batch being written
        # events waiting for the disk, at most what their log keeps
        self._state_changes: deque[Event] = deque(maxlen=retention.history_max_events)
        self._requests: deque[Event] = deque(maxlen=retention.requests_max_events)
        self._records: deque[tuple[int, str, bytes]] = deque(
            maxlen=retention.records_max_entries)
        #: decision records pushed out of `_records` before they reached the disk
        self.records_dropped = 0
        self._trimmed_at: int | None = None  # engine clock; None: not since opening
        self._written_since_trim = 0
        self._trim_unfinished = False  # the last trim stopped at TRIM_BATCH rows
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._restart: asyncio.TimerHandle | None = None  # the flusher's, after it ended
        self._flusher_ends = 0  # since the last write that succeeded
        self._closed = False
        self._flush_lock = asyncio.Lock()
        self._failing_since: int | None = None
        self._last_error: str | None = None
        self._failures = 0

    # -- opening -----------------------------------------------------------------------

    @classmethod
    async def open(
        cls, path: str | Path, *, recover: Recovery = Recovery.FAIL, busy_timeout_ms: int = 2000,
        **options: Any,
    ) -> SqliteStore:
        """Open (or create) the database; a locked, corrupt or foreign file raises StoreError.

        With `recover=Recovery.SET_ASIDE` a corrupt file is renamed and an empty store
        started in its place. A file of another program is never touched.
        """
        path = Path(path)
        if not path.parent.exists():
            raise StoreError(StoreProblem.UNREADABLE, path,
                             f"the folder {path.parent} does not exist")
        lock_path = path.with_name(path.name + ".lock")
        lock_existed = lock_path.exists()
        lock = _take_lock(path)
        moved: Path | None = None
        try:
            try:
                db, migrated = await _connect_checked(path, busy_timeout_ms)
            except StoreError as exc:
                if exc.problem is not StoreProblem.CORRUPT or recover is not Recovery.SET_ASIDE:
                    raise
                moved = set_aside(path)
                db, migrated = await _connect_checked(path, busy_timeout_ms)
        except BaseException:
            lock.close()
            if not lock_existed:  # leave nothing of ours beside a file we refused
                lock_path.unlink(missing_ok=True)
            raise
        return cls(path, db, lock, set_aside_from=moved, migrated_from=migrated, **options)

    # -- reading -----------------------------------------------------------------------

    async def load(self) -> EngineSnapshot:
        """The persisted state as an engine snapshot (the engine clears what expired).

        Rows that do not hold valid values are left out, with one log line each.
        """
        breakers = await self._rows("breakers", schema.BREAKER_COLUMNS, schema.breaker_from_row)
        connections = await self._rows("connections", schema.CONNECTION_COLUMNS,
                                       schema.connection_from_row)
        lockouts = await self._rows("lockouts", schema.LOCKOUT_COLUMNS, schema.lockout_from_row)
        return EngineSnapshot(tuple(breakers), tuple(connections), tuple(lockouts))

    async def _rows(self, table: str, columns: tuple[str, ...], convert: Any) -> list[Any]:
        async with self._db.execute(f"SELECT {','.join(columns)} FROM {table}") as cur:
            rows = await cur.fetchall()
        result = []
        for row in rows:
            try:
                result.append(convert(tuple(row)))
            except ValueError as exc:
                log.warning("state database %s: a row of %s was ignored: %s",
                            self.path, table, exc)
        return result

    async def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        """The last `limit` operator actions, oldest first, including any not yet written."""
        await self.flush()
        async with self._db.execute(
            "SELECT t, actor, action, target, result FROM audit ORDER BY id DESC LIMIT ?",
            (limit,),
        ) as cur:
            rows = await cur.fetchall()
        entries = [AuditEntry(*row) for row in reversed(list(rows))] + self._dirty.audit
        return entries[-limit:] if limit > 0 else []

    async def state_changes(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The last `limit` state changes (the `history` log), oldest first, including
        any not yet written: what a console attaching to the gateway is shown."""
        await self.flush()
        async with self._db.execute(
            "SELECT body FROM history ORDER BY id DESC LIMIT ?", (limit,)
        ) as cur:
            rows = await cur.fetchall()
        stored = []
        for (body,) in reversed(list(rows)):
            try:
                event = json.loads(body)
            except (TypeError, ValueError, RecursionError):
                continue  # a hand-edited row (or nested past the recursion limit): no event
            if isinstance(event, dict):
                stored.append(event)
        events = stored + [e.to_dict() for e in self._state_changes]
        return events[-limit:] if limit > 0 else []

    def health(self) -> StoreHealth:
        """`pending` counts the changes not on disk yet, those being written included."""
        pending = (self._dirty.size() + len(self._state_changes) + len(self._requests)
                   + self._writing.size())
        if self._failing_since is None:
            return StoreHealth(True, pending=pending)
        return StoreHealth(False, self._failing_since, self._last_error, pending)

    # -- following an engine -------------------------------------------------------------

    async def attach(self, engine: ResilienceEngine) -> None:
        """Restore `engine` from the file, then persist its changes from now on."""
        engine.restore(await self.load())
        self._engine = engine
        self._unsubscribe = engine.bus.subscribe(self._on_event)
        # everything restored is written back, so expired entries leave the file too
        for provider in engine.providers():
            self._dirty.breakers.add(provider)
            spec = engine.spec(provider)
            self._dirty.connections.update((provider, c) for c in spec.connections)
        async with self._db.execute("SELECT provider, connection, model FROM lockouts") as cur:
            self._dirty.lockouts.update((r[0], r[1], r[2]) for r in await cur.fetchall())
        self._start_flusher()

    def _start_flusher(self) -> None:
        """The write-behind task, watched: if it ends on a bug (a write's own errors are
        retried inside it), `health()` says so and it runs again, with backoff; what is
        dirty stays dirty meanwhile, so nothing is lost."""
        self._restart = None
        if self._closed:
            return
        self._flusher = asyncio.create_task(self._flush_loop(), name="omniroute-store-flush")
        watch(self._flusher, f"state database {self.path}: the write-behind task",
              logger=log, on_end=self._flusher_ended, expected=())
        self._wake.set()

    def _flusher_ended(self, failure: str) -> None:
        self._flusher_ends += 1
        if self._failing_since is None:
            self._failing_since = int(time.time() * 1000)
        self._last_error = failure[:300]
        delay = min(_RETRY_FIRST_MS << min(self._flusher_ends - 1, 16), _RETRY_MAX_MS)
        self._restart = asyncio.get_running_loop().call_later(delay / 1000,
                                                              self._start_flusher)

    def put_record(self, t: int, request_id: str, body: bytes) -> None:
        """A request's decision record (the gateway's), written with the next flush; past
        `store.records.max_entries` waiting, the oldest is dropped and counted."""
        records = self._records
        if len(records) == records.maxlen:
            self.records_dropped += 1
        records.append((t, request_id, body))
        self._wake.set()

    async def records(self, request_id: str, limit: int) -> list[bytes]:
        """The decision records kept under `request_id`, oldest first (at most `limit`,
        the newest): those written, then those waiting for the disk when asked (taken
        first: a write that ends while the SELECT runs has them in neither place after)."""
        waiting = [body for batch in (self._writing.records, self._records)
                   for _, rid, body in batch if rid == request_id]
        async with self._db.execute(
            "SELECT body FROM (SELECT id, body FROM records WHERE request = ? "
            "ORDER BY id DESC LIMIT ?) ORDER BY id", (request_id, limit)) as cur:
            rows = await cur.fetchall()
        found = [row[0] for row in rows if isinstance(row[0], bytes)]
        # a batch written while the SELECT ran may be found twice: the same bytes
        return list(dict.fromkeys(found + waiting))[-limit:]

    def _on_event(self, event: Event) -> None:
        if type(event) in _STATE_CHANGES:
            self._state_changes.append(event)
        else:
            self._requests.append(event)
        dirty = self._dirty
        if isinstance(event, ResultEvent):
            dirty.breakers.add(event.provider)
            dirty.connections.add((event.provider, event.connection))
            dirty.lockouts.add((event.provider, event.connection, event.model))
        elif isinstance(event, BreakerEvent):
            dirty.breakers.add(event.provider)
        elif isinstance(event, CooldownEvent | DisabledEvent | EnabledEvent):
            dirty.connections.add((event.provider, event.connection))
        elif isinstance(event, LockoutEvent):
            dirty.lockouts.add((event.provider, event.connection, event.model))
        elif isinstance(event, OperatorEvent):
            dirty.audit.append(AuditEntry(event.t, event.actor, event.action, event.target,
                                          event.result))
            self._trim_audit()
        elif isinstance(event, ReloadEvent) and (
                event.providers_removed or event.providers_changed):
            dirty.forget = True
        self._wake.set()

    async def _flush_loop(self) -> None:
        while not self._closed:
            # an idle store still wakes now and then: its logs age out even with no traffic
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TRIM_EVERY_MS / 1000):
                    await self._wake.wait()
            await asyncio.sleep(self.flush_interval_ms / 1000)
            if not await self.flush():
                delay = min(_RETRY_FIRST_MS << min(self._failures - 1, 16), _RETRY_MAX_MS)
                await asyncio.sleep(delay / 1000)
                self._wake.set()

    async def flush(self) -> bool:
        """Write everything dirty now, in one transaction; False if the write failed.

        Flushes run one at a time, so a read that flushes first sees every earlier write.
        A failed write keeps its changes for the next attempt.
        """
        async with self._flush_lock:
            return await self._flush()

    def _take(self) -> _Batch:
        batch, self._dirty = self._dirty, _empty()
        batch.state_changes = list(self._state_changes)
        batch.requests = list(self._requests)
        batch.records = list(self._records)
        self._state_changes.clear()
        self._requests.clear()
        self._records.clear()
        return batch

    def _put_back(self, batch: _Batch) -> None:
        """A failed batch goes back under the changes made since (the newer win)."""
        dirty = self._dirty
        dirty.breakers |= batch.breakers
        dirty.connections |= batch.connections
        dirty.lockouts |= batch.lockouts
        dirty.forget = dirty.forget or batch.forget
        dirty.audit[:0] = batch.audit
        self._trim_audit()
        for pending, failed in ((self._state_changes, batch.state_changes),
                                (self._requests, batch.requests)):
            newer = list(pending)
            pending.clear()
            pending.extend(failed)  # each deque keeps the newest its log would
            pending.extend(newer)
        records = self._records
        newer_records = list(records)
        records.clear()
        records.extend(batch.records)
        records.extend(newer_records)
        self.records_dropped += max(0, len(batch.records) + len(newer_records)
                                    - (records.maxlen or 0))

    def _trim_audit(self) -> None:
        """Operator actions waiting for the disk are bounded: past the bound the oldest
        are dropped, and the log says how many (a long outage, or a runaway script)."""
        audit = self._dirty.audit
        excess = len(audit) - _MAX_PENDING_AUDIT
        if excess > 0:
            del audit[:excess]
            log.error("state database %s: %d operator action(s) dropped from the audit "
                      "log: %d are waiting for the disk already", self.path, excess,
                      _MAX_PENDING_AUDIT)

    def _trim_now(self, batch: _Batch) -> int | None:
        """The engine's time if the logs are due for a trim with `batch` written, else
        None: between trims a log passes its count bound by less than TRIM_AFTER_ROWS."""
        if self._engine is None:
            return None
        now = self._engine.now()
        written = (self._written_since_trim + len(batch.state_changes) + len(batch.requests)
                   + len(batch.records))
        if (self._trimmed_at is None or self._trim_unfinished
                or now - self._trimmed_at >= TRIM_EVERY_MS or written >= TRIM_AFTER_ROWS):
            return now
        return None

    async def _flush(self) -> bool:
        self._wake.clear()
        batch = self._take()
        trim_at = self._trim_now(batch)
        if not batch and trim_at is None:
            return True
        self._writing = batch
        try:
            await self._write(batch, trim_at)
        except Exception as exc:  # a write error, or a bug: the batch is kept either way,
            # and the flusher goes on (a task that ended would stop persisting, silently)
            with contextlib.suppress(*_WRITE_ERRORS):
                await self._db.rollback()
            self._put_back(batch)
            self._failed(exc)
            return False
        except asyncio.CancelledError:  # cut short at shutdown: keep it for the last try
            self._put_back(batch)
            raise
        finally:
            self._writing = _empty()
        self._written_since_trim += (len(batch.state_changes) + len(batch.requests)
                                     + len(batch.records))
        if trim_at is not None:
            self._trimmed_at = trim_at
            self._written_since_trim = 0
        self._recovered()
        return True

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        self._last_error = f"{type(exc).__name__}: {exc}"[:300]
        if self._failing_since is None:
            self._failing_since = int(time.time() * 1000)
            log.error("state database %s: writes are failing (%s); changes are kept in "
                      "memory and retried", self.path, self._last_error,
                      exc_info=None if isinstance(exc, _WRITE_ERRORS) else exc)  # a bug

    def _recovered(self) -> None:
        if self._failing_since is not None:
            seconds = (time.time() * 1000 - self._failing_since) / 1000
            log.warning("state database %s: writes succeed again after %.1f s; every kept "
                        "change is written", self.path, seconds)
        self._failing_since = self._last_error = None
        self._failures = self._flusher_ends = 0

    async def _write(self, batch: _Batch, trim_at: int | None) -> None:
        engine = self._engine
        breakers, connections, lockouts = [], [], []
        lockout_deletes = []
        forgotten: list[tuple[str, list[Any]]] = []
        if engine is not None:
            # what a reload removed may still be marked: it has no state to write
            known = self._known(engine)
            for provider in batch.breakers:
                if provider in known:
                    breakers.append(schema.breaker_row(engine.breaker_snapshot(provider)))
            for provider, connection in batch.connections:
                if connection in known.get(provider, ()):
                    connections.append(
                        schema.connection_row(engine.connection_snapshot(provider, connection))
                    )
            if batch.forget:
                forgotten = await self._forgotten(engine, known)
            by_provider: dict[str, dict[tuple[str, str, str], Any]] = {}
            for key in batch.lockouts:
                if key[0] not in by_provider:
                    by_provider[key[0]] = (
                        {s.key: s for s in engine.lockout_snapshots(key[0])}
                        if key[0] in engine.providers() else {}
                    )
                snapshot = by_provider[key[0]].get(key)
                if snapshot is None:
                    lockout_deletes.append(key)
                else:
                    lockouts.append(schema.lockout_row(snapshot))
        writes: list[tuple[str, list[Any]]] = [
            (_upsert("breakers", schema.BREAKER_COLUMNS, 1), breakers),
            (_upsert("connections", schema.CONNECTION_COLUMNS, 2), connections),
            (_upsert("lockouts", schema.LOCKOUT_COLUMNS, 3), lockouts),
            ("DELETE FROM lockouts WHERE provider=? AND connection=? AND model=?",
             lockout_deletes),
            ("INSERT INTO audit (t, actor, action, target, result) VALUES (?,?,?,?,?)",
             [(a.t, a.actor, a.action, a.target, a.result) for a in batch.audit]),
            ("INSERT INTO history (t, type, body) VALUES (?,?,?)",
             [(e.t, e.TYPE, e.to_json()) for e in batch.state_changes]),
            ("INSERT INTO requests (t, type, body) VALUES (?,?,?)",
             [(e.t, e.TYPE, e.to_json()) for e in batch.requests]),
            ("INSERT INTO records (t, request, body) VALUES (?,?,?)", batch.records),
            *forgotten,
        ]
        db = self._db
        for sql, rows in writes:
            if rows:  # each statement is a trip to the database's thread: none for nothing
                await db.executemany(sql, rows)
        if trim_at is not None:
            self._trim_unfinished = await self._trim(trim_at)
        await db.commit()

    def _known(self, engine: ResilienceEngine) -> dict[str, frozenset[str]]:
        """Each provider's connections, computed again only after a reload (a spec is a
        new object then)."""
        specs = tuple(engine.spec(name) for name in engine.providers())
        if self._known_specs is None or len(specs) != len(self._known_specs) or any(
                a is not b for a, b in zip(specs, self._known_specs, strict=True)):
            self._known_specs = specs
            self._known_connections = {s.name: frozenset(s.connections) for s in specs}
        return self._known_connections

    async def _forgotten(self, engine: ResilienceEngine,
                         known: dict[str, frozenset[str]]) -> list[tuple[str, list[Any]]]:
        """The deletes of rows a reload left without an owner: breakers of providers,
        connections and lockouts the config no longer has (docs/design.md §13)."""
        lockouts = {s.key for name in known for s in engine.lockout_snapshots(name)}
        def owned(table: str, row: tuple[Any, ...]) -> bool:
            if table == "breakers":
                return row[0] in known
            if table == "connections":
                return row[1] in known.get(row[0], ())
            return row in lockouts

        deletes: list[tuple[str, list[Any]]] = []
        for table, columns in (("breakers", ("provider",)),
                               ("connections", ("provider", "connection")),
                               ("lockouts", ("provider", "connection", "model"))):
            async with self._db.execute(f"SELECT {', '.join(columns)} FROM {table}") as cursor:
                rows = [tuple(r) for r in await cursor.fetchall()]
            where = " AND ".join(f"{c}=?" for c in columns)
            deletes.append((f"DELETE FROM {table} WHERE {where}",
                            [r for r in rows if not owned(table, r)]))
        return deletes

    async def _trim(self, now: int) -> bool:
        """Delete what each log keeps no longer: older than its age bound (found through
        the index on `t`), then the oldest past its count (ids only grow, so the newest
        `n` rows are the ids above `MAX(id) - n`). At most TRIM_BATCH rows (ids) each;
        True when a log is left past a bound (more to do at the next flush)."""
        r = self.retention
        unfinished = False
        for table, max_age_ms, max_rows in (
                ("history", r.history_max_age_ms, r.history_max_events),
                ("requests", r.requests_max_age_ms, r.requests_max_events),
                ("audit", r.audit_max_age_ms, r.audit_max_entries),
                ("records", r.records_max_age_ms, r.records_max_entries)):
            async with self._db.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE t < ? "
                "ORDER BY t LIMIT ?)", (now - max_age_ms, TRIM_BATCH),
            ) as cur:
                aged = cur.rowcount
            # one aggregate a SELECT: SQLite finds MAX or MIN in the index, both at once
            # only by scanning the table
            await self._db.execute(
                f"DELETE FROM {table} WHERE id <= min((SELECT MAX(id) FROM {table}) - ?, "
                f"(SELECT MIN(id) FROM {table}) + ?)", (max_rows, TRIM_BATCH - 1))
            # whether rows past the count are left: not what the delete counted, since the
            # age trim leaves gaps in the ids (a row stamped by a clock set back, say) and
            # a batch of ids then holds fewer rows; the backlog would wait for the next
            # trim, 10 s or 20,000 rows away, and grow if rows came faster than that
            async with self._db.execute(
                f"SELECT (SELECT MIN(id) FROM {table}) <= (SELECT MAX(id) FROM {table}) - ?",
                (max_rows,),
            ) as cur:
                row = await cur.fetchone()
            over = row is not None and bool(row[0])
            unfinished = unfinished or aged == TRIM_BATCH or over
        return unfinished

    @property
    def is_open(self) -> bool:
        """Open, and not closed yet (a gateway's `/ready`)."""
        return not self._closed

    async def close(self, timeout_s: float = 5.0) -> StoreHealth:
        """One last flush (bounded by `timeout_s`), then release the file; never raises.

        Returns the health after that flush: not ok means some changes were not written,
        and a log line says which.
        """
        if self._closed:
            return self.health()
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._flusher is not None:
            try:  # stop the flusher between writes, never in the middle of one
                async with asyncio.timeout(timeout_s):
                    async with self._flush_lock:
                        self._flusher.cancel()
            except TimeoutError:
                self._flusher.cancel()
            if self._restart is not None:
                self._restart.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        try:
            await asyncio.wait_for(self.flush(), timeout_s)
        except TimeoutError:
            self._failed(TimeoutError(f"the last write took over {timeout_s:g} s"))
        health = self.health()
        if not health.ok:
            d = self._dirty
            unwritten = _Batch(d.breakers, d.connections, d.lockouts, d.audit,
                               list(self._state_changes), list(self._requests))
            log.error("state database %s: closed with changes not written (%s): %s",
                      self.path, unwritten.describe(), health.error)
        try:
            await asyncio.wait_for(self._db.close(), timeout_s)
        except (TimeoutError, *_WRITE_ERRORS) as exc:
            log.error("state database %s: could not close cleanly: %s", self.path, exc)
        finally:
            self._lock.close()
        return health


def _upsert(table: str, columns: tuple[str, ...], key_count: int) -> str:
    keys = ", ".join(columns[:key_count])
    updates = ", ".join(f"{c}=excluded.{c}" for c in columns[key_count:])
    marks = ", ".join("?" for _ in columns)
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
            f"ON CONFLICT ({keys}) DO UPDATE SET {updates}")


def _take_lock(path: Path) -> IO[str]:
    lock_path = path.with_name(path.name + ".lock")
    try:
        handle = open(lock_path, "a+")  # noqa: SIM115 - held for the store's lifetime
    except OSError as exc:
        raise StoreError(StoreProblem.UNREADABLE, path, f"cannot create {lock_path}: "
                         f"{exc.strerror}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise StoreError(StoreProblem.LOCKED, path,
                         f"locked by {holder} (one router a file: routers that run together "
                         "share their state through Redis, `--redis URL`)") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


async def _connect_checked(
    path: Path, busy_timeout_ms: int
) -> tuple[aiosqlite.Connection, int | None]:
    """Connect, check the file is sound and ours, bring its schema up to date.

    Nothing is written before the file is known to be ours (or new and empty). Returns
    the connection and the version a migrated file had (None if none was needed).
    """
    try:
        pending = aiosqlite.connect(path)
        # aiosqlite's worker thread is not a daemon: one left open (a store whose owner
        # crashed) would keep the process alive after main returns. SQLite survives a
        # process ending mid-write, so the thread must not hold the exit.
        thread = getattr(pending, "_thread", None)
        if thread is not None:
            thread.daemon = True
        db = await pending
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(StoreProblem.UNREADABLE, path, f"cannot open: {exc}") from None
    try:
        await db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        async with db.execute("PRAGMA quick_check") as cur:
            row = await cur.fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else '?'}")
        version = await _our_version(db, path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        migrated = None if version is None or version == schema.SCHEMA_VERSION else version
        if version != schema.SCHEMA_VERSION:
            # one transaction: a process killed while it upgrades leaves the old version,
            # upgraded again on the next open, never half of each
            steps = [] if version is None else [
                schema.MIGRATIONS[step] for step in range(version, schema.SCHEMA_VERSION)]
            await db.executescript(
                "BEGIN IMMEDIATE;\n" + "\n".join(steps) + schema.SCHEMA
                + f"PRAGMA application_id={schema.APPLICATION_ID};\n"
                + f"PRAGMA user_version={schema.SCHEMA_VERSION};\nCOMMIT;")
    except StoreError:
        await db.close()
        raise
    except sqlite3.OperationalError as exc:
        await db.close()
        if "locked" in str(exc):
            raise StoreError(StoreProblem.LOCKED, path, str(exc)) from None
        raise StoreError(StoreProblem.CORRUPT, path, f"not a usable database ({exc})") from None
    except sqlite3.DatabaseError as exc:
        await db.close()
        raise StoreError(StoreProblem.CORRUPT, path, f"not a usable database ({exc})") from None
    return db, migrated


async def _our_version(db: aiosqlite.Connection, path: Path) -> int | None:
    """Our schema version of the file, None for a new empty file; StoreError if not ours."""
    async with db.execute("PRAGMA application_id") as cur:
        app_id = (await cur.fetchone() or (0,))[0]
    async with db.execute("PRAGMA user_version") as cur:
        user_version = (await cur.fetchone() or (0,))[0]
    async with db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                          "AND name NOT LIKE 'sqlite_%'") as cur:
        tables = {row[0] for row in await cur.fetchall()}
    if app_id == schema.APPLICATION_ID:
        if user_version > schema.SCHEMA_VERSION:
            raise StoreError(StoreProblem.NEWER, path,
                             f"its schema version {user_version} is newer than this "
                             f"release's {schema.SCHEMA_VERSION}")
        # both pragmas are set in one transaction: a version no release wrote, or this
        # release's without its tables (writes would fail on `no such table`), is a lie
        if user_version < min(schema.MIGRATIONS):
            raise StoreError(StoreProblem.CORRUPT, path, f"its schema version {user_version} "
                             "is none this release knows")
        missing = schema.TABLES - tables if user_version == schema.SCHEMA_VERSION else set()
        if missing:
            raise StoreError(StoreProblem.CORRUPT, path, f"its schema version {user_version} "
                             f"lacks the tables {', '.join(sorted(missing))}")
        return user_version
    if app_id == 0 and not tables:
        return None  # a new file, or an empty one: ours from now on
    if app_id == 0 and tables <= schema.TABLES | schema.FORMER_TABLES and "meta" in tables:
        async with db.execute("SELECT value FROM meta WHERE key='schema_version'") as cur:
            row = await cur.fetchone()
        if row is not None and row[0] == "1":
            return 1  # our first release, before the application id
    what = (f"application id {app_id:#x}" if app_id else
            f"tables {', '.join(sorted(tables)[:6])}")
    raise StoreError(StoreProblem.FOREIGN, path, f"not an OmniRoute state database ({what}); "
                     "it was left untouched")
