"""One replay for a training room (`--serve-room`): the trainer's console runs it and serves
its state the way a gateway's management API does, read-only, so that trainees attach
(`--attach URL`, in a terminal or a browser) and follow the trainer's run.

The room answers only GETs: the state document (the gateway's, plus a `replay` part and
the run's attempts per second so far, for the viewers' herd chart), the event stream (the
gateway's broadcaster, with a `replay` frame whenever pause, speed or the run change), the
recent state changes, the audit and `/health`. A token, when given, guards all but
`/health`; without one, anyone who can reach the address can watch (docs/design.md §12).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config.limits import GatewayLimits
from ..engine.bus import EventBus
from ..engine.events import STATE_CHANGE_CLASSES, Event, OperatorEvent
from ..gateway.app import error_response
from ..gateway.auth import bearer_matches
from ..gateway.events_stream import EventBroadcaster, EventStreamResponse, encode_frame
from ..gateway.server import Listener
from ..state_document import state_document
from .model.backends import SimulationBackend
from .model.lesson_progress import LessonBackend
from .model.views import LIVE_CHART_S, AttemptSeries

__all__ = ["RoomServer", "attempts_document", "replay_document"]

log = logging.getLogger("omniroute.room")

HISTORY_LIMIT = 1000
#: a playing replay says where it is this often (wall seconds), so viewers' clocks keep up
RESYNC_S = 1.0


def replay_document(replay: SimulationBackend, run: int) -> dict[str, Any]:
    """Where the trainer's replay is: what viewers need to show its clock and state; a
    lesson's also which of its steps is shown (0 before the first), of how many."""
    doc: dict[str, Any] = {
        "scenario": replay.title, "now": replay.now_ms(), "speed": replay.speed,
        "paused": replay.paused, "finished": replay.finished,
        "duration_ms": replay.duration_ms, "run": run}
    if isinstance(replay, LessonBackend):
        progress = replay.progress
        doc["lesson"] = {"title": progress.lesson.title, "step": progress.index + 1,
                         "steps": len(progress.lesson.steps)}
    return doc


def attempts_document(series: AttemptSeries, now_ms: int, since_s: int | None = None
                      ) -> dict[str, list[list[int]]]:
    """Each provider's attempts per second over the last LIVE_CHART_S seconds up to
    `now_ms` (or from `since_s`), as `[second, count]` pairs (seconds without attempts
    left out): what a viewer joining late (or again) needs to draw the run so far."""
    end = now_ms // 1000
    since = max(end - LIVE_CHART_S, since_s or 0)
    # the seconds asked for, not the whole series (a frame asks for one or two)
    return {provider: [[second, counts[second]] for second in range(since, end + 1)
                       if counts.get(second)]
            for provider, counts in series.counts.items()}


