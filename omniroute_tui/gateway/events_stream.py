"""Fan-out of engine events to Server-Sent Events clients, in order, bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse

from ..engine.bus import EventBus
from ..engine.events import Event

__all__ = ["EventBroadcaster", "EventStreamResponse"]

QUEUE_LIMIT = 10_000


def _dropped_frame(reason: str) -> str:
    return f"event: dropped\ndata: {json.dumps({'reason': reason})}\n\n"


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[str]) -> None:
        super().__init__(frames, headers={"cache-control": "no-cache"})


class EventBroadcaster:
    """Each client gets its own bounded queue; a client that falls that far behind is
    dropped (its stream ends; it can reconnect) rather than slowing the router."""

    def __init__(self, bus: EventBus, queue_limit: int = QUEUE_LIMIT,
                 replica: str | None = None) -> None:
        self._queues: set[asyncio.Queue[str | None]] = set()
        self.queue_limit = queue_limit
        #: in a fleet, every frame says which replica's event it is
        self._tag = "" if replica is None else f',"replica":{json.dumps(replica)}'
        bus.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if self._queues:
            data = event.to_json()
            self._send(event.TYPE, data[:-1] + self._tag + "}" if self._tag else data)

    def relay(self, replica: str, data: dict[str, object]) -> None:
        """Another replica's event, from the fleet's stream: streamed with its id, so a
        console attached to any replica follows the fleet."""
        if self._queues:
            self._send(str(data.get("type", "event")),
                       json.dumps({**data, "replica": replica}, separators=(",", ":")))

    def _send(self, kind: str, data: str) -> None:
        frame = f"event: {kind}\ndata: {data}\n\n"
        for queue in tuple(self._queues):
            try:
                queue.put_nowait(frame)
            except asyncio.QueueFull:  # too far behind: end its stream, saying why
                self._end(queue, f"the client fell {self.queue_limit} events behind; "
                                 "reconnect and read the state again")

    async def stream(self) -> AsyncIterator[str]:
        queue: asyncio.Queue[str | None] = asyncio.Queue(self.queue_limit)
        self._queues.add(queue)
        try:
            yield ": connected\n\n"
            while True:
                try:
                    frame = await asyncio.wait_for(queue.get(), timeout=15)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if frame is None:
                    return
                yield frame
        finally:
            self._queues.discard(queue)

    def _end(self, queue: asyncio.Queue[str | None], reason: str | None) -> None:
        self._queues.discard(queue)
        keep = max(0, queue.maxsize - 2) if reason is not None else 0  # at shutdown: none
        while queue.qsize() > keep:
            queue.get_nowait()
        if reason is not None:
            queue.put_nowait(_dropped_frame(reason))
        queue.put_nowait(None)

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    def close(self) -> None:
        for queue in tuple(self._queues):
            self._end(queue, None)
