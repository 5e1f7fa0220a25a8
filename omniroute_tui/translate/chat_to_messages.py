"""An OpenAI chat-completions client served by an Anthropic upstream (docs/design.md §14).

`request` makes the client's body a Messages API body (or raises Untranslatable naming
the field), `response` and `error` make Anthropic's answers chat completions, and
`StreamToChat` makes its stream's events chat chunks.
"""

from __future__ import annotations

import json
from typing import Any

from . import Untranslatable

__all__ = ["DEFAULT_MAX_TOKENS", "DROPPED", "StreamToChat", "error", "request", "response",
           "text_delta"]

#: Anthropic requires `max_tokens`; a chat request may leave it out
DEFAULT_MAX_TOKENS = 4096
#: hints only, which Anthropic has no field for: dropped, the answer is still right
DROPPED = frozenset({"seed", "presence_penalty", "frequency_penalty", "logit_bias",
                     "parallel_tool_calls", "stream_options", "store", "metadata",
                     "service_tier", "user", "prompt_cache_key", "safety_identifier",
                     "reasoning_effort", "verbosity"})
#: fields whose meaning would be lost: the target is not served
_REFUSED = {"logprobs": "Anthropic's API has no log probabilities",
            "top_logprobs": "Anthropic's API has no log probabilities",
            "audio": "Anthropic's API has no audio output",
            "modalities": "Anthropic's API answers in text only",
            "prediction": "Anthropic's API has no predicted outputs",
            "web_search_options": "Anthropic's web search is a tool of its own",
            "functions": "the legacy functions field: send tools",
            "function_call": "the legacy function_call field: send tool_choice"}
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
           "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "invalid_request_error",
                429: "rate_limit_error"}


