"""Serving an ASGI app with uvicorn inside a running event loop: the gateway's and a
room's (`--serve-room`). The server runs in a task nothing awaits until it is stopped, so
its end is watched (`omniroute_tui/tasks.py`): an exception inside uvicorn, or its
listening socket closed under it, is logged with the cause and told to its owner, and
`stop()` stays clean afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp

from ..config.limits import GatewayLimits
from ..tasks import watch
from .app import Gateway
from .protocol import limited_protocol

__all__ = ["GatewayServer", "Listener", "parse_listen"]

log = logging.getLogger("omniroute.gateway")

#: how often (in uvicorn's ticks of 0.1 s) the listening sockets are checked
_CHECK_TICKS = 10


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:4000` → ("127.0.0.1", 4000); a clear ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen wants HOST:PORT like 127.0.0.1:4000, got {text!r}")
    return host.strip("[]"), int(port)


class _CheckedServer(uvicorn.Server):
    """uvicorn that notices its listening sockets are gone: a closed socket accepts
    nothing and uvicorn would tick on for ever, so it shuts down and says why."""

    broken: str | None = None
    #: ends the long responses (event streams) first, so a shutdown is not held up
    closing: Callable[[], None] = staticmethod(lambda: None)

    async def on_tick(self, counter: int) -> bool:
        if counter % _CHECK_TICKS == 0 and self.broken is None:
            self.broken = _closed_listener(self.servers)
        return self.broken is not None or await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.closing()
        # a listener whose socket was closed under it fails to close again (EBADF): closed
        # first, its error dropped, so the connections are still ended and waited for
        for server in getattr(self, "servers", ()):
            with contextlib.suppress(OSError):
                server.close()
        await super().shutdown(sockets)


def _closed_listener(servers: list[asyncio.Server]) -> str | None:
    """Why one of the listening sockets no longer listens, or None if they all do."""
    for server in servers:
        if not server.is_serving():
            return "its listening socket was closed"
        for sock in server.sockets:
            try:
                listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            except OSError as exc:
                return f"its listening socket failed ({exc})"
            if not listening:
                return "its listening socket no longer listens"
    return None


class Listener:
    """uvicorn serving `app` in a task of the running loop: `start()` returns once it
    listens (port 0 picks one); `closing()` ends its long responses when it shuts down.
    If it ends before `stop()` asks it to, the end is logged once on `logger` with its
    cause (a traceback only for a bug), `failure` says it, and `on_end(failure)` is told;
    `stop()` is clean either way."""

    def __init__(self, app: ASGIApp, host: str, port: int, *, what: str,
                 limits: GatewayLimits, graceful_s: int, logger: logging.Logger = log,
                 on_end: Callable[[str], None] | None = None,
                 closing: Callable[[], None] | None = None) -> None:
        # log_config=None: uvicorn's lines go to the handlers of the process
        # (omniroute_tui/logs.py), not to a handler of its own on stderr
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                log_config=None, lifespan="off", access_log=False,
                                timeout_graceful_shutdown=graceful_s,
                                http=limited_protocol(limits),
                                timeout_keep_alive=max(1, round(limits.keep_alive_s)))
        self.server = _CheckedServer(config)
        if closing is not None:
            self.server.closing = closing
        self.host = host
        self.port = port
        self.what = what
        self.logger = logger
        self.on_end = on_end
        #: why the server ended on its own (None: it runs, or was stopped)
        self.failure: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._unwatch: Callable[[], None] = lambda: None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self, timeout_s: float = 10.0) -> None:
        """Listen; OSError if it cannot (the port taken) or not within `timeout_s`."""
        self._task = task = asyncio.create_task(self._serve(), name=f"omniroute-{self.what}")
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if task.done():
                raise OSError(f"{self.what} could not listen on {self.host}:{self.port} "
                              "(is the port taken?)")
            if time.monotonic() > deadline:
                raise OSError(f"{self.what} did not start within {timeout_s:g} s")
            await asyncio.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self._unwatch = watch(task, f"{self.what} on {self.url}", logger=self.logger,
                              on_end=self._ended, cause=lambda: self.server.broken)

    def _ended(self, failure: str) -> None:
        self.failure = failure
        if self.on_end is not None:
            self.on_end(failure)

    async def _serve(self) -> None:
        """uvicorn says why it cannot start (port taken, ...) and exits with SystemExit;
        that must not take the whole process down with it. An exception inside uvicorn
        skips its shutdown: what it listened on and its connections are closed here."""
        try:
            await self.server.serve()
        except SystemExit:
            return
        except Exception:
            if self.server.started:
                with contextlib.suppress(Exception):
                    await self.server.shutdown()
            raise

    async def stop(self, timeout_s: float = 6.0) -> None:
        """Shut down gracefully, at most `timeout_s`; nothing to do if it ended already."""
        self._unwatch()
        task = self._task
        if task is None or task.done():
            return
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=timeout_s)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except Exception as exc:  # its shutdown failed: said, and the stop goes on
            self.logger.warning("%s stopped with an error: %s: %s", self.what,
                                type(exc).__name__, exc)


class GatewayServer:
    """uvicorn serving a Gateway; `start()` returns once it listens (port 0 picks one).
    `on_end(failure)` is told if it ends before `stop()` (`listener.failure` says why)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 4000, *,
                 on_end: Callable[[str], None] | None = None) -> None:
        self.gateway = gateway
        self.listener = Listener(gateway.asgi(), host, port, what="the gateway",
                                 limits=gateway.limits, graceful_s=5, on_end=on_end,
                                 closing=gateway.events.close)
        self.server = self.listener.server
        self.host = host

    @property
    def port(self) -> int:
        return self.listener.port

    @property
    def url(self) -> str:
        return self.listener.url

    async def start(self, timeout_s: float = 10.0) -> None:
        await self.listener.start(timeout_s)

    async def stop(self) -> None:
        await self.listener.stop()
        await self.gateway.aclose()
