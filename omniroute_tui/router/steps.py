"""What the routing core tells its driver to do next: attempt, wait, or respond."""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import field
from typing import Any

from ..engine.breaker import BreakerAdmission
from ..engine.capacity import Ticket
from ..engine.classify import Classification
from ..engine.kinds import FailureKind, SkipReason, StreamCut
from ..engine.settings import STREAM_IDLE_MS
from ..engine.values import value
from .rate_limits import RateLimitInfo

__all__ = ["Attempt", "AttemptRecord", "Reply", "Response", "Routine", "Skip", "Step",
           "StepMachine", "Wait"]


@value
class Attempt:
    """Send the request to `provider` with `connection` for `model`, within `timeout_ms`;
    a stream's first content within `first_token_ms` (0: no such limit) and its events
    at most `stream_idle_ms` apart (docs/design.md §7)."""

    request_id: str
    n: int
    provider: str
    connection: str
    model: str
    probe: bool
    timeout_ms: int
    started_at: int
    admission: BreakerAdmission = field(repr=False)
    first_token_ms: int = 0
    stream_idle_ms: int = STREAM_IDLE_MS

    @property
    def served_by(self) -> str:
        return f"{self.provider}/{self.connection}/{self.model}"


@value
class Wait:
    """Nothing can be attempted now, but something will be within the admission window.

    `queue`: the request waits in the queue of a full provider (§6); its wait ends early
    when a slot is handed to it: the driver sets `queue.wake` to be told, or checks
    `queue.reserved`, and asks for the next step then."""

    delay_ms: int
    queue: Ticket | None = None


@value
class Skip:
    target: str
    reason: SkipReason
    retry_after_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "reason": self.reason, "retry_after_ms": self.retry_after_ms}


@value
class AttemptRecord:
    target: str
    connection: str
    status: int
    kind: FailureKind | None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "connection": self.connection, "status": self.status,
                "kind": self.kind}


#: the Retry-After of a 429 or 503 when nothing says when to retry
UNKNOWN_RETRY_AFTER_MS = 1000


@value
class Response:
    """The request's outcome.

    When `upstream` is set, the driver forwards that attempt's upstream answer (a success,
    or a client error returned as is); otherwise it sends `status` with `body`.
    """

    request_id: str
    status: int
    upstream: Attempt | None
    body: dict[str, Any] | None
    retry_after_ms: int | None
    attempts: tuple[AttemptRecord, ...]
    latency_ms: int
    waited_ms: int

    @property
    def headers(self) -> dict[str, str]:
        """`Retry-After` in whole seconds, rounded up, when the core knows when to retry;
        a 429 or 503 always carries one: a second when nothing says when (a probe in
        flight on another replica, every key disabled by an operator)."""
        retry_ms = self.retry_after_ms
        if retry_ms is None:
            if self.status not in (429, 503):
                return {}
            retry_ms = UNKNOWN_RETRY_AFTER_MS
        return {"Retry-After": str(max(1, math.ceil(retry_ms / 1000)))}


Step = Attempt | Wait | Response

#: an attempt's result as `record()` hears it: the status, its class, whether it is a
#: stream's start, and what broke a stream (docs/design.md §7)
Reply = tuple[int, Classification, bool, StreamCut | None]
Routine = Generator[Step, Reply | None, None]


class StepMachine:
    """The step protocol over a generator: `next_step()` says what to do, `record()`
    reports an attempt's result, and waits are added up in `waited_ms`.

    The routing core and the simulator's baseline policies both speak it.
    """

    __slots__ = ("_next", "_routine", "waited_ms")

    def __init__(self, routine: Routine) -> None:
        self._routine = routine
        self._next: Step | None = None
        self.waited_ms = 0

    def next_step(self) -> Step:
        """What to do now. After an Attempt, call `record()` before asking again."""
        if self._next is None:
            self._next = next(self._routine)
        step = self._next
        if isinstance(step, Wait):
            self._next = None
            self.waited_ms += step.delay_ms
        elif isinstance(step, Response):
            # done: the suspended generator's frame refers back to this object, a cycle
            # that would keep every finished request alive until the cycle collector runs
            self._routine.close()
        return step

    def record(self, status: int, outcome: Classification,
               rate_limits: RateLimitInfo | None = None, *, stream: bool = False,
               reason: StreamCut | None = None) -> None:
        """Report the attempt's HTTP status (0 for transport errors) and its class, as
        `RequestRouting.record` takes them; the answer's rate limits are for the routing
        core's `headroom` (ignored here)."""
        self._next = self._routine.send((status, outcome, stream, reason))
