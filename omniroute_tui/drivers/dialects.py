"""The stream dialects the relay reads and the cut events it writes, per API
(docs/design.md §7, §14).

Each API streams its own way: OpenAI's chat and completions send `data:` chunks and end
with `data: [DONE]`; its Responses API sends typed events (`response.output_text.delta`)
and ends with `response.completed`; Anthropic's Messages API sends named events and ends
with `message_stop`. The relay asks the upstream's dialect what each event is (the held
preamble, content, the end) and, when a stream is cut, writes the last event in the
client's API, the shape its SDK raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from ..apis import Endpoint
from ..engine.kinds import StreamCut
from .sse import SseEvent

__all__ = ["Examine", "Seen", "StreamBroken", "error_event", "examine_for", "has_content",
           "parsed", "sse_event"]

_DONE_DATA = b"[DONE]"
#: the most of an upstream's error message passed on in ours
_MESSAGE_CHARS = 300


class Seen(IntEnum):
    """What an event is to the relay (ordered: content and the end begin a stream)."""

    OTHER = 0  # a comment, a keep-alive, a ping
    PREAMBLE = 1  # the role, a message's start: held back until content comes
    CONTENT = 2
    DONE = 3


class StreamBroken(Exception):
    """The stream broke: `cut` says how, `detail` in words."""

    def __init__(self, cut: StreamCut, detail: str) -> None:
        super().__init__(detail)
        self.cut = cut
        self.detail = detail


Examine = Callable[[SseEvent], Seen]


def has_content(chunk: dict[str, Any]) -> bool:
    """Whether an OpenAI chunk carries more than the role: a delta's text, reasoning or
    tool call, a completion's text, a finish reason, or the usage."""
    choices = chunk.get("choices")
    if type(choices) is list:
        for choice in choices:
            if type(choice) is dict:
                if choice.get("finish_reason") or choice.get("text"):
                    return True
                delta = choice.get("delta")
                if type(delta) is dict:
                    for key, part in delta.items():
                        if part and key != "role":
                            return True
    return bool(chunk.get("usage"))


def _upstream_message(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    if error is None and isinstance(chunk.get("response"), dict):  # response.failed
        error = chunk["response"].get("error")
    if error is None:
        error = chunk.get("message")  # the Responses API's error event
    message = error.get("message") if isinstance(error, dict) else error
    text = message if isinstance(message, str) else json.dumps(error)[:_MESSAGE_CHARS]
    return text[:_MESSAGE_CHARS]


#: the last event's data parsed, and that data: a translated stream's event is read by
#: its dialect, then by the translator, one after the other (the relay runs in one task
#: at a time), and parsed once
_last: tuple[bytes | None, dict[str, Any] | None] = (None, None)


def parsed(event: SseEvent) -> dict[str, Any] | None:
    """The event's data as a JSON object, as the dialect read it (parsed once)."""
    data, chunk = _last
    return chunk if data is event.data and data is not None else _object(event)


def _object(event: SseEvent) -> dict[str, Any] | None:
    """The event's data as a JSON object; None for one without data; StreamBroken for
    one that is not SSE or not a JSON object."""
    global _last
    if event.strange:
        raise StreamBroken(StreamCut.BAD_EVENT, "a line that is not SSE")
    data = event.data
    if data is None:
        return None
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        raise StreamBroken(StreamCut.BAD_EVENT, "an event that is not JSON") from None
    if type(chunk) is not dict:
        raise StreamBroken(StreamCut.BAD_EVENT, "an event that is not a JSON object")
    _last = (data, chunk)
    return chunk


def _broken(chunk: dict[str, Any]) -> StreamBroken:
    return StreamBroken(StreamCut.UPSTREAM_ERROR,
                        f"the upstream sent an error: {_upstream_message(chunk)}")


def examine_openai(event: SseEvent) -> Seen:
    """OpenAI's chat completions and completions: chunks, then `[DONE]`."""
    if event.data == _DONE_DATA and not event.strange:
        return Seen.DONE
    chunk = _object(event)
    if chunk is None:
        return Seen.OTHER
    if "error" in chunk or event.name == b"error":
        raise _broken(chunk)
    return Seen.CONTENT if has_content(chunk) else Seen.PREAMBLE


#: the Responses API's events that end a stream, and those that break it
_RESPONSES_DONE = frozenset({"response.completed", "response.incomplete"})
_RESPONSES_ERROR = frozenset({"error", "response.failed"})
_RESPONSES_PREAMBLE = frozenset({"response.created", "response.in_progress", "response.queued"})


def examine_responses(event: SseEvent) -> Seen:
    """OpenAI's Responses API: typed events, then `response.completed` (no `[DONE]`)."""
    chunk = _object(event)
    if chunk is None:
        return Seen.OTHER
    kind = chunk.get("type")
    if kind in _RESPONSES_ERROR or event.name in (b"error", b"response.failed"):
        raise _broken(chunk)
    if kind in _RESPONSES_DONE:
        return Seen.DONE
    if kind in _RESPONSES_PREAMBLE or not isinstance(kind, str):
        return Seen.PREAMBLE
    # an item or a part added is still before the first token; a delta or a done is not
    return Seen.PREAMBLE if kind.endswith(".added") else Seen.CONTENT


_ANTHROPIC_PREAMBLE = frozenset({"message_start", "content_block_start"})
_ANTHROPIC_CONTENT = frozenset({"content_block_delta", "content_block_stop", "message_delta"})


def examine_anthropic(event: SseEvent) -> Seen:
    """Anthropic's Messages API: named events, then `message_stop`."""
    chunk = _object(event)
    if chunk is None:
        return Seen.OTHER
    kind = chunk.get("type")
    if kind == "error" or event.name == b"error":
        raise _broken(chunk)
    if kind == "message_stop":
        return Seen.DONE
    if kind in _ANTHROPIC_CONTENT:
        return Seen.CONTENT
    if kind in _ANTHROPIC_PREAMBLE:
        return Seen.PREAMBLE
    return Seen.OTHER  # ping, and the event types Anthropic may add (its docs ask so)


_EXAMINE: dict[Endpoint, Examine] = {
    Endpoint.CHAT: examine_openai, Endpoint.COMPLETIONS: examine_openai,
    Endpoint.RESPONSES: examine_responses, Endpoint.MESSAGES: examine_anthropic,
}


def examine_for(upstream: Endpoint) -> Examine:
    """How to read the stream of an upstream endpoint."""
    return _EXAMINE[upstream]


def sse_event(name: str | None, body: dict[str, Any]) -> bytes:
    """One SSE event: its `event:` line when named, its JSON `data:` line, a blank line."""
    head = b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def error_event(client: Endpoint, cut: StreamCut, detail: str, relayed_chunks: int) -> bytes:
    """The event a cut stream ends with, in the client's API: the shape its SDK raises."""
    message = f"the stream broke after {relayed_chunks} chunk(s) of the answer: {detail}"
    if client is Endpoint.MESSAGES:
        return sse_event("error", {"type": "error", "error": {"type": "api_error",
                                                              "message": message}})
    if client is Endpoint.RESPONSES:
        return sse_event("error", {"type": "error", "code": "stream_cut", "message": message,
                                   "param": None, "reason": cut.value})
    return sse_event(None, {"error": {"message": message, "type": "upstream_error",
                                      "param": None, "code": "stream_cut",
                                      "reason": cut.value}})
