"""A request's why from anywhere: `GET /api/requests/{id}` (docs/gateway.md, "A request's
why"), from memory, the state database and a fleet's Redis, and what hostile records do."""

from __future__ import annotations

import asyncio
import json
import zlib
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis.asyncio

from omniroute_tui.config.limits import StoreRetention
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import AttemptEvent, RequestEvent, ResponseEvent
from omniroute_tui.gateway import request_records
from omniroute_tui.gateway.record_codec import (
    MAX_RECORD_BYTES,
    decode_record,
    encode_record,
    record_json,
)
from omniroute_tui.gateway.request_records import (
    MAX_OPEN,
    MemoryRecords,
    RecordsUnavailable,
    RedisRecords,
    RequestRecorder,
)
from omniroute_tui.store import SqliteStore

from .gateway_helpers import TOKEN, running_gateway
from .redis_helpers import REDIS_URL

SCENARIO = """\
name: records
duration: 30m
resilience: {request: {timeout: 3s}}
providers:
  healthy: {models: [m], latency: 5ms, connections: [h1]}
  throttled: {models: [m], latency: 5ms, connections: [t1]}
routes:
  storm: {targets: [throttled/m, healthy/m]}
faults:
  - {name: throttled, target: throttled, error: 429, retry_after: 30s, at: 0s, for: 30m}
"""
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
AUTH = {"authorization": f"Bearer {TOKEN}"}


async def _ask(url: str, request_id: str, *, stream: bool = False) -> None:
    api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                             default_headers={"x-request-id": request_id})
    async with api:
        if stream:
            chunks = await api.chat.completions.create(model="storm", messages=MESSAGES,
                                                       stream=True)
            async for _ in chunks:
                pass
        else:
            await api.chat.completions.create(model="storm", messages=MESSAGES)


async def _why(url: str, request_id: str, *, token: str | None = TOKEN) -> httpx.Response:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        return await http.get(f"/api/requests/{request_id}")


