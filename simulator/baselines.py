"""Baseline policies to compare the engine against (docs/design.md §11): no shared state at all.

`naive` retries each failed attempt at once, up to 3 times, then moves to the next
target; `backoff` does the same with exponential backoff and full jitter between
retries. Both speak the routing core's step protocol (`next_step()` / `record()`), so
the simulator drives them exactly like the engine, and emit the same request, attempt,
result and response events.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from omniroute_tui.clock import Clock
from omniroute_tui.engine.breaker import BreakerAdmission
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import AttemptEvent, RequestEvent, ResponseEvent, ResultEvent
from omniroute_tui.engine.kinds import FailureKind, StreamCut
from omniroute_tui.router.routes import Route, Strategy, Target
from omniroute_tui.router.steps import (
    Attempt,
    AttemptRecord,
    Response,
    Routine,
    StepMachine,
    Wait,
)

__all__ = ["BaselineRouter"]

RETRIES = 3
BACKOFF_BASE_MS = 1000
BACKOFF_CAP_MS = 20_000
_ADMITTED = BreakerAdmission(True, 0)


class BaselineRouter:
    """Routes like a client library without a resilience engine."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        connections: Mapping[str, tuple[str, ...]],
        timeouts_ms: Mapping[str, int],
        clock: Clock,
        bus: EventBus,
        *,
        backoff: bool,
        seed: int,
    ) -> None:
        self.routes = dict(routes)
        self.connections = connections
        self.timeouts_ms = timeouts_ms
        self.clock = clock
        self.bus = bus
        self.backoff = backoff
        self._rng = random.Random(seed)
        self._rotation: dict[str, int] = {}

    def resolve(self, model: str) -> Route:
        route = self.routes.get(model)
        if route is None:
            provider, _, name = model.partition("/")
            route = Route(model, (Target(provider, name),))
        return route

    def start(self, request_id: str, model: str) -> BaselineRouting:
        return BaselineRouting(self, request_id, self.resolve(model))

    def connection_for(self, route: Route, provider: str) -> str:
        conns = self.connections[provider]
        if route.strategy is Strategy.ROUND_ROBIN:
            n = self._rotation.get(provider, 0)
            self._rotation[provider] = n + 1
            return conns[n % len(conns)]
        return conns[0]

    def pause_ms(self, retry: int) -> int:
        """Full jitter: uniform in [0, min(cap, base * 2^retry)]."""
        return int(self._rng.uniform(0, min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2**retry)))


class BaselineRouting(StepMachine):
    def __init__(self, router: BaselineRouter, request_id: str, route: Route) -> None:
        self.router = router
        self.request_id = request_id
        self.route = route
        self.started_at = router.clock.now_ms()
        self.records: list[AttemptRecord] = []
        #: a streamed answer being relayed: its attempt and status, until `end_stream`
        self._stream: tuple[Attempt, int] | None = None
        router.bus.emit(RequestEvent(self.started_at, request_id, route.name))
        super().__init__(self._run())

    def _run(self) -> Routine:
        router = self.router
        status, kind = 503, None
        for target in self.route.targets:
            connection = router.connection_for(self.route, target.provider)
            for retry in range(RETRIES + 1):
                if retry and router.backoff:
                    yield Wait(router.pause_ms(retry - 1))
                now = router.clock.now_ms()
                n = len(self.records) + 1
                attempt = Attempt(self.request_id, n, target.provider, connection,
                                  target.model, False, router.timeouts_ms[target.provider],
                                  now, _ADMITTED)
                router.bus.emit(AttemptEvent(now, self.request_id, n, target.provider,
                                             connection, target.model, False))
                reply = yield attempt
                assert reply is not None  # the step protocol sends every attempt's result
                status, outcome, stream, reason = reply
                kind = outcome.kind
                self.records.append(AttemptRecord(str(target), connection, status, kind))
                if stream and kind is None:  # its result comes when it ends: end_stream
                    self._stream = (attempt, status)
                    yield self._respond(status, attempt)
                    return
                self._result(attempt, status, kind, reason)
                if outcome.kind is None or outcome.kind is FailureKind.CLIENT_ERROR:
                    yield self._respond(status, attempt)
                    return
        yield self._respond(FailureKind.answer_status(status, kind), None)

    def end_stream(self, cut: StreamCut | None = None, *, cancelled: bool = False,
                   relayed_bytes: int = 0, relayed_chunks: int = 0) -> None:
        """The streamed answer has ended: its result event, as the core's (nothing is
        learnt from it here)."""
        if self._stream is None:
            return
        attempt, status = self._stream
        self._stream = None
        kind = (FailureKind.CANCELLED if cancelled else
                None if cut is None else FailureKind.STREAM_CUT)
        self._result(attempt, status, kind, None if cancelled else cut, relayed_bytes,
                     relayed_chunks)

    def _result(self, attempt: Attempt, status: int, kind: FailureKind | None,
                reason: StreamCut | None, relayed_bytes: int | None = None,
                relayed_chunks: int | None = None) -> None:
        end = self.router.clock.now_ms()
        self.router.bus.emit(ResultEvent(end, self.request_id, attempt.n, attempt.provider,
                                         attempt.connection, attempt.model, status, kind,
                                         end - attempt.started_at, reason, relayed_bytes,
                                         relayed_chunks))

    def _respond(self, status: int, upstream: Attempt | None) -> Response:
        now = self.router.clock.now_ms()
        latency = now - self.started_at
        self.router.bus.emit(ResponseEvent(
            now, self.request_id, status, len(self.records), latency, self.waited_ms,
            upstream.served_by if upstream is not None else None,
        ))
        return Response(self.request_id, status, upstream, None, None, tuple(self.records),
                        latency, self.waited_ms)
