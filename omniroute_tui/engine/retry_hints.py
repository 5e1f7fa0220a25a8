"""Retry hints read from upstream response headers, and the duration Google's error
bodies carry (docs/design.md §2).

A bad value never raises: garbage, negative or missing values are ignored, and every
value is capped at 30 days.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

__all__ = ["MAX_HINT_MS", "parse_go_duration_ms", "parse_proto_duration_ms", "retry_hint_ms"]

MAX_HINT_MS = 30 * 24 * 3600 * 1000
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
#: a protobuf Duration as JSON writes it: decimal seconds, `s` (ASCII digits only)
_PROTO_DURATION = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?s")
_GO_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}


def _finite_ms(value: float) -> int | None:
    if not math.isfinite(value) or value <= 0:
        return None
    return min(math.ceil(value), MAX_HINT_MS)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_go_duration_ms(text: str) -> int | None:
    """Parse durations like `1s`, `6m0s`, `20ms`, `1h2m3.5s`; a bare number is seconds."""
    text = text.strip()
    if not text or len(text) > 64:
        return None
    bare = _number(text)
    if bare is not None:
        return _finite_ms(bare * 1000)
    total = 0.0
    pos = 0
    for match in _GO_PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _GO_UNIT_MS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        return None
    return _finite_ms(total)


def parse_proto_duration_ms(value: object) -> int | None:
    """Google's `RetryInfo.retryDelay` (`37s`, `0.5s`, `1.000340s`) in ms, or None for
    anything else (a negative, an exponent, a missing `s`, not a string)."""
    if not isinstance(value, str) or len(value) > 32:
        return None
    text = value.strip()
    if _PROTO_DURATION.fullmatch(text) is None:
        return None
    return _finite_ms(float(text[:-1]) * 1000)


def _retry_after_ms(value: str, now_epoch_ms: int | None) -> int | None:
    value = value.strip()
    seconds = _number(value) if len(value) <= 32 else None
    if seconds is not None:
        return _finite_ms(seconds * 1000)
    if now_epoch_ms is None or len(value) > 64:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    try:
        return _finite_ms(when.timestamp() * 1000 - now_epoch_ms)
    except (OverflowError, OSError, ValueError):
        return None


def retry_hint_ms(headers: Mapping[str, str], now_epoch_ms: int | None = None) -> int | None:
    """The server's word on when to come back, in ms, or None.

    `retry-after-ms` is preferred (most precise), then `Retry-After` (seconds or an HTTP
    date, which needs `now_epoch_ms`), then the later of the `x-ratelimit-reset-*` values.
    A non-positive value carries no information and is ignored.
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if (raw := lowered.get("retry-after-ms")) is not None:
        number = _number(raw.strip()) if len(raw) <= 32 else None
        if number is not None and (hint := _finite_ms(number)) is not None:
            return hint
    raw = lowered.get("retry-after")
    if raw is not None and (hint := _retry_after_ms(raw, now_epoch_ms)) is not None:
        return hint
    resets = [
        parse_go_duration_ms(lowered[name])
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if name in lowered
    ]
    known = [hint for hint in resets if hint is not None]
    return max(known) if known else None
