"""Provider rate limits in the fakes: `limits: {rpm, tpm}` per key, in fixed windows.

Each key (a provider's connection) counts the requests and tokens it accepts in the
current minute of scenario time, `[n * 60 s, (n + 1) * 60 s)`; the counts start again at
each minute's boundary (a fixed window, not a token bucket: a burst at a boundary may take
two minutes' worth within a second, as it may at OpenAI). Every answer of a limited key
says what is left and when the window ends, in OpenAI's headers
(`x-ratelimit-remaining-requests`, `-tokens`, `x-ratelimit-reset-requests`, `-tokens`);
a request the key cannot take gets a 429 with `Retry-After` (the seconds to the window's
end, rounded up) and is not counted. A request costs `REQUEST_TOKENS` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omniroute_tui.config.problems import Path
from omniroute_tui.config.readers import read_mapping, reject_unknown
from omniroute_tui.config.yaml_source import Source

__all__ = ["MAX_RPM", "MAX_TPM", "REQUEST_TOKENS", "WINDOW_MS", "KeyWindow", "RateLimits",
           "read_limits", "reset_text"]

WINDOW_MS = 60_000
#: what one request costs against `tpm` (a short prompt and answer)
REQUEST_TOKENS = 100
#: the largest limits a scenario may declare: far above any provider's tier, and small
#: enough that the headers stay short numbers
MAX_RPM = 10_000_000
MAX_TPM = 10_000_000_000


@dataclass(frozen=True)
class RateLimits:
    """A key's limits per minute; None: that dimension is not limited."""

    rpm: int | None = None
    tpm: int | None = None


def _read_limit(src: Source, value: Any, path: Path, largest: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        src.problem(path, f"expected a whole number of the limit per minute, like 600, got "
                          f"{type(value).__name__} {value!r}"[:200])
        return None
    if value <= 0:
        src.problem(path, f"a limit per minute must be at least 1, got {value}")
        return None
    if value > largest:
        src.problem(path, f"at most {largest:,} a minute, got {value:,}"[:200])
        return None
    return value


def read_limits(src: Source, value: Any, path: Path) -> RateLimits | None:
    """`limits: {rpm: 600, tpm: 90000}` (either or both), each a whole number >= 1."""
    body = read_mapping(src, value, path)
    if body is None:
        return None
    reject_unknown(src, body, path, ("rpm", "tpm"))
    if not body.keys() & {"rpm", "tpm"}:
        src.problem(path, "give rpm (requests a minute), tpm (tokens a minute) or both")
        return None
    rpm = _read_limit(src, body["rpm"], path + ("rpm",), MAX_RPM) if "rpm" in body else None
    tpm = _read_limit(src, body["tpm"], path + ("tpm",), MAX_TPM) if "tpm" in body else None
    if ("rpm" in body and rpm is None) or ("tpm" in body and tpm is None):
        return None
    return RateLimits(rpm, tpm)


def reset_text(ms: int) -> str:
    """A reset time the way OpenAI writes it: `850ms`, `12s`, `12.5s`."""
    if ms < 1000:
        return f"{ms}ms"
    return f"{ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"


class KeyWindow:
    """One key's counts in the current window."""

    __slots__ = ("_requests", "_tokens", "_window", "limits")

    def __init__(self, limits: RateLimits) -> None:
        self.limits = limits
        self._window = -1
        self._requests = 0
        self._tokens = 0

    def _roll(self, t: int) -> None:
        window = t // WINDOW_MS
        if window != self._window:
            self._window, self._requests, self._tokens = window, 0, 0

    def take(self, t: int) -> bool:
        """Count a request at `t` if the key has room for it; False: it is out."""
        self._roll(t)
        rpm, tpm = self.limits.rpm, self.limits.tpm
        if rpm is not None and self._requests >= rpm:
            return False
        if tpm is not None and self._tokens + REQUEST_TOKENS > tpm:
            return False
        self._requests += 1
        self._tokens += REQUEST_TOKENS
        return True

    def retry_after_ms(self, t: int, delay_ms: int = 0) -> int:
        """From the answer to a request at `t`, sent `delay_ms` later, until the window
        of `t` ends (0 when it has already)."""
        return max(0, (t // WINDOW_MS + 1) * WINDOW_MS - t - delay_ms)

    def headers(self, t: int, delay_ms: int) -> dict[str, str]:
        """What is left in the window of a request at `t`, and when it ends, as its answer
        `delay_ms` later says it."""
        self._roll(t)
        reset = reset_text(self.retry_after_ms(t, delay_ms))
        headers: dict[str, str] = {}
        if self.limits.rpm is not None:
            headers["x-ratelimit-limit-requests"] = str(self.limits.rpm)
            headers["x-ratelimit-remaining-requests"] = str(self.limits.rpm - self._requests)
            headers["x-ratelimit-reset-requests"] = reset
        if self.limits.tpm is not None:
            headers["x-ratelimit-limit-tokens"] = str(self.limits.tpm)
            headers["x-ratelimit-remaining-tokens"] = str(self.limits.tpm - self._tokens)
            headers["x-ratelimit-reset-tokens"] = reset
        return headers
