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
from collections.abc import Callable
from typing import Any

__all__ = ["watch"]


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
