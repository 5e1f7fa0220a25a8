"""The store under faults: failed writes are kept and retried, foreign files are left alone."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omniroute_tui.engine import FailureKind, ResilienceEngine
from omniroute_tui.engine.events import ResultEvent
from omniroute_tui.store import Recovery, SqliteStore, StoreError, StoreProblem, schema

from .helpers import ADMIT, OK, fail, make_engine
from .old_schemas import SCHEMA_V2


async def _until(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def attached(db: Path, *connections: str, **options: Any
                   ) -> tuple[SqliteStore, ResilienceEngine]:
    """A store on `db` following a fresh engine with provider `p` of `connections`."""
    engine, _, _ = make_engine({"p": connections})
    store = await SqliteStore.open(db, **options)
    await store.attach(engine)
    return store, engine


def _on_disk(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as raw:
        return raw.execute(sql).fetchall()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_locked_file_delays_writes_but_loses_none(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    store, engine = await attached(db, "a", "b", busy_timeout_ms=50)
    assert await store.flush()
    other = sqlite3.connect(db, timeout=5)
    other.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
    await _until(lambda: not store.health().ok)
    health = store.health()
    assert health.failing_since is not None and "locked" in (health.error or "")
    assert health.pending > 0
    engine.record("p", "b", "m", ADMIT, fail(FailureKind.AUTH_FAILED))  # while failing
    engine.force_open("p", 600_000, actor="ops")
    other.rollback()
    other.close()
    await _until(lambda: store.health().ok and store.health().pending == 0)
    rows = dict((r[0], r[1:]) for r in _on_disk(
        db, "SELECT connection, cooling_until, disabled FROM connections"))
    assert rows == {"a": (60_000, 0), "b": (0, 1)}
    assert _on_disk(db, "SELECT actor, action FROM audit") == [("ops", "force_open")]
    assert _on_disk(db, "SELECT forced_until FROM breakers") == [(600_000,)]
    messages = [r.getMessage() for r in caplog.records if r.name == "omniroute.store"]
    assert len(messages) == 2  # one line when it starts failing, one when it recovers
    assert "writes are failing" in messages[0] and "succeed again" in messages[1]
    await store.close()


@pytest.mark.skipif(shutil.which("chattr") is None, reason="chattr is not installed")
async def test_a_file_that_turns_read_only_is_written_once_it_is_writable(
        tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store, engine = await attached(db, "a", busy_timeout_ms=50)
    assert await store.flush()
    files = [str(p) for p in (db, db.with_name("s.db-wal")) if p.exists()]
    if subprocess.run(["chattr", "+i", *files], capture_output=True).returncode != 0:
        pytest.skip("this file system does not support the immutable flag")
    try:
        engine.record("p", "a", "m", ADMIT, fail(FailureKind.FORBIDDEN))  # a lockout
        await _until(lambda: not store.health().ok)
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)
    await _until(lambda: store.health().ok and store.health().pending == 0)
    assert _on_disk(db, "SELECT model, until FROM lockouts") == [("m", 120_000)]
    await store.close()


async def test_a_value_the_file_cannot_hold_is_retried_until_it_changes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store, engine = await attached(db, "a")
    # the engine refuses such a duration at its door; here it is put past the door
    with pytest.raises(ValueError, match="30 days"):
        engine.force_open("p", 2**70, actor="ops")
    engine.layers("p").breaker.force_open(0, 2**70)
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.AUTH_FAILED))
    await _until(lambda: not store.health().ok)
    assert "OverflowError" in (store.health().error or "")
    engine.reset_breaker("p", actor="ops")  # the value changes; the next write succeeds
    await _until(lambda: store.health().ok and store.health().pending == 0)
    assert _on_disk(db, "SELECT disabled FROM connections") == [(1,)]
    assert _on_disk(db, "SELECT state, forced_until FROM breakers") == [("CLOSED", None)]
    await store.close()


async def test_an_unexpected_error_in_a_flush_is_a_failure_not_a_dead_flusher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Whatever a flush raises keeps its batch, shows in the health, is logged with its
    traceback once, and the flusher goes on: it used to end silently, health still ok."""
    db = tmp_path / "s.db"
    store, engine = await attached(db, "a")
    await _until(lambda: store.health().pending == 0)
    real = engine.connection_snapshot

    def broken(provider: str, connection: str) -> Any:
        raise RuntimeError("a bug in a snapshot")

    monkeypatch.setattr(engine, "connection_snapshot", broken)
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.AUTH_FAILED))
    await _until(lambda: not store.health().ok)
    assert store.health().error == "RuntimeError: a bug in a snapshot"
    assert [r.exc_info is not None for r in caplog.records
            if "writes are failing" in r.getMessage()] == [True]
    monkeypatch.setattr(engine, "connection_snapshot", real)
    await _until(lambda: store.health().ok and store.health().pending == 0)
    assert _on_disk(db, "SELECT disabled FROM connections") == [(1,)]
    await store.close()


