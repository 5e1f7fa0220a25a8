"""A lean HTTP/1.1 client over asyncio streams, with a keep-alive pool per origin.

The router's upstream calls are all alike: one POST, a JSON or SSE answer. httpx spends
over a millisecond per request on generality this path does not use, and aiohttp about
0.8 ms more than this client through the gateway (docs/gateway.md, "Upstream client"); this
client does the one exchange directly. Bodies are read by content-length, chunked, or to
the close.

A completion costs money, so a request is never sent twice: a pooled connection is
checked before it is reused, and once any byte of a request is written, whatever goes
wrong is the caller's failure to classify (a `network` result), never a silent resend.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from ssl import SSLContext, create_default_context
from urllib.parse import unquote, urlsplit

__all__ = ["ConnectTimeout", "Http1Pool", "Http1Response", "ProtocolError", "Proxies"]

MAX_HEAD = 64 * 1024
_IDLE_PER_ORIGIN = 64
#: a pooled connection idle longer than this is not reused: servers close idle
#: connections after a few seconds (uvicorn 5 s), and one closing as a request is written
#: would turn into a failed attempt
IDLE_REUSE_S = 4.0
_FORBIDDEN_IN_HEADERS = frozenset("\r\n\x00")
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})  # never through a proxy


class ProtocolError(Exception):
    """The peer broke HTTP/1.1: a malformed head, a body cut short, a closed connection."""


class ConnectTimeout(TimeoutError):
    """The connection could not be made in time."""


_Origin = tuple[str, str, int]
_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
    if not _FORBIDDEN_IN_HEADERS.isdisjoint(text):
        raise ValueError(f"a {what} holds CR, LF or NUL: refused (header injection)")
    return text


@dataclass
class Http1Response:
    status: int
    headers: dict[str, str]
    _reader: asyncio.StreamReader = field(repr=False)
    _release: object = field(repr=False)  # callable(reusable: bool) -> None
    _done: bool = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked framing removed)."""
        reader = self._reader
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")  # no trailers are expected
                        break
                    chunk = await reader.readexactly(size)
                    await reader.readexactly(2)
                    yield chunk
                self._finish(True)
            elif "content-length" in self.headers:
                left = int(self.headers["content-length"])
                while left > 0:
                    chunk = await reader.read(min(left, 65536))
                    if not chunk:
                        raise ProtocolError("the peer closed the connection mid-body")
                    left -= len(chunk)
                    yield chunk
                self._finish(True)
            else:
                while chunk := await reader.read(65536):
                    yield chunk
                self._finish(False)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self._finish(False)
            raise ProtocolError(f"a broken body: {exc}") from None
        except BaseException:
            self._finish(False)
            raise

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    def _finish(self, reusable: bool) -> None:
        if not self._done:
            self._done = True
            keep = reusable and self.headers.get("connection", "").lower() != "close"
            self._release(keep)  # type: ignore[operator]

    async def aclose(self) -> None:
        self._finish(False)


class Http1Pool:
    """Keep-alive connections per origin; a request is written at most once."""

    def __init__(self, ssl_context: SSLContext | None = None,
                 proxies: Proxies | None = None) -> None:
        self._idle: dict[_Origin, list[tuple[_Conn, float]]] = {}
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
        head += [f"{_check_header(k, 'header name')}: {_check_header(v, 'header value')}"
                 for k, v in headers.items()]
        if proxy is not None and scheme == "http" and (auth := _proxy_auth(proxy)):
            head.append(f"proxy-authorization: {auth}")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        conn = await self._reusable(origin) or await self._connect(origin, proxy,
                                                                    connect_timeout_s)
        try:
            return await self._exchange(origin, conn, payload)
        except asyncio.IncompleteReadError as exc:
            conn[1].close()
            if exc.partial:
                raise ProtocolError("the answer's head was cut short") from None
            raise ProtocolError("the peer closed the connection after the request was "
                                "sent, without an answer (not resent)") from None
        except BaseException:
            conn[1].close()
            raise

    async def _reusable(self, origin: _Origin) -> _Conn | None:
        """A pooled connection that is still open and not idle too long."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        await asyncio.sleep(0)  # one turn of the loop: a close already on the wire is seen
        now = time.monotonic()
        while idle:
            (reader, writer), since = idle.pop()
            if (now - since < IDLE_REUSE_S and not writer.is_closing()
                    and not reader.at_eof()):
                return reader, writer
            writer.close()
        return None

    async def _connect(self, origin: _Origin, proxy: str | None, timeout_s: float) -> _Conn:
        scheme, host, port = origin
        context = await self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout_s):
                if proxy is None:
                    return await asyncio.open_connection(host, port, ssl=context,
                                                         limit=MAX_HEAD)
                return await _via_proxy(proxy, origin, context)
        except TimeoutError:
            raise ConnectTimeout(f"connecting to {host}:{port} took over {timeout_s:g}s") \
                from None

    async def _exchange(self, origin: _Origin, conn: _Conn, payload: bytes
                        ) -> Http1Response:
        reader, writer = conn
        writer.write(payload)
        await writer.drain()
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise ProtocolError("the answer's head is too large") from None
        lines = raw.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
        try:
            status = int(status_line[1])
        except ValueError:
            raise ProtocolError(f"a bad status line: {lines[0][:80]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()

        def release(reusable: bool) -> None:
            idle = self._idle.setdefault(origin, [])
            if reusable and len(idle) < _IDLE_PER_ORIGIN and not writer.is_closing():
                idle.append((conn, time.monotonic()))
            else:
                writer.close()

        return Http1Response(status, headers, reader, release)

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for (_, writer), _since in conns:
                writer.close()
        self._idle.clear()


def _proxy_auth(proxy: str) -> str | None:
    parts = urlsplit(proxy)
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


async def _via_proxy(proxy: str, origin: _Origin, context: SSLContext | None) -> _Conn:
    """A connection to `origin` through an HTTP proxy: plain for http (the request goes
    in absolute form), a CONNECT tunnel with TLS inside for https."""
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")  # checked in Proxies
    assert parts.hostname is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80,
                                                   limit=MAX_HEAD)
    scheme, host, port = origin
    if scheme == "http":
        return reader, writer
    try:
        lines = [f"CONNECT {host}:{port} HTTP/1.1", f"host: {host}:{port}"]
        if auth := _proxy_auth(proxy):
            lines.append(f"proxy-authorization: {auth}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status = head.split(" ", 2)[1] if head.count(" ") >= 1 else "?"
        if status != "200":
            raise ConnectionRefusedError(f"the proxy refused the tunnel: "
                                         f"{head.splitlines()[0][:80]!r}")
        await writer.start_tls(context or create_default_context(), server_hostname=host)
    except BaseException:
        writer.close()
        raise
    return reader, writer
