"""Request records under hostile input and faults: what a stranger wrote in Redis, a
Redis that is slow, full or read-only, one id sent twice at once, a bug after routing;
and the console's fetch and the picker when what they get is not what they expect."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio

from omniroute_tui.engine.events import RequestEvent
from omniroute_tui.gateway.record_codec import _WBITS, _ZDICT, encode_record, record_json

from .gateway_helpers import TOKEN, running_gateway
from .redis_helpers import REDIS_URL
from .test_request_records import _why
from .waiting import eventually, eventually_sync

AUTH = {"authorization": f"Bearer {TOKEN}"}
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]

SLOW = """\
name: slow
duration: 30m
resilience: {request: {timeout: 20s}}
providers:
  quick: {models: [m], latency: 5ms, connections: [q1]}
  slowpoke: {models: [m], latency: 400ms, connections: [s1]}
  stuck: {models: [m], latency: 5ms, connections: [k1]}
routes:
  chat: {targets: [quick/m]}
  slow: {targets: [slowpoke/m]}
  stuck: {targets: [stuck/m]}
faults:
  - {name: stuck, target: stuck, error: slow, latency: 10s, at: 0s, for: 30m}
"""


def _raw(text: str) -> bytes:
    """`text` stored as a record (the codec's own format), whatever it says."""
    packer = zlib.compressobj(9, zlib.DEFLATED, _WBITS, 9, zdict=_ZDICT)
    return b"\x01" + packer.compress(text.encode()) + packer.flush()


async def _chat(url: str, request_id: str, model: str = "chat") -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        return await http.post("/v1/chat/completions", headers={"x-request-id": request_id},
                               json={"model": model, "messages": MESSAGES})


# -- 1: two requests in flight under one client id ------------------------------------------

async def test_two_requests_in_flight_with_one_id_get_a_record_each(tmp_path: Path) -> None:
    """Two requests at once under one client id: the later gets an id of ours, and each
    has its own record with its own events; nothing is left open."""
    async with running_gateway(tmp_path, scenario=SLOW) as gw:
        slow = asyncio.create_task(_chat(gw.url, "dup-1", "slow"))
        await eventually(lambda: "dup-1" in gw.gateway.records._open, what="the slow one")
        fast = await _chat(gw.url, "dup-1", "chat")  # ends while the slow one is in flight
        ours = fast.headers["x-request-id"]
        assert ours.startswith(gw.gateway.request_ids.prefix + "-")
        assert (await _why(gw.url, "dup-1")).json()["records"] == []  # not yet: in flight
        assert (await slow).headers["x-request-id"] == "dup-1"
        for request_id, route in (("dup-1", "slow"), (ours, "chat")):
            [record] = (await _why(gw.url, request_id)).json()["records"]
            [begun] = [e for e in record["events"] if e["type"] == "request"]
            assert (begun["id"], begun["route"], record["status"]) == (request_id, route, 200)
            assert "statuses" not in record
        assert gw.gateway.records._open == {} and gw.gateway.request_ids.in_flight == 0


# -- what a stranger stored as a record: nested past the stack, NaN in an event ----------

@pytest.mark.parametrize("request_id, text", [
    ("deep", '{"id":"deep","replica":null,"status":200,"events":['
     + "[" * 100_000 + "]" * 100_000 + "]}"),
    ("nan-1", record_json("nan-1", "gw-x", 200, [
        '{"t":NaN,"type":"request","id":"nan-1","route":"chat"}'])),
], ids=["nested", "nan"])
async def test_a_strangers_record_is_unreadable_not_a_500(
        tmp_path: Path, prefix: str, request_id: str, text: str) -> None:
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        await client.rpush(f"{prefix}:request:{request_id}", _raw(text))
        async with running_gateway(tmp_path, scenario=SLOW,
                                   redis=(REDIS_URL, prefix)) as gw:
            answer = await _why(gw.url, request_id)
            assert answer.status_code == 200, answer.text[:200]
            assert answer.json()["unreadable_records"] == 1
    finally:
        await client.aclose()


# -- 4: a huge list under a request's key is read whole ---------------------------------------

async def test_a_huge_list_under_a_requests_key_is_not_read_whole(tmp_path: Path,
                                                                  prefix: str) -> None:
    """The writer keeps 8 a key (LTRIM); the reader asks LRANGE 0 -1: a stranger's list
    of 200,000 entries is fetched and decoded entry by entry, and said as 200,000
    unreadable records."""
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        key = f"{prefix}:request:big"
        for _ in range(20):
            await client.rpush(key, *([b"x" * 10] * 10_000))
        async with running_gateway(tmp_path, scenario=SLOW,
                                   redis=(REDIS_URL, prefix)) as gw:
            answer = await _why(gw.url, "big")
            assert answer.status_code in (200, 503)
            if answer.status_code == 200:
                assert answer.json().get("unreadable_records", 0) <= 8, answer.json()
    finally:
        await client.aclose()


# -- 5: the recorder's open table after requests of every kind --------------------------------

def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CLIENTS = (f"gateway:\n  clients:\n    alpha: {{keys: [{_digest('sk-alpha-0001')}], "
           "rpm: 1, routes: [chat, slow, stuck]}\n")


async def test_the_open_table_is_empty_after_requests_of_every_kind(tmp_path: Path) -> None:
    from omniroute_tui.config.limits import GatewayLimits

    async with running_gateway(tmp_path, scenario=SLOW, gateway_section=CLIENTS,
                               limits=GatewayLimits(max_body_bytes=2000)) as gw:
        key = {"authorization": "Bearer sk-alpha-0001"}
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            async def post(rid: str, body: Any = None, content: bytes | None = None,
                           headers: dict[str, str] | None = None,
                           timeout: float = 10) -> int:
                h = {"x-request-id": rid, **(headers or {})}
                if content is not None:
                    return (await http.post("/v1/chat/completions", headers=h,
                                            content=content, timeout=timeout)).status_code
                return (await http.post("/v1/chat/completions", headers=h, json=body,
                                        timeout=timeout)).status_code

            assert await post("k-401", {"model": "chat", "messages": MESSAGES}) == 401
            assert await post("k-400", content=b"{nope", headers=key) == 400
            assert await post("k-413", content=b"{" + b" " * 5000 + b"}", headers=key) == 413
            assert await post("k-200", {"model": "chat", "messages": MESSAGES},
                              headers=key) == 200
            assert await post("k-429", {"model": "chat", "messages": MESSAGES},
                              headers=key) == 429
        assert gw.gateway.records._open == {} and gw.gateway.request_ids.in_flight == 0


async def test_the_open_table_is_empty_after_404_499_and_streams(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SLOW) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            r = await http.post("/v1/chat/completions", headers={"x-request-id": "k-404"},
                                json={"model": "nowhere", "messages": MESSAGES})
            assert r.status_code == 404
            with contextlib.suppress(httpx.ReadTimeout):  # the client gives up: 499
                await http.post("/v1/chat/completions", headers={"x-request-id": "k-499"},
                                json={"model": "stuck", "messages": MESSAGES}, timeout=0.5)
            # a stream read whole, and one the client drops after its first line
            async with http.stream("POST", "/v1/chat/completions",
                                   headers={"x-request-id": "k-s1"},
                                   json={"model": "chat", "messages": MESSAGES,
                                         "stream": True}) as s:
                async for _ in s.aiter_lines():
                    pass
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http2, \
                http2.stream("POST", "/v1/chat/completions", headers={"x-request-id": "k-s2"},
                             json={"model": "slow", "messages": MESSAGES,
                                   "stream": True}) as s:
            async for _ in s.aiter_lines():
                break
        await eventually(lambda: not gw.gateway.records._open, what="every record written")
        assert gw.gateway.request_ids.in_flight == 0
        for rid in ("k-499", "k-s1", "k-s2"):
            answer = await _why(gw.url, rid)
            assert answer.status_code == 200, (rid, answer.text[:200])


# -- 6: streams cut upstream (reset, stall, bad frame, no [DONE]) -----------------------------

@pytest.mark.parametrize("route", ["cut", "stall", "bad", "nodone", "six"])
async def test_a_cut_stream_is_recorded_and_nothing_left_open(route: str) -> None:
    from .test_gateway_streams import _tokens, gateway_and_upstream

    async with gateway_and_upstream() as setup:
        await _tokens(setup.api, route)
        await eventually(lambda: not setup.gateway.records._open,
                         what="the stream's record written")
        assert setup.gateway.records.kept == 1 and setup.gateway.request_ids.in_flight == 0
        [(rid, blobs)] = list(setup.gateway.records.sink._records.items())
        found = await setup.gateway.records.lookup(rid)
        assert found is not None and found["records"][0]["events"][-1]["type"] == "result"


# -- 7: an exception after routing (a 500): the request stays open, its record is lost --------

async def test_a_500_after_routing_writes_its_record_and_leaves_nothing_open(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SLOW) as gw:
        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug after the decision")

        gw.gateway._respond = broken  # type: ignore[method-assign]
        with contextlib.suppress(httpx.HTTPError):
            r = await _chat(gw.url, "k-500")
            assert r.status_code == 500
        assert gw.gateway.records._open == {}, list(gw.gateway.records._open)


# -- 8: Redis slow during a write: the batch times out, ran anyway, and is sent again --------

@pytest.fixture
def debug_redis() -> Iterator[str]:
    """A Redis of this test's own that takes DEBUG (to stall it) and CONFIG (to fill
    it), keeping nothing on disk; skips where there is no redis-server."""
    import shutil
    import subprocess

    from .gateway_helpers import free_port

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary (make test installs it as root)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--bind", "127.0.0.1", "--enable-debug-command", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    probe = redis.Redis.from_url(url, socket_connect_timeout=0.2)

    def answers() -> bool:
        try:
            return bool(probe.ping())
        except redis.RedisError:
            return False

    try:
        eventually_sync(answers, what="the test's own redis-server")
        probe.close()
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_a_slow_redis_does_not_store_a_record_twice(debug_redis: str) -> None:
    OWN_REDIS = debug_redis
    from omniroute_tui.gateway.request_records import RedisRecords

    sleeper = redis.asyncio.Redis.from_url(OWN_REDIS)
    client = redis.asyncio.Redis.from_url(OWN_REDIS)
    prefix = f"omniroute-test-{uuid.uuid4().hex[:8]}"
    try:
        await client.ping()
        sink = RedisRecords(client, prefix, 60_000)
        blob = encode_record(record_json("slow-1", "gw", 200, [
            RequestEvent(1, "slow-1", "chat").to_json()]))
        sink.put("slow-1", 0, blob)
        sink._sender._timer.cancel()  # type: ignore[union-attr]
        sink._sender._timer = None
        pause = asyncio.create_task(sleeper.execute_command("DEBUG", "SLEEP", "1.5"))
        await asyncio.sleep(0.1)
        assert not await sink.flush()  # timed out after 1 s: kept to try again
        await pause
        assert await sink.flush()
        await sink.close()
        assert await client.llen(sink.key("slow-1")) == 1
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        await sleeper.aclose()


# -- 9: what a stranger wrote: events with fields of the wrong types pass as events ----------

async def test_events_with_fields_of_the_wrong_types_are_left_out(tmp_path: Path,
                                                                  prefix: str) -> None:
    """docs/gateway.md / design.md: 'an event that is not one the engine could emit ... is
    left out and counted'. decode_record checks the field names only."""
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        text = record_json("typed", "gw-x", 200, [
            '{"t":"yesterday","type":"request","id":"typed","route":{"x":[1,2]}}',
            '{"t":1,"type":"response","request":"typed","status":"ok","attempts":[],'
            '"latency_ms":"slow","waited_ms":null,"served_by":{"p":1}}'])
        await client.rpush(f"{prefix}:request:typed", _raw(text))
        async with running_gateway(tmp_path, scenario=SLOW,
                                   redis=(REDIS_URL, prefix)) as gw:
            [record] = (await _why(gw.url, "typed")).json()["records"]
            assert record["events"] == [] and record.get("unreadable_events") == 2, record
    finally:
        await client.aclose()


async def test_the_console_says_something_of_a_record_it_cannot_show(
        tmp_path: Path, prefix: str) -> None:
    """Such a record reaches the console, whose why raises in a worker: no detail, no
    notification, the operator sees nothing happen."""
    from .console_helpers import settle
    from .test_console_attach import attached_app

    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        text = record_json("typed-2", "gw-x", 200, [
            '{"t":"yesterday","type":"request","id":"typed-2","route":"chat"}'])
        await client.rpush(f"{prefix}:request:typed-2", _raw(text))
        async with running_gateway(tmp_path, scenario=SLOW,
                                   redis=(REDIS_URL, prefix)) as gw:
            app = await attached_app(tmp_path, gw.url)
            async with app.run_test(size=(120, 36)) as pilot:
                await settle(pilot, lambda: app.backend.connected)
                await pilot.press("6", "/")
                await pilot.press(*"typed-2", "enter")
                from omniroute_tui.console.screens.modals import DetailScreen
                await settle(pilot, lambda: isinstance(app.screen, DetailScreen)
                             or any("typed-2" in str(n.message) for n in app._notifications))
                assert isinstance(app.screen, DetailScreen) or any(
                    "typed-2" in str(n.message) for n in app._notifications)
    finally:
        await client.aclose()


# -- 10: an ordinary filter of the requests pane, attached, says 'no request ... is kept' ---

async def test_filtering_the_requests_pane_by_a_route_raises_no_warning(
        tmp_path: Path) -> None:
    """docs/console.md: '/ filter this pane's rows ... enter gives the keys back to the
    pane'. Attached, any text that is not one request's id is now also asked of the
    gateway as a whole id: filtering by a route or provider warns 'no request quick is
    kept by the gateway'."""
    from .console_helpers import settle
    from .test_console_attach import attached_app

    async with running_gateway(tmp_path, scenario=SLOW) as gw:
        app = await attached_app(tmp_path, gw.url)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, lambda: app.backend.connected)
            await _chat(gw.url, "f-1")
            await _chat(gw.url, "f-2")
            await settle(pilot, lambda: len(app.model.requests) == 2)
            await pilot.press("6", "/")
            await pilot.press(*"quick", "enter")
            await pilot.pause(1.0)
            warnings = [str(n.message) for n in app._notifications]
            assert not any("no request" in w for w in warnings), warnings