async def test_close_is_bounded_and_says_what_it_could_not_write(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    store, engine = await attached(db, "a", busy_timeout_ms=50)
    assert await store.flush()
    other = sqlite3.connect(db, timeout=5)
    other.execute("BEGIN EXCLUSIVE")
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.AUTH_FAILED))
    async with asyncio.timeout(10):
        health = await store.close(timeout_s=2)
    other.close()
    assert not health.ok
    assert any("closed with changes not written (1 connection(s), 1 event(s))"
               in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def _foreign(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE breakers (id INTEGER PRIMARY KEY, colour TEXT)")
        raw.execute("INSERT INTO breakers (colour) VALUES ('red')")


@pytest.mark.parametrize("recover", [Recovery.FAIL, Recovery.SET_ASIDE])
async def test_another_programs_database_is_refused_and_left_untouched(
        tmp_path: Path, recover: Recovery) -> None:
    db = tmp_path / "theirs.db"
    _foreign(db)
    before = _digest(db)
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(db, recover=recover)
    assert info.value.problem is StoreProblem.FOREIGN
    assert "not an OmniRoute state database (tables breakers)" in str(info.value)
    assert "file of its own" in str(info.value)
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db"]  # no lock file left


async def test_a_file_with_another_application_id_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA application_id=1234")
    with pytest.raises(StoreError, match="application id 0x4d2"):
        await SqliteStore.open(db)


async def _ours_with_version(db: Path, version: int) -> None:
    """A file this release made, then its user_version set to `version` by hand."""
    store = await SqliteStore.open(db)
    await store.close()
    with sqlite3.connect(db) as raw:
        raw.execute(f"PRAGMA user_version={version}")


async def test_a_file_of_a_newer_release_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    await _ours_with_version(db, schema.SCHEMA_VERSION + 1)
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(db)
    assert info.value.problem is StoreProblem.NEWER


@pytest.mark.parametrize("version", [0, -1])
async def test_a_file_of_ours_whose_version_is_no_release_is_corrupt(
        tmp_path: Path, version: int) -> None:
    """Both pragmas are set in one transaction, so our id with a version no release wrote
    is a lie: refused as corrupt (and set aside on request), not a KeyError."""
    db = tmp_path / "s.db"
    await _ours_with_version(db, version)
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(db)
    assert info.value.problem is StoreProblem.CORRUPT
    assert f"schema version {version} is none this release knows" in str(info.value)
    store = await SqliteStore.open(db, recover=Recovery.SET_ASIDE)
    assert store.set_aside_from is not None and store.set_aside_from.exists()
    await store.close()


async def test_a_file_whose_version_claims_tables_it_lacks_is_corrupt(tmp_path: Path) -> None:
    """A version 2 file with its version set to this release's by hand: refused at open
    (it would fail every write with `no such table`), its `events` left as they were."""
    db = tmp_path / "s.db"
    with sqlite3.connect(db) as raw:
        raw.executescript(SCHEMA_V2)
        raw.execute("INSERT INTO events (t, type, body) VALUES (1, 'breaker', '{}')")
        raw.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
        raw.execute(f"PRAGMA user_version={schema.SCHEMA_VERSION}")
    before = _digest(db)
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(db)
    assert info.value.problem is StoreProblem.CORRUPT
    assert "lacks the tables history, records, requests" in str(info.value)
    assert _digest(db) == before


async def test_a_first_release_file_is_migrated_with_its_state(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with sqlite3.connect(db) as raw:
        raw.executescript(SCHEMA_V2)  # the tables of version 1 too
        raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        raw.execute("INSERT INTO connections VALUES ('p', 'a', 1, 9000000, 1, 'x', NULL, NULL)")
    store = await SqliteStore.open(db)
    assert store.migrated_from == 1
    engine, clock, _ = make_engine({"p": ("a",)})
    await store.attach(engine)
    assert engine.connection_snapshot("p", "a").disabled
    await store.close()
    assert _on_disk(db, "PRAGMA application_id") == [(schema.APPLICATION_ID,)]
    assert _on_disk(db, "PRAGMA user_version") == [(schema.SCHEMA_VERSION,)]
    assert _on_disk(db, "SELECT * FROM meta") == []


async def test_rows_with_hostile_values_are_ignored_not_a_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    store = await SqliteStore.open(db)
    await store.close()
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO breakers VALUES ('p', 'melted', 0, NULL, NULL, 0, 0, 0, NULL)")
        raw.execute("INSERT INTO connections VALUES ('p', 'a', 999999, 9000000, 0, NULL, "
                    "'not-a-kind', NULL)")
        raw.execute("INSERT INTO connections VALUES ('p', 'b', 3, 9000000, 0, NULL, NULL, NULL)")
        raw.execute("INSERT INTO lockouts VALUES ('p', 'b', 'm', NULL, 'x', 0, 1)")
    store, engine = await attached(db, "a", "b")
    b = engine.connection_snapshot("p", "b")
    assert (b.level, b.cooling_until) == (3, 9_000_000)
    assert engine.connection_snapshot("p", "a").cooling_until == 0
    ignored = [r.getMessage() for r in caplog.records if "was ignored" in r.getMessage()]
    assert len(ignored) == 3
    assert any("state is not a breaker state: 'melted'" in m for m in ignored)
    await store.close()


KINDS = [FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR, FailureKind.AUTH_FAILED,
         FailureKind.FORBIDDEN, FailureKind.MODEL_NOT_FOUND, FailureKind.QUOTA_EXHAUSTED,
         None]
OPS = st.one_of(
    st.tuples(st.just("result"), st.sampled_from(["a", "b"]), st.sampled_from(["m", "n"]),
              st.sampled_from(KINDS), st.sampled_from([None, 5_000, 600_000])),
    st.tuples(st.just("operator"), st.sampled_from(["force", "reset", "clear", "enable",
                                                    "disable", "unlock"])),
    st.tuples(st.just("advance"), st.integers(1, 900_000)),
    st.tuples(st.just("lock"), st.booleans()),
    st.tuples(st.just("flush")),
)


@settings(max_examples=30, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=40))
def test_every_change_reaches_the_file_once_its_faults_clear(tmp_path_factory: Any,
                                                              ops: list[Any]) -> None:
    """Any mix of changes, operator actions, time and a lock taken and released by
    another program: once the lock is gone, the file holds exactly the engine's state
    and every operator action once, in order."""
    db = tmp_path_factory.mktemp("prop") / "s.db"

    async def run() -> None:
        engine, clock, recorder = make_engine({"p": ("a", "b")})
        clock.set(1_000_000)
        store = await SqliteStore.open(db, busy_timeout_ms=0, flush_interval_ms=1)
        await store.attach(engine)
        other = sqlite3.connect(db, timeout=5, isolation_level=None, check_same_thread=False)
        locked = False
        try:
            for op in ops:
                if op[0] == "result":
                    _, conn, model, kind, hint = op
                    engine.record("p", conn, model, ADMIT, fail(kind, hint) if kind else OK)
                    # as the router does after every attempt
                    engine.bus.emit(ResultEvent(clock.now_ms(), "r", 1, "p", conn, model, 0,
                                                kind.value if kind else None, 1))
                elif op[0] == "operator":
                    action = op[1]
                    if action == "force":
                        engine.force_open("p", 60_000, actor="ops")
                    elif action == "reset":
                        engine.reset_breaker("p", actor="ops")
                    elif action == "clear":
                        engine.clear_cooldown("p", "a", actor="ops")
                    elif action in ("enable", "disable"):
                        engine.set_enabled("p", "b", action == "enable", actor="ops")
                    else:
                        engine.clear_lockouts("p", actor="ops")
                elif op[0] == "advance":
                    clock.advance(op[1])
                elif op[0] == "lock" and op[1] != locked:
                    if op[1]:  # from a thread: a write under way needs the loop to finish
                        await asyncio.to_thread(other.execute, "BEGIN EXCLUSIVE")
                    else:
                        other.execute("ROLLBACK")
                    locked = op[1]
                elif op[0] == "flush":
                    assert await store.flush() is not locked or not store.health().pending
                await asyncio.sleep(0)
            if locked:
                other.execute("ROLLBACK")
            # reading the engine first: a breaker whose window passed turns HALF_OPEN on
            # this read (lazily), and that change is written too
            rows = {
                "breakers": {schema.breaker_row(engine.breaker_snapshot("p"))},
                "connections": {schema.connection_row(engine.connection_snapshot("p", c))
                                for c in ("a", "b")},
                "lockouts": {schema.lockout_row(s) for s in engine.lockout_snapshots("p")},
            }
            async with asyncio.timeout(10):
                while not (await store.flush() and store.health().pending == 0):
                    await asyncio.sleep(0.01)
            columns = {"breakers": schema.BREAKER_COLUMNS,
                       "connections": schema.CONNECTION_COLUMNS,
                       "lockouts": schema.LOCKOUT_COLUMNS}
            for table, expected in rows.items():
                on_disk = set(_on_disk(db, f"SELECT {','.join(columns[table])} FROM {table}"))
                assert on_disk == expected, table
            audit = [(e["action"], e["target"]) for e in recorder.of("operator")]
            assert _on_disk(db, "SELECT action, target FROM audit ORDER BY id") == audit
        finally:
            other.close()
            await store.close()

    asyncio.run(run())


async def test_a_write_behind_task_that_ends_is_said_and_loses_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="omniroute.store")
    db = tmp_path / "s.db"
    store, engine = await attached(db, "a")
    assert await store.flush()
    real, calls = store._take, 0

    def broken_once() -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # outside the write, whose own errors are retried in the loop
            raise RuntimeError("a bug in the write-behind")
        return real()

    store._take = broken_once  # type: ignore[method-assign]
    engine.force_open("p", 600_000, actor="alice")
    await _until(lambda: not store.health().ok)
    failure = (f"state database {db}: the write-behind task ended: RuntimeError: a bug in "
               "the write-behind")
    health = store.health()
    assert (health.error, health.failing_since is not None) == (failure, True)
    assert health.pending > 0
    await _until(lambda: store.health().ok)  # it runs again, and writes what was kept
    assert _on_disk(db, "SELECT actor, action, target FROM audit") == [
        ("alice", "force_open", "p")]
    assert (await store.close()).ok
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [failure]
    assert errors[0].exc_info is not None  # a bug: its traceback
