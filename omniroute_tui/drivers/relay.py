"""Relaying an upstream's streamed answer (SSE) to the client (docs/design.md §7).

The relay reads the upstream's body through one `SseDecoder` and looks at every event
before it passes it on, as the upstream's API streams (`dialects.py`). Until the first
event with content (a token, a reasoning or a tool-call part, a finish) the events are
held back: the attempt can still fail without the client knowing, and the request go to
the next target. From then on each whole event is passed on as the upstream sent it (or
translated, for a client of another API: docs/design.md §14), and the stream ends in one
of two ways: whole, at its API's end (`data: [DONE]`, `response.completed`,
`message_stop`), or cut, when the connection breaks, the upstream sends an error event or
an event that is not a JSON object, the body ends before its end event, or nothing comes
for `stream_idle`. A cut stream's client gets one last event in its own API's error shape
(`data: {"error": {...}}` for OpenAI's chat) saying what happened, and a body that ends
cleanly: never a short answer that looks whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from ..apis import Endpoint
from ..engine.kinds import StreamCut
from .dialects import Examine, Seen, StreamBroken, examine_openai
from .dialects import error_event as dialect_error_event
from .sse import MAX_EVENT_BYTES, SseDecoder, SseError, SseEvent
from .usage import Usage, usage_of

__all__ = ["BodyReader", "StreamBroken", "StreamRelay", "Translate", "error_event"]

#: the most of an upstream's error message passed on in ours
_MESSAGE_CHARS = 300


class BodyReader(Protocol):
    """The upstream's answer, as the relay reads it (`ResponseBody`)."""

    def aiter_raw(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


#: turns one upstream event (and what it is) into the bytes the client gets: a stream
#: carried across API families (docs/design.md §14)
Translate = Callable[[SseEvent, Seen], bytes]


def error_event(cut: StreamCut, detail: str, relayed_chunks: int) -> bytes:
    """The event a cut chat stream ends with: OpenAI's error shape, which its SDKs raise."""
    return dialect_error_event(Endpoint.CHAT, cut, detail, relayed_chunks)


class StreamRelay:
    """One streamed answer: `first_content()` reads until it has begun, `relay()` passes
    it on; then `cut` (None: whole) and what was relayed say how it went."""

    __slots__ = ("_backlog", "_body", "_chunks", "_client", "_decoder", "_examine", "_held",
                 "_held_chunks", "_idle_s", "_reading", "_since", "_stop", "_task", "_timer",
                 "_translate", "cut", "detail", "finished", "gone", "relayed_bytes",
                 "relayed_chunks", "usage")

    def __init__(self, body: BodyReader, idle_ms: int, *, examine: Examine = examine_openai,
                 client: Endpoint = Endpoint.CHAT, translate: Translate | None = None) -> None:
        """`examine` reads the upstream's dialect, `client` is the endpoint whose shape a
        cut's event takes, `translate` (None: passed on as they came) makes each event
        the client's."""
        self._body = body
        self._examine = examine
        self._client = client
        self._translate = translate
        self._chunks = body.aiter_raw()
        self._decoder = SseDecoder()
        self._idle_s = idle_ms / 1000
        self._held: list[bytes] = []  # events read before the first content
        self._held_chunks = 0  # events with content among them (the first, or none)
        self._backlog: list[SseEvent] = []  # events read and not yet looked at
        self._reading = False
        self._since = 0.0
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stop: StreamCut | None = None  # why the read in progress was interrupted
        self.cut: StreamCut | None = None
        self.detail = ""
        self.finished = False  # `[DONE]` passed on
        self.gone = False  # the client left
        self.relayed_bytes = 0
        self.relayed_chunks = 0  # events with content passed on
        #: the tokens the stream's usage event says it took (the last one, if several)
        self.usage: Usage | None = None

    async def first_content(self) -> None:
        """Read until the first event with content (or `[DONE]`), holding back what
        comes before it; StreamBroken if the stream breaks first. The caller bounds the
        time (`request.first_token`, or `request.timeout`)."""
        held = 0
        while True:
            for i, event in enumerate(self._backlog):
                seen = self._examine(event)
                self._held.append(self._out(event, seen))
                held += len(event.raw)
                if held > MAX_EVENT_BYTES:  # keep-alives without end hold no memory
                    raise StreamBroken(StreamCut.BAD_EVENT, f"over {MAX_EVENT_BYTES >> 10} "
                                       "KiB of events before any content")
                if seen >= Seen.CONTENT:
                    if seen == Seen.CONTENT:
                        self._note_usage(event)
                    self._held_chunks = int(seen == Seen.CONTENT)
                    self.finished = seen == Seen.DONE
                    del self._backlog[:i + 1]
                    return
            self._backlog = await self._read()

    async def _read(self) -> list[SseEvent]:
        """The next events of the body; StreamBroken when it breaks or ends."""
        try:
            chunk = await anext(self._chunks, None)
        except Exception as exc:  # a reset, a body cut short (ProtocolError, httpx's own)
            raise StreamBroken(StreamCut.RESET, _said(exc)) from None
        decoder = self._decoder
        if chunk is None:
            last = decoder.finish()
            if last:
                return last
            raise StreamBroken(StreamCut.NO_DONE, "the body ended without data: [DONE]")
        try:
            return decoder.feed(chunk)
        except SseError as exc:
            raise StreamBroken(StreamCut.BAD_EVENT, str(exc)) from None

    async def relay(self) -> AsyncIterator[bytes]:
        """The stream as the client gets it: what was held back, then each batch of
        whole events as it comes, until `[DONE]` or a cut (then the error event)."""
        try:
            async for piece in self._relay():
                yield piece
        except StreamBroken as broken:
            self.cut, self.detail = broken.cut, broken.detail
            yield dialect_error_event(self._client, broken.cut, broken.detail,
                                      self.relayed_chunks)
        finally:
            self._stop_timer()

    async def _relay(self) -> AsyncIterator[bytes]:
        held = b"".join(self._held)
        self._held = []
        self.relayed_chunks += self._held_chunks
        piece, broken = self._pass(self._backlog) if not self.finished else (b"", None)
        if held or piece:
            out = held + piece if piece else held
            self.relayed_bytes += len(out)
            yield out
        if broken is not None:
            raise broken
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._timer = loop.call_at(loop.time() + self._idle_s, self._check_idle)
        while not self.finished and not self.gone:
            self._since = loop.time()
            self._reading = True
            try:
                events = await self._read()
            except asyncio.CancelledError:
                if self._stop is None:  # not ours: the server's
                    raise
                assert self._task is not None
                self._task.uncancel()
                if self.gone:
                    return
                raise StreamBroken(StreamCut.IDLE, f"nothing came for {self._idle_s:g} s") \
                    from None
            finally:
                self._reading = False
            piece, broken = self._pass(events)
            if piece:
                self.relayed_bytes += len(piece)
                yield piece
            if broken is not None:
                raise broken

    def _pass(self, events: list[SseEvent]) -> tuple[bytes, StreamBroken | None]:
        """The bytes of `events` to pass on, up to `[DONE]`, and what broke the stream
        among them, if anything did (the good events before it are passed on first)."""
        self._backlog = []
        out: list[bytes] = []
        for event in events:
            try:
                seen = self._examine(event)
            except StreamBroken as broken:
                return b"".join(out), broken
            out.append(self._out(event, seen))
            if seen == Seen.CONTENT:
                self.relayed_chunks += 1
                self._note_usage(event)
            elif seen == Seen.DONE:
                self.finished = True
                break
        return b"".join(out), None

    def _out(self, event: SseEvent, seen: Seen) -> bytes:
        """The bytes the client gets for an event: as it came, or translated."""
        translate = self._translate
        return event.raw if translate is None else translate(event, seen)

    def _note_usage(self, event: SseEvent) -> None:
        """Keep the usage of an event that has one (most have none: a byte search); an
        Anthropic stream says its output tokens last, its input tokens first."""
        data = event.data
        if data is not None and b'"usage"' in data:
            self.usage = usage_of(data, self.usage) or self.usage

    def _check_idle(self) -> None:
        """The idle timer: one handle, moved on while reads come in time."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = (self._since if self._reading else now) + self._idle_s
        if self._reading and now >= due:
            self._timer = None
            self._interrupt(StreamCut.IDLE)
            return
        self._timer = loop.call_at(due, self._check_idle)

    def client_gone(self) -> None:
        """The client left: the relay ends at once (a read of the upstream it waits for
        is interrupted), and the stream's end is `cancelled`."""
        self.gone = True
        if self._reading:
            self._interrupt(StreamCut.RESET)

    def _interrupt(self, why: StreamCut) -> None:
        """Interrupt the read in progress: the only await the relay cancels, and it
        takes the cancellation back there (`_relay`)."""
        if self._stop is None and self._task is not None:
            self._stop = why
            self._task.cancel()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def drain(self) -> None:
        """After `[DONE]`: read the body to its end (within `stream_idle`), so that its
        connection can serve again; whatever comes or goes wrong is not the client's."""
        try:
            async with asyncio.timeout(self._idle_s):
                async for _ in self._chunks:
                    pass
        except (Exception, TimeoutError):
            return

    async def aclose(self) -> None:
        self._stop_timer()
        await self._body.aclose()


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MESSAGE_CHARS] if str(exc) else type(exc).__name__
