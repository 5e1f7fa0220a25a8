"""Injected clocks: the core reads time only through one of these (milliseconds)."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ElapsedClock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Anything that tells the time in whole milliseconds."""

    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock time as epoch milliseconds, for live routing."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ElapsedClock:
    """Real time in milliseconds since the clock was made: a live run's scenario time."""

    def __init__(self) -> None:
        self._origin = time.monotonic_ns()

    def now_ms(self) -> int:
        return (time.monotonic_ns() - self._origin) // 1_000_000

    def restart(self) -> None:
        """Count from now: a live run restarts its clock once its servers are up."""
        self._origin = time.monotonic_ns()


class ManualClock:
    """A clock that moves only when told to: for tests and the virtual-time simulator."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        """Move forward by `ms` (never backward) and return the new time."""
        if ms < 0:
            raise ValueError("a clock never moves backward")
        self._now += ms
        return self._now

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms`, which must not be earlier than the current time."""
        if now_ms < self._now:
            raise ValueError("a clock never moves backward")
        self._now = now_ms
