"""Translation between OpenAI chat completions and Anthropic messages (docs/design.md
§14): table-driven from the APIs' documented shapes, both ways, with their streams."""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.translate import Untranslatable, chat_to_messages, messages_to_chat

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_a_chat_with_tools_images_and_results_becomes_a_messages_request() -> None:
    body = {"model": "m", "temperature": 0.5, "max_completion_tokens": 300, "stop": ["X"],
            "tools": [WEATHER_TOOL], "tool_choice": "required", "seed": 7, "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function", "function": {
                        "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "user", "content": "Thanks"}]}
    assert chat_to_messages.request(body) == {
        "model": "m", "system": "Be brief.", "max_tokens": 300, "temperature": 0.5,
        "stop_sequences": ["X"], "tool_choice": {"type": "any"},
        "tools": [{"name": "get_weather", "description": "The weather in a city",
                   "input_schema": WEATHER_TOOL["function"]["parameters"]}],  # type: ignore[index]
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "AAAA"}},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1",
                                               "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "text", "text": "Thanks"}]}]}


@pytest.mark.parametrize(("change", "param"), [
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"temperature": 1.5}, "temperature"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"audio": {"voice": "alloy"}}, "audio"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {
        "name": "f", "arguments": "{not json"}}]}]}, "messages[0].tool_calls[0].function"
                                                      ".arguments"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": "hello"}, "messages"),
    ({"stop": 5}, "stop"), ({"temperature": True}, "temperature"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0]"),
])
def test_what_anthropic_cannot_carry_is_named(change: dict[str, Any], param: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **change}
    with pytest.raises(Untranslatable) as info:
        chat_to_messages.request(body)
    assert info.value.param == param


@pytest.mark.parametrize(("stop_reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("tool_use", "tool_calls"), ("refusal", "content_filter")])
def test_an_anthropic_message_becomes_a_chat_completion(stop_reason: str,
                                                        finish: str) -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
        "stop_reason": stop_reason, "usage": {"input_tokens": 10, "output_tokens": 4,
                                              "cache_read_input_tokens": 2}}
    answer = chat_to_messages.response(message, "claude", 1700)
    assert answer["choices"][0] == {"index": 0, "logprobs": None, "finish_reason": finish,
                                    "message": {"role": "assistant", "content": "Let me check.",
                                                "tool_calls": [{
                                                    "id": "toolu_1", "type": "function",
                                                    "function": {"name": "get_weather",
                                                                 "arguments": json.dumps(
                                                                     {"city": "Oslo"})}}]}}
    assert answer["usage"] == {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}
    assert (answer["id"], answer["created"], answer["model"]) == ("chatcmpl-msg_1", 1700,
                                                                   "claude")


#: Anthropic's documented stream of a tool call (its streaming docs' example, shortened)
TOOL_STREAM = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_014p", "type": "message", "role": "assistant", "content": [],
        "model": "claude", "stop_reason": None, "usage": {"input_tokens": 472,
                                                          "output_tokens": 2}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "Okay"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_01T1", "name": "get_weather", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
        "type": "input_json_delta", "partial_json": "{\"location\":"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
        "type": "input_json_delta", "partial_json": " \"SF\"}"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                       "usage": {"output_tokens": 89}}),
    ("message_stop", {"type": "message_stop"}),
]


