"""Rate-limit headers as the routing core reads them: a typed value and its parser.

Providers say how much of a key's rate limit is left with every answer
(`x-ratelimit-remaining-requests`, `anthropic-ratelimit-requests-remaining`, ...). The
driver parses them here and hands the value to the core with the attempt's outcome; the
`headroom` strategy orders a provider's keys by it (docs/design.md §7). The parser never
raises: a value it cannot read, a negative count or an absurdly large one is ignored.

Anthropic counts input and output tokens apart (`anthropic-ratelimit-input-tokens-*`,
`-output-tokens-*`); without its plain `-tokens-*` headers, the tokens dimension is the
one of the two that runs out first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..engine.values import value

__all__ = ["MAX_COUNT", "MAX_RESET_MS", "RateLimitInfo", "parse_rate_limits"]

#: counts above this are not a real limit (a garbage header): ignored
MAX_COUNT = 10**12
#: resets further away than this are ignored (the longest real windows are a day)
MAX_RESET_MS = 7 * 24 * 3_600_000
_MAX_TEXT = 64  # longer header values are not read at all

#: (dimension, field, header) for every header read; the first one present wins
_HEADERS = (
    ("requests", "remaining", ("x-ratelimit-remaining-requests",
                               "anthropic-ratelimit-requests-remaining")),
    ("requests", "limit", ("x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit")),
    ("requests", "reset", ("x-ratelimit-reset-requests", "anthropic-ratelimit-requests-reset")),
    ("tokens", "remaining", ("x-ratelimit-remaining-tokens",
                             "anthropic-ratelimit-tokens-remaining")),
    ("tokens", "limit", ("x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit")),
    ("tokens", "reset", ("x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset")),
)
#: Anthropic's split token limits, read when no plain tokens header was
_SPLIT_TOKENS = ("anthropic-ratelimit-input-tokens", "anthropic-ratelimit-output-tokens")
# ASCII digits only: `\d` and float() also read "١٢" or "１２" as 12, which no provider
# writes (a count with them was already refused)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@value
class RateLimitInfo:
    """What one answer said about its key's limits; None where it said nothing usable.
    Resets are durations from the answer (ms)."""

    requests_remaining: int | None = None
    requests_limit: int | None = None
    requests_reset_ms: int | None = None
    tokens_remaining: int | None = None
    tokens_limit: int | None = None
    tokens_reset_ms: int | None = None

    @property
    def empty(self) -> bool:
        return self.requests_remaining is None and self.tokens_remaining is None


def _count(text: str) -> int | None:
    text = text.strip()
    if not text.isascii() or not text.isdigit():
        return None  # negative, fractional, garbage
    count = int(text)
    return count if count <= MAX_COUNT else None


def _reset_ms(text: str, now_epoch_ms: int | None) -> int | None:
    """`1s`, `6m0s`, `20ms`, `1h2m3.5s`, plain seconds (`12`, `0.5`), or an RFC 3339
    time (Anthropic's; read against `now_epoch_ms`, ignored without it)."""
    text = text.strip()
    ms: float | None = None
    if _NUMBER.fullmatch(text):
        ms = float(text) * 1000
    elif text and _DURATION_PART.sub("", text) == "":
        unit = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
        ms = sum(float(n) * unit[u] for n, u in _DURATION_PART.findall(text))
    elif now_epoch_ms is not None and "T" in text:
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
        ms = when.timestamp() * 1000 - now_epoch_ms
        if ms < 0:
            ms = 0.0  # already passed: the window has reset
    if ms is None or not math.isfinite(ms) or ms < 0 or ms > MAX_RESET_MS:
        return None
    return math.ceil(ms)


def _scarcer_tokens(lowered: Mapping[str, str], now_epoch_ms: int | None
                    ) -> dict[str, int]:
    """The input or the output tokens' (remaining, limit, reset), whichever has the smaller
    share of its limit left (the smaller count when a limit is unknown)."""
    split: list[tuple[int, int | None, int | None]] = []
    for prefix in _SPLIT_TOKENS:
        text = lowered.get(f"{prefix}-remaining")
        remaining = _count(text) if text is not None else None
        if remaining is None:
            continue
        text = lowered.get(f"{prefix}-limit")
        limit = _count(text) if text is not None else None
        text = lowered.get(f"{prefix}-reset")
        split.append((remaining, limit or None,
                      _reset_ms(text, now_epoch_ms) if text is not None else None))
    if not split:
        return {}
    if all(limit is not None for _, limit, _ in split):
        remaining, limit, reset = min(split, key=lambda t: t[0] / (t[1] or 1))
    else:
        remaining, limit, reset = min(split, key=lambda t: t[0])
    found = {"tokens_remaining": remaining}
    if limit is not None:
        found["tokens_limit"] = limit
    if reset is not None:
        found["tokens_reset_ms"] = reset
    return found


def parse_rate_limits(headers: Mapping[str, Any], now_epoch_ms: int | None = None
                      ) -> RateLimitInfo | None:
    """The rate-limit headers of an answer, or None when it has none usable. Header names
    are matched case-insensitively; anything unreadable is left out, never raised."""
    try:
        lowered = {str(k).lower(): v for k, v in headers.items()
                   if isinstance(v, str) and len(v) <= _MAX_TEXT}
    except Exception:  # a hostile mapping must not fail the request
        return None
    found: dict[str, int] = {}
    for dimension, what, names in _HEADERS:
        for name in names:
            text = lowered.get(name)
            if text is None:
                continue
            number = _reset_ms(text, now_epoch_ms) if what == "reset" else _count(text)
            if number is not None:
                found[f"{dimension}_{what}{'_ms' if what == 'reset' else ''}"] = number
                break
    if not any(field.startswith("tokens_") for field in found):
        found.update(_scarcer_tokens(lowered, now_epoch_ms))
    info = RateLimitInfo(**found)
    return None if info.empty else info
