"""The store under faults: failed writes are kept and retried, foreign files are left alone."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from omniroute_tui.engine import FailureKind
from omniroute_tui.store import Recovery, SqliteStore, StoreError, StoreProblem, schema

from .helpers import ADMIT, fail, make_engine


async def _until(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def _on_disk(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as raw:
        return raw.execute(sql).fetchall()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_locked_file_delays_writes_but_loses_none(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    engine, clock, _ = make_engine({"p": ("a", "b")})
    store = await SqliteStore.open(db, busy_timeout_ms=50)
    await store.attach(engine)
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
    engine, clock, _ = make_engine({"p": ("a",)})
    store = await SqliteStore.open(db, busy_timeout_ms=50)
    await store.attach(engine)
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
    engine, clock, _ = make_engine({"p": ("a",)})
    store = await SqliteStore.open(db)
    await store.attach(engine)
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


async def test_close_is_bounded_and_says_what_it_could_not_write(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    engine, clock, _ = make_engine({"p": ("a",)})
    store = await SqliteStore.open(db, busy_timeout_ms=50)
    await store.attach(engine)
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db", "theirs.db.lock"]


async def test_a_file_with_another_application_id_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA application_id=1234")
    with pytest.raises(StoreError, match="application id 0x4d2"):
        await SqliteStore.open(db)


async def test_a_file_of_a_newer_release_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await SqliteStore.open(db)
    await store.close()
    with sqlite3.connect(db) as raw:
        raw.execute(f"PRAGMA user_version={schema.SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(db)
    assert info.value.problem is StoreProblem.NEWER


async def test_a_first_release_file_is_migrated_with_its_state(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with sqlite3.connect(db) as raw:
        raw.executescript(schema.SCHEMA)
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
    engine, clock, _ = make_engine({"p": ("a", "b")})
    store = await SqliteStore.open(db)
    await store.attach(engine)
    b = engine.connection_snapshot("p", "b")
    assert (b.level, b.cooling_until) == (3, 9_000_000)
    assert engine.connection_snapshot("p", "a").cooling_until == 0
    ignored = [r.getMessage() for r in caplog.records if "was ignored" in r.getMessage()]
    assert len(ignored) == 3
    assert any("state is not a breaker state: 'melted'" in m for m in ignored)
    await store.close()
