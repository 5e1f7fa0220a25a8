"""The SQLite store: write-behind, restart recovery, audit, bad files, kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from omniroute_tui.clock import ManualClock
from omniroute_tui.config.limits import StoreRetention
from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.store import Recovery, SqliteStore, StoreError, StoreProblem

from .helpers import ADMIT, fail, make_engine
from .waiting import eventually


async def test_state_round_trips_and_expired_entries_are_cleared(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    engine, clock, _ = make_engine({"p": ("a", "b", "c", "d"), "q": ("x",)})
    clock.set(1_000_000)
    store = await SqliteStore.open(db)
    await store.attach(engine)
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 600_000))  # long
    engine.record("p", "b", "m", ADMIT, fail(FailureKind.SERVER_ERROR))  # 3 s: will expire
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.AUTH_FAILED))
    engine.record("p", "d", "m", ADMIT, fail(FailureKind.FORBIDDEN))  # 2 min lockout
    engine.record("p", "d", "n", ADMIT, fail(FailureKind.MODEL_NOT_FOUND))
    engine.force_open("q", 3_600_000, actor="ops")
    await store.close()

    clock2 = ManualClock(1_000_000 + 60_000)  # a minute later
    engine2, _, _ = make_engine({"p": ("a", "b", "c", "d"), "q": ("x",)}, clock=clock2)
    store2 = await SqliteStore.open(db)
    await store2.attach(engine2)
    a = engine2.connection_snapshot("p", "a")
    assert (a.cooling_until, a.level) == (1_600_000, 1)
    b = engine2.connection_snapshot("p", "b")
    assert (b.cooling_until, b.level) == (0, 0)  # expired: cleared, level back to 0
    assert engine2.connection_snapshot("p", "c").disabled
    assert {(s.model, s.until) for s in engine2.lockout_snapshots("p")} == {
        ("m", 1_120_000), ("n", 1_120_000)}
    q = engine2.breaker_snapshot("q")
    assert q.state is BreakerState.OPEN and q.forced_until == 4_600_000
    audit = await store2.audit_log()
    assert [(a.action, a.actor, a.target) for a in audit] == [("force_open", "ops", "q")]
    await store2.close()

    clock3 = ManualClock(1_000_000 + 3_600_000)  # past the lockouts and the forced open
    engine3, _, _ = make_engine({"p": ("a", "b", "c", "d"), "q": ("x",)}, clock=clock3)
    store3 = await SqliteStore.open(db)
    await store3.attach(engine3)
    assert engine3.lockout_snapshots("p") == ()
    assert engine3.breaker_snapshot("q").state is BreakerState.HALF_OPEN  # lazy, on read
    await store3.close()


async def test_state_is_on_disk_without_close_on_the_flush_interval(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    engine, clock, _ = make_engine({"p": ("a",)})
    store = await SqliteStore.open(db)
    assert store.flush_interval_ms <= 100  # what "on disk within 100 ms" rests on
    await store.attach(engine)
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
    await eventually(lambda: store.health().pending == 0, what="the flusher's write")
    import sqlite3

    with sqlite3.connect(db) as raw:
        row = raw.execute("SELECT cooling_until FROM connections WHERE connection='a'").fetchone()
    assert row == (60_000,)
    await store.close()


async def test_the_history_log_is_bounded_by_its_count(tmp_path: Path) -> None:
    engine, clock, _ = make_engine({"p": ("a",)})
    store = await SqliteStore.open(tmp_path / "s.db",
                                   retention=StoreRetention(history_max_events=10))
    await store.attach(engine)
    for _ in range(50):
        clock.advance(10_000)  # each flush is a trim's turn
        engine.record("p", "a", "m", ADMIT, fail(FailureKind.FORBIDDEN))
        await store.flush()
    events = await store.state_changes(limit=100)
    assert len(events) == 10
    assert [e["type"] for e in events] == ["lockout"] * 10
    assert events[-1]["t"] == clock.now_ms()
    await store.close()


async def test_a_second_router_on_the_same_file_is_refused(tmp_path: Path) -> None:
    first = await SqliteStore.open(tmp_path / "s.db")
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(tmp_path / "s.db")
    assert info.value.problem is StoreProblem.LOCKED
    assert "another router is using it" in str(info.value)
    await first.close()


async def test_corrupt_file_is_reported_then_set_aside_on_request(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as info:
        await SqliteStore.open(db)
    assert info.value.problem is StoreProblem.CORRUPT
    assert "--db-recover set-aside" in str(info.value)
    store = await SqliteStore.open(db, recover=Recovery.SET_ASIDE)
    assert store.set_aside_from is not None and store.set_aside_from.exists()
    assert store.set_aside_from.read_bytes().startswith(b"this is not")
    await store.close()


async def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        await SqliteStore.open(tmp_path / "nope" / "s.db")


WRITER = textwrap.dedent("""
    import asyncio, sys
    from omniroute_tui.clock import SystemClock
    from omniroute_tui.engine import (BreakerAdmission, Classification, FailureKind,
        ProviderSpec, ResilienceEngine, default_settings)
    from omniroute_tui.store import SqliteStore

    CONNS = tuple(f"c{i}" for i in range(400))

    async def main():
        clock = SystemClock()
        engine = ResilienceEngine([ProviderSpec("p", CONNS, default_settings())], clock)
        store = await SqliteStore.open(sys.argv[1])
        await store.attach(engine)
        print("ready", flush=True)
        admission = BreakerAdmission(True, 0)
        for i, conn in enumerate(CONNS):
            at = clock.now_ms()
            kind = FailureKind.AUTH_FAILED if i % 3 == 0 else FailureKind.RATE_LIMITED
            hint = None if i % 3 == 0 else 3_600_000
            engine.record("p", conn, "m", admission, Classification(kind, hint))
            if i % 5 == 0:
                engine.record("p", conn, "n", admission,
                              Classification(FailureKind.MODEL_NOT_FOUND, 3_600_000))
            print(conn, at, flush=True)
            await asyncio.sleep(0.005)
        await asyncio.sleep(60)

    asyncio.run(main())
