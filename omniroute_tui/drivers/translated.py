"""The answers of a translated attempt, made the client's (docs/design.md §14): a whole
body or an error through the pair's module, a stream event by event."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..apis import Translation
from ..translate import chat_to_messages, messages_to_chat
from .dialects import Seen
from .relay import Translate
from .sse import SseEvent

__all__ = ["REQUESTS", "answer_in_client_api", "stream_translator"]

#: a client's request body made the upstream's
REQUESTS: dict[Translation, Callable[[dict[str, Any]], dict[str, Any]]] = {
    Translation.CHAT_TO_MESSAGES: chat_to_messages.request,
    Translation.MESSAGES_TO_CHAT: messages_to_chat.request,
}
_DONE = b"data: [DONE]\n\n"


def _sse(name: str | None, data: dict[str, Any]) -> bytes:
    head = b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


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

        def chat(event: SseEvent, seen: Seen) -> bytes:
            data = _data(event)
            if data is None:
                return event.raw if event.data is None else b""
            name = event.name.decode("utf-8", "replace") if event.name else ""
            out = b"".join(_sse(None, chunk) for chunk in to_chat.feed(
                str(data.get("type", name)), data))
            return out + _DONE if seen is Seen.DONE else out

        return chat
    to_messages = messages_to_chat.StreamToMessages(model)

    def messages(event: SseEvent, seen: Seen) -> bytes:
        if seen is Seen.DONE:
            return b"".join(_sse(name, data) for name, data in to_messages.finish())
        data = _data(event)
        if data is None:
            return event.raw if event.data is None else b""
        return b"".join(_sse(name, out) for name, out in to_messages.feed(data))

    return messages


def _data(event: SseEvent) -> dict[str, Any] | None:
    """The event's JSON object (the relay checked it is one before asking)."""
    if event.data is None:
        return None
    try:
        data = json.loads(event.data)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
