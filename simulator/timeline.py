"""A policy run over time, for the charts: attempts per second on each provider, answers
per second, latency percentiles per slice, and when each breaker was OPEN.

Per-second counters: a run of an hour keeps 3,600 numbers a provider.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import AttemptEvent, BreakerEvent, Event, ResponseEvent
from omniroute_tui.engine.kinds import BreakerState

from .metrics import LatencyHistogram
from .scenario import Scenario

__all__ = ["Timeline"]

#: latency percentiles are taken over slices of the run, about this many
LATENCY_SLICES = 60


@dataclass
class Timeline:
    """`subscribe()` it to a run's bus; read it once the run is over."""

    scenario: Scenario
    attempts: dict[str, Counter[int]] = field(default_factory=dict)
    successes: Counter[int] = field(default_factory=Counter)
    failures: Counter[int] = field(default_factory=Counter)
    #: provider -> [(from_ms, until_ms)] of its OPEN spans (until None: open at the end)
    open_spans: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    _latency: dict[int, LatencyHistogram] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.attempts = {name: Counter() for name in self.scenario.providers}
        self.open_spans = {name: [] for name in self.scenario.providers}
        self.slice_ms = max(1000, -(-self.scenario.duration_ms // LATENCY_SLICES))

    def subscribe(self, bus: EventBus) -> None:
        """A handler per event type it draws: events of other types need not be built."""
        handlers: dict[type[Event], Callable[[Any], None]] = {
            AttemptEvent: self._attempt, ResponseEvent: self._response,
            BreakerEvent: self._breaker,
        }
        for kind, handler in handlers.items():
            bus.subscribe(handler, kind)

    def _attempt(self, event: AttemptEvent) -> None:
        self.attempts[event.provider][event.t // 1000] += 1

    def _response(self, event: ResponseEvent) -> None:
        second = event.t // 1000
        if 200 <= event.status < 300:
            self.successes[second] += 1
        else:
            self.failures[second] += 1
        bucket = self._latency.get(event.t // self.slice_ms)
        if bucket is None:
            bucket = self._latency[event.t // self.slice_ms] = LatencyHistogram()
        bucket.add(event.latency_ms)

    def _breaker(self, event: BreakerEvent) -> None:
        spans = self.open_spans[event.provider]
        if event.to is BreakerState.OPEN and not (spans and spans[-1][1] is None):
            spans.append((event.t, None))
        elif event.from_ is BreakerState.OPEN and spans and spans[-1][1] is None:
            spans[-1] = (spans[-1][0], event.t)

    def seconds(self) -> int:
        """How many whole seconds the charts cover: the run, and its last answers."""
        last = max([self.scenario.duration_ms // 1000,
                    *(max(c, default=0) for c in self.attempts.values()),
                    max(self.successes, default=0), max(self.failures, default=0)])
        return last + 1

    def per_second(self, counts: Counter[int]) -> list[int]:
        return [counts.get(s, 0) for s in range(self.seconds())]

    def binned(self, counts: Counter[int], points: int) -> tuple[list[float], list[float]]:
        """(seconds, per second) averaged into at most `points` points: a chart draws a
        point a pixel column or a terminal column, not one a second of an hour."""
        values = self.per_second(counts)
        step = max(1, -(-len(values) // max(1, points)))
        xs, ys = [], []
        for left in range(0, len(values), step):
            chunk = values[left:left + step]
            xs.append(float(left))
            ys.append(sum(chunk) / len(chunk))
        return xs, ys

    def latency(self) -> dict[str, Any]:
        """{"t_s": [...], "p50": [...], "p95": [...], "p99": [...]} per slice with answers."""
        slices = sorted(self._latency)
        return {
            "t_s": [(s * self.slice_ms + self.slice_ms / 2) / 1000 for s in slices],
            **{name: [self._latency[s].percentile(q) for s in slices]
               for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))},
        }

    def spans(self, provider: str) -> list[tuple[float, float]]:
        """The provider's OPEN spans in seconds (one still open ends with the run)."""
        end = self.seconds()
        return [(start / 1000, end if until is None else until / 1000)
                for start, until in self.open_spans[provider]]
