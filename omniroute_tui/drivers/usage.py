"""The tokens an upstream answer says it took: its `usage`, read without parsing the rest."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

__all__ = ["MAX_TOKENS", "Usage", "usage_of"]

#: an answer that claims more tokens than this is not believed (nor counted)
MAX_TOKENS = 100_000_000
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_KEY = b'"usage"'
#: the names of the two counts: OpenAI's, then Anthropic's
_NAMES = (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"))


class Usage(NamedTuple):
    """The two counts (a tuple: made at every answer, five times cheaper than a frozen
    dataclass)."""

    prompt_tokens: int
    completion_tokens: int


#: a `Usage` made in C, `_usage(Usage, (prompt, completion))`: the class's own `__new__`
#: is a Python function, called from C, a fifth of `usage_of`'s time
_usage = tuple.__new__


def usage_of(content: bytes, previous: Usage | None = None) -> Usage | None:
    """The `usage` of an answer's JSON body, or of a stream's last chunk (its `data`): the
    object after the body's last `"usage"` key, decoded alone (a body of megabytes is not
    parsed for two numbers; the key inside a string would be escaped, `\\"usage\\"`, and
    is not found). None when there is none or it does not hold two whole counts; an
    Anthropic stream's `message_delta` holds only its output tokens, taken with the
    input tokens of `previous` (its `message_start`'s); an embedding's holds its prompt
    tokens and a total of as many (nothing completed)."""
    at = content.rfind(_KEY)
    if at < 0:
        return None
    start = content.find(b"{", at + len(_KEY))
    if start < 0 or content[at + len(_KEY):start].strip() != b":":
        return None
    try:  # the decoder's scanner itself: `raw_decode` is a Python call around it
        value, _ = _SCAN(content[start:].decode("utf-8"), 0)
    except (ValueError, RecursionError, StopIteration):  # not JSON, not UTF-8, too deep
        return None
    if type(value) is dict:  # most: OpenAI's, in a few steps, without `_counts`' call
        prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
        if (type(prompt) is int and type(completion) is int and 0 <= prompt <= MAX_TOKENS
                and 0 <= completion <= MAX_TOKENS):
            return _usage(Usage, (prompt, completion))
    return _counts(value, previous)


def _counts(value: Any, previous: Usage | None = None) -> Usage | None:
    if not isinstance(value, dict):
        return None
    for prompt_name, completion_name in _NAMES:
        prompt, completion = _count(value.get(prompt_name)), _count(value.get(completion_name))
        if prompt is not None and completion is not None:
            return Usage(prompt, completion)
    output = _count(value.get("output_tokens"))
    if output is not None and previous is not None:
        return Usage(previous.prompt_tokens, output)
    # embeddings: the prompt's tokens and their total, nothing completed
    prompt, total = _count(value.get("prompt_tokens")), _count(value.get("total_tokens"))
    if prompt is not None and total == prompt and "completion_tokens" not in value:
        return Usage(prompt, 0)
    return None


def _count(value: Any) -> int | None:
    """A whole count in range (not a bool, a float or a string of digits), or None."""
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else None