# -- 11: the picker: a scenario that cannot be replayed leaves the run paused ----------------

async def test_a_scenario_that_cannot_load_gives_the_run_back_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """picker.py/scenarios.py list an invalid scenario on purpose ('choosing it says why
    it cannot run'); replay_controls._picked then notifies and returns, but the run the
    picker paused stays paused (escape gives it back; a failed choice does not)."""
    from textual.widgets import OptionList

    import simulator.scenario
    from omniroute_tui.config.problems import ConfigError
    from omniroute_tui.console.screens.picker import ScenarioPicker

    from .console_helpers import past_the_guard, piloted, settle

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError([])

    async with piloted() as (app, pilot):
        app.backend.paused = False  # a run playing
        monkeypatch.setattr(simulator.scenario, "load_scenario", refuse)
        await pilot.press("p")
        await settle(pilot, lambda: isinstance(app.screen, ScenarioPicker))
        options = app.screen.query_one(OptionList)
        options.highlighted = options.get_option_index("vpn-blip")
        await past_the_guard(pilot, ScenarioPicker)
        await pilot.press("enter")
        await settle(pilot, lambda: not isinstance(app.screen, ScenarioPicker))
        assert any("cannot be replayed" in str(n.message) for n in app._notifications)
        assert app.backend.title == "demo"
        assert not app.backend.paused  # it was running before the picker opened


