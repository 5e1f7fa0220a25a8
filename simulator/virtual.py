"""The virtual-time runner: a discrete-event loop around the routing core.

No sockets and no sleeping: a heap of timed events (arrivals, attempt outcomes, admission
wake-ups, fault boundaries) is popped in time order and the manual clock jumps to each.
The same scenario and seed give the same trace, byte for byte.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import IO, Any

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import EVENT_CLASSES, Event, FaultEvent, json_encoder
from omniroute_tui.router.rate_limits import parse_rate_limits
from omniroute_tui.router.steps import Attempt, Wait

from .fake_streams import stream_fate
from .fakes import FakeProviders, StreamEnd
from .fleet import Fleet
from .metrics import MetricsCollector
from .policies import PolicyRouter, Routing, build_policy
from .scenario import Policy, Scenario, StreamSpec
from .timeline import Timeline

__all__ = ["TraceWriter", "VirtualRun", "run_virtual"]

# heap entry phases: at one instant, fault boundaries first, then what a fleet's replicas
# tell each other, then outcomes, then arrivals
_FAULT, _SHARE, _STEP, _ARRIVAL = 0, 1, 2, 3


class TraceWriter:
    """Writes each event as one JSON line, in batches; `flush()` writes what is left."""

    def __init__(self, out: IO[str], batch: int = 2048) -> None:
        self._out = out
        self._lines: list[str] = []
        self._batch = batch

    def subscribe(self, bus: EventBus) -> None:
        """Take every event type from `bus`, each with its own encoder: the trace is the
        busiest subscriber there is (a replay writes millions of lines)."""
        for cls in EVENT_CLASSES:
            bus.subscribe(self._writer(json_encoder(cls)), cls)

    def _writer(self, encode: Callable[[Event], str]) -> Callable[[Event], None]:
        lines, batch, flush = self._lines, self._batch, self.flush

        def write(event: Event) -> None:
            lines.append(encode(event))
            if len(lines) >= batch:
                flush()

        return write

    def flush(self) -> None:
        if self._lines:
            self._out.write("\n".join(self._lines) + "\n")
            self._lines.clear()


class _Queued:
    """A request waiting in a full provider's queue (docs/design.md §6): its step comes
    when a slot is handed to it or when its wait ends, whichever is first."""

    __slots__ = ("done", "routing")

    def __init__(self, routing: Routing) -> None:
        self.routing = routing
        self.done = False


class VirtualRun:
    """One policy's replay of a scenario, advanced in virtual time on demand.

    `run_virtual()` plays it to the end at once; the console advances it a slice at a
    time (`advance_to`) to show it unfold at a chosen speed.
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy = Policy.RESILIENT,
        *,
        trace: IO[str] | None = None,
        subscribers: tuple[Callable[[Event], None], ...] = (),
        timeline: Timeline | None = None,
    ) -> None:
        self.scenario = scenario
        self.policy = policy
        self.clock = ManualClock(0)
        self.bus = EventBus()
        self.metrics = MetricsCollector(scenario)
        self.metrics.subscribe(self.bus)
        self._writer = TraceWriter(trace) if trace is not None else None
        if self._writer is not None:
            self._writer.subscribe(self.bus)
        for subscriber in subscribers:
            self.bus.subscribe(subscriber)
        if timeline is not None:
            timeline.subscribe(self.bus)
        self.router: PolicyRouter
        if scenario.replicas > 1 and policy in (Policy.RESILIENT, Policy.ISOLATED):
            shared = policy == Policy.RESILIENT and scenario.shared_state
            self.router = Fleet(scenario, self.clock, self.bus, shared=shared,
                                schedule=self._later)
        else:
            self.router = build_policy(scenario, policy, self.clock, self.bus)
        fakes = FakeProviders(scenario)
        self._answer, self._answer_stream = fakes.answer, fakes.answer_stream
        #: the requests in flight that stream, with their answer's shape
        self._streams: dict[Routing, StreamSpec] = {}
        self._rng = random.Random(scenario.seed)
        self._heap: list[tuple[int, int, int, int, Any]] = []
        self._seq = 0
        self._shares = 0
        self._last_event_ms = 0  # when the last thing happened: the run's end
        self._requests = 0
        #: queued requests a slot was handed to, to step at the current virtual time
        self._handed: list[_Queued] = []
        self.wall_s = 0.0
        heap = self._heap
        for t, fault, phase in scenario.fault_edges(scenario.duration_ms):
            heap.append((t, _FAULT, 0, self._next_seq(), (fault, phase)))
        self._arrivals: list[Iterator[int]] = []
        for index in range(len(scenario.traffic)):
            stream = scenario.arrivals(index)
            self._arrivals.append(stream)
            first = next(stream, None)
            if first is not None:
                heap.append((first, _ARRIVAL, index, self._next_seq(), None))
        heapq.heapify(heap)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _later(self, at_ms: int, call: Callable[[], None]) -> None:
        """Run `call` at virtual time `at_ms` (a fleet's propagation delays). Numbered on
        their own: ties are broken within a phase, and this is the only one they use."""
        self._shares += 1
        heapq.heappush(self._heap, (at_ms, _SHARE, 0, self._shares, call))

    @property
    def done(self) -> bool:
        return not self._heap

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def advance_to(self, until_ms: int, progress: Callable[[int], None] | None = None) -> None:
        """Handle every event due at or before `until_ms`, then move the clock there."""
        started = time.perf_counter()
        heap, clock, scenario = self._heap, self.clock, self.scenario
        push, pop = heapq.heappush, heapq.heappop
        answer, rng, router, traffic = self._answer, self._rng, self.router, scenario.traffic
        arrivals, emit, streams = self._arrivals, self.bus.emit, self._streams
        handed = self._handed
        seq = self._seq
        handled = 0

        def advance(routing: Routing, now: int) -> None:
            nonlocal seq
            step = routing.next_step()
            if isinstance(step, Attempt):
                spec = streams.get(routing) if streams else None
                if spec is None:
                    fate = answer(now, step.provider, step.connection, step.model,
                                  step.timeout_ms, rng)
                else:
                    fate = stream_fate(*self._answer_stream(
                        now, step.provider, step.connection, step.model, step.timeout_ms,
                        rng), spec, step)
                seq += 1
                push(heap, (now + fate.delay_ms, _STEP, 0, seq, (routing, fate)))
            elif isinstance(step, Wait):
                seq += 1
                ticket = step.queue
                if ticket is None:
                    push(heap, (now + step.delay_ms, _STEP, 0, seq, (routing, None)))
                else:
                    queued = _Queued(routing)
                    ticket.wake = partial(handed.append, queued)
                    push(heap, (now + step.delay_ms, _STEP, 0, seq, (routing, queued)))
            elif streams:
                streams.pop(routing, None)  # answered

        while heap and heap[0][0] <= until_ms:
            now, phase, index, _, payload = pop(heap)
            clock.set(now)
            if phase == _ARRIVAL:
                self._requests += 1
                item = traffic[index]
                routing = router.start(f"r{self._requests}", item.route)
                if item.stream is not None:
                    streams[routing] = item.stream
                advance(routing, now)
                following = next(arrivals[index], None)
                if following is not None:
                    seq += 1
                    push(heap, (following, _ARRIVAL, index, seq, None))
            elif phase == _STEP:
                routing, fate = payload
                if fate is None:
                    advance(routing, now)
                elif fate.__class__ is _Queued:  # handed a slot, or its wait is over
                    if not fate.done:
                        fate.done = True
                        advance(routing, now)
                elif fate.__class__ is StreamEnd:  # a streamed answer's end (docs/design.md §7)
                    routing.end_stream(fate.cut, relayed_bytes=fate.relayed_bytes,
                                       relayed_chunks=fate.relayed_chunks)
                else:
                    # a key with `limits:` says what is left in its headers, as over HTTP
                    limits = parse_rate_limits(fate.headers) if fate.headers else None
                    end = fate.stream
                    if end is None and fate.reason is None:
                        routing.record(fate.status, fate.classification, limits)
                    else:
                        routing.record(fate.status, fate.classification, limits,
                                       stream=end is not None, reason=fate.reason)
                    if end is not None:
                        seq += 1
                        push(heap, (now + end.after_ms, _STEP, 0, seq, (routing, end)))
                    advance(routing, now)
            elif phase == _SHARE:
                payload()
            else:
                fault, edge = payload
                emit(FaultEvent(now, fault.name, edge, str(fault.target)))
            if handed:  # their steps come next, at this same time, oldest first
                for queued in handed:
                    seq += 1
                    push(heap, (now, _STEP, 0, seq, (queued.routing, queued)))
                handed.clear()
            handled += 1
            if progress is not None and handled % 4096 == 0:
                progress(now)
        self._seq = seq
        if handled:
            self._last_event_ms = now
        if until_ms > clock.now_ms():
            clock.set(until_ms)
        self.wall_s += time.perf_counter() - started

    def finish(self) -> dict[str, Any]:
        """Flush the trace and return the policy's metrics."""
        if self._writer is not None:
            self._writer.flush()
        # not the clock: run_virtual leaves it far past the end, and an OPEN window still
        # open at the end counts only up to the end
        end = max(self._last_event_ms, self.scenario.duration_ms)
        return self.metrics.report(end, self.wall_s)


def run_virtual(
    scenario: Scenario,
    policy: Policy = Policy.RESILIENT,
    *,
    trace: IO[str] | None = None,
    progress: Callable[[int], None] | None = None,
    subscribers: tuple[Callable[[Event], None], ...] = (),
    timeline: Timeline | None = None,
) -> dict[str, Any]:
    """Replay `scenario` under `policy` in virtual time; returns the policy's metrics.

    `progress` is called with the virtual time (ms) every few thousand events; `timeline`
    collects the run over time for the charts.
    """
    run = VirtualRun(scenario, policy, trace=trace, subscribers=subscribers,
                     timeline=timeline)
    # everything left: the outcomes of the last requests may land after the duration
    run.advance_to(2**62, progress)
    if progress is not None:
        progress(scenario.duration_ms)
    return run.finish()
