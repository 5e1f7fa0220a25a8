"""How the console writes times, durations, levels and states in a cell (no Textual
here): the words every pane's module and the events' lines share."""

from __future__ import annotations

from collections.abc import Iterable

from ...config.durations import format_ms
from ...engine.kinds import BreakerState, FailureKind

__all__ = ["AGE_WIDTH", "BREAKER_GLYPHS", "COOLDOWN_KINDS", "FORCED_OPEN", "LONGEST_DURATION",
           "SPARK", "age_text", "clock_text", "cooldown_kind", "countdown_text",
           "event_age", "level_gauge", "longest", "precise_ms", "sparkline"]

#: an OPEN breaker that an operator forced: its own state on screen, not a tripped one
FORCED_OPEN = "FORCED OPEN"
BREAKER_GLYPHS: dict[str, str] = {
    BreakerState.CLOSED: "●", BreakerState.DEGRADED: "◐", BreakerState.OPEN: "○",
    BreakerState.HALF_OPEN: "◌", FORCED_OPEN: "⊘",
}
#: what a cooling connection waits for: backoff (its level), a quota, or the server's hint
COOLDOWN_KINDS = ("backoff", "quota", "hinted")
LONGEST_DURATION = len("720h00m")  # format_ms of the longest deadline there is (30 days)
AGE_WIDTH = len("59m59s")  # a cell's age ("12s"), shown up to an hour (older: ">1h")
SPARK = " ▁▂▃▄▅▆▇█"


def longest(words: Iterable[str]) -> int:
    """The length of the longest of `words`: a column as wide as its vocabulary."""
    return max(len(w) for w in words)


def sparkline(values: Iterable[int]) -> str:
    data = list(values)
    top = max(data, default=0)
    if top <= 0:
        return SPARK[0] * len(data)
    return "".join(SPARK[min(8, -(-v * 8 // top))] for v in data)


def countdown_text(ms: int) -> str:
    """Time left, in whole seconds rounded up (as format_ms): a 5 s rest reads `5s` from
    its start, as a lesson's text says, and `1s` in its last second, never `0s` or `4s`
    while 4.9 s remain."""
    return format_ms(-(-ms // 1000) * 1000)


def precise_ms(ms: int) -> str:
    """A duration to the tenth of a second under a minute (`2.9s`), as a request's steps
    need; longer ones as format_ms."""
    if ms < 1000 or ms >= 60_000:
        return format_ms(ms)
    return f"{ms / 1000:.1f}s"


def level_gauge(level: int, max_level: int, width: int = 8) -> str:
    """`▰▰▱▱▱ 2/5`: a level (backoff, tokens) as a small gauge with its number."""
    width = min(max_level, width)
    filled = round(level * width / max_level) if max_level else 0
    return "▰" * filled + "▱" * (width - filled) + f" {level}/{max_level}"


def age_text(now: int, then: int | None) -> str:
    """How long ago, compactly (`12s`, `4m05s`; `>1h` past an hour) for a cell."""
    if then is None:
        return ""
    ago = max(0, now - then)
    return ">1h" if ago >= 3_600_000 else format_ms(ago)


def event_age(ms: int) -> str:
    """An event line's age in whole seconds (`<1s`, `12s`, `4m05s`, `3h20m`, `12d`): at
    most six characters, whatever the gap (a gateway's history goes back days)."""
    if ms < 1000:
        return "<1s"
    if ms >= 100 * 3_600_000:
        return f"{ms // 86_400_000}d"
    return format_ms(ms)


def clock_text(t_ms: int) -> str:
    """Scenario time as `mm:ss.s`, or epoch milliseconds as wall-clock `HH:MM:SS`."""
    if t_ms >= 10**12:
        import time

        return time.strftime("%H:%M:%S", time.localtime(t_ms / 1000))
    seconds, ms = divmod(t_ms, 1000)
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes:02d}:{seconds:02d}.{ms // 100}"


def cooldown_kind(kind: str, hint_ms: int | None) -> str:
    """What a cooldown waits for, in COOLDOWN_KINDS' words."""
    if kind == FailureKind.QUOTA_EXHAUSTED:
        return "quota"
    return "hinted" if hint_ms is not None else "backoff"
