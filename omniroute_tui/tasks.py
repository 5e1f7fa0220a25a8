"""Background tasks whose end is said (docs/design.md §9).

A task the event loop runs for us (a server, a follow loop, a write behind) that ends
with nobody awaiting it is silent: its exception waits for a garbage collection to be
printed as "Task exception was never retrieved", if ever, and a loop that merely returns
says nothing at all. `watch` says it at once: one log line with the cause (a traceback
only for an exception that is not among the expected ones, that is, a bug) and a call to
the owner, so that it can show it (`/health`, the console's status) or start it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["SendSoon", "watch"]


def watch(task: asyncio.Task[Any], what: str, *, logger: logging.Logger,
          on_end: Callable[[str], None] | None = None,
          expected: tuple[type[BaseException], ...] = (OSError,),
          forever: bool = True, cause: Callable[[], str | None] | None = None,
          ) -> Callable[[], None]:
    """Say it when `task` ends on its own: with an exception, or (`forever`: it is meant
    to run until its owner stops it) by returning. A cancelled task was ended by someone
    on purpose and is not said. `cause()`, if given, may name why the task ended better
    than its exception does (a server that noticed its socket closed). `on_end` gets the
    sentence that was logged. Returns the call that stops watching: the owner makes it
    before it ends the task in a way that is not a cancellation."""
    watching = True

    def ended(done: asyncio.Task[Any]) -> None:
        if not watching or done.cancelled():
            return
        error = done.exception()
        if error is None and not forever:
            return
        named = cause() if cause is not None else None
        if named is not None:
            reason, bug = named, None
        elif error is None:
            reason, bug = "it stopped on its own", None
        else:
            reason = f"{type(error).__name__}: {error}"
            bug = None if isinstance(error, expected) else error
        sentence = f"{what} ended: {reason}"
        logger.error("%s", sentence, exc_info=bug)
        if on_end is not None:
            try:
                on_end(sentence)
            except Exception:
                logger.exception("telling of the end of %s failed", what)

    def release() -> None:
        nonlocal watching
        watching = False

    task.add_done_callback(ended)
    return release


class SendSoon:
    """What waits is sent together a moment later: `soon(delay_s)` runs `send` as a task
    after `delay_s` (once, however often it is asked meanwhile); `close` sends what is
    left now and waits for the sends in flight, within `timeout_s`. `send` never raises:
    it runs as a task nobody awaits."""

    def __init__(self, send: Callable[[], Awaitable[object]]) -> None:
        self._send = send
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self.closed = False

    def soon(self, delay_s: float) -> None:
        if self._timer is None and not self.closed:
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._start)

    def _start(self) -> None:
        self._timer = None
        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(
            self._send())  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self, timeout_s: float) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self._send()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
