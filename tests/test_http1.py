"""The lean HTTP/1.1 client against raw sockets on 127.0.0.1: framing, keep-alive, breaks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from omniroute_tui.drivers import UpstreamClient
from omniroute_tui.drivers.http1 import Http1Pool, ProtocolError
from omniroute_tui.engine import FailureKind, TransportFailure

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on an ephemeral port; yields its URL and the count of connections made."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", connections
    finally:
        server.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


def answer(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: "
            f"{len(body)}\r\n{extra}\r\n").encode() + body


async def test_keep_alive_reuses_one_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(answer(body))
            await writer.drain()

    async with raw_server(handler) as (url, connections):
        pool = Http1Pool()
        for i in range(5):
            response = await pool.post(f"{url}/chat/completions", {}, f"#{i}".encode(), 5)
            assert (response.status, await response.aread()) == (200, f"#{i}".encode())
        assert len(connections) == 1
        await pool.aclose()


async def test_chunked_and_until_close_bodies() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n")
        await writer.drain()

    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()

    for handler, expected in ((chunked, b"hello world"), (until_close, b"all of it")):
        async with raw_server(handler) as (url, _):
            pool = Http1Pool()
            response = await pool.post(url, {}, b"{}", 5)
            assert await response.aread() == expected
            await pool.aclose()


async def test_a_stale_pooled_connection_is_replaced_once() -> None:
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await read_request(reader)
        served += 1
        writer.write(answer(b"ok"))
        await writer.drain()
        # and close: the next request on this connection finds it dead

    async with raw_server(handler) as (url, connections):
        pool = Http1Pool()
        for _ in range(3):
            response = await pool.post(url, {}, b"{}", 5)
            assert await response.aread() == b"ok"
        assert served == 3 and len(connections) == 3
        await pool.aclose()


async def test_a_body_cut_short_is_a_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")
        await writer.drain()

    async with raw_server(handler) as (url, _):
        pool = Http1Pool()
        response = await pool.post(url, {}, b"{}", 5)
        with pytest.raises(ProtocolError):
            await response.aread()


@pytest.mark.parametrize(
    ("reply", "failure"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\ncut", TransportFailure.CONNECTION_RESET),
        (b"", TransportFailure.CONNECTION_RESET),
        (b"SMTP ready\r\n\r\n", TransportFailure.CONNECTION_RESET),
    ],
)
async def test_upstream_client_classifies_broken_answers(reply: bytes,
                                                         failure: TransportFailure) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        result = await client.send(url, {"model": "m"}, api_key=None, timeout_ms=2000)
        assert (result.status, result.transport_failure) == (0, failure)
        assert result.classification.kind is FailureKind.NETWORK
        await client.aclose()


async def test_refused_and_read_timeout() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    client = UpstreamClient()
    refused = await client.send(f"http://127.0.0.1:{port}/v1", {}, api_key=None,
                                timeout_ms=2000)
    assert refused.transport_failure is TransportFailure.CONNECT_REFUSED

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async with raw_server(silent) as (url, _):
        slow = await client.send(url, {}, api_key=None, timeout_ms=200)
        assert slow.transport_failure is TransportFailure.READ_TIMEOUT
        assert slow.classification.kind is FailureKind.TIMEOUT
    await client.aclose()
