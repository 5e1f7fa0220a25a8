"""uvicorn's HTTP/1.1 protocol with the limits a public gateway needs.

uvicorn bounds idle keep-alive connections, but not the time a client may take to send a
request's head or body, the size of the head, or the number of open connections: a client
that sends half a request holds its connection forever. This protocol adds those limits at
the socket, before any of the request reaches the application, and answers each with its
status (408, 413, 431, 503) and `connection: close`. A client still sending when it is
refused (413, 431) has what it sends read and dropped for a moment before the connection
closes: closing on unread data makes the kernel send a reset, which can destroy the
answer before the client reads it. Each refusal is a log line at most once per client
address and reason every 10 s, never a traceback (docs/design.md §13).

`HttpToolsProtocol` is uvicorn's private class: pyproject pins uvicorn to the versions
tests/test_gateway_uvicorn_api.py has checked what this subclass overrides, calls and reads.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..config.limits import GatewayLimits

__all__ = ["ClientLog", "client_log", "limited_protocol"]

log = logging.getLogger("omniroute.gateway")


class ClientLog:
    """Log lines about misbehaving clients, at most one per reason and one per client
    address every `every_s`: a hundred slow connections are one line and a count, not a
    hundred lines, and one client sending bad requests of every kind fills no log."""

    #: client addresses remembered at most; past it, those seen over `every_s` ago go
    MAX_CLIENTS = 10_000

    def __init__(self, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._last_client: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def reset(self) -> None:
        self._last.clear()
        self._last_client.clear()
        self._quiet.clear()

    def note(self, reason: str, message: str, *args: object, client: str | None = None,
             request_id: str | None = None) -> None:
        """Log `message % args` unless `reason`, or `client` (an address), had a line in
        the last `every_s`; then it is counted, and said with the reason's next line.
        `client` and `request_id` are the line's fields too."""
        now = self._clock()
        recent = now - self.every_s
        if self._last.get(reason, -math.inf) > recent or (
                client is not None and self._last_client.get(client, -math.inf) > recent):
            self._quiet[reason] = self._quiet.get(reason, 0) + 1
            return
        self._last[reason] = now
        if client is not None:
            if len(self._last_client) >= self.MAX_CLIENTS:
                self._last_client = {c: t for c, t in self._last_client.items() if t > recent}
            self._last_client[client] = now
        quiet = self._quiet.pop(reason, 0)
        more = f" (and {quiet} more like it since the last line)" if quiet else ""
        log.info(message + more, *args, extra={"client": client, "request_id": request_id})


client_log = ClientLog()