def _steps(record: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each event as what it says of the decision."""
    steps: list[tuple[Any, ...]] = []
    for e in record["events"]:
        if e["type"] == "attempt":
            steps.append(("attempt", e["provider"], e["connection"]))
        elif e["type"] == "result":
            steps.append(("result", e["provider"], e["kind"], e["status"]))
        elif e["type"] == "skip":
            steps.append(("skip", e["provider"], e["reason"]))
        else:
            steps.append((e["type"],))
    return steps


FELL_BACK = [("request",), ("attempt", "throttled", "t1"),
             ("result", "throttled", "rate_limited", 429), ("attempt", "healthy", "h1"),
             ("result", "healthy", None, 200), ("response",)]


async def test_a_request_that_met_a_429_and_fell_back_is_found_by_its_id(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SCENARIO) as gw:
        await _ask(gw.url, "why-1")
        answer = await _why(gw.url, "why-1")
        assert answer.status_code == 200
        body = answer.json()
        assert body["id"] == "why-1" and body["kept_in"] == "memory"
        [record] = body["records"]
        assert record["status"] == 200 and record["replica"] is None
        assert _steps(record) == FELL_BACK
        # the next one finds the key cooling: skipped, with its reason
        await _ask(gw.url, "why-2")
        [record] = (await _why(gw.url, "why-2")).json()["records"]
        assert _steps(record) == [("request",), ("skip", "throttled", "all_cooling"),
                                  ("attempt", "healthy", "h1"),
                                  ("result", "healthy", None, 200), ("response",)]


async def test_a_streams_record_ends_with_the_stream(tmp_path: Path) -> None:
    """A stream's response event comes at its first content; its record is written when
    the stream ends, so the result that says what was relayed is in it."""
    async with running_gateway(tmp_path, scenario=SCENARIO) as gw:
        await _ask(gw.url, "stream-1", stream=True)
        [record] = (await _why(gw.url, "stream-1")).json()["records"]
        assert [e["type"] for e in record["events"]][-2:] == ["response", "result"]
        assert record["events"][-1]["relayed_chunks"] > 0


async def test_unknown_bad_and_unauthenticated_asks(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SCENARIO) as gw:
        missing = await _why(gw.url, "never-seen")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        assert "last 10,000 requests in memory" in missing.json()["error"]["message"]
        for bad in ("a%20b", "x" * 129, "%C3%A9t%C3%A9"):
            answer = await _why(gw.url, bad)
            assert answer.status_code == 400, bad
            assert answer.json()["error"]["param"] == "request_id"
        assert (await _why(gw.url, "never-seen", token=None)).status_code == 401


async def test_a_client_that_reuses_its_id_gets_each_request_kept(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SCENARIO) as gw:
        for _ in range(3):
            await _ask(gw.url, "same-id")
        records = (await _why(gw.url, "same-id")).json()["records"]
        assert len(records) == 3
        assert _steps(records[0]) == FELL_BACK  # oldest first
        assert ("skip", "throttled", "all_cooling") in _steps(records[2])


async def test_the_database_keeps_records_across_a_restart(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SCENARIO, db=True) as gw:
        await _ask(gw.url, "kept-1")
        body = (await _why(gw.url, "kept-1")).json()  # found before or after the flush
        assert "kept_in" in body, body
        assert body["kept_in"] == "database" and _steps(body["records"][0]) == FELL_BACK
    store = await SqliteStore.open(tmp_path / "state.db")
    try:
        [blob] = await store.records("kept-1", 8)
        record = decode_record(blob, "kept-1")
        assert record is not None and _steps(record.to_dict()) == FELL_BACK
    finally:
        await store.close()


async def test_the_database_trims_records_by_age(tmp_path: Path) -> None:
    from omniroute_tui.clock import ManualClock
    from omniroute_tui.engine import ResilienceEngine

    clock = ManualClock(10_000_000)
    store = await SqliteStore.open(tmp_path / "s.db", retention=StoreRetention(
        records_max_age_ms=3_600_000))
    try:
        await store.attach(ResilienceEngine({}, clock))
        store.put_record(clock.now_ms(), "old", b"\x01old")
        await store.flush()
        clock.advance(3_600_001)
        store.put_record(clock.now_ms(), "new", b"\x01new")
        assert await store.flush()
        assert await store.records("old", 8) == []
        assert await store.records("new", 8) == [b"\x01new"]
    finally:
        await store.close()


def test_the_defaults_keep_an_hour_at_100_requests_a_second() -> None:
    kept = StoreRetention()
    assert kept.records_max_age_ms == 3_600_000
    assert kept.records_max_entries >= 100 * 3600


# -- a fleet ------------------------------------------------------------------------------

async def test_any_replica_answers_for_a_request_another_served_even_once_it_is_gone(
        tmp_path: Path, prefix: str) -> None:
    async with running_gateway(tmp_path / "b", scenario=SCENARIO,
                               redis=(REDIS_URL, prefix)) as two:
        async with running_gateway(tmp_path / "a", scenario=SCENARIO,
                                   redis=(REDIS_URL, prefix)) as one:
            await _ask(one.url, "fleet-1")
            assert one.gateway.fleet is not None
            served_by = one.gateway.fleet.replica
        # the replica that served it has stopped (its records were sent as it closed)
        body = (await _why(two.url, "fleet-1")).json()
        assert body["kept_in"] == "redis"
        [record] = body["records"]
        assert record["replica"] == served_by and _steps(record) == FELL_BACK
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        ttl = await client.pttl(f"{prefix}:request:fleet-1")
        assert 3_500_000 < ttl <= 3_600_000
    finally:
        await client.aclose()


async def test_hostile_values_in_redis_are_left_out_and_counted(
        tmp_path: Path, prefix: str) -> None:
    """What a stranger may have written under a request's key: a string, a list of
    what is not a record, a zip bomb, another request's record, events that are not
    events. None is a 500, none is read as a step."""
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    good = encode_record(record_json("mixed", "gw-x", 200, [
        RequestEvent(1, "mixed", "storm").to_json(),
        ResponseEvent(2, "mixed", 200, 1, 1, 0, "healthy/h1/m").to_json()]))
    bomb = b"\x01" + zlib.compress(b"{" + b" " * (MAX_RECORD_BYTES * 4), 9, )[2:-4]
    try:
        await client.set(f"{prefix}:request:stringy", "not a list")
        await client.rpush(f"{prefix}:request:mixed", b"junk", b"\x01\xff\xfe", bomb,
                           encode_record(record_json("other", None, 200, [])),
                           encode_record(record_json("mixed", None, 200, [
                               '{"t":1,"type":"attempt","request":"mixed"}',
                               '{"t":1,"type":"nope","request":"mixed"}', '[1]'])),
                           good)
        async with running_gateway(tmp_path, scenario=SCENARIO,
                                   redis=(REDIS_URL, prefix)) as gw:
            stringy = await _why(gw.url, "stringy")
            assert stringy.status_code == 200
            assert stringy.json() == {"id": "stringy", "kept_in": "redis", "records": [],
                                      "unreadable_records": 1}
            body = (await _why(gw.url, "mixed")).json()
            assert body["unreadable_records"] == 4
            bad, fine = body["records"]
            assert bad["events"] == [] and bad["unreadable_events"] == 3
            assert fine["replica"] == "gw-x" and _steps(fine) == [("request",), ("response",)]
            # a request whose key a stranger made a string: its record is refused alone
            await _ask(gw.url, "stringy")
            await _ask(gw.url, "after")
            await gw.gateway.records.sink.close()
            assert gw.gateway.records.sink.dropped == 1
            assert (await _why(gw.url, "after")).json()["records"]
    finally:
        await client.aclose()


async def test_redis_down_keeps_records_waiting_and_says_503(tmp_path: Path) -> None:
    sink = RedisRecords(redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0",
                                                     socket_connect_timeout=0.2), "x", 1000)
    sink.put("r1", 0, b"\x01a")
    assert not await sink.flush()
    assert sink.errors == 1 and list(sink._pending) == [("r1", b"\x01a")]  # kept to try again
    with pytest.raises(RecordsUnavailable):
        await sink.get("r1")
    await sink.close()  # one more try; then lost, counted, and no retry left behind
    assert sink.errors == 2 and sink._sender._timer is None
    assert sink.dropped == 1 and not sink._pending


async def test_a_long_outage_keeps_the_newest_records_and_counts_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_PENDING the oldest record goes at each put (a deque: each put was a
    list's first item deleted, 50,000 moved, through a Redis outage at 100 req/s)."""
    monkeypatch.setattr(request_records, "MAX_PENDING", 3)
    sink = RedisRecords(redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0",
                                                     socket_connect_timeout=0.2), "x", 1000)
    for n in range(5):
        sink.put(f"r{n}", 0, b"\x01")
    assert sink.dropped == 2 and [r for r, _ in sink._pending] == ["r2", "r3", "r4"]
    assert not await sink.flush()
    sink.put("r5", 0, b"\x01")
    assert sink.dropped == 3 and [r for r, _ in sink._pending] == ["r3", "r4", "r5"]
    await sink.close()
    assert sink.dropped == 6 and not sink._pending


