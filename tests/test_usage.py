"""An answer's `usage`, read from its last `"usage"` key alone: the counts when they are
whole and in range, None for anything else, whatever the rest of the body holds."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.drivers.usage import MAX_TOKENS, Usage, usage_of


def body(usage: object, content: str = "hello") -> bytes:
    return json.dumps({"id": "x", "choices": [{"message": {"content": content}}],
                       "usage": usage}).encode()


def test_openai_and_anthropic_counts() -> None:
    assert usage_of(body({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                          "prompt_tokens_details": {"cached_tokens": 4}})) == Usage(12, 3)
    assert usage_of(body({"input_tokens": 7, "output_tokens": 9})) == Usage(7, 9)
    # a stream's last chunk, as the relay would hand it over
    chunk = b'{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,' \
            b'"completion_tokens":2}}'
    assert usage_of(chunk) == Usage(5, 2)


@pytest.mark.parametrize("usage", [
    None, [], "12", {"prompt_tokens": 1}, {"prompt_tokens": "1", "completion_tokens": 2},
    {"prompt_tokens": True, "completion_tokens": 2}, {"prompt_tokens": 1.5,
                                                      "completion_tokens": 2},
    {"prompt_tokens": -1, "completion_tokens": 2},
    {"prompt_tokens": MAX_TOKENS + 1, "completion_tokens": 2}])
def test_anything_but_two_whole_counts_is_none(usage: object) -> None:
    assert usage_of(body(usage)) is None


@pytest.mark.parametrize("raw", [
    b"", b"not json", b'{"usage"', b'{"usage": ', b'{"usage": {"prompt_tokens": 1,',
    b'{"usage" {"prompt_tokens": 1, "completion_tokens": 2}}',
    b'{"usage": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"usage": {"prompt_tokens": 1, "completion_tokens": 2, "x": "\xff"}}',
    b'{"usage": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}"])
def test_malformed_bodies_are_none(raw: bytes) -> None:
    assert usage_of(raw) is None


def test_the_word_usage_in_the_answers_text_is_not_its_usage() -> None:
    text = 'the "usage": {"prompt_tokens": 999, "completion_tokens": 999} of it'
    assert usage_of(body({"prompt_tokens": 1, "completion_tokens": 2}, text)) == Usage(1, 2)
    assert usage_of(json.dumps({"choices": [{"message": {"content": text}}]}).encode()) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)),
       st.text())
def test_any_json_body_gives_counts_or_none_and_never_raises(value: object, text: str) -> None:
    usage = usage_of(body(value, text))
    assert usage is None or (0 <= usage.prompt_tokens <= MAX_TOKENS
                             and 0 <= usage.completion_tokens <= MAX_TOKENS)
    if isinstance(value, dict) and type(value.get("prompt_tokens")) is int \
            and type(value.get("completion_tokens")) is int \
            and 0 <= value["prompt_tokens"] <= MAX_TOKENS \
            and 0 <= value["completion_tokens"] <= MAX_TOKENS:
        assert usage == Usage(value["prompt_tokens"], value["completion_tokens"])
