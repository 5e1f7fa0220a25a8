"""The gateway under bad input and misbehaving clients: a 4xx or a closed socket, never a
500 of its own, never a traceback, and the gateway stays up."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from omniroute_tui.config.limits import GatewayLimits
from omniroute_tui.config.token import TokenError, load_token
from omniroute_tui.engine import EventBus, OperatorEvent
from omniroute_tui.gateway.events_stream import EventBroadcaster
from omniroute_tui.gateway.protocol import client_log

from .gateway_helpers import TOKEN, running_gateway
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}"}
CHAT = "/v1/chat/completions"
FAST = GatewayLimits(head_timeout_s=0.5, body_timeout_s=0.5, write_timeout_s=0.5,
                     max_body_bytes=64 * 1024)


@pytest.fixture(autouse=True)
def _fresh_client_log() -> None:
    client_log.reset()


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


async def _raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def _read_all(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> bytes:
    async with asyncio.timeout(timeout_s):
        return await reader.read()  # to EOF: the server closed the connection


async def test_bad_chat_bodies_get_400_naming_the_field(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cases: list[tuple[bytes, str | None, str]] = [
        (b"[" * 5000 + b"]" * 5000, None, "nested more than 64"),
        (b'{"model": "chat", "messages": [], "x": ' + b"[" * 70 + b"]" * 70 + b"}", None,
         "nested more than 64"),
        (b'{"model": "chat", "messages": [], "stream": "false"}', "stream", "true or false"),
        (b'{"model": "chat", "messages": ["hi"]}', "messages[0]", "must be an object"),
        (b'{"model": "chat", "messages": {}}', "messages", "a list"),
        (b'{"model": "chat", "messages": [], "temperature": NaN}', None, "NaN"),
        (b'{"model": "chat", "messages": [], "temperature": 1e999}', None, "out of range"),
        (b'{"model": "chat", "messages": [], "temperature": "hot"}', "temperature", "number"),
        (b'{"model": "chat", "messages": [], "max_tokens": 1.5}', "max_tokens", "integer"),
        (b'{"model": "' + b"m" * 300 + b'", "messages": []}', "model", "longer than 256"),
        (b'{"model": 7, "messages": []}', "model", "missing `model`"),
        (b"\xff\xfe", None, "not valid JSON"),
        (b'{"model": "chat", "messages": [], "n": ' + b"9" * 5000 + b"}", None,
         "not valid JSON"),
    ]
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        for body, param, words in cases:
            reply = await http.post(CHAT, content=body,
                                    headers={"content-type": "application/json"})
            assert reply.status_code == 400, (body[:60], reply.text)
            error = reply.json()["error"]
            assert words in error["message"], (body[:60], error)
            assert error["param"] == param
        assert (await http.get("/health")).status_code == 200
    _no_tracebacks(caplog)


async def test_management_bodies_are_validated_and_durations_bounded(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH) as http:
        force = "/api/resilience/breakers/healthy/force-open"
        for body, words in [({"for": 99999999999999999999}, "longer than 30 days"),
                            ({"for": "31d"}, "longer than 30 days"),
                            ({"for": 1.5}, "expected a duration"),
                            ({"for": -5}, "negative")]:
            reply = await http.post(force, json=body)
            assert reply.status_code == 400 and words in reply.json()["error"]["message"]
        deep = b'{"provider": ' + b"[" * 3000 + b"]" * 3000 + b"}"
        reply = await http.request("DELETE", "/api/resilience/lockouts", content=deep)
        assert reply.status_code == 400 and "nested" in reply.json()["error"]["message"]
        reply = await http.post(force, content=b'{"for": "' + b"1" * 20_000 + b'"}')
        assert reply.status_code == 413
        assert (await http.post(force, json={"for": "30d"})).status_code == 200

        async def written() -> bool:
            store = (await http.get("/health")).json()["store"]
            return bool(store["pending"] == 0)

        await eventually(written, what="the store's write")
        health = (await http.get("/health")).json()
        assert health["status"] == "ok" and health["store"]["ok"] is True


async def test_undeclared_models_are_404_before_any_upstream_call(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True) as gw, httpx.AsyncClient(
            base_url=gw.url) as http:
        seen: list[str] = []
        gw.gateway.engine.bus.subscribe(lambda e: seen.append(e.TYPE))
        for i in range(300):
            reply = await http.post(CHAT, json={"model": f"healthy/made-up-{i}",
                                                "messages": []})
            assert reply.status_code == 404
            assert reply.json()["error"]["code"] == "model_not_found"
        assert seen == []  # no request, attempt or lockout: nothing reached the engine
        assert gw.gateway.router._direct == {}
        assert (await http.post(CHAT, json={"model": "healthy/m", "messages": []})
                ).status_code == 200


async def test_oversized_bodies_and_heads_are_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running_gateway(tmp_path, limits=FAST) as gw, httpx.AsyncClient(
            base_url=gw.url) as http:
        big = b'{"model": "chat", "messages": [], "pad": "' + b"x" * 100_000 + b'"}'
        reply = await http.post(CHAT, content=big)
        assert reply.status_code == 413

        async def chunks():  # no content-length: counted as it arrives
            for _ in range(20):
                yield b"x" * 10_000

        with pytest.raises(httpx.HTTPError):  # refused and closed mid-upload, or a 413
            reply = await http.post(CHAT, content=chunks())
            assert reply.status_code == 413
            raise httpx.RemoteProtocolError("answered 413")
        reply = await http.post(CHAT, json={"model": "chat", "messages": []},
                                headers={"x-big": "y" * 1_000_000})
        assert reply.status_code == 431
        assert (await http.post(CHAT, json={"model": "chat", "messages": []})
                ).status_code == 200
    _no_tracebacks(caplog)


async def test_slow_clients_are_cut_off_and_their_connections_closed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running_gateway(tmp_path, limits=FAST) as gw:
        half_heads = [await _raw(gw.url) for _ in range(100)]
        for _, writer in half_heads:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        half_body = await _raw(gw.url)
        half_body[1].write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                           b"content-length: 100\r\n\r\n{\"model\":")
        silent = await _raw(gw.url)  # connects and says nothing at all
        started = time.monotonic()
        answers = await asyncio.gather(*(_read_all(r) for r, _ in half_heads),
                                       _read_all(half_body[0]), _read_all(silent[0]))
        assert time.monotonic() - started < 4
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[-1]
        for _, writer in [*half_heads, half_body, silent]:
            writer.close()
        async with httpx.AsyncClient(base_url=gw.url) as http:
            assert (await http.get("/health")).status_code == 200
    _no_tracebacks(caplog)


async def test_a_client_that_hangs_up_mid_body_is_one_line_not_a_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with running_gateway(tmp_path) as gw:
        for _ in range(5):
            reader, writer = await _raw(gw.url)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                         b"content-length: 1000\r\n\r\n{\"model\": \"chat\"")
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        def hung_up() -> bool:
            return any("hung up" in r.getMessage() for r in caplog.records)

        await eventually(hung_up, what="the hang-up's log line")
        async with httpx.AsyncClient(base_url=gw.url) as http:
            assert (await http.get("/health")).status_code == 200
    _no_tracebacks(caplog)
    lines = [r.getMessage() for r in caplog.records if "hung up" in r.getMessage()]
    assert len(lines) == 1  # five of a kind within 10 s: one line (the count comes later)


async def test_too_many_connections_are_answered_503(tmp_path: Path) -> None:
    limits = GatewayLimits(max_connections=5, head_timeout_s=5)
    async with running_gateway(tmp_path, limits=limits) as gw:
        held = [await _raw(gw.url) for _ in range(5)]
        reader, writer = await _raw(gw.url)
        answer = await _read_all(reader)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"\r\nretry-after: 1\r\n" in answer
        writer.close()
        for _, w in held:
            w.close()


async def test_an_event_subscriber_that_never_reads_is_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with running_gateway(tmp_path, limits=FAST) as gw:
        reader, writer = await _raw(gw.url)
        writer.write(f"GET /api/resilience/events HTTP/1.1\r\nhost: x\r\n"
                     f"authorization: Bearer {TOKEN}\r\n\r\n".encode())
        await writer.drain()
        broadcaster = gw.gateway.events
        async with asyncio.timeout(5):
            while broadcaster.subscribers == 0:
                await asyncio.sleep(0.01)
        engine = gw.gateway.engine
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and broadcaster.subscribers:
            for _ in range(2000):  # ~1 MB of events a round, never read by the client
                engine.bus.emit(OperatorEvent(engine.now(), "noise", "x" * 300, "t", "ok"))
            await asyncio.sleep(0.05)
        assert broadcaster.subscribers == 0  # its queue overflowed: it left the fan-out

        def cut_off() -> bool:
            return any("read nothing of its answer" in r.getMessage() for r in caplog.records)

        async with asyncio.timeout(5):  # and its connection, stuck on a full socket, is cut
            while not cut_off():
                await asyncio.sleep(0.05)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            async with asyncio.timeout(5):
                while await reader.read(1 << 20):
                    pass
                raise ConnectionResetError("closed")
        writer.close()


async def test_a_subscriber_too_far_behind_is_told_why_it_was_dropped() -> None:
    bus = EventBus()
    broadcaster = EventBroadcaster(bus, queue_limit=10)
    frames = broadcaster.stream()
    assert await anext(frames) == b": connected\n\n"
    for i in range(50):
        bus.emit(OperatorEvent(i, "noise", "x", "t", "ok"))
    received = [frame async for frame in frames]
    assert received[-1].startswith(b'event: dropped\ndata: {"reason": "the client fell 10')
    assert all(f.startswith(b"event: operator") for f in received[:-1])
    assert broadcaster.subscribers == 0


def test_the_management_token_has_a_minimum_length_from_every_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNIROUTE_TOKEN", "a")
    with pytest.raises(TokenError, match=r"\$OMNIROUTE_TOKEN is shorter than 16"):
        load_token(None)
    monkeypatch.setenv("OMNIROUTE_TOKEN", "a" * 16 + " b")
    with pytest.raises(TokenError, match="printable ASCII"):
        load_token(None)
    short = tmp_path / "t"
    short.write_text("abc\n")
    with pytest.raises(TokenError, match="shorter than 16"):
        load_token(short)
    monkeypatch.setenv("OMNIROUTE_TOKEN", TOKEN)
    assert load_token(None) == TOKEN


async def test_the_operator_header_is_read_as_utf8(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH) as http:
        reply = await http.post("/api/resilience/breakers/healthy/reset",
                                headers={"x-omniroute-operator": "Zoë 東京".encode()})
        assert reply.status_code == 200
        audit = (await http.get("/api/resilience/audit")).json()["entries"]
        assert audit[-1]["actor"] == "Zoë 東京"


async def test_health_and_state_report_a_failing_store_until_it_recovers(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True, busy_timeout_ms=50) as gw, \
            httpx.AsyncClient(base_url=gw.url, headers=AUTH) as http:
        other = sqlite3.connect(tmp_path / "state.db", timeout=5)
        other.execute("BEGIN EXCLUSIVE")
        try:
            assert (await http.post("/api/resilience/breakers/broken/force-open",
                                    json={"for": "1h"})).status_code == 200
            async with asyncio.timeout(5):
                while (health := (await http.get("/health")).json())["status"] == "ok":
                    await asyncio.sleep(0.02)
            assert health["status"] == "degraded"
            assert health["store"]["failing_since"] > 0 and "locked" in health["store"]["error"]
            state = (await http.get("/api/resilience/state")).json()
            assert state["store"]["ok"] is False
        finally:
            other.rollback()
            other.close()
        async with asyncio.timeout(10):
            while (await http.get("/health")).json()["status"] != "ok":
                await asyncio.sleep(0.02)
        with sqlite3.connect(tmp_path / "state.db") as raw:
            assert raw.execute("SELECT actor, action FROM audit").fetchall() == [
                ("api", "force_open")]


def test_client_log_lines_are_one_per_reason_every_ten_seconds(
        caplog: pytest.LogCaptureFixture) -> None:
    from omniroute_tui.gateway.protocol import ClientLog

    caplog.set_level(logging.INFO)
    now = [100.0]
    clients = ClientLog(10.0, clock=lambda: now[0])
    for _ in range(100):
        clients.note("slow-head", "closed %s", "a slow client")
    clients.note("stalled", "closed %s", "a stalled client")
    now[0] += 10.0
    clients.note("slow-head", "closed %s", "a slow client")
    assert [r.getMessage() for r in caplog.records] == [
        "closed a slow client", "closed a stalled client",
        "closed a slow client (and 99 more like it since the last line)"]


async def test_oversized_chunked_bodies_are_413_every_time_and_one_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """5 MiB bodies with no content-length, over the 4 MiB limit: each is answered 413
    (the rest of its upload read and dropped, so no reset destroys the answer), and the
    twenty of them from one address are one log line, without a traceback."""
    caplog.set_level(logging.INFO)

    async def five_mib() -> AsyncIterator[bytes]:
        for _ in range(80):
            yield b"x" * 65_536

    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        statuses = [(await http.post(CHAT, content=five_mib())).status_code
                    for _ in range(20)]
        assert (await http.post(CHAT, json={"model": "chat", "messages": []})
                ).status_code == 200
    assert statuses == [413] * 20
    _no_tracebacks(caplog)
    lines = [r.getMessage() for r in caplog.records  # the server's, not the client's
             if r.name.startswith(("omniroute", "uvicorn")) and r.name != "omniroute.access"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("answered 413 to 127.0.0.1:")
    assert lines[0].endswith(": the request body is over 4194304 bytes")


def test_one_client_address_gets_one_line_every_ten_seconds_whatever_it_does(
        caplog: pytest.LogCaptureFixture) -> None:
    from omniroute_tui.gateway.protocol import ClientLog

    caplog.set_level(logging.INFO)
    now = [100.0]
    clients = ClientLog(10.0, clock=lambda: now[0])
    for reason in ("refused-413", "refused-431", "malformed", "slow-head", "hung-up"):
        clients.note(reason, "%s from %s", reason, "10.0.0.1", client="10.0.0.1")
    clients.note("malformed", "%s from %s", "malformed", "10.0.0.2", client="10.0.0.2")
    now[0] += 10.0
    clients.note("malformed", "%s from %s", "malformed", "10.0.0.1", client="10.0.0.1")
    assert [r.getMessage() for r in caplog.records] == [
        "refused-413 from 10.0.0.1",
        "malformed from 10.0.0.2 (and 1 more like it since the last line)",
        "malformed from 10.0.0.1"]


async def test_a_slow_second_request_on_a_kept_alive_connection_is_cut_off_too(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running_gateway(tmp_path, limits=FAST) as gw:
        reader, writer = await _raw(gw.url)
        writer.write(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"content-length: (\d+)", head)
            assert length is not None
            await reader.readexactly(int(length[1]))
        assert head.startswith(b"HTTP/1.1 200 ")
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")  # and no more
        started = time.monotonic()
        assert (await _read_all(reader)).startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - started < 4
        writer.close()
    _no_tracebacks(caplog)