async def test_the_api_says_503_with_retry_after_when_records_cannot_be_read(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SCENARIO) as gw:
        class Down(MemoryRecords):
            async def get(self, request_id: str) -> list[bytes]:
                raise RecordsUnavailable("Redis: ConnectionError")

        gw.gateway.records.sink = Down()
        answer = await _why(gw.url, "any")
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.json()["error"]["code"] == "records_unavailable"


# -- the recorder and the codec -------------------------------------------------------------

def test_a_record_round_trips_and_is_small() -> None:
    events = [RequestEvent(5, "r9", "chat").to_json(),
              AttemptEvent(5, "r9", 1, "alpha", "a1", "gpt-4o", False).to_json(),
              ResponseEvent(90, "r9", 200, 1, 85, 0, "alpha/a1/gpt-4o").to_json()]
    text = record_json("r9", "gw-1", 200, events)
    blob = encode_record(text)
    assert len(blob) < len(text) / 2
    record = decode_record(blob, "r9")
    assert record is not None and record.unreadable == 0
    assert record.to_dict() == {"replica": "gw-1", "status": 200,
                                "events": [json.loads(e) for e in events]}
    assert decode_record(blob, "r8") is None  # another id's
    assert decode_record(blob[:-3], "r9") is None  # cut short
    assert decode_record(b"\x02" + blob[1:], "r9") is None  # a format of another release
    assert decode_record("text", "r9") is None  # type: ignore[arg-type]


def test_requests_open_too_long_are_dropped_counted_and_the_table_bounded() -> None:
    bus = EventBus()
    sink = MemoryRecords(limit=3)
    recorder = RequestRecorder(bus, sink, replica=None, wall_ms=lambda: 0)
    for n in range(MAX_OPEN + 5):
        bus.emit(RequestEvent(n, f"r{n}", "chat"))
    assert recorder.abandoned == 5 and len(recorder._open) == MAX_OPEN
    recorder.finish("r0", 200)  # dropped: nothing to write
    for n in range(MAX_OPEN, MAX_OPEN + 5):
        recorder.finish(f"r{n}", 200)
    assert recorder.kept == 5 and len(sink._records) == 3  # the memory sink's bound
    assert asyncio.run(sink.get("r0")) == []


# -- the console ---------------------------------------------------------------------------

async def test_the_console_opens_the_why_of_a_request_another_replica_served(
        tmp_path: Path, prefix: str) -> None:
    """Attached to one replica, an operator pastes the id a client quoted: the request
    was served by the other replica before the console attached, and its why opens."""
    from omniroute_tui.console.screens.modals import DetailScreen

    from .console_helpers import settle
    from .test_console_attach import attached_app

    async with running_gateway(tmp_path / "a", scenario=SCENARIO,
                               redis=(REDIS_URL, prefix)) as one, \
            running_gateway(tmp_path / "b", scenario=SCENARIO,
                            redis=(REDIS_URL, prefix)) as two:
        await _ask(one.url, "quoted-7")
        await one.gateway.records.sink.close()  # sent now, not in a quarter second
        app = await attached_app(tmp_path, two.url)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, lambda: app.backend.connected)
            await pilot.press("6", "/")
            await pilot.press(*"quoted-7", "enter")
            await settle(pilot, lambda: isinstance(app.screen, DetailScreen))
            screen = app.screen
            assert isinstance(screen, DetailScreen)
            assert screen.heading == "request quoted-7"
            assert ("replica", f"replica {one.gateway.fleet.replica}") in screen.current
            text = "\n".join(screen.history)
            assert "attempt 1 on throttled/t1/m" in text
            assert "failed: rate_limited (429)" in text
            assert "attempt 2 on healthy/h1/m" in text
            assert "answered the client 200 from healthy/h1/m" in text
            await pilot.press("escape", "/")
            await pilot.press(*"nowhere-1", "enter")
            await settle(pilot, lambda: any("no request nowhere-1" in str(n.message)
                                            for n in app._notifications))