""")


def test_kill_9_loses_at_most_the_last_100ms(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    recorded: list[tuple[str, int]] = []
    deadline = time.monotonic() + 30
    assert proc.stdout.readline().strip() == "ready"
    while time.monotonic() < deadline and len(recorded) < 150:
        line = proc.stdout.readline()
        if not line:
            break
        conn, at = line.split()
        recorded.append((conn, int(at)))
    os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.time_ns() // 1_000_000
    proc.wait(timeout=10)
    assert len(recorded) >= 100, "the writer did not get going"

    async def reload() -> None:
        engine, _, _ = make_engine({"p": tuple(f"c{i}" for i in range(400))},
                                   clock=ManualClock(killed_at))
        store = await SqliteStore.open(db)
        try:
            await store.attach(engine)
        finally:
            await store.close()
        locked = {s.connection for s in engine.lockout_snapshots("p") if s.model == "n"}
        # rate limits (less the 401s and 404s, which count as answers) opened it early on:
        # at c20's record, whose time the writer read just before it (the engine reads
        # the clock again, a millisecond later at times), so before c21's was read
        breaker = engine.breaker_snapshot("p")
        assert breaker.state is BreakerState.OPEN and breaker.opened_at is not None
        assert breaker.opened_at <= recorded[21][1]
        for conn, at in recorded:
            if killed_at - at <= 100:
                continue
            i = int(conn[1:])
            snap = engine.connection_snapshot("p", conn)
            if i % 3 == 0:
                assert snap.disabled, f"{conn} disabled at {at} was lost"
            else:
                # the engine read the clock again a moment after `at`
                assert 0 <= snap.cooling_until - (at + 3_600_000) < 50, f"{conn} cooldown lost"
            if i % 5 == 0:
                assert conn in locked, f"{conn} lockout was lost"

    asyncio.run(reload())
