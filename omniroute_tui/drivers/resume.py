"""Resuming a cut stream on the route's next target (`stream_resume: continue`,
docs/design.md §7).

When a stream breaks after its first content, the client has part of an answer. Under
`stream_resume` the router may give the request to the route's next target once more
(`RequestRouting.resume`), now with the text relayed so far as a trailing assistant
message, which a provider that takes a prefill completes. The continuation is spliced
into the client's stream: its role chunk dropped, each event with content passed on
under the first stream's `id`, `model` and `created`, then its `[DONE]`: the client reads
one answer. If the continuation fails before its first content (a provider that refuses
the prefill answers 400), the client gets the cut's own error event, as without a
resume, and nothing twice.

Only plain text is continued: a stream whose deltas carried a tool call, reasoning, a
refusal or anything but text, a request for several choices (`n`) or for `logprobs`, and
an answer whose finish already came are not resumed (`ResumeRefusal`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ..engine.kinds import StreamCut
from ..engine.values import value
from ..router.steps import Attempt
from .dialects import has_content
from .relay import StreamRelay, error_event
from .sse import SseDecoder

if TYPE_CHECKING:
    from ..router.core import RequestRouting
    from .upstream import UpstreamReply

__all__ = ["MAX_RESUMED_BYTES", "RelayedAnswer", "ResumeRefusal", "StreamResume",
           "continuation_body", "read_relayed", "refusal_of_request"]

#: the most of a stream kept to be continued: past it, a cut stands (a prefill that long
#: is a prompt few models take, and the bytes would be held for every stream)
MAX_RESUMED_BYTES = 4 << 20
_DONE_DATA = b"[DONE]"
#: the fields of the first stream's chunks the continuation's are written under
_HEAD_FIELDS = ("id", "model", "created", "system_fingerprint")
#: the fields that cap a completion's length: the continuation's is what is left of it
_LENGTH_FIELDS = ("max_tokens", "max_completion_tokens")


class ResumeRefusal(StrEnum):
    """Why a cut stream is not continued."""

    TOOL_CALLS = "tool_calls"  # a delta carried a tool call: half a call cannot be prefilled
    NOT_TEXT = "not_text"  # a delta carried reasoning, a refusal, audio: not text to prefill
    CHOICES = "choices"  # several choices (`n` > 1): one prefill cannot continue them all
    LOGPROBS = "logprobs"  # a continuation's would be another model's, of another prompt
    FINISHED = "finished"  # the finish came: the text is whole, only the end was lost
    EMPTY = "empty"  # no text to continue
    TOO_LONG = "too_long"  # over MAX_RESUMED_BYTES relayed
    SHAPE = "shape"  # a chunk not shaped as OpenAI's


@value
class RelayedAnswer:
    """What the client has of the answer: the text of its one choice, and the first
    stream's `id`, `model`, `created`, `system_fingerprint` (those it sent)."""

    text: str
    head: dict[str, Any]


def refusal_of_request(body: dict[str, Any]) -> ResumeRefusal | None:
    """Why a request's stream is not to be continued, whatever it relays; None: it may be."""
    choices = body.get("n")
    if isinstance(choices, int) and choices > 1:
        return ResumeRefusal.CHOICES
    if body.get("logprobs") or body.get("top_logprobs"):
        return ResumeRefusal.LOGPROBS
    return None


def read_relayed(pieces: list[bytes]) -> RelayedAnswer | ResumeRefusal:
    """The answer in the events relayed (whole events, each a JSON object or `[DONE]`:
    the relay checked them), or why it cannot be continued."""
    text: list[str] = []
    head: dict[str, Any] | None = None
    for event in SseDecoder().feed(b"".join(pieces)):
        if event.data is None or event.data == _DONE_DATA:
            continue
        chunk = json.loads(event.data)
        if head is None:
            head = {name: chunk[name] for name in _HEAD_FIELDS if name in chunk}
        choices = chunk.get("choices") or []
        if type(choices) is not list:
            return ResumeRefusal.SHAPE
        for choice in choices:
            refusal = _read_choice(choice, text)
            if refusal is not None:
                return refusal
    if not text:
        return ResumeRefusal.EMPTY
    return RelayedAnswer("".join(text), head or {})


