"""Reading and checking request bodies: size, JSON shape and depth, field types.

Every failure is a `BadRequest` carrying the status and a sentence that names the field, so
the gateway answers a 4xx in OpenAI's error shape and never a 500 of its own.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ..apis import Endpoint

__all__ = ["BadRequest", "ClientGone", "check_body", "check_chat_body", "json_object",
           "parse_json", "read_body"]

MAX_MODEL_CHARS = 256


class BadRequest(Exception):
    def __init__(self, message: str, *, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


class ClientGone(Exception):
    """The client hung up before its request was read whole."""


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes `max_bytes`.

    Our uvicorn protocol refuses such a body at the socket already; this holds the limit
    for the app served any other way (another server, or in-process over ASGI).
    """
    too_large = BadRequest(f"the request body is over {max_bytes} bytes", status=413)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise too_large
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone from None
    return b"".join(chunks)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes, max_depth: int) -> Any:
    """Strict JSON: UTF-8, finite numbers only, nesting at most `max_depth` deep.

    The C parser stops at the interpreter's recursion limit by itself (RecursionError);
    the tighter depth limit is then checked on the parsed value, at a cost proportional
    to its containers, not its bytes.
    """
    try:
        value = json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest(f"the JSON body is nested more than {max_depth} levels deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON ({str(exc)[:120]})") from None
    if _deeper_than(value, max_depth):
        raise BadRequest(f"the JSON body is nested more than {max_depth} levels deep")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def json_object(raw: bytes, max_depth: int) -> dict[str, Any]:
    body = parse_json(raw, max_depth)
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


_NUMBERS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_COUNTS = ("max_tokens", "max_completion_tokens", "n", "seed")


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BadRequest("missing `model`: a route or provider/model name", param="model")
    if len(model) > MAX_MODEL_CHARS:
        raise BadRequest(f"`model` is longer than {MAX_MODEL_CHARS} characters", param="model")
    return model


def _stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("`stream` must be true or false", param="stream")
    return bool(stream)


def _text_or_list(body: dict[str, Any], name: str, what: str) -> None:
    value = body.get(name)
    if not isinstance(value, str | list) or not value:
        raise BadRequest(f"missing `{name}`: {what}", param=name)


def check_body(endpoint: Endpoint, body: dict[str, Any]) -> tuple[str, bool]:
    """The `model` and `stream` of a body of `endpoint` whose main fields have their
    types; the upstream checks the rest (a 400 of its own is passed on)."""
    if endpoint is Endpoint.CHAT:
        return check_chat_body(body)
    model = _model(body)
    if endpoint is Endpoint.COMPLETIONS:
        _text_or_list(body, "prompt", "a string or a list of prompts")
    elif endpoint is Endpoint.EMBEDDINGS:
        _text_or_list(body, "input", "a string or a list of inputs to embed")
        if body.get("stream"):
            raise BadRequest("embeddings do not stream", param="stream")
    elif endpoint is Endpoint.RESPONSES:
        value = body.get("input")
        if value is not None and not isinstance(value, str | list):
            raise BadRequest("`input` must be a string or a list of items", param="input")
    else:  # Anthropic's messages and count_tokens
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("missing `messages`: a list of messages", param="messages")
        if endpoint is Endpoint.MESSAGES:
            limit = body.get("max_tokens")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise BadRequest("`max_tokens` must be a whole number of at least 1",
                                 param="max_tokens")
    return model, _stream(body) if endpoint.streams else False


def check_chat_body(body: dict[str, Any]) -> tuple[str, bool]:
    """The `model` and `stream` of a chat-completions body whose fields have their types."""
    model = _model(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("missing `messages`: a list of chat messages", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"`messages[{i}]` must be an object with a role and content",
                             param=f"messages[{i}]")
        if "role" in message and not isinstance(message["role"], str):
            raise BadRequest(f"`messages[{i}].role` must be a string",
                             param=f"messages[{i}].role")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("`stream` must be true or false", param="stream")
    for name in _NUMBERS:
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise BadRequest(f"`{name}` must be a number", param=name)
    for name in _COUNTS:
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise BadRequest(f"`{name}` must be an integer", param=name)
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise BadRequest("`stop` must be a string or a list of strings", param="stop")
    return model, bool(stream)
