"""Durations and rates as written in config and scenario files."""

from __future__ import annotations

import re

__all__ = ["MAX_DURATION_MS", "MAX_RATE_PER_S", "format_ms", "parse_duration_ms",
           "parse_rate_per_s"]

#: the longest duration any file or API accepts: 30 days, the cap on retry hints (docs/design.md §2)
MAX_DURATION_MS = 30 * 86_400_000
#: the highest rate a scenario may ask for (a million requests a second is not a test)
MAX_RATE_PER_S = 100_000.0

_UNITS_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
#: ASCII digits only: `\d` would take "٥" or "５", which `float()` reads as 5
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_RATE = re.compile(r"^ *([0-9]+(?:\.[0-9]+)?) */ *(ms|s|m|h) *$")


def parse_duration_ms(value: object, *, longest_ms: int = MAX_DURATION_MS) -> int:
    """Parse `250ms`, `3s`, `1.5s`, `5m`, `1h`, `7d`, `1m30s` or integer milliseconds.

    ASCII digits and units only, with nothing around or between them: `"5 m"`, `" 5m"`,
    `"٥m"` or `"1e3ms"` are refused rather than guessed at (docs/design.md §1). At most
    `longest_ms` (30 days unless a field says otherwise: how long a log is kept may be
    longer). Raises ValueError with a sentence a user can act on.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 3s or 250ms, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 1500.0 is 1500 in JSON's eyes too
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return _bounded(value, value, longest_ms)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration like 3s or 250ms, got {value!r}")
    if not value:
        raise ValueError("expected a duration like 3s or 250ms, got an empty string")
    if any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a duration: write it without spaces, like 5m "
                         "or 1m30s")
    if not value.isascii():
        raise ValueError(f"{value!r} is not a duration: write it in ASCII digits 0-9 and a "
                         "unit (ms, s, m, h, d), like 5m")
    total = 0.0
    pos = 0
    for match in _PART.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS_MS[match.group(2)]
        pos = match.end()
    if pos != len(value) or pos == 0:
        raise ValueError(
            f"{value!r} is not a duration: write a number with a unit (250ms, 3s, 5m, 1h) "
            "or integer milliseconds"
        )
    return _bounded(total, value, longest_ms)


def _bounded(ms: float, value: object, longest_ms: int) -> int:
    # compared before rounding: 400 digits read as infinity, which no int can hold
    if ms > longest_ms:
        days = f"{longest_ms // 86_400_000} days" if longest_ms % 86_400_000 == 0 else (
            format_ms(longest_ms))
        raise ValueError(f"{value!r:.80} is longer than {days}, the longest duration "
                         "accepted")
    return round(ms)


def parse_rate_per_s(value: object) -> float:
    """Parse a rate like `20/s`, `300/m` or a bare number (per second); must be positive."""
    if isinstance(value, bool):
        raise ValueError(f"expected a rate like 20/s, got {value!r}")
    if isinstance(value, int | float):
        rate = float(value)
    elif isinstance(value, str) and (match := _RATE.match(value)):
        rate = float(match.group(1)) * 1000.0 / _UNITS_MS[match.group(2)]
    else:
        raise ValueError(f"{value!r} is not a rate: write it like 20/s or 300/m")
    if not rate > 0:
        raise ValueError(f"a rate must be positive, got {value!r}")
    if rate > MAX_RATE_PER_S:
        raise ValueError(f"{value!r} is over {MAX_RATE_PER_S:,.0f}/s, the highest rate accepted")
    return rate


def format_ms(ms: int) -> str:
    """Render milliseconds compactly for people: 950ms, 12s, 3m20s, 1h05m."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s" if seconds else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
