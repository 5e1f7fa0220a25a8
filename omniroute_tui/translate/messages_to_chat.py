"""An Anthropic Messages client served by an OpenAI-shaped upstream (docs/design.md §14).

`request` makes the client's body a chat-completions body (or raises Untranslatable
naming the field), `response` and `error` make the upstream's answers Anthropic's, and
`StreamToMessages` makes its chunks Anthropic's stream events.
"""

from __future__ import annotations

import json
from typing import Any

from . import Untranslatable

__all__ = ["DROPPED", "StreamToMessages", "error", "request", "response"]

#: hints only, which chat completions have no field for: dropped
DROPPED = frozenset({"metadata", "service_tier", "container", "mcp_servers"})
_REFUSED = {"top_k": "OpenAI's chat completions have no top_k",
            "thinking": "extended thinking has no chat-completions equivalent",
            "citations": "citations have no chat-completions equivalent"}
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
         "function_call": "tool_use", "content_filter": "refusal"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 529: "overloaded_error"}


def _text(value: Any, param: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for i, block in enumerate(value):
            if not isinstance(block, dict) or block.get("type") != "text" \
                    or not isinstance(block.get("text"), str):
                raise Untranslatable(f"{param}[{i}]", "only text blocks are taken here")
            parts.append(block["text"])
        return "\n".join(parts)
    raise Untranslatable(param, "expected a string or a list of text blocks")


def _image(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64" \
            and isinstance(source.get("data"), str) \
            and str(source.get("media_type", "")).startswith("image/"):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif isinstance(source, dict) and source.get("type") == "url" \
            and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise Untranslatable(f"{param}.source", "an image is base64 data or a URL")
    return {"type": "image_url", "image_url": {"url": url}}


def _turn(role: str, content: Any, param: str) -> list[dict[str, Any]]:
    """The chat messages of one Anthropic turn: tool results become `tool` messages."""
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise Untranslatable(param, "expected a string or a list of content blocks")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        where = f"{param}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append(_image(block, where))
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise Untranslatable(where, "a tool_use block needs an id and a name")
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
        elif kind == "tool_result" and role == "user":
            if not isinstance(block.get("tool_use_id"), str):
                raise Untranslatable(f"{where}.tool_use_id", "a tool result needs its id")
            text = _text(block.get("content", ""), f"{where}.content")
            if block.get("is_error") is True:
                text = f"(the tool failed) {text}"
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": text})
        else:
            raise Untranslatable(f"{where}.type", f"a {str(kind)[:40]!r} block has no "
                                                  "chat-completions equivalent here")
    out = list(results)
    if role == "assistant":
        message: dict[str, Any] = {"role": "assistant", "content": "".join(
            p["text"] for p in parts) or None}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    elif parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts)
                    if only_text else parts})
    return out