# -- 12: a reload that changes store.records names the wrong sections ------------------------

def test_a_reload_names_store_records_as_needing_a_restart() -> None:
    from omniroute_tui.gateway.reload import RESTART_FIELDS

    assert "records" in RESTART_FIELDS["store_retention"], RESTART_FIELDS["store_retention"]


# -- 13: Redis out of memory or read-only (a failover): records dropped, not kept -----------

async def test_records_redis_refuses_for_oom_are_kept_to_try_again(debug_redis: str) -> None:
    OWN_REDIS = debug_redis
    """docs/gateway.md: 'A record waiting for Redis ... is kept and retried'. An OOM (the
    default maxmemory-policy is noeviction) or READONLY error comes back through the
    script's pcall and is counted as 'refused by keys of another type': dropped at once."""
    from omniroute_tui.gateway.request_records import RedisRecords

    client = redis.asyncio.Redis.from_url(OWN_REDIS)
    prefix = f"omniroute-test-{uuid.uuid4().hex[:8]}"
    try:
        await client.config_set("maxmemory", "1")
        await client.config_set("maxmemory-policy", "noeviction")
        sink = RedisRecords(client, prefix, 60_000)
        sink.put("oom-1", 0, b"\x01abc")
        sink._sender._timer.cancel()  # type: ignore[union-attr]
        sink._sender._timer = None
        await sink.flush()
        assert sink.dropped == 0 and list(sink._pending) == [("oom-1", b"\x01abc")]
    finally:
        await client.config_set("maxmemory", "0")
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


