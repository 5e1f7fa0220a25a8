"""The SQLite state store: write-behind persistence of the engine's state (SPEC §10).

The store is an event consumer. Each event marks the entities it touched as dirty (a set
insert, cheap and synchronous, so routing never waits); a flusher task wakes within
`flush_interval_ms`, reads the current snapshots of the dirty entities through the engine's
public API and writes them in one transaction. `close()` flushes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiosqlite

from ..engine.engine import EngineSnapshot, ResilienceEngine
from ..engine.events import (
    BreakerEvent,
    CooldownEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
    OperatorEvent,
    ResultEvent,
)
from . import schema
from .errors import Recovery, StoreError, StoreProblem, set_aside

__all__ = ["AuditEntry", "SqliteStore"]


@dataclass(frozen=True)
class AuditEntry:
    t: int
    actor: str
    action: str
    target: str
    result: str


class SqliteStore:
    """One database file, used by one router process at a time (a lock file says so)."""

    def __init__(
        self,
        path: Path,
        db: aiosqlite.Connection,
        lock: IO[str],
        *,
        flush_interval_ms: int = 20,
        max_events: int = 5000,
        set_aside_from: Path | None = None,
    ) -> None:
        self.path = path
        self._db = db
        self._lock = lock
        self.flush_interval_ms = flush_interval_ms
        self.max_events = max_events
        #: where a bad file was moved when the store was opened with Recovery.SET_ASIDE
        self.set_aside_from = set_aside_from
        self._engine: ResilienceEngine | None = None
        self._unsubscribe: Any = None
        self._dirty_breakers: set[str] = set()
        self._dirty_connections: set[tuple[str, str]] = set()
        self._dirty_lockouts: set[tuple[str, str, str]] = set()
        self._audit: list[AuditEntry] = []
        self._events: deque[Event] = deque(maxlen=max_events)
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        self._flush_lock = asyncio.Lock()

    # -- opening -----------------------------------------------------------------------

    @classmethod
    async def open(
        cls, path: str | Path, *, recover: Recovery = Recovery.FAIL, **options: Any
    ) -> SqliteStore:
        """Open (or create) the database; a locked or corrupt file raises StoreError.

        With `recover=Recovery.SET_ASIDE` a corrupt file is renamed and an empty store
        started in its place.
        """
        path = Path(path)
        if not path.parent.exists():
            raise StoreError(StoreProblem.UNREADABLE, path,
                             f"the folder {path.parent} does not exist")
        lock = _take_lock(path)
        moved: Path | None = None
        try:
            try:
                db = await _connect_checked(path)
            except StoreError as exc:
                if exc.problem is not StoreProblem.CORRUPT or recover is not Recovery.SET_ASIDE:
                    raise
                moved = set_aside(path)
                db = await _connect_checked(path)
        except BaseException:
            lock.close()
            raise
        return cls(path, db, lock, set_aside_from=moved, **options)

    # -- reading -----------------------------------------------------------------------

    async def load(self) -> EngineSnapshot:
        """The persisted state as an engine snapshot (the engine clears what expired)."""
        db = self._db
        async with db.execute(f"SELECT {','.join(schema.BREAKER_COLUMNS)} FROM breakers") as cur:
            breakers = tuple(schema.breaker_from_row(tuple(r)) for r in await cur.fetchall())
        async with db.execute(
            f"SELECT {','.join(schema.CONNECTION_COLUMNS)} FROM connections"
        ) as cur:
            connections = tuple(
                schema.connection_from_row(tuple(r)) for r in await cur.fetchall()
            )
        async with db.execute(f"SELECT {','.join(schema.LOCKOUT_COLUMNS)} FROM lockouts") as cur:
            lockouts = tuple(schema.lockout_from_row(tuple(r)) for r in await cur.fetchall())
        return EngineSnapshot(breakers, connections, lockouts)

    async def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        await self.flush()
        async with self._db.execute(
            "SELECT t, actor, action, target, result FROM audit ORDER BY id DESC LIMIT ?",
            (limit,),
        ) as cur:
            rows = await cur.fetchall()
        return [AuditEntry(*row) for row in reversed(list(rows))]

    async def recent_events(self, limit: int = 100) -> list[str]:
        """The most recent events as JSON lines, oldest first."""
        await self.flush()
        async with self._db.execute(
            "SELECT body FROM events ORDER BY id DESC LIMIT ?", (limit,)
        ) as cur:
            rows = await cur.fetchall()
        return [row[0] for row in reversed(list(rows))]

    # -- following an engine -------------------------------------------------------------

    async def attach(self, engine: ResilienceEngine) -> None:
        """Restore `engine` from the file, then persist its changes from now on."""
        engine.restore(await self.load())
        self._engine = engine
        self._unsubscribe = engine.bus.subscribe(self._on_event)
        # everything restored is written back, so expired entries leave the file too
        for provider in engine.providers():
            self._dirty_breakers.add(provider)
            spec = engine.spec(provider)
            self._dirty_connections.update((provider, c) for c in spec.connections)
        async with self._db.execute("SELECT provider, connection, model FROM lockouts") as cur:
            self._dirty_lockouts.update((r[0], r[1], r[2]) for r in await cur.fetchall())
        self._flusher = asyncio.create_task(self._flush_loop(), name="omniroute-store-flush")
        self._wake.set()

    def _on_event(self, event: Event) -> None:
        self._events.append(event)
        if isinstance(event, ResultEvent):
            self._dirty_breakers.add(event.provider)
            self._dirty_connections.add((event.provider, event.connection))
            self._dirty_lockouts.add((event.provider, event.connection, event.model))
        elif isinstance(event, BreakerEvent):
            self._dirty_breakers.add(event.provider)
        elif isinstance(event, CooldownEvent | DisabledEvent | EnabledEvent):
            self._dirty_connections.add((event.provider, event.connection))
        elif isinstance(event, LockoutEvent):
            self._dirty_lockouts.add((event.provider, event.connection, event.model))
        elif isinstance(event, OperatorEvent):
            self._audit.append(AuditEntry(event.t, event.actor, event.action, event.target,
                                          event.result))
        self._wake.set()

    async def _flush_loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            await asyncio.sleep(self.flush_interval_ms / 1000)
            await self.flush()

    async def flush(self) -> None:
        """Write everything dirty now, in one transaction.

        Flushes run one at a time, so a read that flushes first sees every earlier write.
        """
        async with self._flush_lock:
            await self._flush()

    async def _flush(self) -> None:
        self._wake.clear()
        engine = self._engine
        breakers, connections, lockouts = [], [], []
        lockout_deletes = []
        if engine is not None:
            for provider in self._dirty_breakers:
                breakers.append(schema.breaker_row(engine.breaker_snapshot(provider)))
            for provider, connection in self._dirty_connections:
                connections.append(
                    schema.connection_row(engine.connection_snapshot(provider, connection))
                )
            if self._dirty_lockouts:
                by_provider: dict[str, dict[tuple[str, str, str], Any]] = {}
                for key in self._dirty_lockouts:
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
        self._dirty_breakers.clear()
        self._dirty_connections.clear()
        self._dirty_lockouts.clear()
        audit, self._audit = self._audit, []
        events = list(self._events)
        self._events.clear()
        if not (breakers or connections or lockouts or lockout_deletes or audit or events):
            return
        db = self._db
        await db.executemany(_upsert("breakers", schema.BREAKER_COLUMNS, 1), breakers)
        await db.executemany(_upsert("connections", schema.CONNECTION_COLUMNS, 2), connections)
        await db.executemany(_upsert("lockouts", schema.LOCKOUT_COLUMNS, 3), lockouts)
        await db.executemany(
            "DELETE FROM lockouts WHERE provider=? AND connection=? AND model=?", lockout_deletes
        )
        await db.executemany(
            "INSERT INTO audit (t, actor, action, target, result) VALUES (?,?,?,?,?)",
            [(a.t, a.actor, a.action, a.target, a.result) for a in audit],
        )
        if events:
            await db.executemany(
                "INSERT INTO events (t, type, body) VALUES (?,?,?)",
                [(e.t, e.TYPE, schema.event_body(e.to_dict())) for e in events],
            )
            await db.execute(
                "DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?",
                (self.max_events,),
            )
        await db.commit()

    async def close(self) -> None:
        """Flush everything and release the file."""
        if self._closed:
            return
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        try:
            await self.flush()
        finally:
            await self._db.close()
            self._lock.close()


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
        raise StoreError(StoreProblem.LOCKED, path, f"locked by {holder}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


async def _connect_checked(path: Path) -> aiosqlite.Connection:
    try:
        db = await aiosqlite.connect(path)
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(StoreProblem.UNREADABLE, path, f"cannot open: {exc}") from None
    try:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA busy_timeout=2000")
        async with db.execute("PRAGMA quick_check") as cur:
            row = await cur.fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else '?'}")
        await db.executescript(schema.SCHEMA)
        async with db.execute("SELECT value FROM meta WHERE key='schema_version'") as cur:
            version = await cur.fetchone()
        if version is None:
            await db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                             (schema.SCHEMA_VERSION,))
            await db.commit()
        elif version[0] != schema.SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"schema version {version[0]} is not "
                                        f"{schema.SCHEMA_VERSION}")
    except sqlite3.OperationalError as exc:
        await db.close()
        if "locked" in str(exc):
            raise StoreError(StoreProblem.LOCKED, path, str(exc)) from None
        raise StoreError(StoreProblem.CORRUPT, path, f"not a usable database ({exc})") from None
    except sqlite3.DatabaseError as exc:
        await db.close()
        raise StoreError(StoreProblem.CORRUPT, path, f"not a usable database ({exc})") from None
    return db