def request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body of a Messages API body; Untranslatable for a field chat
    completions cannot carry."""
    for name, why in _REFUSED.items():
        if body.get(name) not in (None, False):
            raise Untranslatable(name, why)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Untranslatable("messages", "expected a list of messages")
    out_messages: list[dict[str, Any]] = []
    if body.get("system") is not None:
        out_messages.append({"role": "system", "content": _text(body["system"], "system")})
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Untranslatable(f"{where}.role", "expected user or assistant")
        out_messages += _turn(role, message.get("content"), f"{where}.content")
    out: dict[str, Any] = {"model": body.get("model"), "messages": out_messages}
    if isinstance(body.get("max_tokens"), int):
        out["max_tokens"] = body["max_tokens"]
    for name in ("temperature", "top_p"):
        if isinstance(body.get(name), int | float):
            out[name] = body[name]
    if body.get("stop_sequences"):
        out["stop"] = body["stop_sequences"]
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    tools = body.get("tools")
    if tools:
        out["tools"] = _tools(tools)
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            out["tool_choice"] = choice
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise Untranslatable("tools", "expected a list of tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) \
                or tool.get("type") not in (None, "custom"):
            raise Untranslatable(f"tools[{i}]", "only client tools with a name and an "
                                                "input_schema are taken")
        function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get(
            "input_schema") or {"type": "object", "properties": {}}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if choice is None:
        return None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise Untranslatable("tool_choice", "expected auto, any, none or a tool")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _first_choice(body: dict[str, Any]) -> dict[str, Any]:
    choices = body.get("choices")
    return _dict(choices[0]) if isinstance(choices, list) and choices else {}


def _count(usage: Any, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if type(value) is int and value >= 0 else 0


def response(body: dict[str, Any], model: str) -> dict[str, Any]:
    """The Anthropic message of a chat completion (never raises)."""
    if not isinstance(body, dict):
        body = {}
    choice = _first_choice(body)
    message = _dict(choice.get("message"))
    content: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (ValueError, TypeError, RecursionError):
            arguments = {}
        content.append({"type": "tool_use", "id": str(call.get("id", "")),
                        "name": str(function.get("name", "")),
                        "input": arguments if isinstance(arguments, dict) else {}})
    usage = body.get("usage")
    return {"id": f"msg_{body.get('id', '')}", "type": "message", "role": "assistant",
            "model": model, "content": content,
            "stop_reason": _STOP.get(str(choice.get("finish_reason")), "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": _count(usage, "prompt_tokens"),
                      "output_tokens": _count(usage, "completion_tokens")}}


def error(status: int, body: bytes | str | dict[str, Any] | None) -> dict[str, Any]:
    """Anthropic's error body for an OpenAI error answer (never raises)."""
    data: Any = body
    if isinstance(body, bytes | str):
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            data = None
    inner = data.get("error") if isinstance(data, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return {"type": "error", "error": {
        "type": _ERROR_TYPES.get(status, "api_error"),
        "message": message if isinstance(message, str) else f"the upstream answered {status}"}}


class StreamToMessages:
    """A chat-completions stream's chunks, as Anthropic's stream events."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._started = False
        self._block: tuple[str, int] | None = None  # ("text" | "tool", its key), open
        self._index = -1
        self._stop: str | None = None
        self._usage = {"input_tokens": 0, "output_tokens": 0}
        self._done = False

    def _start(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if self._started:
            return []
        self._started = True
        return [("message_start", {"type": "message_start", "message": {
            "id": f"msg_{chunk.get('id', '')}", "type": "message", "role": "assistant",
            "model": self.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": dict(self._usage)}})]

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        if self._block is None:
            return []
        self._block = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _open(self, key: tuple[str, int], block: dict[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        if self._block == key:
            return []
        out = self._close()
        self._block = key
        self._index += 1
        return out + [("content_block_start", {"type": "content_block_start",
                                               "index": self._index, "content_block": block})]

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if not isinstance(chunk, dict):
            return []
        out = self._start(chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = {"input_tokens": _count(usage, "prompt_tokens"),
                           "output_tokens": _count(usage, "completion_tokens")}
        choice = _first_choice(chunk)
        delta = _dict(choice.get("delta"))
        text = delta.get("content")
        if isinstance(text, str) and text:
            out += self._open(("text", 0), {"type": "text", "text": ""})
            out.append(("content_block_delta", {"type": "content_block_delta",
                                                "index": self._index,
                                                "delta": {"type": "text_delta", "text": text}}))
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            key = ("tool", index if isinstance(index, int) else 0)
            function = _dict(call.get("function"))
            out += self._open(key, {"type": "tool_use", "id": str(call.get("id", "")),
                                    "name": str(function.get("name", "")), "input": {}})
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                out.append(("content_block_delta", {
                    "type": "content_block_delta", "index": self._index,
                    "delta": {"type": "input_json_delta", "partial_json": arguments}}))
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self._stop = _STOP.get(finish, "end_turn")
        return out

    def finish(self) -> list[tuple[str, dict[str, Any]]]:
        """The events that end the message (at the upstream's `[DONE]`)."""
        if self._done:
            return []
        self._done = True
        out = self._start({}) + self._close()
        return out + [
            ("message_delta", {"type": "message_delta", "delta": {
                "stop_reason": self._stop or "end_turn", "stop_sequence": None},
                "usage": dict(self._usage)}),
            ("message_stop", {"type": "message_stop"})]
