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
from typing import IO, Any

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine.events import Event, EventBus, FaultEvent
from omniroute_tui.router.steps import Attempt, Wait

from .fakes import FakeProviders
from .metrics import MetricsCollector
from .policies import Routing, build_policy
from .scenario import Scenario

__all__ = ["TraceWriter", "run_virtual"]

# heap entry phases: at one instant, fault boundaries first, then outcomes, then arrivals
_FAULT, _STEP, _ARRIVAL = 0, 1, 2


class TraceWriter:
    """Writes each event as one JSON line, in batches; `flush()` writes what is left."""

    def __init__(self, out: IO[str], batch: int = 2048) -> None:
        self._out = out
        self._lines: list[str] = []
        self._batch = batch

    def __call__(self, event: Event) -> None:
        lines = self._lines
        lines.append(event.to_json())
        if len(lines) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            self._out.write("\n".join(self._lines) + "\n")
            self._lines.clear()


def _arrival_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def run_virtual(
    scenario: Scenario,
    policy: str = "resilient",
    *,
    trace: IO[str] | None = None,
    progress: Callable[[int], None] | None = None,
    subscribers: tuple[Callable[[Event], None], ...] = (),
) -> dict[str, Any]:
    """Replay `scenario` under `policy` in virtual time; returns the policy's metrics.

    `progress` is called with the virtual time (ms) every few thousand events.
    """
    clock = ManualClock(0)
    bus = EventBus()
    metrics = MetricsCollector(scenario)
    bus.subscribe(metrics.on_event)
    writer = TraceWriter(trace) if trace is not None else None
    if writer is not None:
        bus.subscribe(writer)
    for subscriber in subscribers:
        bus.subscribe(subscriber)
    router = build_policy(scenario, policy, clock, bus)
    fakes = FakeProviders(scenario)
    rng = random.Random(scenario.seed)
    heap: list[tuple[int, int, int, int, Any]] = []
    seq = 0

    for fault in scenario.faults:
        for t, phase in ((fault.at_ms, "start"), (fault.until_ms, "end")):
            if t <= scenario.duration_ms:
                heap.append((t, _FAULT, 0, seq, (fault, phase)))
                seq += 1
    arrivals: list[Iterator[int]] = []
    for index, item in enumerate(scenario.traffic):
        stream = item.arrivals(random.Random(_arrival_seed(scenario.seed, index)))
        arrivals.append(stream)
        first = next(stream, None)
        if first is not None:
            heap.append((first, _ARRIVAL, index, seq, None))
            seq += 1
    heapq.heapify(heap)

    push, pop = heapq.heappush, heapq.heappop
    answer = fakes.answer
    request_number = 0
    started = time.perf_counter()
    handled = 0

    def advance(routing: Routing, now: int) -> None:
        nonlocal seq
        step = routing.next_step()
        if isinstance(step, Attempt):
            fate = answer(now, step.provider, step.connection, step.model, step.timeout_ms, rng)
            seq += 1
            push(heap, (now + fate.delay_ms, _STEP, 0, seq, (routing, fate)))
        elif isinstance(step, Wait):
            seq += 1
            push(heap, (now + step.delay_ms, _STEP, 0, seq, (routing, None)))

    while heap:
        now, phase, index, _, payload = pop(heap)
        clock.set(now)
        if phase == _ARRIVAL:
            request_number += 1
            routing = router.start(f"r{request_number}", scenario.traffic[index].route)
            advance(routing, now)
            following = next(arrivals[index], None)
            if following is not None:
                seq += 1
                push(heap, (following, _ARRIVAL, index, seq, None))
        elif phase == _STEP:
            routing, fate = payload
            if fate is not None:
                routing.record(fate.status, fate.classification)
            advance(routing, now)
        else:
            fault, edge = payload
            bus.emit(FaultEvent(now, fault.name, edge, str(fault.target)))
        handled += 1
        if progress is not None and handled % 4096 == 0:
            progress(now)
    if writer is not None:
        writer.flush()
    wall = time.perf_counter() - started
    if progress is not None:
        progress(scenario.duration_ms)
    return metrics.report(max(clock.now_ms(), scenario.duration_ms), wall)