def _read_choice(choice: Any, text: list[str]) -> ResumeRefusal | None:
    """Add a choice's text to `text`; why not, when it has more than text."""
    if type(choice) is not dict:
        return ResumeRefusal.SHAPE
    if choice.get("index", 0) != 0:
        return ResumeRefusal.CHOICES
    if choice.get("logprobs"):
        return ResumeRefusal.LOGPROBS
    if choice.get("finish_reason"):
        return ResumeRefusal.FINISHED
    delta = choice.get("delta") or {}
    if type(delta) is not dict:
        return ResumeRefusal.SHAPE
    for key, part in delta.items():
        if key == "content":
            if part is None:
                continue
            if type(part) is not str:
                return ResumeRefusal.SHAPE
            text.append(part)
        elif key in ("tool_calls", "function_call") and part:
            return ResumeRefusal.TOOL_CALLS
        elif key != "role" and part:
            return ResumeRefusal.NOT_TEXT
    return None


def continuation_body(body: dict[str, Any], text: str, relayed_chunks: int) -> dict[str, Any]:
    """The request that continues `text`: the client's, with the text as a trailing
    assistant message (joined to the client's own prefill, if it ended with one), and
    what is left of its length cap (a chunk counted as a token, as OpenAI streams them)."""
    messages = list(body["messages"])
    last = messages[-1] if messages else None
    if (last is not None and last.get("role") == "assistant"
            and isinstance(last.get("content"), str)):
        messages[-1] = dict(last, content=last["content"] + text)
    else:
        messages.append({"role": "assistant", "content": text})
    continued = dict(body, messages=messages)
    for name in _LENGTH_FIELDS:
        cap = body.get(name)
        if isinstance(cap, int) and not isinstance(cap, bool):
            continued[name] = max(1, cap - relayed_chunks)
    return continued


class _Splice:
    """The continuation's events as the first stream's: events without content (its
    role) dropped, the others under the first stream's head, `[DONE]` as it came."""

    __slots__ = ("_decoder", "_head")

    def __init__(self, head: dict[str, Any]) -> None:
        self._decoder = SseDecoder()
        self._head = head

    def feed(self, piece: bytes) -> bytes:
        out: list[bytes] = []
        for event in self._decoder.feed(piece):
            if event.data is None:
                continue  # a keep-alive: the client's stream is not idle
            if event.data == _DONE_DATA:
                out.append(event.raw)
                continue
            chunk = json.loads(event.data)
            if not has_content(chunk):
                continue
            choices = chunk.get("choices")
            for choice in choices if type(choices) is list else ():
                delta = choice.get("delta") if type(choice) is dict else None
                if type(delta) is dict:
                    delta.pop("role", None)
            chunk.update(self._head)
            out.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode()
                       + b"\n\n")
        return b"".join(out)


#: makes an attempt with a body: the driver's upstream call
Send = Callable[[Attempt, dict[str, Any]], Awaitable["UpstreamReply"]]


