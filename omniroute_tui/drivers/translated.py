"""The answers of a translated attempt, made the client's (docs/design.md §14): a whole
body or an error through the pair's module, a stream event by event."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..apis import Translation
from ..translate import chat_to_messages, messages_to_chat
from .dialects import Seen, StreamBroken, parsed, sse_event
from .relay import Translate
from .sse import SseEvent

__all__ = ["REQUESTS", "answer_in_client_api", "stream_translator"]

#: a client's request body made the upstream's
REQUESTS: dict[Translation, Callable[[dict[str, Any]], dict[str, Any]]] = {
    Translation.CHAT_TO_MESSAGES: chat_to_messages.request,
    Translation.MESSAGES_TO_CHAT: messages_to_chat.request,
}
_DONE = b"data: [DONE]\n\n"
#: a text delta's chunk around its text, after the stream's head
_TEXT_OPEN = b',"choices":[{"index":0,"delta":{"content":'
_TEXT_CLOSE = b'},"logprobs":null,"finish_reason":null}]}\n\n'


def answer_in_client_api(translation: Translation, status: int, content: bytes, model: str,
                         created: int) -> bytes:
    """A whole answer (success or error) of the upstream, in the client's API."""
    if not 200 <= status < 300:
        error = (chat_to_messages.error if translation is Translation.CHAT_TO_MESSAGES
                 else messages_to_chat.error)
        return json.dumps(error(status, content)).encode()
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        body = {}
    if translation is Translation.CHAT_TO_MESSAGES:
        answer = chat_to_messages.response(body, model, created)
    else:
        answer = messages_to_chat.response(body, model)
    return json.dumps(answer, separators=(",", ":")).encode()


def stream_translator(translation: Translation, body: dict[str, Any], model: str,
                      created: int) -> Translate:
    """The relay's `translate` for one stream: each upstream event in, the client's
    bytes out (a keep-alive comment passes as it came)."""
    if translation is Translation.CHAT_TO_MESSAGES:
        options = body.get("stream_options")
        to_chat = chat_to_messages.StreamToChat(
            model, created, include_usage=isinstance(options, dict)
            and options.get("include_usage") is True)

        head = b""  # `data: {"id":…,"object":…,"created":…,"model":…`, once known
        head_id: object = None  # the chunk id `head` was written for

        def encoded(chunk: dict[str, Any]) -> bytes:
            """A chunk's event, its head (the same in every chunk of a stream) written
            once."""
            nonlocal head, head_id
            if "usage" in chunk or len(chunk) != 5:
                return sse_event(None, chunk)
            if chunk["id"] != head_id:
                head_id = chunk["id"]
                head = sse_event(None, {key: chunk[key] for key in
                                        ("id", "object", "created", "model")})[:-3]
            return (head + b',"choices":'
                    + json.dumps(chunk["choices"], separators=(",", ":")).encode() + b"}\n\n")

        def chat(event: SseEvent, seen: Seen) -> bytes:
            data = _data(event)
            if data is None:
                return event.raw if event.data is None else b""
            kind = data.get("type")
            if not isinstance(kind, str):
                kind = event.name.decode("utf-8", "replace") if event.name else ""
            text = chat_to_messages.text_delta(kind, data)
            if text is not None and head:  # the bytes `encoded` writes for its chunk
                out = head + _TEXT_OPEN + json.dumps(text).encode() + _TEXT_CLOSE
            else:
                out = b"".join(encoded(chunk) for chunk in to_chat.feed(kind, data))
            return out + _DONE if seen is Seen.DONE else out

        return chat
    to_messages = messages_to_chat.StreamToMessages(model)

    def messages(event: SseEvent, seen: Seen) -> bytes:
        if seen is Seen.DONE:
            return b"".join(sse_event(name, data) for name, data in to_messages.finish())
        data = _data(event)
        if data is None:
            return event.raw if event.data is None else b""
        return b"".join(sse_event(name, out) for name, out in to_messages.feed(data))

    return messages


def _data(event: SseEvent) -> dict[str, Any] | None:
    """The event's JSON object, as the relay's dialect read it just before."""
    try:
        return parsed(event)
    except StreamBroken:  # (the relay has checked it: not reached)
        return None
