"""Waiting on a condition instead of on the wall clock: I/O tests poll what they need to
see, with a bound that only a broken build reaches."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

Check = Callable[[], object | Awaitable[object]]


async def eventually(check: Check, *, timeout_s: float = 10.0, poll_s: float = 0.01,
                     what: str = "the condition") -> None:
    """Return as soon as `check()` (sync or async) is truthy; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s:g} s")
        await asyncio.sleep(poll_s)


def eventually_sync(check: Callable[[], object], *, timeout_s: float = 10.0,
                    poll_s: float = 0.02, what: str = "the condition") -> None:
    """`eventually` for tests without an event loop (subprocesses, blocking clients)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s:g} s")
        time.sleep(poll_s)