def test_an_anthropic_tool_stream_becomes_chat_chunks() -> None:
    stream = chat_to_messages.StreamToChat("claude", 5, include_usage=True)
    chunks = [c for name, data in TOOL_STREAM for c in stream.feed(name, data)]
    deltas = [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) if c["choices"]
              else c["usage"] for c in chunks]
    assert deltas == [
        ({"role": "assistant", "content": ""}, None),
        ({"content": "Okay"}, None),
        ({"tool_calls": [{"index": 0, "id": "toolu_01T1", "type": "function",
                          "function": {"name": "get_weather", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{\"location\":"}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": " \"SF\"}"}}]}, None),
        ({}, "tool_calls"),
        {"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561}]
    assert {c["id"] for c in chunks} == {"chatcmpl-msg_014p"}


def test_a_messages_request_becomes_a_chat_request() -> None:
    body = {"model": "m", "max_tokens": 50, "system": [{"type": "text", "text": "Brief."}],
            "stream": True, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "f"}, "messages": [
                {"role": "user", "content": [{"type": "image", "source": {
                    "type": "base64", "media_type": "image/jpeg", "data": "BBBB"}},
                    {"type": "text", "text": "Look"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                                   "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": "42", "is_error": True}]}]}
    assert messages_to_chat.request(body) == {
        "model": "m", "max_tokens": 50, "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {"name": "f",
                                                    "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "messages": [
            {"role": "system", "content": "Brief."},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}},
                {"type": "text", "text": "Look"}]},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "t1", "type": "function", "function": {"name": "f",
                                                             "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "(the tool failed) 42"}]}
    for field in ("top_k", "thinking"):
        with pytest.raises(Untranslatable) as info:
            messages_to_chat.request({**body, field: {"type": "enabled"}})
        assert info.value.param == field


def test_a_chat_tool_stream_becomes_anthropic_events() -> None:
    stream = messages_to_chat.StreamToMessages("gpt")
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": ""}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "function": {"arguments": "{}"}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}]
    events = [e for chunk in chunks for e in stream.feed(chunk)] + stream.finish()
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert events[4][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f",
                                             "input": {}}
    assert events[7][1] == {"type": "message_delta", "delta": {
        "stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 9, "output_tokens": 3}}
    assert stream.finish() == []  # once


@pytest.mark.parametrize(("status", "kind"), [(400, "invalid_request_error"),
                                              (429, "rate_limit_error"),
                                              (529, "overloaded_error"), (502, "api_error")])
def test_errors_cross_both_ways(status: int, kind: str) -> None:
    openai_error = {"error": {"message": "nope", "type": "x", "param": None, "code": None}}
    assert messages_to_chat.error(status, json.dumps(openai_error).encode()) == {
        "type": "error", "error": {"type": kind, "message": "nope"}}
    anthropic_error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    back = chat_to_messages.error(status, anthropic_error)["error"]
    assert (back["message"], back["code"]) == ("busy", "overloaded_error")


@pytest.mark.parametrize("garbage", [b"", b"<html>", b"[1,2]", b"\xff", b"null",
                                     b'{"error": 5}'])
def test_unreadable_answers_degrade_and_never_raise(garbage: bytes) -> None:
    assert messages_to_chat.error(500, garbage)["error"]["message"] == \
        "the upstream answered 500"
    assert chat_to_messages.error(500, garbage)["error"]["message"] == \
        "the upstream answered 500"
    assert chat_to_messages.response({"content": "x", "usage": [1]}, "m", 0)[
        "choices"][0]["message"]["content"] is None
    assert messages_to_chat.response({"choices": "x"}, "m")["content"] == []


TEXT = st.text(min_size=1, max_size=30)


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), TEXT), min_size=1,
                max_size=8), st.one_of(st.none(), TEXT))
def test_text_turns_survive_a_round_trip(turns: list[tuple[str, str]],
                                         system: str | None) -> None:
    """chat -> messages -> chat keeps every text, in order; only same-role neighbours
    are joined (Anthropic's turns alternate)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": role, "content": text} for role, text in turns]
    there = chat_to_messages.request({"model": "m", "messages": messages})
    back = messages_to_chat.request(there)
    texts = [m["content"] for m in back["messages"]]
    flat = "\n".join(t for t in texts if t)
    assert flat.replace("\n", "") == "".join(
        ([system] if system else []) + [text for _, text in turns]).replace("\n", "")
    roles = [m["role"] for m in back["messages"] if m["role"] != "system"]
    assert all(a != b for a, b in itertools.pairwise(roles))


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["role", "content", "type", "text",
                                                       "tool_calls", "messages", "n"]),
                                      inner, max_size=4), max_leaves=20))
def test_hostile_requests_raise_only_untranslatable(value: Any) -> None:
    body = {"model": "m", "messages": value if isinstance(value, list) else [value],
            "stop": value, "tools": value, "tool_choice": value, "system": value}
    for translate in (chat_to_messages.request, messages_to_chat.request):
        with contextlib.suppress(Untranslatable):
            translate(body)


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.sampled_from(
                           ["type", "index", "delta", "text", "partial_json", "content_block",
                            "message", "usage", "id", "name", "choices", "tool_calls",
                            "function", "arguments", "finish_reason", "stop_reason"]),
                           inner, max_size=5), max_leaves=25)


@given(st.lists(st.tuples(st.sampled_from([
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "other"]), st.dictionaries(
        st.sampled_from(["type", "index", "delta", "content_block", "message", "usage"]),
        JSONISH, max_size=4)), max_size=12),
    st.lists(st.dictionaries(st.sampled_from(["choices", "usage", "id"]), JSONISH,
                             max_size=3), max_size=12))
def test_hostile_streams_never_raise(anthropic_events: list[tuple[str, dict[str, Any]]],
                                     chat_chunks: list[dict[str, Any]]) -> None:
    """An upstream's stream events, whatever they hold, translate to something: the
    relay has checked each is a JSON object, and nothing more."""
    to_chat = chat_to_messages.StreamToChat("m", 0, include_usage=True)
    for name, data in anthropic_events:
        json.dumps(to_chat.feed(name, data))
    to_messages = messages_to_chat.StreamToMessages("m")
    for chunk in chat_chunks:
        json.dumps(to_messages.feed(chunk))
    json.dumps(to_messages.finish())


@pytest.mark.parametrize("value", [[1], "x", None, 5])
def test_a_body_or_event_that_is_not_an_object_translates_to_nothing(value: Any) -> None:
    assert chat_to_messages.response(value, "m", 0)["choices"][0]["message"]["content"] is None
    assert messages_to_chat.response(value, "m")["content"] == []
    assert chat_to_messages.StreamToChat("m", 0).feed("message_start", value) == []
    assert messages_to_chat.StreamToMessages("m").feed(value) == []
