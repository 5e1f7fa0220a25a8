"""The store's logs: state changes kept for days apart from per-request events kept for the
last hour, both trimmed by age and count, the audit trimmed too, and files of the earlier
release (one `events` log) migrated in place."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from omniroute_tui.config.limits import StoreRetention
from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.engine.events import (
    AttemptEvent,
    BreakerEvent,
    OperatorEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
)
from omniroute_tui.engine.kinds import SkipReason
from omniroute_tui.store import SqliteStore, schema
from omniroute_tui.store.sqlite_store import TRIM_EVERY_MS
from simulator.event_sources import events_from_db
from simulator.scenario_from_events import scenario_from_events

from .helpers import ADMIT, fail, make_engine
from .old_schemas import SCHEMA_V2

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
START = 1_764_000_000_000  # epoch ms, as a live gateway's clock reads


def _on_disk(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as raw:
        return raw.execute(sql).fetchall()


async def test_an_hour_at_20_per_second_keeps_the_hour_and_a_week_of_state_changes(
        tmp_path: Path) -> None:
    """Default bounds, virtual time: eight days of breaker transitions (one each ten
    minutes), then 65 minutes of traffic at 20 requests a second and five events a
    request. The file keeps the transitions of the last seven days and the requests of
    the last hour (plus at most one trim period), and a recording of it has them all."""
    db = tmp_path / "state.db"
    engine, clock, _ = make_engine({"p": ("a", "b")})
    clock.set(START)
    store = await SqliteStore.open(db)
    await store.attach(engine)
    emit = engine.bus.emit
    transitions = []
    for i in range(8 * 24 * 6):
        clock.set(START + i * 10 * MINUTE)
        transitions.append(clock.now_ms())
        emit(BreakerEvent(clock.now_ms(), "p", BreakerState.CLOSED, BreakerState.OPEN,
                          "threshold", 5, None))
        if i % 6 == 5:
            await store.flush()
    traffic_from = START + 8 * DAY
    for second in range(65 * 60):
        for k in range(20):
            t = traffic_from + second * 1000 + k * 50
            clock.set(t)
            rid = f"r{second}.{k}"
            emit(RequestEvent(t, rid, "chat"))
            emit(SkipEvent(t, rid, "p", "m", SkipReason.ALL_COOLING, 1000))
            emit(AttemptEvent(t, rid, 1, "p", "b", "m", False))
            emit(ResultEvent(t, rid, 1, "p", "b", "m", 200, None, 40))
            emit(ResponseEvent(t, rid, 200, 1, 40, 0, "p/b/m"))
        if second % 30 == 29:
            await store.flush()
    await store.close()
    end = clock.now_ms()

    kept = [t for (t,) in _on_disk(db, "SELECT t FROM history ORDER BY id")]
    assert kept[-1] == transitions[-1]
    assert kept == [t for t in transitions if t >= kept[0]]  # the newest, none lost
    assert end - 7 * DAY - TRIM_EVERY_MS <= kept[0] <= end - 7 * DAY + 10 * MINUTE
    arrivals = [t for (t,) in _on_disk(
        db, "SELECT t FROM requests WHERE type = 'request' ORDER BY id")]
    in_the_hour = [traffic_from + s * 1000 + k * 50 for s in range(65 * 60) for k in range(20)
                   if traffic_from + s * 1000 + k * 50 >= arrivals[0]]
    assert arrivals == in_the_hour
    assert end - HOUR - TRIM_EVERY_MS <= arrivals[0] <= end - HOUR
    assert len(arrivals) >= 72_000
    assert _on_disk(db, "SELECT count(*) FROM requests") == [(5 * len(arrivals),)]

    scenario, recording = scenario_from_events(events_from_db(db), name="hour",
                                               source=str(db))
    assert recording.requests == recording.answered == len(arrivals)
    assert recording.results == len(arrivals)
    assert scenario["traffic"] == [{"route": "chat",
                                    "at": [t - arrivals[0] for t in arrivals]}]
    assert scenario["duration"] == f"{(end - arrivals[0]) // 1000 + 1}s"


async def test_the_audit_is_trimmed_by_age_and_by_count(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    engine, clock, _ = make_engine({"p": ("a",)})
    clock.set(START)
    store = await SqliteStore.open(db)
    await store.attach(engine)
    for day in range(120):  # an operator action a day for four months
        clock.set(START + day * DAY)
        engine.force_open("p", 60_000, actor=f"ops{day}")
        await store.flush()
    clock.advance(TRIM_EVERY_MS)  # the last trim's turn
    assert await store.flush()
    audit = await store.audit_log(limit=1000)
    assert [a.actor for a in audit] == [f"ops{day}" for day in range(119 - 89, 120)]
    assert audit[0].t == START + 30 * DAY  # 90 days before the last, to the ms
    await store.close()

    store = await SqliteStore.open(db, retention=StoreRetention(audit_max_entries=100))
    engine, clock, _ = make_engine({"p": ("a",)}, clock=clock)
    await store.attach(engine)
    for n in range(150):  # a script in a loop: the newest hundred stay
        clock.advance(TRIM_EVERY_MS)
        engine.bus.emit(OperatorEvent(clock.now_ms(), "reset", "p", f"script{n}", "ok"))
        await store.flush()
    entries = _on_disk(db, "SELECT actor FROM audit ORDER BY id")
    assert entries == [(f"script{n}",) for n in range(50, 150)]
    await store.close()


#: what a version 2 gateway logged: a request that failed over, the breaker it opened,
#: a dedup, an operator's force-open
V2_EVENTS = [
    {"t": START, "type": "request", "id": "r1", "route": "chat"},
    {"t": START, "type": "attempt", "request": "r1", "n": 1, "provider": "p",
     "connection": "a", "model": "m", "probe": False},
    {"t": START + 30, "type": "result", "request": "r1", "n": 1, "provider": "p",
     "connection": "a", "model": "m", "status": 429, "kind": "rate_limited",
     "latency_ms": 30},
    {"t": START + 30, "type": "cooldown", "provider": "p", "connection": "a",
     "kind": "rate_limited", "level": 1, "until": START + 60_030, "hint_ms": 60_000},
    {"t": START + 30, "type": "breaker", "provider": "p", "from": "CLOSED",
     "to": "DEGRADED", "reason": "failure", "failures": 1, "retry_after_ms": None},
    {"t": START + 31, "type": "dedup", "provider": "p", "connection": "a",
     "kind": "rate_limited", "window": "connection"},
    {"t": START + 80, "type": "response", "request": "r1", "status": 200, "attempts": 2,
     "latency_ms": 80, "waited_ms": 0, "served_by": "q/x/m"},
    {"t": START + 90, "type": "operator", "action": "force_open", "target": "p",
     "actor": "ops", "result": "ok"},
]


def _version_2_file(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.executescript(SCHEMA_V2)
        raw.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
        raw.execute("PRAGMA user_version=2")
        raw.execute("INSERT INTO connections VALUES ('p', 'a', 1, ?, 0, NULL, "
                    "'rate_limited', ?)", (START + 60_030, START + 30))
        raw.execute("INSERT INTO breakers VALUES ('p', 'OPEN', 1, ?, ?, 3600000, 1, 1, ?)",
                    (START + 30, START + 90, START + 90 + 3_600_000))
        raw.execute("INSERT INTO audit (t, actor, action, target, result) VALUES "
                    "(?, 'ops', 'force_open', 'p', 'ok')", (START + 90,))
        raw.executemany("INSERT INTO events (t, type, body) VALUES (?, ?, ?)",
                        [(e["t"], e["type"], json.dumps(e, separators=(",", ":")))
                         for e in V2_EVENTS])


async def test_a_version_2_file_is_migrated_in_place_keeping_everything(
        tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _version_2_file(db)
    recorded_before = list(events_from_db(db))  # record --db reads it as it is, too
    assert [e["type"] for e in recorded_before] == [e["type"] for e in V2_EVENTS]

    store = await SqliteStore.open(db)
    assert store.migrated_from == 2
    engine, clock, _ = make_engine({"p": ("a",)})
    clock.set(START + 1000)
    await store.attach(engine)
    a = engine.connection_snapshot("p", "a")
    assert (a.level, a.cooling_until, a.last_error) == (1, START + 60_030, "rate_limited")
    assert engine.breaker_snapshot("p").forced_until == START + 90 + 3_600_000
    assert [(e.actor, e.action, e.t) for e in await store.audit_log()] == [
        ("ops", "force_open", START + 90)]
    assert [e["type"] for e in await store.state_changes()] == [
        "cooldown", "breaker", "operator"]
    await store.close()

    def log(table: str) -> list[dict[str, object]]:
        return [json.loads(str(body)) for (body,) in _on_disk(
            db, f"SELECT body FROM {table} WHERE t < {START + 1000} ORDER BY id")]

    state_types = {"cooldown", "breaker", "operator"}
    assert log("history") == [e for e in V2_EVENTS if e["type"] in state_types]
    assert log("requests") == [e for e in V2_EVENTS if e["type"] not in state_types]
    tables = {name for (name,) in _on_disk(db, "SELECT name FROM sqlite_master WHERE "
                                               "type = 'table'")}
    assert "events" not in tables and {"history", "requests"} <= tables
    assert _on_disk(db, "PRAGMA user_version") == [(schema.SCHEMA_VERSION,)]
    assert sorted(list(events_from_db(db)), key=lambda e: (e["t"], e["type"])) == sorted(
        V2_EVENTS, key=lambda e: (e["t"], e["type"]))  # type: ignore[arg-type, return-value]

    again = await SqliteStore.open(db)
    assert again.migrated_from is None
    await again.close()
    with sqlite3.connect(db) as raw:
        raw.execute(f"PRAGMA user_version={schema.SCHEMA_VERSION + 1}")
    with pytest.raises(ValueError, match="written by a newer release"):
        list(events_from_db(db))


async def test_the_request_log_is_bounded_by_its_count_within_a_burst(tmp_path: Path) -> None:
    """100,000 request events in one instant of the clock: the count bound holds (trimmed
    a batch at a time), the newest kept, and the state change from before the burst stays."""
    db = tmp_path / "state.db"
    engine, clock, _ = make_engine({"p": ("a",)})
    clock.set(START)
    store = await SqliteStore.open(db, retention=StoreRetention(requests_max_events=30_000))
    await store.attach(engine)
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.FORBIDDEN))  # a lockout
    for n in range(100_000):
        engine.bus.emit(RequestEvent(START, f"r{n}", "chat"))
        if n % 10_000 == 9_999:
            await store.flush()
    for _ in range(20):  # the backlog goes a TRIM_BATCH a flush, with no time passing
        await store.flush()
    assert _on_disk(db, "SELECT count(*) FROM requests") == [(30_000,)]
    assert [json.loads(str(b))["id"] for (b,) in _on_disk(
        db, "SELECT body FROM requests ORDER BY id LIMIT 1")] == ["r70000"]
    assert [e["type"] for e in await store.state_changes()] == ["lockout"]
    await store.close()


async def test_a_row_nested_past_the_recursion_limit_is_skipped_by_every_reader(
        tmp_path: Path) -> None:
    """A row written by hand or another program: the gateway's history (a 500 before)
    and `record --db` (a traceback) leave it out and read the rest."""
    db = tmp_path / "state.db"
    store = await SqliteStore.open(db)
    await store.close()
    deep = '{"type": "breaker", "t": 5, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    good = {"type": "request", "t": 7, "id": "r1", "route": "chat"}
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO history (t, type, body) VALUES (5, 'breaker', ?)", (deep,))
        raw.execute("INSERT INTO requests (t, type, body) VALUES (7, 'request', ?)",
                    (json.dumps(good),))
    store = await SqliteStore.open(db)
    assert await store.state_changes() == []
    await store.close()
    assert list(events_from_db(db)) == [good]




async def test_a_count_trim_over_gaps_in_the_ids_goes_on_at_the_next_flush(
        tmp_path: Path) -> None:
    """Events stamped ten years ahead (a skewed clock) never age out, those ten years
    behind all do at once, leaving gaps in the ids; the count trim, a batch of ids at a
    time, then deletes fewer rows than a batch, and must still go on at the next flush
    rather than wait 10 s or 20,000 rows (it stopped at 2,666 rows of a bound of 1,000)."""
    db = tmp_path / "state.db"
    engine, clock, _ = make_engine({"p": ("a",)})
    clock.set(START)
    store = await SqliteStore.open(db, retention=StoreRetention(requests_max_events=1000))
    await store.attach(engine)
    await store.flush()
    for n in range(9_000):
        skew = 10 * 365 * DAY * (1 if n % 3 else -1)
        engine.bus.emit(RequestEvent(START + skew, f"r{n}", "chat"))
        if n % 1_000 == 999:  # within what the store holds for the disk
            await store.flush()
    clock.advance(TRIM_EVERY_MS)
    for _ in range(3):
        await store.flush()
    kept = [json.loads(str(b))["id"] for (b,) in _on_disk(
        db, "SELECT body FROM requests ORDER BY id")]
    assert len(kept) == 1000 - 1000 // 3  # the newest 1,000 ids, less those aged out
    assert (kept[0], kept[-1]) == ("r8000", "r8999")
    await store.close()