class StreamResume:
    """A streamed answer that may be continued once (the route's `stream_resume`).

    `relay()` passes the first attempt's stream on, keeping what it relayed; at a cut it
    records the attempt's end, asks the router for a resume, and either splices the
    continuation's stream in or sends the cut's error event. `reply` then holds the
    stream still open (the continuation's, once it took over), whose end `Completion.
    finish` records. `outcome` says what became of a cut: `resumed`, `refused: <why>`,
    `no target`, `failed: <kind>`."""

    def __init__(self, reply: UpstreamReply, routing: RequestRouting, body: dict[str, Any],
                 send: Send, record: Callable[[UpstreamReply], None]) -> None:
        self.reply = reply
        self._routing = routing
        self._body = body
        self._send = send
        self._record = record
        self._task: asyncio.Task[Any] | None = None
        self._sending = False
        self.gone = False
        self.outcome: str | None = None
        self.cut: StreamCut | None = None  # the first attempt's cut, once it came
        self.resumed_by: str | None = None
        #: what the first attempt relayed, once a continuation took over
        self.before_bytes = 0
        self.before_chunks = 0

    @property
    def relay_in_use(self) -> StreamRelay:
        relay = self.reply.relay
        assert relay is not None
        return relay

    def client_gone(self) -> None:
        """The client left: the stream relayed ends, or the continuation asked for is
        given up (the read of its answer interrupted)."""
        self.gone = True
        if self._sending and self._task is not None:
            self._task.cancel()
        else:
            self.relay_in_use.client_gone()

    async def relay(self) -> AsyncIterator[bytes]:
        first = self.relay_in_use
        kept: list[bytes] | None = []
        cut_event = None
        async for piece in first.relay():
            if first.cut is not None:  # the last piece: the cut's error event
                cut_event = piece
                continue
            if kept is not None:
                kept.append(piece)
                if first.relayed_bytes > MAX_RESUMED_BYTES:
                    kept = None
            yield piece
        if cut_event is None:
            return
        continued = await self._continue(first, kept)
        if continued is None:
            if not self.gone:
                yield cut_event
            return
        relay, splice = continued
        async for piece in relay.relay():
            if relay.cut is not None:  # the continuation's cut: said with the total
                yield error_event(relay.cut, relay.detail,
                                  self.before_chunks + relay.relayed_chunks)
                continue
            spliced = splice.feed(piece)
            if spliced:
                yield spliced

    async def _continue(self, first: StreamRelay, kept: list[bytes] | None
                        ) -> tuple[StreamRelay, _Splice] | None:
        """Record the cut, and continue the answer if the request, what was relayed and
        the router allow it; None: the cut stands."""
        routing = self._routing
        cut = self.cut = first.cut
        assert cut is not None
        routing.end_stream(cut, relayed_bytes=first.relayed_bytes,
                           relayed_chunks=first.relayed_chunks)
        await first.aclose()
        if self.gone:
            return None
        answer = refusal_of_request(self._body) or (
            read_relayed(kept) if kept is not None else ResumeRefusal.TOO_LONG)
        if isinstance(answer, ResumeRefusal):
            self.outcome = f"refused: {answer}"
            return None
        attempt = routing.resume(cut, first.relayed_chunks)
        if attempt is None:
            self.outcome = "no target"
            return None
        # the client's stream is silent until the continuation's first content: no
        # longer than any other silence of it (`stream_idle`), or `first_token` if shorter
        bound = min(attempt.first_token_ms or attempt.stream_idle_ms, attempt.stream_idle_ms)
        reply = await self._attempt(replace(attempt, first_token_ms=bound), continuation_body(
            self._body, answer.text, first.relayed_chunks))
        if reply is None:
            return None
        self._record(reply)
        if reply.relay is None or reply.classification.kind is not None:
            await reply.aclose()
            self.outcome = (f"failed: {reply.classification.kind or 'not a stream'} "
                            f"({reply.status})")
            return None
        self.outcome, self.resumed_by = "resumed", attempt.served_by
        self.before_bytes, self.before_chunks = first.relayed_bytes, first.relayed_chunks
        self.reply = reply  # its stream is the one open now
        if self.gone:  # the client left while it was asked for
            reply.relay.client_gone()
        return reply.relay, _Splice(answer.head)

    async def _attempt(self, attempt: Attempt, body: dict[str, Any]) -> UpstreamReply | None:
        """The continuation's attempt; None when the client left meanwhile (then it
        counts `cancelled`). Its time is bounded as any attempt's (`Attempt.timeout_ms`,
        `first_token_ms`)."""
        task = self._task = asyncio.current_task()
        assert task is not None
        self._sending = True
        try:
            return await self._send(attempt, body)
        except asyncio.CancelledError:
            self._routing.cancel()
            if not self.gone:  # not ours: the server's
                raise
            task.uncancel()
            self.outcome = "failed: cancelled"
            return None
        except Exception:
            self._routing.cancel()
            raise
        finally:
            self._sending = False
