"""A lean HTTP/1.1 client over asyncio, with a keep-alive pool per origin.

The router's upstream calls are all alike: one POST, a JSON or SSE answer. httpx spends
over a millisecond per request on generality this path does not use, and aiohttp about
0.8 ms more than this client through the gateway (docs/gateway.md, "Upstream client"); this
client does the one exchange directly. Answers are framed by llhttp (httptools' response
parser; uvicorn parses requests with the same): informational answers (100 Continue,
103 Early Hints) are skipped, a body ends at its content-length, its last chunk (trailers
read and dropped) or the close, and anything else malformed is a ProtocolError.

A completion costs money, so a request is never sent twice: a pooled connection is
checked before it is reused, and once any byte of a request is written, whatever goes
wrong is the caller's failure to classify (a `network` result), never a silent resend.
Only a request none of whose bytes were written (the socket was found reset as the
request was handed to it) goes again, on a fresh connection, once.
"""

from __future__ import annotations

import asyncio
import base64
import os
import select
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from ssl import SSLContext, create_default_context
from typing import cast
from urllib.parse import unquote, urlsplit

import httptools

__all__ = ["ConnectTimeout", "Http1Pool", "Http1Response", "ProtocolError", "Proxies"]

MAX_HEAD = 64 * 1024
_IDLE_PER_ORIGIN = 64
#: a pooled connection idle longer than this is not reused: servers close idle
#: connections after a few seconds (uvicorn 5 s), and one closing as a request is written
#: would turn into a failed attempt
IDLE_REUSE_S = 4.0
#: body bytes held for a slow reader before the socket is paused
_READ_AHEAD = 128 * 1024
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})  # never through a proxy


class ProtocolError(Exception):
    """The peer broke HTTP/1.1: a malformed head, a body cut short, a closed connection."""


class ConnectTimeout(TimeoutError):
    """The connection could not be made in time."""


_Origin = tuple[str, str, int]


@dataclass(frozen=True)
class Proxies:
    """HTTP(S)_PROXY / NO_PROXY, read once (as curl and httpx read them); loopback
    addresses are always reached directly."""

    http: str | None = None
    https: str | None = None
    no_proxy: str = ""

    def __post_init__(self) -> None:
        """A proxy this client cannot use is an error at start, not a failure per request."""
        for variable, proxy in (("HTTP_PROXY", self.http), ("HTTPS_PROXY", self.https)):
            if proxy is not None:
                parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
                if parts.scheme != "http" or not parts.hostname:
                    raise ValueError(f"{variable}={proxy!r}: only http:// proxies are "
                                     "supported (https targets go through them by CONNECT)")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Proxies:
        env = {k.lower(): v for k, v in (environ if environ is not None else
                                          os.environ).items()}
        return cls(env.get("http_proxy") or None, env.get("https_proxy") or None,
                   env.get("no_proxy", ""))

    def for_origin(self, scheme: str, host: str, port: int) -> str | None:
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or host in _LOOPBACK:
            return None
        if self.no_proxy.strip() == "*" or _bypassed(host, port, self.no_proxy):
            return None
        return proxy


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        name, _, entry_port = entry.partition(":")
        if entry_port and entry_port != str(port):
            continue
        name = name.lstrip("*").lstrip(".")
        if host.lower() == name or host.lower().endswith("." + name):
            return True
    return False


def _check_header(text: str, what: str) -> str:
    # three scans of the text in C: a sixth of the CPU of a set's test, char by char
    if "\r" in text or "\n" in text or "\x00" in text:
        raise ValueError(f"a {what} holds CR, LF or NUL: refused (header injection)")
    return text


def _header_lines(headers: dict[str, str]) -> list[str]:
    """`name: value` of each header, all the names and values scanned at once (an
    attempt's dozen headers: a fifth of the CPU of a scan each; a name or value that is
    not text raises TypeError in the joins)."""
    _check_header("".join(headers) + "".join(headers.values()), "header name or value")
    return [f"{k}: {v}" for k, v in headers.items()]