# -- 14: records that inflate to the cap, many under one key: the event loop stalls ---------

async def test_a_list_of_inflating_records_does_not_stall_routing(tmp_path: Path,
                                                                  prefix: str) -> None:
    """Each blob is ~800 bytes in Redis, inflates to ~210 KB of 2,000 valid events (6 ms of
    CPU to decode, ~240 KB of answer); LRANGE 0 -1 reads any number of them, decoded on
    the event loop: 150 stall every request the gateway serves meanwhile."""
    event = ('{"t":1,"type":"attempt","request":"bombs","n":1,"provider":"p",'
             '"connection":"c","model":"m","probe":false}')
    blob = _raw(record_json("bombs", "gw", 200, [event] * 2000))
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        await client.rpush(f"{prefix}:request:bombs", *([blob] * 150))
        async with running_gateway(tmp_path, scenario=SLOW,
                                   redis=(REDIS_URL, prefix)) as gw:
            answer = await _why(gw.url, "bombs")
            body = answer.json()
            # at most the last 8 read, and none of them decoded past its bound of events
            assert body["records"] == [] and body["unreadable_records"] == 8, body
    finally:
        await client.aclose()


# -- 15: the memory sink bounds ids, not records ---------------------------------------------

def test_memory_keeps_the_last_10000_requests_not_80000() -> None:
    """docs/gateway.md: 'one gateway without: its memory, the last 10,000 requests
    (~1.6 MB)'. The bound is on ids; each id keeps 8: a client reusing each id 8 times
    keeps 8x as many records (and a 64-attempt request is ~20 KiB, not 170 bytes)."""
    from omniroute_tui.gateway.request_records import MemoryRecords

    sink = MemoryRecords(limit=100)
    for n in range(800):
        sink.put(f"id-{n % 100}", 0, b"\x01r")
    assert sum(len(v) for v in sink._records.values()) <= 100
