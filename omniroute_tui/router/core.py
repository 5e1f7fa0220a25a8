"""The routing decision (docs/design.md §7) as a sans-IO state machine.

A driver asks `RequestRouting.next_step()` what to do, performs attempts and waits in its
own way (httpx and asyncio, or a virtual-time event loop) and reports each attempt's result
with `record()`. The core reads time only from the engine's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from ..engine.breaker import BreakerAdmission
from ..engine.capacity import Capacity, Ticket
from ..engine.classify import Classification
from ..engine.consequences import CONSEQUENCES, Then
from ..engine.engine import ProviderLayers, ProviderSpec, ResilienceEngine, UnknownTarget
from ..engine.events import (
    AttemptEvent,
    BudgetEvent,
    ReloadEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from ..engine.jitter import Jitter
from ..engine.kinds import FailureKind, SkipReason, StreamCut
from ..engine.reload import ReloadSummary
from ..engine.settings import AdmissionSettings
from .rate_limits import RateLimitInfo
from .routes import RESUME_WHY, Route, Strategy, Target
from .steps import Attempt, AttemptRecord, Response, Skip, Step, Wait
from .strategies import (
    Busy,
    Chooser,
    Headroom,
    HeadroomChooser,
    LeastBusy,
    LeastBusyChooser,
    Plan,
    WeightedChooser,
)

__all__ = ["MAX_ROTATION", "QUICK_RETRY_MS", "RequestRouting", "Router", "Serves",
           "UnknownRoute"]

#: which targets can serve a request (its endpoint, its translation: docs/design.md §14)
Serves = Callable[[Target], bool]

#: where a request goes after an attempt of each kind (the consequences table)
_THEN = {kind: row.then for kind, row in CONSEQUENCES.items()}
# enum members bound once: attribute access on an Enum class is slow on the hot path
_ROUND_ROBIN, _WEIGHTED = Strategy.ROUND_ROBIN, Strategy.WEIGHTED
_LEAST_BUSY, _HEADROOM = Strategy.LEAST_BUSY, Strategy.HEADROOM
_RESPOND, _NEXT_TARGET = Then.RESPOND, Then.NEXT_TARGET
_CANCELLED = Classification(FailureKind.CANCELLED)
_CONTEXT_LENGTH = FailureKind.CONTEXT_LENGTH
_RATE_LIMITED, _SERVER_ERROR = FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR
#: the wait before the one quick retry of a target that answered a 5xx without a hint,
#: under `fallback_wait` (docs/design.md §7)
QUICK_RETRY_MS = 250
_STREAM_CUT = Classification(FailureKind.STREAM_CUT)
_OK = Classification(None)


class UnknownRoute(LookupError):
    """The client asked for a model that is neither a route nor a `provider/model`."""


#: `provider/model` names remembered for providers that declare no models: each one costs
#: a route, a plan and (on failures) lockouts, so clients cannot grow them without bound
MAX_LEARNED_MODELS = 256
#: the most a config lets a provider's connection weights add up to: the length of its
#: rotation, built on its first request (10,000 over 140 distinct weights: about 1 s)
MAX_ROTATION = 10_000


def _rotation(weights: tuple[int, ...]) -> tuple[int, ...]:
    """Smooth weighted round-robin order of connection positions (nginx's algorithm).

    Equal weights give plain rotation. Otherwise the period is `sum(weights)` long, and
    each step is worked out per distinct weight rather than per connection (exactly the
    same order): the connections of one weight are chosen in turn, so a group's best is
    its next in turn. 1,000 keys, one of weight 2, took 0.8 s per connection (over 60 s
    with weights 999 and 1,000); a config caps the period (`MAX_ROTATION`).
    """
    if len(set(weights)) <= 1:
        return tuple(range(len(weights)))
    total = sum(weights)
    members: dict[int, list[int]] = {}
    for i, weight in enumerate(weights):
        members.setdefault(weight, []).append(i)
    # per weight: its connections in order, and how many times the group was chosen
    groups = [(weight, positions, len(positions)) for weight, positions in members.items()]
    chosen = [0] * len(groups)
    order = []
    for step in range(1, total + 1):
        # a connection's current is step * weight - total * (times chosen); the group's
        # next in turn has the highest current of the group and the lowest position
        best = best_value = best_pos = -1
        for g, (weight, positions, size) in enumerate(groups):
            picks = chosen[g]
            value = step * weight - total * (picks // size)
            pos = positions[picks % size]
            if best < 0 or value > best_value or (value == best_value and pos < best_pos):
                best, best_value, best_pos = g, value, pos
        chosen[best] += 1
        order.append(best_pos)
    return tuple(order)


class _Rotation:
    """A provider's round robin: its order of connection positions and how many requests
    it has started."""

    __slots__ = ("count", "positions", "size")

    def __init__(self, positions: tuple[int, ...], count: int) -> None:
        self.positions = positions
        self.size = len(positions)
        self.count = count


class Router:
    """Routes requests over the engine; one per process (or per simulated policy run)."""

    def __init__(
        self,
        engine: ResilienceEngine,
        routes: Mapping[str, Route],
        *,
        max_attempts: int = 5,
        admission: AdmissionSettings | None = None,
        jitter: Jitter | None = None,
        models: Mapping[str, frozenset[str]] | None = None,
        seed: int = 0,
    ) -> None:
        self.engine = engine
        self.routes = dict(routes)
        #: the models each provider declares; a provider missing here accepts any name,
        #: up to MAX_LEARNED_MODELS of them
        self.models = dict(models or {})
        self.max_attempts = max_attempts
        self.admission = admission or AdmissionSettings(max_wait_ms=5000, margin_ms=50)
        self._jitter = jitter or Jitter()
        self._rotations: dict[str, _Rotation] = {}
        #: the counts of rotations a reload made stale, for their rebuilt rotations
        self._rotation_counts: dict[str, int] = {}
        self._direct: dict[str, Route] = {}
        #: model as asked -> route, plan and the chooser of its ordering strategy (None
        #: for priority and round_robin)
        self._starts: dict[str, tuple[Route, Plan, Chooser | None]] = {}
        #: the strategies' counters, this process's own (docs/fleet.md)
        self._weighted: dict[str, list[int]] = {}  # route -> smooth WRR current weights
        self.load = LeastBusy(seed)
        self.headroom = Headroom()
        self._tracks_load = False  # whether attempts are counted in flight (least_busy)
        self._watch_routes()

    def _watch_routes(self) -> None:
        self._tracks_load = any(r.strategy is _LEAST_BUSY for r in self.routes.values())
        self._weighted = {name: current for name, current in self._weighted.items()
                          if name in self.routes and len(current) == len(
                              self.routes[name].targets)}

    def reconfigure(
        self,
        providers: Iterable[ProviderSpec],
        routes: Mapping[str, Route],
        *,
        models: Mapping[str, frozenset[str]],
        max_attempts: int,
        admission: AdmissionSettings,
        jitter: Jitter,
        version: str,
        also_changed: Iterable[str] = (),
    ) -> ReloadSummary:
        """Take a reloaded config between two decisions (docs/design.md §13) and announce
        it as a `reload` event. A request in flight finishes on the plan it started with;
        the engine keeps the state of what is unchanged (`ResilienceEngine.reconfigure`);
        a provider whose declared models changed counts as changed, and so does one the
        caller names in `also_changed` (its address, which only the driver reads)."""
        specs = tuple(providers)
        summary = self.engine.reconfigure(specs, models=models)
        also = set(also_changed)
        remodelled = [name for name, declared in models.items()
                      if name in self.models and (self.models[name] != declared or name in also)
                      and name not in summary.providers_changed]
        if remodelled:
            summary = replace(summary,
                              providers_changed=(*summary.providers_changed, *remodelled))
        changed_routes = [name for name, route in routes.items()
                          if name in self.routes and self.routes[name] != route]
        for name in changed_routes:  # a route changed: its weights count from zero
            self._weighted.pop(name, None)
        self.routes = dict(routes)
        self._watch_routes()
        self.models = dict(models)
        self.max_attempts = max_attempts
        self.admission = admission
        if jitter.fraction != self._jitter.fraction:
            self._jitter = jitter
        self._direct.clear()  # caches of names asked for: rebuilt on the next request
        self._starts.clear()
        for name in summary.providers_changed:  # rebuilt on the next request, count kept
            stale = self._rotations.pop(name, None)
            if stale is not None:
                self._rotation_counts[name] = stale.count
        for name in summary.providers_removed:
            self._rotations.pop(name, None)
            self._rotation_counts.pop(name, None)
        kept = {spec.name: frozenset(spec.connections) for spec in specs}
        self.load.keep(kept)
        self.headroom.keep(kept)
        bus = self.engine.bus
        if bus.wants(ReloadEvent):
            bus.emit(ReloadEvent(self.engine.now(), version, summary.providers_added,
                                 summary.providers_removed, summary.providers_changed,
                                 summary.connections_added, summary.connections_removed))
        return summary

    def resolve(self, model: str) -> Route:
        """The route a client means by `model`: a route name or `provider/model`."""
        route = self.routes.get(model) or self._direct.get(model)
        if route is not None:
            return route
        provider, sep, name = model.partition("/")
        if not (sep and provider in self.engine.providers() and name):
            raise UnknownRoute(f"no route or provider/model named {model!r}")
        declared = self.models.get(provider)
        if declared is not None and name not in declared:
            raise UnknownRoute(f"provider {provider!r} has no model {name!r}")
        if declared is None and len(self._direct) >= MAX_LEARNED_MODELS:
            raise UnknownRoute(f"{model!r} would be more than {MAX_LEARNED_MODELS} "
                               "provider/model names; declare the provider's models")
        route = Route(model, (Target(provider, name),))
        self._direct[model] = route
        return route

    def start(self, request_id: str, model: str, serves: Serves | None = None,
              tenant: str | None = None) -> RequestRouting:
        """Begin routing one request; raises UnknownRoute for an unknown `model`.
        `serves` says which targets can serve it (its endpoint, its translation); the
        others are skipped `not_served` before their breaker is asked (None: all can).
        `tenant`: the client key's, written on its `request` event."""
        known = self._starts.get(model)
        if known is None:  # the route's providers are looked up once per name asked for
            route = self.resolve(model)
            plan = tuple((t, self.engine.layers(t.provider), str(t)) for t in route.targets)
            known = self._starts[model] = (route, plan, self._chooser(route, plan))
        routing = RequestRouting(self, request_id, *known, tenant=tenant)
        routing.serves = serves
        return routing

    def _chooser(self, route: Route, plan: Plan) -> Chooser | None:
        """The route's ordering strategy, with the counters it shares with the router."""
        strategy = route.strategy
        if strategy is _WEIGHTED:
            current = self._weighted.get(route.name)
            if current is None or len(current) != len(plan):
                current = self._weighted[route.name] = [0] * len(plan)
            return WeightedChooser(plan, self.engine.bus, self.engine.changes, current,
                                   route.weights or (1,) * len(plan), self.rotation_start)
        if strategy is _LEAST_BUSY:
            return LeastBusyChooser(plan, self.engine.bus, self.engine.changes, self.load)
        if strategy is _HEADROOM:
            return HeadroomChooser(plan, self.engine.bus, self.engine.changes, self.headroom,
                                   self.rotation_start)
        return None

    def rotation_start(self, layers: ProviderLayers) -> int:
        """The connection position a round-robin request starts at on a provider."""
        rotation = self._rotations.get(layers.name)
        if rotation is None:
            spec = layers.spec
            weights = spec.weights or (1,) * len(spec.connections)
            rotation = self._rotations[layers.name] = _Rotation(
                _rotation(tuple(max(1, w) for w in weights)) or (0,),
                self._rotation_counts.pop(layers.name, 0))
        count = rotation.count
        rotation.count = count + 1
        return rotation.positions[count % rotation.size]


class RequestRouting:
    """One request's walk over its route's targets, as an explicit state machine.

    The position of the walk is in plain fields (the target index, the open candidate
    iterator of the current provider, its admission and attempt count), so a finished
    request holds no suspended frame and is freed at once. `record()` moves the walk to
    its next step straight away, as a driver asks for it next.

    Every attempt ends exactly once, by `record()` or `cancel()`: a driver that may stop
    early (cancelled, failed, its client gone) routes inside `with router.start(...) as
    routing:`, whose end cancels a request left unanswered, so nothing the attempt holds
    (its count in flight, a probe slot) outlives it.
    """

    __slots__ = (
        "_admission",
        "_again",
        "_again_done",
        "_busy",
        "_candidates",
        "_carried",
        "_chooser",
        "_full",
        "_held",
        "_inflight",
        "_label",
        "_layers",
        "_next",
        "_on_provider",
        "_pass",
        "_plan",
        "_resumed",
        "_round_robin",
        "_strategy",
        "_stream",
        "_target",
        "_target_index",
        "_too_long",
        "_wait",
        "_why",
        "engine",
        "records",
        "request_id",
        "response",
        "route",
        "router",
        "serves",
        "skips",
        "started_at",
        "waited_ms",
    )

    def __init__(self, router: Router, request_id: str, route: Route, plan: Plan,
                 chooser: Chooser | None = None, *, tenant: str | None = None) -> None:
        self.router = router
        self.engine = router.engine
        self.request_id = request_id
        self.route = route
        self.started_at = self.engine.clock.now_ms()
        self.records: list[AttemptRecord] = []
        self.skips: list[Skip] = []
        self.response: Response | None = None
        self.waited_ms = 0
        self._inflight: Attempt | None = None
        #: a streamed answer being relayed: its attempt and status, until `end_stream`
        self._stream: tuple[Attempt, int] | None = None
        #: the in-flight count the attempt last built holds (least_busy), until it ends
        self._busy: Busy | None = None
        #: the slot the attempt in flight holds on a capped provider, until it ends (a
        #: stream's at its end), and the full providers met in this pass (§6)
        self._held: tuple[Capacity, str] | None = None
        self._full: list[tuple[Capacity, Skip]] | None = None
        self._next: Step | None = None
        self._pass = 0
        self._plan = plan
        self._round_robin = route.strategy is _ROUND_ROBIN
        self._target_index = 0
        self._candidates: Iterator[str] | None = None  # the current provider's, while open
        self._target: Target | None = None
        self._layers: ProviderLayers | None = None
        self._label = ""
        self._admission: BreakerAdmission | None = None
        self._on_provider = 0
        #: the attempt built last rides a cooling key (§4): its end frees the provider's slot
        self._carried = False
        #: the first attempt answered "the prompt is too long" and its status: the answer
        #: if no later target takes the request (docs/design.md §2)
        self._too_long: tuple[Attempt, int] | None = None
        #: the connection to try once more after a fallback wait, and whether this
        #: request has had its one fallback wait (`fallback_wait`, docs/design.md §7)
        self._again: str | None = None
        self._again_done = False
        #: a wait's start, what it waits out and its place in a queue, until it ends
        self._wait: tuple[int, Skip, Ticket | None] | None = None
        #: a cut stream has been given to `resume` (once a request, docs/design.md §7)
        self._resumed = False
        self.serves: Serves | None = None
        bus = self.engine.bus
        if bus.wants(RequestEvent):  # events are built only for someone (here and below)
            bus.emit(RequestEvent(self.started_at, request_id, route.name, tenant))
        #: an ordering strategy's name, written on the attempt and skip events (None for
        #: priority and round_robin, whose events stay as they were), and the reason for
        #: its choice, written on the next attempt
        self._strategy: str | None = None
        self._why: str | None = None
        self._chooser = chooser
        if chooser is not None:
            self._strategy = chooser.name
            self._plan, self._why = chooser.order(self.started_at)

    def __enter__(self) -> RequestRouting:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Leaving the block unanswered (an exception, a cancelled task) cancels."""
        if self.response is None:
            self.cancel()

    # -- driver interface --------------------------------------------------------------

    def next_step(self) -> Step:
        """What to do now. After an Attempt, call `record()` before asking again."""
        step = self._next
        if step is None:
            step = self._next = self._advance(self.engine.clock.now_ms())
        if isinstance(step, Wait):
            self._next = None
            if step.queue is None:  # a queue's wait is counted as it was, at its end
                self.waited_ms += step.delay_ms
        elif isinstance(step, Attempt):
            self._inflight = step
        return step

    def record(self, status: int, outcome: Classification,
               rate_limits: RateLimitInfo | None = None, *, stream: bool = False,
               reason: StreamCut | None = None) -> None:
        """Report the attempt's HTTP status (0 for transport errors) and its class, and
        what the answer's headers said of the key's rate limits (`parse_rate_limits`).

        `stream`: a success is a stream whose first content is in; the request is answered
        with it, and the attempt's result waits for `end_stream` (docs/design.md §7).
        `reason`: what went wrong with a stream before its first content (a `stream_cut`,
        or a `timeout` for `first_token`), written on the result event."""
        attempt = self._inflight
        if attempt is None:
            raise RuntimeError("record() without an attempt in flight")
        self._inflight = self._next = None
        now = self.engine.clock.now_ms()
        busy = self._busy
        if busy is not None:  # first: nothing below may keep it counted
            self._busy = None
            busy.finished(attempt.connection, now - attempt.started_at)
        kind = outcome.kind
        if rate_limits is not None:
            self.router.headroom.note(attempt.provider, attempt.connection, now, rate_limits)
        elif kind is None and self.router.headroom.out:
            self.router.headroom.served(attempt.provider, attempt.connection)
        if self.response is not None:  # a resume's attempt: the request is answered
            if stream and kind is None:
                self.records.append(AttemptRecord(self._label, attempt.connection, status,
                                                  None))
                self._stream = (attempt, status)
            else:
                self._note_result(now, attempt, status, outcome, reason)
                self._release(now)
            self._next = self.response
            return
        if stream and kind is None:  # its slot is held until the stream ends
            self.records.append(AttemptRecord(self._label, attempt.connection, status, None))
            self._stream = (attempt, status)
            self._next = self._respond(now, status, attempt, None, None)
            return
        self._note_result(now, attempt, status, outcome, reason)
        if self._held is not None:  # after the pool has heard: a key now cooling wakes no one
            self._release(now)
        then = _RESPOND if kind is None else _THEN[kind]
        if then is _RESPOND:
            self._next = self._respond(now, status, attempt, None, None)
            return
        if kind is _CONTEXT_LENGTH and self._too_long is None:
            self._too_long = (attempt, status)
        layers = self._layers
        assert layers is not None
        if then is _NEXT_TARGET or not layers.breaker.admits_traffic(now):
            self._candidates = None  # on to the next target
        if (kind is _RATE_LIMITED or kind is _SERVER_ERROR) and self.route.fallback_wait_ms:
            delay = self._fallback_wait(now, attempt, outcome, layers)
            if delay is not None:
                self._next = Wait(delay)
                return
        self._next = self._advance(now)

    def end_stream(self, cut: StreamCut | None = None, *, cancelled: bool = False,
                   relayed_bytes: int = 0, relayed_chunks: int = 0) -> None:
        """The streamed answer `record(stream=True)` responded with has ended: whole
        (`cut` None), cut (`stream_cut` for `cut`'s reason), or given up by the client
        (`cancelled`). Its result goes to the layers now, as any attempt's does: breaker,
        cooldown and dedup treat a cut as any other failure. A second call, or one for
        a request that streamed nothing, changes nothing."""
        stream = self._stream
        if stream is None:
            return
        self._stream = None
        attempt, status = stream
        outcome = _CANCELLED if cancelled else _OK if cut is None else _STREAM_CUT
        now = self.engine.clock.now_ms()
        self._apply_result(now, attempt, status, outcome, None if cancelled else cut,
                           relayed_bytes, relayed_chunks)
        self._release(now)

    def resume(self, cut: StreamCut, relayed_chunks: int) -> Attempt | None:
        """After a stream cut after its first content (its `end_stream` called), the
        attempt that continues its answer, under the route's `stream_resume`: on the
        route's next target that can take it (its breaker admitting, a key ready), for a
        token of that provider's retry budget (a resume is a retry), within
        `request.max_attempts`; once a request. None: the cut stands (the skips say why,
        as for any walk). The driver makes the attempt and reports it with `record()`:
        a stream whose first content is in goes on to `end_stream` like the first; a
        failure is recorded and the request stays answered (docs/design.md §7)."""
        if (not self.route.stream_resume or self._resumed or self.response is None
                or self._stream is not None or self.response.upstream is None):
            return None
        self._resumed = True
        now = self.engine.clock.now_ms()
        self._candidates, self._carried = None, False  # another target, not another key
        self._why = (f"{RESUME_WHY}continues attempt {self.response.upstream.n}'s answer, cut "
                     f"({cut}) after {relayed_chunks} chunk(s)")
        attempt = self._walk(now)
        self._why = None
        self._inflight = attempt
        return attempt

    @property
    def streaming(self) -> bool:
        """Whether a streamed answer is being relayed (`end_stream` not called yet)."""
        return self._stream is not None

    def cancel(self) -> Response:
        """The request ends unanswered (its client gave up, or its driver stopped): the
        attempt in flight counts as `cancelled`, and so does one `record()` already
        prepared that the driver never asked for; the answer is 499."""
        now = self.engine.clock.now_ms()
        if self.response is not None:
            if self._inflight is not None:  # a resume's attempt: it counts `cancelled`
                self._cancel_attempt(now, self._inflight)
            return self.response
        if self._wait is not None:  # it gave up while waiting
            refill = self._end_wait(now)
            if refill is not None:
                refill.fill(now)
        attempt = self._inflight
        if attempt is None and isinstance(self._next, Attempt):
            attempt = self._next
        if attempt is not None:
            self._cancel_attempt(now, attempt)
        self._candidates = None
        self._next = self._respond(now, 499, None, {"error": {
            "type": "cancelled", "code": "client_closed_request",
            "message": "the client closed the request",
        }}, None)
        return self._next

    def _cancel_attempt(self, now: int, attempt: Attempt) -> None:
        self._inflight = None
        busy = self._busy
        if busy is not None:
            self._busy = None
            busy.finished(attempt.connection, now - attempt.started_at)
        self._note_result(now, attempt, 0, _CANCELLED)
        self._release(now)

    def _release(self, now: int) -> None:
        """The slot the attempt held on a capped provider, to the next waiter (§6)."""
        held = self._held
        if held is not None:
            self._held = None
            held[0].release(held[1], now)

    # -- the algorithm -----------------------------------------------------------------

    def _advance(self, now: int) -> Step:
        """The next step after the current position: an attempt, a wait or the answer."""
        if self.response is not None:
            return self.response
        refill = None if self._wait is None else self._end_wait(now)
        try:
            if self._again is not None:
                attempt = self._try_again(now)
                if attempt is not None:
                    return attempt
            attempt = self._walk(now)
            if attempt is not None:
                return attempt
            return self._walked_all(now)
        finally:
            if refill is not None:  # the slot reserved for it, if it did not take it
                refill.fill(now)

    def _walked_all(self, now: int) -> Step:
        """Every target walked in this pass without an answer: a wait, or the answer."""
        if self._pass == 0 and not self.records:
            wait = self._admission_wait()
            full, self._full = self._full, None
            ticket = None if full is None else self._queue(full)
            if wait is not None or ticket is not None:  # route once more after it
                if wait is not None:  # a key back, or a slot if one comes first
                    delay, cause = wait
                else:
                    assert full is not None
                    delay, cause = self.router.admission.max_wait_ms, full[0][1]
                self._wait = (now, cause, ticket)
                bus = self.engine.bus
                if bus.wants(WaitEvent):
                    bus.emit(WaitEvent(now, self.request_id, "start", delay, cause.target,
                                       cause.reason))
                self._pass, self._target_index, self.skips = 1, 0, []
                return Wait(delay, ticket)
        return self._final_response(now)

    def _queue(self, full: list[tuple[Capacity, Skip]]) -> Ticket | None:
        """A place in the queue of every full provider with room in its queue; None when
        every such queue is full (§6)."""
        ticket = Ticket()
        for capacity, _ in full:
            capacity.queue(ticket)
        return ticket if ticket.queues else None

    def _end_wait(self, now: int) -> Capacity | None:
        """End the wait in progress; returns the capacity a slot reserved for the request
        went back to (to be handed on, after the request has walked)."""
        assert self._wait is not None
        started, cause, ticket = self._wait
        self._wait = None
        refill = None
        if ticket is not None:
            ticket.leave()
            self.waited_ms += now - started
            reserved = ticket.reserved
            if reserved is not None:
                ticket.reserved = None
                refill = reserved[0]
                refill.give_back(reserved[1])
        bus = self.engine.bus
        if bus.wants(WaitEvent):
            bus.emit(WaitEvent(now, self.request_id, "end", now - started, cause.target,
                               cause.reason))
        return refill

    def _walk(self, now: int) -> Attempt | None:
        """Walk on from the current position to the next attempt; None past the last
        target (docs/design.md §7)."""
        records = self.records
        max_attempts = self.router.max_attempts
        while True:
            candidates = self._candidates
            if candidates is None:  # on to the next target
                if self._target_index >= len(self._plan) or len(records) >= max_attempts:
                    return None
                next_target, next_layers, label = self._plan[self._target_index]
                self._target_index += 1
                if self.serves is not None and not self.serves(next_target):
                    self._skip(now, next_target, SkipReason.NOT_SERVED, None)
                    continue
                granted = next_layers.breaker.admit(now)
                if not granted.allowed:
                    assert granted.skip is not None
                    self._skip(now, next_target, granted.skip, granted.retry_after_ms)
                    continue
                capacity = next_layers.capacity
                if capacity is not None and capacity.full():
                    next_layers.breaker.release(granted)
                    self._skip_full(now, next_target, capacity)
                    continue
                chooser = self._chooser
                if chooser is not None:
                    start, why = chooser.start(next_layers, next_target.model, now)
                    if why is not None:
                        self._why = (f"{self._strategy}: {why}" if self._why is None
                                     else f"{self._why}; {why}")
                else:
                    start = self.router.rotation_start(next_layers) if self._round_robin else 0
                candidates = self._candidates = next_layers.pool.candidates(
                    now, next_target.model, next_layers.lockouts, start)
                self._target, self._layers, self._admission = next_target, next_layers, granted
                self._label = label
                self._on_provider = 0
            target, layers, admission = self._target, self._layers, self._admission
            assert target is not None and layers is not None and admission is not None
            connection = next(candidates, None)
            capacity = layers.capacity
            full_here = False  # a key was passed over at its cap (§6)
            if capacity is not None:  # the provider's cap too: a retry here waits its turn
                while connection is not None and not capacity.has_room(connection):
                    full_here = True
                    connection = next(candidates, None)
            cooling_until = None
            if connection is None:  # the provider has nothing (more) to offer
                self._candidates = None
                if full_here:  # its free keys are full: no cooling key instead
                    key = None
                elif admission.probe_token is None:  # a cooling key may carry it (§4)
                    key = layers.carrier(now, target.model, self._tried_on(layers.name))
                    self._carried = key is not None
                elif not self._on_provider:  # a probe may use a backoff key (§3)
                    key = layers.pool.probe_key(now, target.model, layers.lockouts)
                else:
                    key = None
                if key is not None and capacity is not None and not capacity.has_room(key[0]):
                    key, full_here, self._carried = None, True, False
                if key is None:
                    if self._on_provider:
                        continue
                    layers.breaker.release(admission)
                    if full_here:  # when a cooling key is back, the wait may end sooner
                        assert capacity is not None
                        self._skip_full(now, target, capacity,
                                        layers.unavailable(now, target.model).retry_after_ms)
                        continue
                    unavailable = layers.unavailable(now, target.model)
                    self._skip(now, target, unavailable.reason, unavailable.retry_after_ms)
                    continue
                connection, cooling_until = key
                candidates = self._candidates = iter(())  # the one attempt on a cooling key
            if len(records) >= max_attempts:
                layers.breaker.release(admission)
                self._candidates = None
                self._carried = False
                return None
            if self._on_provider or self._resumed:
                if not self._spend(now, layers):
                    if not self._on_provider:  # a resume's fresh admission (a probe slot)
                        layers.breaker.release(admission)
                    self._skip(now, target, SkipReason.RETRY_BUDGET, None)
                    self._candidates, self._carried = None, False
                    continue
            else:
                layers.budget.deposit()
            if self._carried:
                layers.carried_until = now + layers.timeout_ms
            probe = admission.probe_token is not None and not self._on_provider
            return self._attempt_on(now, layers, target, connection, admission, probe,
                                    cooling_until)

    def _attempt_on(self, now: int, layers: ProviderLayers, target: Target, connection: str,
                    admission: BreakerAdmission, probe: bool, cooling_until: int | None
                    ) -> Attempt:
        """The attempt on `connection`, counted and announced."""
        self._on_provider += 1
        n = len(self.records) + 1
        first_token = target.first_token_ms
        attempt = Attempt(self.request_id, n, layers.name, connection, target.model, probe,
                          layers.timeout_ms, now, admission,
                          layers.first_token_ms if first_token is None else first_token,
                          layers.stream_idle_ms)
        capacity = layers.capacity
        if capacity is not None:  # held until the attempt ends (a stream's, at its end)
            capacity.take(connection)
            self._held = (capacity, connection)
        router = self.router
        if router._tracks_load:  # counted until the attempt ends: record() or cancel()
            self._busy = router.load.started(layers.name, connection)
        if router.headroom.keys:
            router.headroom.spend(layers.name, connection, now)
        bus = self.engine.bus
        if bus.wants(AttemptEvent):
            bus.emit(AttemptEvent(now, self.request_id, n, layers.name, connection,
                                  target.model, probe, cooling_until, self._strategy,
                                  self._why))
        self._why = None
        return attempt

    def _spend(self, now: int, layers: ProviderLayers) -> bool:
        """A token of the provider's retry budget for a further attempt of this request
        there (docs/design.md §6); False when there is none."""
        spent = layers.budget.try_spend()
        bus = self.engine.bus
        if bus.wants(BudgetEvent):
            bus.emit(BudgetEvent(now, self.request_id, layers.name, spent,
                                 round(layers.budget.tokens, 3)))
        return spent

    def _fallback_wait(self, now: int, attempt: Attempt, outcome: Classification,
                       layers: ProviderLayers) -> int | None:
        """Under the route's `fallback_wait`, how long to wait before trying the failed
        attempt's key once more, instead of falling back to another model: its own short
        Retry-After, or a quick retry after a 5xx without one; None to walk on. Once a
        request, within its timeout and the provider's retry budget (docs/design.md §7)."""
        if self._again_done:
            return None
        hint = outcome.hint_ms
        if outcome.kind is _RATE_LIMITED:
            if hint is None:
                return None
            delay = hint
        else:
            delay = QUICK_RETRY_MS if hint is None else hint
        plan, i = self._plan, self._target_index
        if (delay > self.route.fallback_wait_ms or i >= len(plan)
                or plan[i][0].model == attempt.model  # the fallback is the same model
                or not layers.breaker.admits_traffic(now)
                or (self._candidates is not None  # another key of it can take it now
                    and layers.pool.has_candidate(now, attempt.model, layers.lockouts))
                or now + delay - self.started_at >= layers.timeout_ms
                or len(self.records) >= self.router.max_attempts
                or not self._spend(now, layers)):
            return None
        target = self._target
        assert target is not None
        cause = Skip(str(target), SkipReason.FALLBACK_WAIT, delay)
        self._again, self._again_done = attempt.connection, True
        self._wait = (now, cause, None)
        bus = self.engine.bus
        if bus.wants(WaitEvent):
            bus.emit(WaitEvent(now, self.request_id, "start", delay, cause.target,
                               cause.reason))
        return delay

    def _try_again(self, now: int) -> Attempt | None:
        """After a fallback wait, the attempt on the key that asked for it, if its
        provider still takes traffic and the key is still usable; else None."""
        connection, self._again = self._again, None
        layers, target = self._layers, self._target
        assert connection is not None and layers is not None and target is not None
        cooldown = layers.pool.get(connection) if connection in layers.pool.position else None
        if (cooldown is None or cooldown.disabled
                or layers.lockouts.locked_until(connection, target.model, now) is not None
                or (layers.capacity is not None and not layers.capacity.has_room(connection))):
            return None
        admission = layers.breaker.admit(now)
        if not admission.allowed or admission.probe_token is not None:
            layers.breaker.release(admission)
            self._candidates = None
            return None
        self._admission = admission
        self._candidates = iter(())  # then on to the next target, as after any attempt
        until = cooldown.cooling_until
        return self._attempt_on(now, layers, target, connection, admission, False,
                                until if until > now else None)

    def _note_result(self, now: int, attempt: Attempt, status: int, outcome: Classification,
                     reason: StreamCut | None = None) -> None:
        """Tell the events, the request's records and the attempt's provider's layers."""
        self.records.append(AttemptRecord(self._label, attempt.connection, status,
                                          outcome.kind))
        self._apply_result(now, attempt, status, outcome, reason)

    def _apply_result(self, now: int, attempt: Attempt, status: int, outcome: Classification,
                      reason: StreamCut | None = None, relayed_bytes: int | None = None,
                      relayed_chunks: int | None = None) -> None:
        """The result event, and the result told to the attempt's provider's layers (a
        stream's, with what it relayed, when it ends)."""
        bus = self.engine.bus
        if bus.wants(ResultEvent):  # positional: a third cheaper to build than by keyword
            bus.emit(ResultEvent(now, self.request_id, attempt.n, attempt.provider,
                                 attempt.connection, attempt.model, status, outcome.kind,
                                 now - attempt.started_at, reason, relayed_bytes,
                                 relayed_chunks))
        layers = self._layers  # the attempt's: nothing moves the walk while it is in flight,
        assert layers is not None  # and nothing after the answer it streams
        carried, self._carried = self._carried, False
        layers.record(now, attempt.connection, attempt.model, attempt.admission, outcome,
                      carried)

    def _tried_on(self, provider: str) -> list[str]:
        """The connections of `provider` this request has tried (labels are
        `provider/model`, and a provider's name has no slash)."""
        return [record.connection for record in self.records
                if record.target.partition("/")[0] == provider]

    def _skip_full(self, now: int, target: Target, capacity: Capacity,
                   retry_after_ms: int | None = None) -> None:
        """Pass over a target whose provider, or every key it could use, is full (§6);
        `retry_after_ms`: when a key of it now cooling comes back."""
        self._skip(now, target, SkipReason.AT_CAPACITY, retry_after_ms)
        if self._full is None:
            self._full = []
        self._full.append((capacity, self.skips[-1]))

    def _skip(self, now: int, target: Target, reason: SkipReason, retry_after_ms: int | None
              ) -> None:
        self.skips.append(Skip(str(target), reason, retry_after_ms))
        bus = self.engine.bus
        if bus.wants(SkipEvent):
            bus.emit(SkipEvent(now, self.request_id, target.provider, target.model,
                               reason, retry_after_ms, self._strategy))

    def _admission_wait(self) -> tuple[int, Skip] | None:
        """The wait before routing once more and the skip it waits out (the earliest to
        come back), or None to fail at once (docs/design.md §6)."""
        waits = [
            skip for skip in self.skips
            if skip.retry_after_ms is not None and skip.reason != SkipReason.ALL_DISABLED
        ]
        if not waits:
            return None
        earliest = min(waits, key=lambda skip: skip.retry_after_ms or 0)
        assert earliest.retry_after_ms is not None
        if earliest.retry_after_ms > self.router.admission.max_wait_ms:
            return None
        delay = earliest.retry_after_ms + self.router._jitter.stretch(
            self.router.admission.margin_ms)
        return delay, earliest

    def _final_response(self, now: int) -> Response:
        if self._too_long is not None:  # no larger model took it: the provider's own 400
            attempt, status = self._too_long
            return self._respond(now, status, attempt, None, None)
        if not self.records:
            return self._unavailable_response(now)
        last = self.records[-1]
        status = FailureKind.answer_status(last.status, last.kind)
        body = {"error": {
            "type": "upstream_error",
            "code": "all_attempts_failed",
            "message": f"{len(self.records)} attempt(s) failed; the last answered {last.status}"
                       f" ({last.kind})",
            "attempts": [record.to_dict() for record in self.records],
            "skipped": [skip.to_dict() for skip in self.skips],
        }}
        retry = self._earliest_retry()
        if retry is None and status in (429, 503):
            retry = self._tried_cooling(now)
        return self._respond(now, status, None, body, retry)

    def _tried_cooling(self, now: int) -> int | None:
        """How long until the first key this request tried is out of its cooldown (None:
        none cools): when to retry a 429 or 503 that no skip said anything about."""
        left = []
        for record in self.records:
            try:  # a reload may have removed it since
                snapshot = self.engine.connection_snapshot(record.target.partition("/")[0],
                                                           record.connection)
            except UnknownTarget:
                continue
            left.append(snapshot.cooling_until - now)
        return min((ms for ms in left if ms > 0), default=None)

    def _earliest_retry(self) -> int | None:
        known = [s.retry_after_ms for s in self.skips if s.retry_after_ms is not None]
        return min(known) if known else None

    def _unavailable_response(self, now: int) -> Response:
        # a target that does not serve the request says nothing of when to retry
        skips = [skip for skip in self.skips if skip.reason is not SkipReason.NOT_SERVED]
        temporary = bool(skips) and all(
            skip.reason.is_temporary_unavailability for skip in skips)
        status = 429 if temporary else 503
        retry = self._earliest_retry()
        reasons = ", ".join(f"{s.target}: {s.reason}" for s in self.skips) or "no targets"
        body = {"error": {
            "type": "rate_limit_error" if temporary else "service_unavailable",
            "code": "all_targets_unavailable",
            "message": f"no target of {self.route.name!r} can take the request now ({reasons})",
            "retry_after_ms": retry,
            "skipped": [skip.to_dict() for skip in self.skips],
        }}
        return self._respond(now, status, None, body, retry)

    def _respond(
        self, now: int, status: int, upstream: Attempt | None, body: dict[str, Any] | None,
        retry_after_ms: int | None,
    ) -> Response:
        response = Response(self.request_id, status, upstream, body, retry_after_ms,
                            tuple(self.records), now - self.started_at, self.waited_ms)
        self.response = response
        bus = self.engine.bus
        if bus.wants(ResponseEvent):
            bus.emit(ResponseEvent(now, self.request_id, status, len(self.records),
                                   response.latency_ms, self.waited_ms,
                                   upstream.served_by if upstream is not None else None))
        return response
