"""Metrics of one policy run (docs/design.md §11), aggregated from events as they happen.

Memory stays flat however long the run: counters, a latency histogram, and per-fault
state bounded by the number of faults.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.events import (
    AttemptEvent,
    BreakerEvent,
    DedupEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
)
from omniroute_tui.engine.kinds import BreakerState

from .scenario import Fault, Scenario

__all__ = ["LatencyHistogram", "MetricsCollector"]

BURST_WINDOW_MS = 10_000


class LatencyHistogram:
    """Exact below 1,024 ms, then 1/64-octave buckets (under 1.6% error)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.total = 0

    def add(self, ms: int) -> None:
        if ms >= 1024:
            shift = ms.bit_length() - 7
            ms = (ms >> shift) << shift
        counts = self._counts
        counts[ms] = counts.get(ms, 0) + 1
        self.total += 1

    def percentile(self, q: float) -> int | None:
        if not self.total:
            return None
        rank = max(1, -(-int(q * self.total * 1000) // 1000))  # ceil(q * n), nearest-rank
        seen = 0
        for value in sorted(self._counts):
            seen += self._counts[value]
            if seen >= rank:
                return value
        return None


@dataclass
class _ProviderStats:
    attempts: int = 0
    probes: int = 0  # attempts a HALF_OPEN breaker let through
    successes: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    breaker_opens: int = 0
    open_ms: int = 0
    open_since: int | None = None
    open_for: int = 0
    episode_attempts: int | None = None
    max_attempts_per_open: int = 0

    def leave_open(self, t: int) -> None:
        if self.open_since is not None:
            self.open_ms += max(0, min(self.open_for, t - self.open_since))
            self.open_since = None


@dataclass
class _FaultStats:
    fault: Fault
    attempts: int = 0
    ttr_ms: int | None = None
    after: list[int] = field(default_factory=lambda: [0] * (BURST_WINDOW_MS // 1000))


class MetricsCollector:
    """`subscribe()` it to a bus; read `report()` when the run is over."""

    def __init__(self, scenario: Scenario) -> None:
        self.requests = 0
        self.successes = 0
        self.attempts = 0
        self.dedup_suppressed = 0
        self.latency = LatencyHistogram()
        self.providers = {name: _ProviderStats() for name in scenario.providers}
        self.faults = [_FaultStats(f) for f in scenario.faults]
        self._faults_on = {  # the faults that can touch each provider
            name: [fs for fs in self.faults
                   if fs.fault.target.provider in (None, name)]
            for name in scenario.providers
        }
        self._handlers = {
            RequestEvent: self._request, AttemptEvent: self._attempt,
            ResultEvent: self._result, ResponseEvent: self._response,
            BreakerEvent: self._breaker, DedupEvent: self._dedup,
        }

    def subscribe(self, bus: EventBus) -> None:
        """A handler per event type it counts: events of other types need not be built."""
        for kind, handler in self._handlers.items():
            bus.subscribe(handler, kind)

    def _request(self, event: Any) -> None:
        self.requests += 1

    def _attempt(self, event: AttemptEvent) -> None:
        self.attempts += 1
        stats = self.providers[event.provider]
        stats.attempts += 1
        stats.probes += event.probe
        if stats.episode_attempts is not None:
            stats.episode_attempts += 1
            stats.max_attempts_per_open = max(stats.max_attempts_per_open,
                                              stats.episode_attempts)
        t = event.t
        for fs in self._faults_on[event.provider]:
            fault = fs.fault
            if t < fault.at_ms or t >= fault.until_ms + BURST_WINDOW_MS:
                continue
            if not fault.target.matches(event.provider, event.connection, event.model):
                continue
            if t < fault.until_ms:
                fs.attempts += 1
            else:
                fs.after[(t - fault.until_ms) // 1000] += 1

    def _result(self, event: ResultEvent) -> None:
        stats = self.providers[event.provider]
        if event.kind is None:
            stats.successes += 1
            for fs in self._faults_on[event.provider]:
                if (fs.ttr_ms is None and event.t >= fs.fault.until_ms
                        and fs.fault.target.matches(event.provider, event.connection,
                                                    event.model)):
                    fs.ttr_ms = event.t - fs.fault.until_ms
        else:
            stats.failures[event.kind] += 1
            if event.relayed_chunks is not None:
                # a stream that broke after its answer had started: the request, counted
                # a success when it was answered (with the stream), is not one
                self.successes -= 1

    def _response(self, event: ResponseEvent) -> None:
        if 200 <= event.status < 300:
            self.successes += 1
        self.latency.add(event.latency_ms)

    def _breaker(self, event: BreakerEvent) -> None:
        stats = self.providers[event.provider]
        if event.from_ is BreakerState.OPEN:
            stats.leave_open(event.t)
        if event.to is BreakerState.OPEN:
            stats.breaker_opens += 1
            stats.open_since = event.t
            stats.open_for = event.retry_after_ms or 0
            stats.episode_attempts = 0
        elif event.to is not BreakerState.HALF_OPEN:
            stats.episode_attempts = None

    def _dedup(self, event: Any) -> None:
        self.dedup_suppressed += 1

    def report(self, end_ms: int, wall_s: float) -> dict[str, Any]:
        """The policy's metrics in the report layout of docs/design.md §11."""
        for stats in self.providers.values():
            stats.leave_open(end_ms)
        requests = self.requests
        return {
            "requests": requests,
            "successes": self.successes,
            "success_rate": round(self.successes / requests, 6) if requests else None,
            "attempts": self.attempts,
            "amplification": round(self.attempts / requests, 6) if requests else None,
            "p50_ms": self.latency.percentile(0.50),
            "p95_ms": self.latency.percentile(0.95),
            "p99_ms": self.latency.percentile(0.99),
            "dedup_suppressed": self.dedup_suppressed,
            "breaker_opens": sum(s.breaker_opens for s in self.providers.values()),
            "open_ms": sum(s.open_ms for s in self.providers.values()),
            "max_attempts_per_open": max(
                (s.max_attempts_per_open for s in self.providers.values()), default=0),
            "wall_s": round(wall_s, 4),
            "sim_rps": round(requests / wall_s) if wall_s > 0 else None,
            "providers": {
                name: {
                    "attempts": s.attempts,
                    "probes": s.probes,
                    "successes": s.successes,
                    "failures": dict(sorted(s.failures.items())),
                    "breaker_opens": s.breaker_opens,
                    "open_ms": s.open_ms,
                    "max_attempts_per_open": s.max_attempts_per_open,
                }
                for name, s in self.providers.items()
            },
            "faults": {
                fs.fault.name: {
                    "attempts": fs.attempts,
                    "attempts_per_s": round(
                        fs.attempts * 1000 / max(1, fs.fault.until_ms - fs.fault.at_ms), 3),
                    "ttr_ms": fs.ttr_ms,
                    "burst_after": max(fs.after),
                }
                for fs in self.faults
            },
        }