class RoomServer:
    """Serves the replay the trainer's console runs; `follow()` is told of every paint,
    so a pause, a speed change or a replay from the start reaches the viewers at once."""

    def __init__(self, host: str, port: int, *, token: str | None = None,
                 limits: GatewayLimits | None = None) -> None:
        """`limits`: what one viewer may cost the room, as a gateway's (the scenario's
        `gateway.limits`; the defaults otherwise)."""
        self.host = host
        self.port = port
        self.token = token
        self.bus = EventBus()
        self.events = EventBroadcaster(self.bus)
        self._replay: SimulationBackend | None = None
        self._attempts: AttemptSeries | None = None  # the trainer's, for late viewers
        self._run = 0
        self._last: tuple[object, ...] = ()
        self._last_sent = 0.0
        self._compared_s = 0  # the compared policy's seconds sent in frames from here on
        self._history: deque[Event] = deque(maxlen=HISTORY_LIMIT)
        self._audit: deque[OperatorEvent] = deque(maxlen=HISTORY_LIMIT)
        self.bus.subscribe(self._history.append, *STATE_CHANGE_CLASSES)
        self.bus.subscribe(self._audit.append, OperatorEvent)  # type: ignore[arg-type]
        #: told, once, if the room stops serving before `stop()` (why, as a sentence)
        self.on_end: Callable[[str], None] | None = None
        self.listener = Listener(self.asgi(), host, port, what="the room",
                                 limits=limits or GatewayLimits(), graceful_s=2, logger=log,
                                 on_end=self._ended, closing=self.events.close)
        self.server = self.listener.server

    @property
    def viewers(self) -> int:
        """The viewers following now: each has the event stream open (a browser tab too,
        through the console it runs)."""
        return self.events.subscribers

    def _ended(self, failure: str) -> None:
        if self.on_end is not None:
            self.on_end(failure)

    @property
    def url(self) -> str:
        return self.listener.url

    @property
    def failure(self) -> str | None:
        """Why the room stopped serving on its own (None: it serves, or was stopped)."""
        return self.listener.failure

    # -- following the trainer's replay -----------------------------------------------------

    def follow(self, replay: SimulationBackend, attempts: AttemptSeries | None = None
               ) -> None:
        """Called on every paint of the trainer's console with its replay (and the
        attempts its herd chart draws): a new replay (from the start) ends every stream
        with a `replay` frame of the new run, so viewers mark it, reconnect and read its
        state; a change of pause or speed, a step, or a second of play is a `replay`
        frame."""
        self._attempts = attempts
        if replay is not self._replay:
            if self._replay is not None:
                self._run += 1
                self._history.clear()
                self._audit.clear()
                moved = json.dumps(replay_document(replay, self._run), separators=(",", ":"))
                self.events.close(final=encode_frame("replay", moved))
            self._replay = replay
            self._compared_s = 0
            replay.run.bus.subscribe(self._relay(replay))
        doc = replay_document(replay, self._run)
        compared = replay.comparison
        if compared is not None:  # the seconds of the compared policy since the last frame
            doc["compared"] = {"policy": compared.policy, "attempts": attempts_document(
                compared, doc["now"], since_s=self._compared_s)}
        # while paused, a step moves the clock: that is news too
        changed = (doc["paused"], doc["speed"], doc["finished"], doc["run"], str(doc.get("lesson")),
                   doc["now"] if doc["paused"] else None)
        now = time.monotonic()
        if changed != self._last or (not doc["paused"] and now - self._last_sent >= RESYNC_S):
            self._last, self._last_sent = changed, now
            self._compared_s = max(0, doc["now"] // 1000 - 1)  # the last one may grow
            self.events.send("replay", json.dumps(doc, separators=(",", ":")))

    def _relay(self, replay: SimulationBackend) -> Any:
        def relay(event: Event) -> None:
            if replay is self._replay:  # a replaced run's last events are not the room's
                self.bus.emit(event)
        return relay

    # -- serving -----------------------------------------------------------------------------

    async def start(self, timeout_s: float = 10.0) -> None:
        """Listen; returns once listening (port 0 picks one). OSError if it cannot."""
        await self.listener.start(timeout_s)
        self.port = self.listener.port

    async def stop(self) -> None:
        await self.listener.stop(timeout_s=5)

    def asgi(self) -> Starlette:
        guarded = self._guarded
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/api/resilience/state", guarded(self.state), methods=["GET"]),
            Route("/api/resilience/events", guarded(self.event_stream), methods=["GET"]),
            Route("/api/resilience/history", guarded(self.history), methods=["GET"]),
            Route("/api/resilience/audit", guarded(self.audit), methods=["GET"]),
        ]
        return Starlette(routes=routes, exception_handlers={404: _refused, 405: _refused})

    def _guarded(self, handler: Any) -> Any:
        async def guarded(request: Request) -> Response:
            if self.token is not None and not bearer_matches(
                    request.headers.get("authorization"), self.token):
                return error_response(
                    401, "this room needs `Authorization: Bearer <token>` (--token-file)",
                    type_="authentication_error", headers={"WWW-Authenticate": "Bearer"})
            if self._replay is None:
                return error_response(503, "the room's replay has not started yet")
            response: Response = await handler(request, self._replay)
            return response
        return guarded

    async def health(self, request: Request) -> Response:
        replay = self._replay
        body: dict[str, Any] = {"status": "ok", "room": True, "store": None}
        if replay is not None:
            body["providers"] = {b.provider: b.state.value
                                 for b in replay.engine.snapshot().breakers}
            body["replay"] = replay_document(replay, self._run)
        return JSONResponse(body)

    async def state(self, request: Request, replay: SimulationBackend) -> Response:
        now = replay.now_ms()
        attempts = ({} if self._attempts is None else attempts_document(self._attempts, now))
        scenario = replay.scenario
        routes = None if scenario is None else scenario.config.routes
        compared = replay.comparison
        return JSONResponse({
            **state_document(replay.engine, replay.providers, routes),
            "store": None, "config": None, "replay": replay_document(replay, self._run),
            "attempts": attempts,
            "faults": [] if scenario is None else [
                [f.name, f.at_ms, min(f.until_ms, scenario.duration_ms)]
                for f in scenario.faults],
            "compared": None if compared is None else {
                "policy": compared.policy, "attempts": attempts_document(compared, now)}})

    async def event_stream(self, request: Request, replay: SimulationBackend) -> Response:
        response = EventStreamResponse(self.events.stream())
        self._last = ()  # the new viewer gets the replay's state in its first frames
        return response

    async def history(self, request: Request, replay: SimulationBackend) -> Response:
        return JSONResponse({"events": [e.to_dict() for e in self._history]})

    async def audit(self, request: Request, replay: SimulationBackend) -> Response:
        return JSONResponse({"entries": [
            {"t": e.t, "actor": e.actor, "action": e.action, "target": e.target,
             "result": e.result} for e in self._audit]})


async def _refused(request: Request, exc: Exception) -> Response:
    """Anything but the GETs above: the room is watched, never driven over HTTP."""
    status = getattr(exc, "status_code", 404)
    message = (f"a room is read-only: no {request.method} here" if status == 405 else
               "nothing here: a room serves /health and GET /api/resilience/state, "
               "/events, /history and /audit")
    return error_response(status, message, code="not_found" if status == 404 else None)
