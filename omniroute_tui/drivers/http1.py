"""A lean HTTP/1.1 client over asyncio streams, with a keep-alive pool per origin.

The router's upstream calls are all alike: one POST, a JSON or SSE answer. httpx spends
over a millisecond per request on generality this path does not use; this client does
the one exchange directly. Bodies are read by content-length, chunked, or to the close.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["ConnectTimeout", "Http1Pool", "Http1Response", "ProtocolError"]

MAX_HEAD = 64 * 1024
_IDLE_PER_ORIGIN = 64


class ProtocolError(Exception):
    """The peer broke HTTP/1.1: a malformed head, a body cut short, a closed connection."""


class ConnectTimeout(TimeoutError):
    """The connection could not be made in time."""


_Origin = tuple[str, str, int]
_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
    """Keep-alive connections per origin; a reused connection found dead is replaced once."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[_Origin, list[_Conn]] = {}
        self._ssl = ssl_context

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> Http1Response:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        origin = (scheme, parts.hostname, port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        head = [f"POST {path} HTTP/1.1", f"host: {host}", f"content-length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        idle = self._idle.setdefault(origin, [])
        while idle:  # a pooled connection may have been closed by the peer meanwhile
            conn = idle.pop()
            try:
                return await self._exchange(origin, conn, payload)
            except asyncio.IncompleteReadError as exc:
                conn[1].close()
                if exc.partial:  # it did answer, then broke: that is the peer's failure
                    raise ProtocolError("the answer's head was cut short") from None
            except ConnectionError:
                conn[1].close()
        conn = await self._connect(origin, connect_timeout_s)
        try:
            return await self._exchange(origin, conn, payload)
        except asyncio.IncompleteReadError:
            conn[1].close()
            raise ProtocolError("the peer closed the connection without an answer") from None
        except BaseException:
            conn[1].close()
            raise

    async def _connect(self, origin: _Origin, timeout_s: float) -> _Conn:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            context = self._ssl or ssl.create_default_context()
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context, limit=MAX_HEAD),
                timeout_s)
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
                idle.append(conn)
            else:
                writer.close()

        return Http1Response(status, headers, reader, release)

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
        self._idle.clear()
