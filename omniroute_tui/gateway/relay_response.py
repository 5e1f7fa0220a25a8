"""The ASGI response that relays a streamed answer to the client (docs/design.md §7)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..drivers.async_driver import Completion

__all__ = ["RelayResponse"]


class RelayResponse(Response):
    """Sends the stream's events as they come and ends the body cleanly whatever
    happens: after `[DONE]`, after the error event of a cut stream, or at once when the
    client goes away. Then, always, the stream's end is recorded (`Completion.finish`)
    and `on_end` is told (the access line): nothing of it reaches the server as an
    exception (no traceback, no broken chunked body)."""

    def __init__(self, completion: Completion, status: int, headers: Mapping[str, str],
                 on_end: Callable[[Completion], None]) -> None:
        # as a StreamingResponse: no body, so no content-length (the body is chunked)
        self.status_code = status
        self.background = None
        self.init_headers(headers)
        self.completion = completion
        self.on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        completion = self.completion

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            completion.client_gone()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for piece in completion.pieces():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            if not completion.gone:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # a server that says so when the client has left
            completion.client_gone()
        finally:
            watcher.cancel()
            try:
                await self.completion.finish()
            finally:  # the request's end (its id, record and trace) whatever `finish` met
                self.on_end(self.completion)
