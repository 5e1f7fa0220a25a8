"""The event stream's fan-out: one encoding an event for every client, every client gets
every event in order, and a client too far behind (events or bytes) is dropped alone."""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from pathlib import Path

import httpx
import pytest

from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import Event, OperatorEvent
from omniroute_tui.gateway import events_stream
from omniroute_tui.gateway.events_stream import EventBroadcaster

from .gateway_helpers import TOKEN, read_events, running_gateway
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}"}


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


def _all_have(seen: list[list[dict[str, object]]], count: int) -> bool:
    return all(len(into) == count for into in seen)


async def _follow(http: httpx.AsyncClient, into: list[dict[str, object]]) -> None:
    """Read the stream until the operator event `end` (kept too)."""
    await read_events(http, into, lambda seen: seen[-1].get("action") == "end")


async def test_twenty_clients_get_every_event_in_order_each_encoded_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    encoded: list[str] = []
    encode = events_stream.encode_frame

    def counting(kind: str, data: str) -> bytes:
        encoded.append(data)
        return encode(kind, data)

    monkeypatch.setattr(events_stream, "encode_frame", counting)
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH, timeout=10) as http:
        seen: list[list[dict[str, object]]] = [[] for _ in range(20)]
        readers = [asyncio.create_task(_follow(http, into)) for into in seen]
        await eventually(lambda: gw.gateway.events.subscribers == 20, what="20 clients")
        engine = gw.gateway.engine
        emitted: list[Event] = []
        engine.bus.subscribe(emitted.append)
        for burst in range(5):  # bursts of the bus, and routed requests between them
            for i in range(200):
                engine.bus.emit(OperatorEvent(engine.now(), f"n{burst * 200 + i}", "t",
                                              "a", "ok"))
            reply = await http.post("/v1/chat/completions",
                                    json={"model": "fallback", "messages": []})
            assert reply.status_code == 200
        engine.bus.emit(OperatorEvent(engine.now(), "end", "t", "a", "ok"))
        await asyncio.wait_for(asyncio.gather(*readers), timeout=20)
    expected = [json.loads(e.to_json()) for e in emitted]
    assert len(expected) > 1000 + 5 * 4  # the bursts, and each request's own events
    for into in seen:
        assert into == expected
    assert len(encoded) == len(expected)  # once an event, not once a client
    _no_tracebacks(caplog)


async def test_a_client_that_never_reads_is_dropped_alone_at_its_byte_bound(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH, timeout=30) as http:
        broadcaster = gw.gateway.events
        broadcaster.queue_bytes = 1 << 20  # far fewer than its 10,000 events of 4 KB
        host, port = gw.url.removeprefix("http://").split(":")
        stuck, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"GET /api/resilience/events HTTP/1.1\r\nhost: x\r\n"
                     f"authorization: Bearer {TOKEN}\r\n\r\n".encode())
        await eventually(lambda: broadcaster.subscribers == 1, what="the stuck client")
        seen: list[list[dict[str, object]]] = [[] for _ in range(3)]
        readers = [asyncio.create_task(_follow(http, into)) for into in seen]
        await eventually(lambda: broadcaster.subscribers == 4, what="the three readers")
        engine = gw.gateway.engine
        sent = 0
        while broadcaster.subscribers == 4 and sent < 5000:  # 20 MB at most
            for _ in range(50):
                engine.bus.emit(OperatorEvent(engine.now(), f"n{sent}", "x" * 4000, "a",
                                              "ok"))
                sent += 1
            await eventually(partial(_all_have, seen, sent), timeout_s=20,
                             what="the readers keeping up")
        assert broadcaster.subscribers == 3, "the stuck client was not dropped"
        engine.bus.emit(OperatorEvent(engine.now(), "end", "t", "a", "ok"))
        await asyncio.wait_for(asyncio.gather(*readers), timeout=20)
        for into in seen:  # the others missed nothing
            assert [e["action"] for e in into] == [f"n{i}" for i in range(sent)] + ["end"]
        received = b""
        async with asyncio.timeout(20):  # what the stuck client gets once it reads: the end
            while not received.endswith(b"\r\n0\r\n\r\n"):
                received += await stuck.read(1 << 20)
        writer.close()
    assert b'event: dropped\ndata: {"reason": "the client fell 1048576 bytes behind' in received
    _no_tracebacks(caplog)


async def test_the_bounds_count_every_event_and_byte_a_client_has_not_taken() -> None:
    bus = EventBus()
    broadcaster = EventBroadcaster(bus, queue_limit=25, queue_bytes=3000)
    lagging, keeping_up = broadcaster.stream(), broadcaster.stream()
    assert await anext(lagging) == await anext(keeping_up) == b": connected\n\n"
    frame = len(events_stream.encode_frame(
        "operator", OperatorEvent(0, "n", "x" * 50, "a", "ok").to_json()))
    assert frame == 150  # 20 of them are 3,000 bytes, 21 are over
    for _ in range(20):
        bus.emit(OperatorEvent(0, "n", "x" * 50, "a", "ok"))
        await asyncio.sleep(0)  # a flush for each
        assert (await anext(keeping_up)).count(b"event: operator") == 1
    assert broadcaster.subscribers == 2
    bus.emit(OperatorEvent(0, "n", "x" * 50, "a", "ok"))
    await asyncio.sleep(0)
    assert broadcaster.subscribers == 1
    taken = await anext(lagging)  # nothing of what it fell behind on: why it ends
    assert taken.startswith(b'event: dropped\ndata: {"reason": "the client fell 3000 bytes')
    assert [chunk async for chunk in lagging] == []
    assert (await anext(keeping_up)).count(b"event: operator") == 1
    for _ in range(26):  # in one turn of the loop: one batch, over the bound in events
        bus.emit(OperatorEvent(0, "n", "", "a", "ok"))
    await asyncio.sleep(0)
    assert broadcaster.subscribers == 0
    assert (await anext(keeping_up)).startswith(b'event: dropped\ndata: {"reason": '
                                                b'"the client fell 25 events behind')


async def test_an_idle_stream_says_it_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_stream, "KEEP_ALIVE_S", 0.01)
    broadcaster = EventBroadcaster(EventBus())
    frames = broadcaster.stream()
    assert await anext(frames) == b": connected\n\n"
    assert await asyncio.wait_for(anext(frames), 5) == b": keep-alive\n\n"
    assert await asyncio.wait_for(anext(frames), 5) == b": keep-alive\n\n"
    broadcaster.close()
    assert [frame async for frame in frames] == []
