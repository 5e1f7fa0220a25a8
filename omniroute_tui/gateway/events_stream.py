"""Fan-out of engine events to Server-Sent Events clients, in order, bounded.

Every event is encoded once into one SSE frame, whatever the number of clients: the bus
handler only keeps the event (the routing path pays a list append), and a flush at the end
of the loop's turn encodes what came, joins it into one batch and appends the batch to a
log all clients read from. A client takes everything it has not read yet in one write, so
under load, or when it fell behind, it catches up in a few large writes rather than many
small ones, and the batches it shares with the others are never copied for it
(docs/design.md §13).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from starlette.responses import StreamingResponse

from ..engine.bus import EventBus
from ..engine.events import Event

__all__ = ["EventBroadcaster", "EventStreamResponse", "encode_frame"]

#: how far behind (events, bytes) a client may fall before it is dropped
QUEUE_LIMIT = 10_000
QUEUE_BYTES = 4 << 20
#: an idle stream says it is alive this often, so proxies keep it open
KEEP_ALIVE_S = 15.0

CONNECTED = b": connected\n\n"
KEEP_ALIVE = b": keep-alive\n\n"


def encode_frame(kind: str, data: str) -> bytes:
    """One event's SSE frame: made once, shared by every client's stream."""
    return f"event: {kind}\ndata: {data}\n\n".encode()


def _dropped_frame(reason: str) -> bytes:
    return f"event: dropped\ndata: {json.dumps({'reason': reason})}\n\n".encode()


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes]) -> None:
        super().__init__(frames, headers={"cache-control": "no-cache"})


class _Reader:
    """Where one client is in the log: the batch it reads next, and the broadcaster's
    totals when it last read (how far behind it is, in events and bytes)."""

    __slots__ = ("bytes_at", "cursor", "ended", "final", "frames_at", "reason", "wake")

    def __init__(self, cursor: int, frames_at: int, bytes_at: int) -> None:
        self.cursor = cursor
        self.frames_at = frames_at
        self.bytes_at = bytes_at
        #: set while the client waits for frames: True wakes it for a keep-alive
        self.wake: asyncio.Future[bool] | None = None
        self.ended = False
        self.reason: str | None = None
        self.final: bytes | None = None  # the frame a stream closed on purpose ends with


class EventBroadcaster:
    """Every client reads the same log of encoded batches; a client that falls
    `queue_limit` events or `queue_bytes` bytes behind is dropped alone (its stream ends
    with a `dropped` event; it can reconnect) rather than slowing the router or the others.
    """

    def __init__(self, bus: EventBus, queue_limit: int = QUEUE_LIMIT,
                 replica: str | None = None, *, queue_bytes: int = QUEUE_BYTES,
                 echo: Callable[[], bool] | None = None) -> None:
        """`echo()`: whether the engine's event now is its merge of another replica's,
        which is streamed as that replica's (`relay`): not streamed twice."""
        self.queue_limit = queue_limit
        self._echo = echo
        self.queue_bytes = queue_bytes
        #: in a fleet, every frame says which replica's event it is
        self._tag = "" if replica is None else f',"replica":{json.dumps(replica)}'
        self._readers: set[_Reader] = set()
        #: since the last flush: this replica's events (encoded at the flush) and other
        #: replicas' frames, in arrival order
        self._pending: list[Event | bytes] = []
        #: batches not yet read by every client; `_base` is the index of the first
        self._log: list[bytes] = []
        self._base = 0
        #: frames and bytes ever appended to the log
        self._frames_total = 0
        self._bytes_total = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_soon: asyncio.Handle | None = None
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        bus.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        """On the routing path: keep the event; the flush encodes it."""
        if self._readers and (self._echo is None or not self._echo()):
            self._pending.append(event)
            if self._flush_soon is None:
                self._arm_flush()

    def relay(self, replica: str, data: dict[str, object]) -> None:
        """Another replica's event, from the fleet's stream: streamed with its id, so a
        console attached to any replica follows the fleet."""
        self.send(str(data.get("type", "event")),
                  json.dumps({**data, "replica": replica}, separators=(",", ":")))

    def send(self, kind: str, data: str) -> None:
        """A frame that is no event of this engine (another replica's, a room's replay
        state), in order with the events."""
        if self._readers:
            self._pending.append(encode_frame(kind, data))
            if self._flush_soon is None:
                self._arm_flush()

    def _arm_flush(self) -> None:
        """One flush for all the events of this turn of the loop: when the loop is busy,
        batches grow and the writes a second do not."""
        assert self._loop is not None  # set by the first client's stream
        self._flush_soon = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Encode what came into one batch, drop the clients too far behind, forget what
        every remaining client has read, and wake the waiting ones."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        pending, self._pending = self._pending, []
        if not pending or not self._readers:
            return
        tag = self._tag
        frames = []
        for item in pending:
            if isinstance(item, Event):
                data = item.to_json()
                item = encode_frame(item.TYPE, data[:-1] + tag + "}" if tag else data)
            frames.append(item)
        batch = b"".join(frames)
        self._log.append(batch)
        self._frames_total += len(frames)
        self._bytes_total += len(batch)
        oldest = self._base + len(self._log)
        for reader in tuple(self._readers):
            if self._frames_total - reader.frames_at > self.queue_limit:
                self._end(reader, f"the client fell {self.queue_limit} events behind; "
                                  "reconnect and read the state again")
            elif self._bytes_total - reader.bytes_at > self.queue_bytes:
                self._end(reader, f"the client fell {self.queue_bytes} bytes behind; "
                                  "reconnect and read the state again")
            else:
                oldest = min(oldest, reader.cursor)
                if reader.wake is not None and not reader.wake.done():
                    reader.wake.set_result(False)
        del self._log[:oldest - self._base]
        self._base = oldest

    def _keep_alive(self) -> None:
        self._keep_alive_timer = None
        for reader in self._readers:
            if reader.wake is not None and not reader.wake.done():
                reader.wake.set_result(True)
        if self._readers and self._loop is not None:
            self._keep_alive_timer = self._loop.call_later(KEEP_ALIVE_S, self._keep_alive)

    async def stream(self) -> AsyncIterator[bytes]:
        self._loop = loop = asyncio.get_running_loop()
        self._flush()  # what came before this client is not its to read
        reader = _Reader(self._base + len(self._log), self._frames_total, self._bytes_total)
        self._readers.add(reader)
        if self._keep_alive_timer is None:
            self._keep_alive_timer = loop.call_later(KEEP_ALIVE_S, self._keep_alive)
        try:
            yield CONNECTED
            while not reader.ended:
                log = self._log
                start = reader.cursor - self._base
                if start < len(log):
                    batches = log[start:]
                    reader.cursor = self._base + len(log)
                    reader.frames_at, reader.bytes_at = self._frames_total, self._bytes_total
                    yield batches[0] if len(batches) == 1 else b"".join(batches)
                    continue
                reader.wake = loop.create_future()
                if await reader.wake:
                    yield KEEP_ALIVE
            if reader.reason is not None:
                yield _dropped_frame(reader.reason)
            elif reader.final is not None:
                yield reader.final
        finally:
            self._readers.discard(reader)
            if not self._readers:
                self._forget()

    def _end(self, reader: _Reader, reason: str | None) -> None:
        self._readers.discard(reader)
        reader.ended, reader.reason = True, reason
        if reader.wake is not None and not reader.wake.done():
            reader.wake.set_result(False)

    @property
    def subscribers(self) -> int:
        return len(self._readers)

    @property
    def caught_up(self) -> bool:
        """Whether every client has been handed every event so far."""
        end = self._base + len(self._log)
        return not self._pending and all(r.cursor == end for r in self._readers)

    def close(self, final: bytes | None = None) -> None:
        """At shutdown: every stream ends now, without what it has not read; with
        `final`, each ends with that frame (a room's new run: where to read on)."""
        for reader in tuple(self._readers):
            reader.final = final
            self._end(reader, None)
        self._forget()

    def _forget(self) -> None:
        """No client left: nothing to keep, nothing to send."""
        for handle in (self._flush_soon, self._keep_alive_timer):
            if handle is not None:
                handle.cancel()
        self._flush_soon = self._keep_alive_timer = None
        self._pending.clear()
        self._base += len(self._log)
        self._log.clear()
