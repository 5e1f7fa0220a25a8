"""Fan-out of engine events to Server-Sent Events clients, in order, bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ..engine.events import Event, EventBus

__all__ = ["EventBroadcaster"]

QUEUE_LIMIT = 10_000


class EventBroadcaster:
    """Each client gets its own bounded queue; a client that falls that far behind is
    dropped (its stream ends; it can reconnect) rather than slowing the router."""

    def __init__(self, bus: EventBus) -> None:
        self._queues: set[asyncio.Queue[str | None]] = set()
        bus.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if not self._queues:
            return
        frame = f"event: {event.TYPE}\ndata: {event.to_json()}\n\n"
        for queue in tuple(self._queues):
            try:
                queue.put_nowait(frame)
            except asyncio.QueueFull:  # too far behind: end its stream
                self._queues.discard(queue)
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)

    async def stream(self) -> AsyncIterator[str]:
        queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_LIMIT)
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

    def close(self) -> None:
        for queue in tuple(self._queues):
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(None)
        self._queues.clear()
