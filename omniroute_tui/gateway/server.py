"""Serving a Gateway with uvicorn inside a running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time

import uvicorn

from .app import Gateway
from .protocol import limited_protocol

__all__ = ["GatewayServer", "parse_listen"]


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:4000` → ("127.0.0.1", 4000); a clear ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen wants HOST:PORT like 127.0.0.1:4000, got {text!r}")
    return host.strip("[]"), int(port)


class GatewayServer:
    """uvicorn serving a Gateway; `start()` returns once it listens (port 0 picks one)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 4000) -> None:
        self.gateway = gateway
        limits = gateway.limits
        # log_config=None: uvicorn's lines go to the handlers of the process
        # (omniroute_tui/logs.py), not to a handler of its own on stderr
        config = uvicorn.Config(gateway.asgi(), host=host, port=port, log_level="warning",
                                log_config=None, lifespan="off", access_log=False,
                                timeout_graceful_shutdown=5,
                                http=limited_protocol(limits),
                                timeout_keep_alive=max(1, round(limits.keep_alive_s)))
        self.server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self, timeout_s: float = 10.0) -> None:
        self._task = asyncio.create_task(self._serve(), name="omniroute-gateway")
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if self._task.done():
                raise OSError(f"the gateway could not listen on {self.host}:{self.port} "
                              "(is the port taken?)")
            if time.monotonic() > deadline:
                raise OSError(f"the gateway did not start within {timeout_s:g} s")
            await asyncio.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    async def _serve(self) -> None:
        """uvicorn says why it cannot start (port taken, ...) and exits with SystemExit;
        that must not take the whole process down with it."""
        with contextlib.suppress(SystemExit):
            await self.server.serve()

    async def stop(self) -> None:
        if self._task is None or self._task.done():
            await self.gateway.aclose()
            return
        self.server.should_exit = True
        self.gateway.events.close()  # end event streams so the shutdown is not held up
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout=6)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        await self.gateway.aclose()
