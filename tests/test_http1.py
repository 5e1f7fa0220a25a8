"""The lean HTTP/1.1 client against raw sockets on 127.0.0.1: framing, keep-alive, breaks."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import struct
import subprocess
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from omniroute_tui.drivers import UpstreamClient, http1
from omniroute_tui.drivers.http1 import Http1Pool, ProtocolError
from omniroute_tui.engine import FailureKind, TransportFailure

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[asyncio.StreamWriter]]]:
    """A server on an ephemeral port; yields its URL and the server side of every
    connection made."""
    connections: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
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


@contextmanager
def server_in_a_thread(handler: Handler) -> Iterator[str]:
    """A server on its own event loop in a thread, yielding its URL: what it does to a
    connection reaches the test's socket while the test's loop is not running, as a
    peer's close reaches a gateway whose loop is busy with other requests."""
    loop = asyncio.new_event_loop()
    ports: list[int] = []
    listening = threading.Event()

    def run() -> None:
        server = loop.run_until_complete(asyncio.start_server(handler, "127.0.0.1", 0))
        ports.append(server.sockets[0].getsockname()[1])
        listening.set()
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert listening.wait(5), "the server did not start"
    try:
        yield f"http://127.0.0.1:{ports[0]}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


def answer(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: "
            f"{len(body)}\r\n{extra}\r\n").encode() + body


def keep_alive(reply: Callable[[bytes], bytes | None]) -> Handler:
    """A handler that sends `reply(body)` for each request a connection carries, until the
    peer closes it (or `reply` gives None: then it hangs up)."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            sent = reply(body)
            if sent is None:
                return
            writer.write(sent)
            await writer.drain()
    return handler


#: answers every request on a connection with its own body, keeping it alive
echo = keep_alive(answer)


async def test_keep_alive_reuses_one_connection() -> None:
    async with raw_server(echo) as (url, connections):
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


async def test_informational_answers_are_skipped_for_the_final_one() -> None:
    """100 Continue and 103 Early Hints come before the answer: the 200 is the answer,
    its body arrives whole and the connection carries the next request."""
    handler = keep_alive(lambda body: (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
        + answer(b"final:" + body)))

    async with raw_server(handler) as (url, connections):
        pool = Http1Pool()
        async with asyncio.timeout(5):
            for n in (1, 2):
                response = await pool.post(url, {}, b"#%d" % n, 5)
                assert (response.status, await response.aread()) == (200, b"final:#%d" % n)
                assert "link" not in response.headers
                assert response.headers["content-type"] == "application/json"
        assert len(connections) == 1
        await pool.aclose()


async def test_trailers_are_read_and_the_connection_carries_the_next_request() -> None:
    received: list[bytes] = []

    def reply(body: bytes) -> bytes:
        received.append(body)
        if len(received) == 1:
            return (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n0\r\nx-checksum: 5d41\r\nx-usage: 12\r\n\r\n")
        return answer(b"second")

    async with raw_server(keep_alive(reply)) as (url, connections):
        pool = Http1Pool()
        async with asyncio.timeout(5):
            first = await pool.post(url, {}, b"1", 5)
            assert await first.aread() == b"hello"
            assert "x-checksum" not in first.headers
            second = await pool.post(url, {}, b"2", 5)
            assert (second.status, await second.aread()) == (200, b"second")
        assert received == [b"1", b"2"] and len(connections) == 1
        await pool.aclose()


async def test_bytes_after_an_answer_are_not_taken_for_the_next_one() -> None:
    """The answer is whole and used; the connection, holding bytes no request asked
    for, is not reused."""
    stale = answer(b"ok") + b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"
    async with raw_server(keep_alive(lambda _: stale)) as (url, connections):
        pool = Http1Pool()
        async with asyncio.timeout(5):
            for _ in range(2):
                response = await pool.post(url, {}, b"{}", 5)
                assert (response.status, await response.aread()) == (200, b"ok")
        assert len(connections) == 2
        await pool.aclose()


async def test_an_answer_before_the_body_is_read_is_used_and_ends_the_connection() -> None:
    """The peer answers 413 after the head and never reads the body, which no socket
    buffer holds: the answer is read while the body waits to be sent, then the
    connection is dropped (the peer would take the rest of the body for a request)."""
    big = b"x" * (8 << 20)
    stop = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if f"content-length: {len(big)}".encode() in head:
            writer.write(answer(b"too large", "413 Content Too Large"))
            await writer.drain()
            await stop.wait()  # and the body is never read
            return
        length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
        writer.write(answer(await reader.readexactly(length)))
        await writer.drain()

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    listener.bind(("127.0.0.1", 0))
    connections = 0

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(counted, sock=listener)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    pool = Http1Pool()
    try:
        async with asyncio.timeout(5):
            refused = await pool.post(url, {}, big, 5)
            assert (refused.status, await refused.aread()) == (413, b"too large")
            small = await pool.post(url, {}, b"small", 5)
            assert (small.status, await small.aread()) == (200, b"small")
        assert connections == 2
    finally:
        stop.set()
        await pool.aclose()
        server.close()
        await server.wait_closed()


def closing_after_each_answer(received: list[bytes], closed: threading.Semaphore,
                              reset: bool = False) -> Handler:
    """A handler that answers one request per connection without saying it will close,
    closes 5 ms later (with a reset if `reset`), and releases `closed` once it has."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            body = await read_request(reader)
            received.append(body)
            writer.write(answer(body))
            await writer.drain()
            await asyncio.sleep(0.005)
            if reset:
                writer.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            writer.close()
            await writer.wait_closed()
            closed.release()
    return handler