def _text(value: Any, param: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise Untranslatable(f"{param}[{i}]", "only text parts are taken here")
            parts.append(part["text"])
        return "\n".join(parts)
    if value is None:
        return ""
    raise Untranslatable(param, "expected a string or a list of text parts")


def _image(url: Any, param: str) -> dict[str, Any]:
    if not isinstance(url, str):
        raise Untranslatable(param, "an image_url's url must be a string")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[5:].split(";")[0]
        if ";base64" not in head or not media.startswith("image/"):
            raise Untranslatable(param, "a data URL image must be base64 image data")
        return {"type": "image", "source": {"type": "base64", "media_type": media,
                                            "data": data}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise Untranslatable(param, "an image is a data: URL or an http(s) URL")


def _user_content(value: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        raise Untranslatable(param, "expected a string or a list of content parts")
    blocks = []
    for i, part in enumerate(value):
        where = f"{param}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            blocks.append(_image(image.get("url") if isinstance(image, dict) else image,
                                 f"{where}.image_url"))
        else:
            raise Untranslatable(f"{where}.type", f"a {str(kind)[:40]!r} part has no "
                                                  "Anthropic equivalent")
    return blocks


def _tool_calls(calls: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise Untranslatable(param, "expected a list of tool calls")
    blocks = []
    for i, call in enumerate(calls):
        where = f"{param}[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str) \
                or not isinstance(function.get("name"), str):
            raise Untranslatable(where, "a tool call needs an id and a function name")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (ValueError, TypeError, RecursionError):
            raise Untranslatable(f"{where}.function.arguments",
                                 "the arguments are not JSON") from None
        if not isinstance(arguments, dict):
            raise Untranslatable(f"{where}.function.arguments",
                                 "the arguments must be a JSON object")
        blocks.append({"type": "tool_use", "id": call["id"], "name": function["name"],
                       "input": arguments})
    return blocks


def _append(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add a turn; Anthropic's turns alternate, so one of the same role is merged."""
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def request(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages API body of a chat-completions body; Untranslatable for a field
    Anthropic cannot carry."""
    for name in body:
        if name in _REFUSED and body[name] not in (None, False):
            raise Untranslatable(name, _REFUSED[name])
    n = body.get("n")
    if n not in (None, 1):
        raise Untranslatable("n", "Anthropic answers one choice a request")
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        raise Untranslatable("response_format", "Anthropic's API has no JSON mode")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Untranslatable("messages", "expected a list of messages")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise Untranslatable(where, "expected an object")
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            system.append(_text(content, f"{where}.content"))
        elif role == "user":
            _append(turns, "user", _user_content(content, f"{where}.content"))
        elif role == "assistant":
            blocks = []
            text = _text(content, f"{where}.content")
            if text:
                blocks.append({"type": "text", "text": text})
            if message.get("tool_calls"):
                blocks += _tool_calls(message["tool_calls"], f"{where}.tool_calls")
            _append(turns, "assistant", blocks)
        elif role == "tool":
            call = message.get("tool_call_id")
            if not isinstance(call, str):
                raise Untranslatable(f"{where}.tool_call_id", "a tool result needs its call id")
            _append(turns, "user", [{"type": "tool_result", "tool_use_id": call,
                                     "content": _text(content, f"{where}.content")}])
        else:
            raise Untranslatable(f"{where}.role", f"the role {str(role)[:40]!r} has no "
                                                  "Anthropic equivalent")
    out: dict[str, Any] = {"model": body.get("model"), "messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    out["max_tokens"] = limit if type(limit) is int and limit > 0 else DEFAULT_MAX_TOKENS
    temperature = body.get("temperature")
    if temperature is not None:
        if type(temperature) not in (int, float) or not 0 <= temperature <= 1:
            raise Untranslatable("temperature", "Anthropic takes a temperature from 0 to 1")
        out["temperature"] = temperature
    if isinstance(body.get("top_p"), int | float):
        out["top_p"] = body["top_p"]
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        out["stop_sequences"] = stop
    elif stop is not None:
        raise Untranslatable("stop", "expected a string or a list of strings")
    if body.get("stream") is True:
        out["stream"] = True
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
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise Untranslatable(f"tools[{i}]", "only function tools are taken")
        entry: dict[str, Any] = {"name": function["name"], "input_schema": function.get(
            "parameters") or {"type": "object", "properties": {}}}
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        out.append(entry)
    return out


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice is None or choice == "auto":
        return {"type": "auto"} if choice else None
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return {"type": "tool", "name": function["name"]}
    raise Untranslatable("tool_choice", "expected auto, none, required or a function")


def _usage(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}

    def count(name: str) -> int:
        value = usage.get(name)
        return value if type(value) is int and value >= 0 else 0

    prompt = (count("input_tokens") + count("cache_read_input_tokens")
              + count("cache_creation_input_tokens"))
    completion = count("output_tokens")
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def response(body: dict[str, Any], model: str, created: int) -> dict[str, Any]:
    """The chat completion of an Anthropic message (never raises)."""
    if not isinstance(body, dict):
        body = {}
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    content = body.get("content")
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": {
                "name": str(block.get("name", "")),
                "arguments": json.dumps(block.get("input") or {})}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    return {"id": f"chatcmpl-{body.get('id', '')}", "object": "chat.completion",
            "created": created, "model": model, "choices": [{
                "index": 0, "message": message, "logprobs": None,
                "finish_reason": _FINISH.get(str(body.get("stop_reason")), "stop")}],
            "usage": _usage(body.get("usage"))}


def error(status: int, body: bytes | str | dict[str, Any] | None) -> dict[str, Any]:
    """OpenAI's error body for an Anthropic error answer (never raises)."""
    data: Any = body
    if isinstance(body, bytes | str):
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            data = None
    inner = data.get("error") if isinstance(data, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    kind = inner.get("type") if isinstance(inner, dict) else None
    return {"error": {
        "message": message if isinstance(message, str) else f"the upstream answered {status}",
        "type": _ERROR_TYPES.get(status, "api_error" if status >= 500 else
                                 "invalid_request_error"),
        "param": None, "code": kind if isinstance(kind, str) else None}}


def text_delta(event_type: str, data: dict[str, Any]) -> str | None:
    """The text an event adds to the answer, when it is a text delta (most events of a
    stream), else None."""
    if event_type != "content_block_delta":
        return None
    delta = data.get("delta")
    if isinstance(delta, dict) and delta.get("type") == "text_delta":
        text = delta.get("text")
        return text if isinstance(text, str) else None
    return None


class StreamToChat:
    """An Anthropic stream's events, as chat-completion chunks."""

    def __init__(self, model: str, created: int, include_usage: bool = False) -> None:
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.id = "chatcmpl-"
        self._usage: dict[str, Any] = {}
        self._tools: dict[int, int] = {}  # Anthropic block index -> tool call index
        self._finish: str | None = None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": delta,
                                                  "logprobs": None, "finish_reason": finish}]}

    def feed(self, event_type: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        if not isinstance(data, dict):
            return []
        if event_type == "message_start":
            message = data.get("message")
            message = message if isinstance(message, dict) else {}
            self.id = f"chatcmpl-{message.get('id', '')}"
            if isinstance(message.get("usage"), dict):
                self._usage.update(message["usage"])
            return [self._chunk({"role": "assistant", "content": ""})]
        index = data.get("index")
        if type(index) is not int:  # a block's index: anything else names no block
            index = -1
        if event_type == "content_block_start":
            block = data.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                call = self._tools[index] = len(self._tools)
                return [self._chunk({"tool_calls": [{
                    "index": call, "id": str(block.get("id", "")), "type": "function",
                    "function": {"name": str(block.get("name", "")), "arguments": ""}}]})]
            return []
        if event_type == "content_block_delta":
            text = text_delta(event_type, data)
            if text is not None:
                return [self._chunk({"content": text})]
            delta = data.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            if delta.get("type") == "input_json_delta" and index in self._tools:
                return [self._chunk({"tool_calls": [{"index": self._tools[index], "function": {
                    "arguments": str(delta.get("partial_json", ""))}}]})]
            return []
        if event_type == "message_delta":
            delta = data.get("delta")
            stop = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(data.get("usage"), dict):
                self._usage.update(data["usage"])
            self._finish = _FINISH.get(str(stop), "stop")
            return [self._chunk({}, self._finish)]
        if event_type == "message_stop":
            if self.include_usage:
                return [{"id": self.id, "object": "chat.completion.chunk",
                         "created": self.created, "model": self.model, "choices": [],
                         "usage": _usage(self._usage)}]
            return []
        return []  # ping, content_block_stop, and the events Anthropic may add