def _readable(fd: int) -> bool:
    """Whether the kernel holds something to read on this socket. On an idle connection
    that can only be a close, a reset or bytes no request asked for, and the loop may not
    have seen it yet (it came while the loop was busy): the socket itself is asked, as
    httpcore and urllib3 check a pooled connection."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _Connection(asyncio.Protocol):
    """One connection to an origin: the socket's events and llhttp's callbacks, kept as
    the state of the one exchange on it (no pipelining)."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self.idle_since = 0.0
        self.closed = False  # by the peer, or the socket broke
        self._fd = -1
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._parser = httptools.HttpResponseParser(self)
        self.next_exchange()

    def next_exchange(self) -> None:
        """Forget the answer read: the connection carries the next request."""
        self._in_flight = False  # a request is written and its answer not complete
        self.status = 0
        self.headers: dict[str, str] = {}
        self._final = False  # the final (not 1xx) head is parsed
        self._until_close = False  # and its body ends with the connection
        self._complete = False
        self._keep_alive = False  # the peer keeps the connection after this answer
        self._head_bytes = 0  # read before the final head was parsed (1xx answers too)
        self._header_bytes = 0  # of the heads' header lines, however few reads brought them
        self._body: list[bytes] = []
        self._buffered = 0
        self._failure: BaseException | None = None

    # -- what the pool asks ------------------------------------------------------------

    def alive(self) -> bool:
        """Idle, open, and nothing came on it since its last answer."""
        return (not self.closed and not self.transport.is_closing()
                and not (self._fd >= 0 and _readable(self._fd)))

    def write_request(self, payload: bytes) -> bool:
        """Hands `payload` to the socket; False if none of it was written: the first send
        failed (a reset the loop had not seen yet), so it may go on another connection.
        The transport keeps what the socket does not take at once and sends it while the
        answer is read: a peer may answer before it reads the whole body."""
        self._in_flight = True
        self.transport.write(payload)
        # a plain socket's transport closes itself in write() when its first send fails;
        # a TLS transport reports the failure later, which then counts as written
        return not self.transport.is_closing()

    async def read_head(self) -> None:
        """Until the final answer's head is parsed (1xx answers are passed over)."""
        while not self._final:
            if self._failure is not None:
                raise self._failure
            await self._wait()

    async def body(self) -> AsyncIterator[bytes]:
        """The body as it arrives, what came at once joined (chunked framing removed)."""
        while True:
            if self._body:
                chunk = self._body[0] if len(self._body) == 1 else b"".join(self._body)
                self._body, self._buffered = [], 0
                if self._reading_paused:
                    self._reading_paused = False
                    self.transport.resume_reading()
                yield chunk
            elif self._complete:
                return
            elif self._failure is not None:
                raise self._failure
            else:
                await self._wait()

    def reusable(self) -> bool:
        """The answer was read whole, the peer keeps the connection, and all of the
        request reached the socket (a peer that answered before reading the whole body
        would read the rest of it as the next request)."""
        return (self._complete and not self.closed and self._failure is None
                and self._keep_alive and not self.transport.is_closing()
                and self.transport.get_write_buffer_size() == 0)

    def close(self) -> None:
        """Closes it; what of a request the socket has not taken yet is dropped."""
        self.closed = True
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()

    async def start_tls(self, context: SSLContext, host: str) -> None:
        """TLS inside a proxy's tunnel, once the proxy has answered the CONNECT."""
        if self._body:
            raise ProtocolError("the proxy sent bytes after its answer to CONNECT")
        self._parser = httptools.HttpResponseParser(self)  # the tunnel's own answers
        self.next_exchange()
        transport = await asyncio.get_running_loop().start_tls(
            self.transport, self, context, server_hostname=host)
        if transport is None:
            raise ConnectionResetError("the proxy closed the tunnel during the TLS handshake")
        self.transport = transport

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, failure: BaseException) -> None:
        if self._failure is None:
            self._failure = failure
        self.close()
        self._wake()

    # -- the socket's events -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        if not self._in_flight:
            self._fail(ProtocolError("the peer sent bytes no request asked for"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # one of the callbacks below
            cause = exc.__context__
            self._fail(cause if isinstance(cause, ProtocolError) else ProtocolError(str(exc)))
            return
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(ProtocolError(f"a malformed answer: {exc}"))
            return
        if not self._final:
            self._head_bytes += len(data)  # 1xx answers count too: a flood is bounded
            if self._head_bytes > MAX_HEAD:
                self._fail(ProtocolError("the answer's head is too large"))
                return
        elif self._buffered > _READ_AHEAD and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._peer_closed(None)
        return False  # and close our side

    def connection_lost(self, exc: Exception | None) -> None:
        self._peer_closed(exc)

    def _peer_closed(self, exc: Exception | None) -> None:
        self.closed = True
        if self._final and not self._complete and self._until_close and exc is None:
            self._complete = True  # a body without length or chunks ends with the close
            self._in_flight = False
        elif self._in_flight and self._failure is None:
            if exc is not None and not isinstance(exc, ConnectionResetError
                                                  | BrokenPipeError):
                self._failure = exc  # a TLS or socket error, classified by the caller
            elif self._final:
                self._failure = ProtocolError("the peer closed the connection mid-body")
            elif self._head_bytes:
                self._failure = ProtocolError("the answer's head was cut short")
            else:
                self._failure = ProtocolError(
                    "the peer closed the connection after the request was sent, without "
                    "an answer (not resent)")
        self._wake()

    # -- llhttp's callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:
            raise ProtocolError("the peer sent bytes after the answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._final:
            return  # a trailer after the last chunk: read, not kept
        # a head that came in one read is parsed whole before `data_received` can count it
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEAD:
            raise ProtocolError("the answer's head is too large")
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            if status == 101:
                raise ProtocolError("the peer switched protocols (101), which no request "
                                    "asked for")
            self.headers = {}  # informational: the final answer follows on the wire
            return
        self.status = status
        self._final = True
        chunked = self.headers.get("transfer-encoding", "").lower().endswith("chunked")
        self._until_close = not chunked and "content-length" not in self.headers
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        if self._final:  # not the end of a 1xx answer
            self._complete = True
            self._in_flight = False
            self._keep_alive = self._parser.should_keep_alive()  # forgotten once it returns


@dataclass
class Http1Response:
    """An answer whose head is read; its body comes off the connection as it is read."""

    status: int
    headers: dict[str, str]
    _connection: _Connection = field(repr=False)
    _release: Callable[[bool], None] = field(repr=False)  # (read whole) -> None
    _done: bool = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked framing removed)."""
        try:
            async for chunk in self._connection.body():
                yield chunk
        except BaseException:
            self._finish(False)
            raise
        self._finish(True)

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    def _finish(self, read_whole: bool) -> None:
        if not self._done:
            self._done = True
            self._release(read_whole)

    async def aclose(self) -> None:
        self._finish(False)


class Http1Pool:
    """Keep-alive connections per origin; a request is written at most once."""

    def __init__(self, ssl_context: SSLContext | None = None,
                 proxies: Proxies | None = None) -> None:
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._ssl = ssl_context
        self._ssl_lock = asyncio.Lock()
        self.proxies = proxies if proxies is not None else Proxies.from_environ()

    async def _tls(self) -> SSLContext:
        """One TLS context for the pool, built in a thread: loading the system's CA
        certificates takes tens of milliseconds, too long to hold the event loop."""
        if self._ssl is None:
            async with self._ssl_lock:
                if self._ssl is None:
                    self._ssl = await asyncio.to_thread(create_default_context)
        return self._ssl

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> Http1Response:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        origin = (scheme, parts.hostname, port)
        proxy = self.proxies.for_origin(*origin)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        target = f"http://{host}{path}" if proxy is not None and scheme == "http" else path
        head = [f"POST {_check_header(target, 'URL')} HTTP/1.1", f"host: {host}",
                f"content-length: {len(body)}"]
        head += _header_lines(headers)
        if proxy is not None and scheme == "http" and (auth := _proxy_auth(proxy)):
            head.append(f"proxy-authorization: {auth}")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        conn = self._reusable(origin)
        if conn is None or not conn.write_request(payload):
            if conn is not None:
                conn.close()  # reset under the request, none of which went out: once more
            conn = await self._connect(origin, proxy, connect_timeout_s)
            if not conn.write_request(payload):
                conn.close()
                raise ConnectionResetError(f"{host} reset a new connection before any of "
                                           "the request was written")
        try:
            await conn.read_head()
        except BaseException:
            conn.close()
            raise
        return Http1Response(conn.status, conn.headers, conn,
                             partial(self._release, origin, conn))

    def _reusable(self, origin: _Origin) -> _Connection | None:
        """A pooled connection that is still open and not idle too long."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < IDLE_REUSE_S and conn.alive():
                return conn
            conn.close()
        return None

    def _release(self, origin: _Origin, conn: _Connection, read_whole: bool) -> None:
        idle = self._idle.setdefault(origin, [])
        if read_whole and conn.reusable() and len(idle) < _IDLE_PER_ORIGIN:
            conn.next_exchange()
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()

    async def _connect(self, origin: _Origin, proxy: str | None,
                       timeout_s: float) -> _Connection:
        scheme, host, port = origin
        context = await self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout_s):
                if proxy is None:
                    _, conn = await asyncio.get_running_loop().create_connection(
                        _Connection, host, port, ssl=context)
                    return conn
                return await _via_proxy(proxy, origin, context)
        except TimeoutError:
            raise ConnectTimeout(f"connecting to {host}:{port} took over {timeout_s:g}s") \
                from None

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


def _proxy_auth(proxy: str) -> str | None:
    parts = urlsplit(proxy)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


async def _via_proxy(proxy: str, origin: _Origin, context: SSLContext | None
                     ) -> _Connection:
    """A connection to `origin` through an HTTP proxy: plain for http (the request goes
    in absolute form), a CONNECT tunnel with TLS inside for https."""
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")  # checked in Proxies
    assert parts.hostname is not None
    _, conn = await asyncio.get_running_loop().create_connection(
        _Connection, parts.hostname, parts.port or 80)
    scheme, host, port = origin
    if scheme == "http":
        return conn
    try:
        lines = [f"CONNECT {host}:{port} HTTP/1.1", f"host: {host}:{port}"]
        if auth := _proxy_auth(proxy):
            lines.append(f"proxy-authorization: {auth}")
        if not conn.write_request(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")):
            raise ConnectionResetError("the proxy reset the connection before the CONNECT")
        await conn.read_head()
        if conn.status != 200:
            raise ConnectionRefusedError(f"the proxy refused the tunnel: {conn.status}")
        await conn.start_tls(context or create_default_context(), host)
    except BaseException:
        conn.close()
        raise
    return conn