#: how long, and how many more bytes, a refused client's upload is read and dropped
LINGER_S = 2.0
_REASONS = {408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class _CorkedTransport:
    """The socket's transport, sending an answer's head together with what follows it.

    uvicorn writes an answer's head and its body separately, which costs a send each (and
    on loopback, a wake-up of the peer each): a third of the socket sends of a proxied
    request. The head is held until the next write, which the body makes at once in the
    same turn of the loop; if nothing follows in this turn (a stream still waiting for its
    first bytes), the head goes out alone at the end of it. Everything else passes through.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head, self._head = self._head, None
        if head is not None:
            self._transport.write(head + bytes(data))
        elif data[:7] == b"HTTP/1.":
            self._head = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._head = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Refuse(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _LimitedProtocol(HttpToolsProtocol):
    limits: GatewayLimits = GatewayLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._body_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        #: once refused while the client still sends: the bytes it may send yet
        self._dropping: int | None = None

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._timed_out, what)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self, what: str) -> None:
        self._timer = None
        cycle = self.cycle  # this request's, or (a kept-alive connection's) the one before
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            return  # the answer is under way; the client is not what is slow
        client_log.note(f"slow-{what}", "closed a connection from %s: the request's %s took "
                        "longer than allowed", _peer(self.client), what,
                        client=_host(self.client))
        self._refuse(_Refuse(408, f"the request's {what} took too long"))

    def _refuse(self, refusal: _Refuse) -> None:
        self._disarm()
        if self.transport.is_closing() or self._dropping is not None:
            return
        cycle = self.cycle  # this request's, or (refused in its head) the one before
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()
            return
        if cycle is not None and not cycle.response_complete:
            # the application's answer, if any, is void: to it the client has gone, so
            # its sends are dropped (uvicorn raised on them, and logged a traceback)
            cycle.disconnected = True
            cycle.message_event.set()
        body = f"{refusal}\n".encode()
        # a 503 (too many connections) says when to come back, as every 503 of ours does
        retry = b"retry-after: 1\r\n" if refusal.status == 503 else b""
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\n%sconnection: close\r\n\r\n%s"
            % (refusal.status, _REASONS[refusal.status], len(body), retry, body))
        if refusal.status in (413, 431):  # refused while it still sends
            self._linger(refusal)
        else:
            self.transport.close()

    def _linger(self, refusal: _Refuse) -> None:
        """End the answer, then read and drop what the client still sends, for
        `LINGER_S` and another body's worth of bytes at most, before closing."""
        client_log.note(f"refused-{refusal.status}", "answered %d to %s: %s",
                        refusal.status, _peer(self.client), refusal,
                        client=_host(self.client))
        self._dropping = self.limits.max_body_bytes
        self.transport.write_eof()
        self.flow.resume_reading()
        self._timer = self.loop.call_later(LINGER_S, self.transport.close)

    # -- the socket ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _CorkedTransport(transport, self.loop)  # type: ignore[assignment]
        if len(self.connections) > self.limits.max_connections:
            client_log.note("too-many", "refused a connection from %s: %d connections are "
                            "open", _peer(self.client), len(self.connections) - 1,
                            client=_host(self.client))
            self._refuse(_Refuse(503, "too many open connections; try again shortly"))
            return
        self._arm(self.limits.head_timeout_s, "head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._stall is not None:
            self._stall.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """A graceful shutdown waits for answers under way; a refused client's is sent."""
        if self._dropping is not None:
            self.transport.close()
        else:
            super().shutdown()

    def pause_writing(self) -> None:
        """The client's buffers are full: it gets `write_timeout_s` to read on."""
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.limits.write_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().resume_writing()

    def _stalled(self) -> None:
        self._stall = None
        client_log.note("stalled", "closed a connection from %s: it read nothing of its "
                        "answer for %g s", _peer(self.client), self.limits.write_timeout_s,
                        client=_host(self.client))
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._dropping is not None:  # refused: read, dropped, and closed when too much
            self._dropping -= len(data)
            if self._dropping < 0:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        if self._in_head:
            if self._timer is None:
                self._arm(self.limits.head_timeout_s, "head")
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, _Refuse):
                self._refuse(cause)
            else:
                self._refuse_malformed()
            return
        except httptools.HttpParserUpgrade:
            self._refuse_malformed()  # no upgrades here (no websockets)
            return
        except httptools.HttpParserError:
            self._refuse_malformed()
            return
        if self._in_head and self._head_bytes > self.limits.max_head_bytes:
            self._refuse(_Refuse(431, f"the request head is over "
                                      f"{self.limits.max_head_bytes} bytes"))

    def _refuse_malformed(self) -> None:
        self._disarm()
        client_log.note("malformed", "closed a connection from %s: not a valid HTTP/1.1 "
                        "request", _peer(self.client), client=_host(self.client))
        self.send_400_response("Invalid HTTP request received.")

    # -- parser callbacks ----------------------------------------------------------------

    def on_headers_complete(self) -> None:
        limits = self.limits
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if size > limits.max_head_bytes:
            raise _Refuse(431, f"the request head is over {limits.max_head_bytes} bytes")
        for name, value in self.headers:
            if name == b"content-length" and value.strip().isdigit() \
                    and int(value) > limits.max_body_bytes:
                raise _Refuse(413, f"the request body is over {limits.max_body_bytes} bytes")
        self._in_head = False
        super().on_headers_complete()
        self._arm(limits.body_timeout_s, "body")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:
            raise _Refuse(413, f"the request body is over {self.limits.max_body_bytes} bytes")
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_head, self._head_bytes, self._body_bytes = True, 0, 0  # a next request
        super().on_message_complete()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def _host(client: tuple[str, int] | None) -> str | None:
    """The client's address without its port: what one client may log is counted by it."""
    return client[0] if client else None


def limited_protocol(limits: GatewayLimits) -> type[HttpToolsProtocol]:
    """A protocol class for `uvicorn.Config(http=...)` enforcing `limits`."""
    return type("GatewayHttpProtocol", (_LimitedProtocol,), {"limits": limits})