async def test_a_peer_that_closes_5_ms_after_each_answer_loses_no_request() -> None:
    """Each close is on the wire before the next request, and the client's loop has
    not run since (it was busy): the pool sees the close on the socket and opens a
    fresh connection; no request fails and none reaches the server twice."""
    received: list[bytes] = []
    closed = threading.Semaphore(0)
    with server_in_a_thread(closing_after_each_answer(received, closed)) as url:
        pool = Http1Pool()
        failures = []
        for n in range(100):
            try:
                async with asyncio.timeout(5):
                    response = await pool.post(url, {}, b"#%d" % n, 5)
                    assert await response.aread() == b"#%d" % n
            except (OSError, ProtocolError) as exc:
                failures.append(f"#{n}: {exc}")
                continue  # written to a closed connection: no new one to wait for
            assert closed.acquire(timeout=5), "the server did not close the connection"
        await pool.aclose()
    assert failures == []
    assert received == [b"#%d" % n for n in range(100)]


async def test_a_request_the_socket_refuses_at_once_goes_on_a_fresh_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pooled connection passed its check, then was found reset as the request was
    handed to it (the reset came in between): none of it was written, so it goes once
    more, on a new connection, and reaches the server once."""
    monkeypatch.setattr(http1, "_readable", lambda fd: False, raising=False)
    received: list[bytes] = []
    closed = threading.Semaphore(0)
    with server_in_a_thread(closing_after_each_answer(received, closed, reset=True)) as url:
        client = UpstreamClient()
        statuses = []
        for n in range(3):
            reply = await client.send(url, {"n": n}, api_key=None, timeout_ms=5000)
            statuses.append((reply.status, reply.error))
            if reply.status == 200:  # else no new connection was made, none to wait for
                assert closed.acquire(timeout=5), "the server did not reset the connection"
        await client.aclose()
    assert statuses == [(200, None)] * 3
    assert received == [b'{"n":0}', b'{"n":1}', b'{"n":2}']


async def test_a_pooled_connection_the_peer_closed_is_not_reused() -> None:
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
            await connections[-1].wait_closed()  # the peer's close is on the wire
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
        (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n",
         TransportFailure.CONNECTION_RESET),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
         TransportFailure.CONNECTION_RESET),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
         TransportFailure.CONNECTION_RESET),
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n" * 5000,
                     TransportFailure.CONNECTION_RESET, id="endless-100-continue"),
        # 100 KiB of head in one write: one read of the socket can hold all of it
        pytest.param(b"HTTP/1.1 200 OK\r\nx-filler: " + b"z" * 100_000
                     + b"\r\ncontent-length: 2\r\n\r\nok",
                     TransportFailure.CONNECTION_RESET, id="head-over-64k-in-one-read"),
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


async def test_an_answer_over_the_size_bound_is_a_network_failure_not_held() -> None:
    """A 500 of 64 MiB (only its first 64 KiB are ever classified) was read whole into
    memory: 300 MiB made the process grow by 615 MiB. Past the bound reading stops."""
    sent: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 500 X\r\ncontent-length: %d\r\n\r\n" % (64 << 20))
        chunk = b"e" * (1 << 20)
        with contextlib.suppress(ConnectionError):
            for n in range(64):
                writer.write(chunk)
                await writer.drain()
                sent.append(n)

    async with raw_server(handler) as (url, _):
        client = UpstreamClient()
        result = await client.send(url, {"model": "m"}, api_key=None, timeout_ms=10_000)
        assert (result.status, result.transport_failure) == (
            0, TransportFailure.CONNECTION_RESET)
        assert result.error == ("ProtocolError: the answer is over 16 MiB, more than any "
                                "completion")
        await client.aclose()
    assert len(sent) < 64


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


async def test_a_request_is_never_sent_twice_when_a_kept_alive_connection_dies() -> None:
    """The peer reads the second request on a kept-alive connection, then closes it
    without an answer: that is one failed attempt, reported, not a silent resend."""
    received: list[bytes] = []

    def reply(body: bytes) -> bytes | None:
        received.append(body)
        if len(received) == 2:
            return None  # read it, charged for it, and hung up
        return answer(b"ok")

    async with raw_server(keep_alive(reply)) as (url, connections):
        client = UpstreamClient()
        first = await client.send(url, {"n": 1}, api_key=None, timeout_ms=5000)
        assert first.status == 200
        second = await client.send(url, {"n": 2}, api_key=None, timeout_ms=5000)
        assert second.status == 0
        assert second.classification.kind is FailureKind.NETWORK
        assert "not resent" in (second.error or "")
        assert received == [b'{"n":1}', b'{"n":2}'] and len(connections) == 1
        await client.aclose()


async def test_an_idle_connection_past_its_reuse_age_is_not_reused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "IDLE_REUSE_S", 0.0)
    async with raw_server(echo) as (url, connections):
        pool = Http1Pool()
        for _ in range(3):
            await (await pool.post(url, {}, b"{}", 5)).aread()
        assert len(connections) == 3
        await pool.aclose()


@pytest.mark.parametrize("headers", [{"x-a": "b\r\nx-injected: 1"}, {"x-a\n": "b"},
                                     {"x-a": "b\x00"}])
async def test_cr_lf_and_nul_in_headers_are_refused_before_connecting(
        headers: dict[str, str]) -> None:
    pool = Http1Pool(proxies=http1.Proxies())
    with pytest.raises(ValueError, match="header injection"):
        await pool.post("http://127.0.0.1:9/v1", headers, b"{}", 5)


@pytest.mark.parametrize("headers", [{"x-a": b"v\r\nx: y"}, {"x-a": 1}, {b"x-a": "v"}],
                         ids=["bytes-value", "int-value", "bytes-name"])
async def test_a_header_that_is_not_text_is_refused_before_connecting(
        headers: dict[str, str]) -> None:
    pool = Http1Pool(proxies=http1.Proxies())
    with pytest.raises(TypeError):
        await pool.post("http://127.0.0.1:9/v1", headers, b"{}", 5)


def test_a_key_with_a_line_break_is_refused_in_the_config() -> None:
    from omniroute_tui.config import ConfigError, load_router_config

    text = ("providers:\n  p: {models: [m], connections: [{id: a, api_key: \"${K}\"}]}\n"
            "routes: {r: {targets: [p/m]}}\n")
    with pytest.raises(ConfigError, match="line break"):
        load_router_config("r.yaml", text=text, env={"K": "sk-abc\r\nx-evil: 1"})


async def test_one_tls_context_per_pool_built_off_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real = http1.create_default_context

    def counting() -> ssl.SSLContext:
        made.append(threading.current_thread().name)
        return real()

    monkeypatch.setattr(http1, "create_default_context", counting)
    pool = Http1Pool()
    contexts = await asyncio.gather(*(pool._tls() for _ in range(5)))
    assert len(made) == 1 and made[0] != threading.main_thread().name
    assert all(c is contexts[0] for c in contexts)


def test_no_proxy_rules() -> None:
    proxies = http1.Proxies.from_environ({"HTTPS_PROXY": "http://proxy:3128",
                                          "no_proxy": "localhost, .internal,api.x:8443"})
    assert proxies.for_origin("https", "api.openai.com", 443) == "http://proxy:3128"
    assert proxies.for_origin("https", "localhost", 443) is None
    assert proxies.for_origin("https", "127.0.0.1", 443) is None  # loopback: always direct
    assert proxies.for_origin("https", "llm.internal", 443) is None
    assert proxies.for_origin("https", "api.x", 8443) is None
    assert proxies.for_origin("https", "api.x", 443) == "http://proxy:3128"
    assert proxies.for_origin("http", "api.openai.com", 80) is None  # no HTTP_PROXY
    assert http1.Proxies.from_environ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}
                                      ).for_origin("https", "a", 443) is None


async def test_plain_http_goes_through_a_proxy_in_absolute_form() -> None:
    lines: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines.extend(head.split(b"\r\n")[:4])
        writer.write(answer(b"via proxy"))
        await writer.drain()

    async with raw_server(proxy) as (proxy_url, _):
        origin = proxy_url.removesuffix("/v1").replace("http://", "http://user:pw@")
        pool = Http1Pool(proxies=http1.Proxies(http=origin))
        response = await pool.post("http://upstream.example:8080/v1/chat", {}, b"{}", 5)
        assert await response.aread() == b"via proxy"
        assert lines[0] == b"POST http://upstream.example:8080/v1/chat HTTP/1.1"
        assert b"proxy-authorization: Basic dXNlcjpwdw==" in lines
        await pool.aclose()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
async def test_https_goes_through_a_connect_tunnel(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=upstream.test", "-addext", "subjectAltName=DNS:upstream.test",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(cert))

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        writer.write(answer(b"tls:" + body))
        await writer.drain()
        writer.close()

    tls_server = await asyncio.start_server(upstream, "127.0.0.1", 0, ssl=server_tls)
    tls_port = tls_server.sockets[0].getsockname()[1]
    tunnels: list[bytes] = []

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
        dst.close()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        tunnels.append(head.split(b"\r\n")[0])
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", tls_port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async with raw_server(proxy) as (proxy_url, _):
        pool = Http1Pool(ssl_context=client_tls,
                         proxies=http1.Proxies(https=proxy_url.removesuffix("/v1")))
        response = await pool.post(f"https://upstream.test:{tls_port}/v1", {}, b"{}", 5)
        assert await response.aread() == b"tls:{}"
        assert tunnels == [f"CONNECT upstream.test:{tls_port} HTTP/1.1".encode()]
        await pool.aclose()
    tls_server.close()
    await tls_server.wait_closed()


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "HTTP_PROXY"])
def test_a_proxy_this_client_cannot_use_is_refused_at_start(variable: str) -> None:
    with pytest.raises(ValueError, match=f"{variable}='socks5://p:1080': only http://"):
        http1.Proxies.from_environ({variable: "socks5://p:1080"})
    assert http1.Proxies.from_environ({variable: "proxy.internal:3128"}) is not None
