"""A gateway's recorded events turned into a scenario: the traffic as it arrived and the
upstream errors as faults, to replay an incident against a changed router config.

Pure functions over event dictionaries (as the trace, the store's `requests` and
`history` logs and the management API's event stream write them); what reads them lives
in `event_sources`. Only
routes, provider, connection and model names, statuses and times enter the scenario:
events carry no keys and no message contents, and nothing else is copied from them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omniroute_tui.config.durations import MAX_DURATION_MS
from omniroute_tui.config.hidden import find_hidden, hidden_reason, visible
from omniroute_tui.engine.kinds import FailureKind

from .metrics import LatencyHistogram
from .scenario import MAX_SIMULATED_REQUESTS

__all__ = ["Recording", "scenario_from_events"]

#: failure windows of one provider closer than this are one fault with a failure rate
MERGE_GAP_MS = 2_000
#: below this share of failures a merged window says its `rate`
FULL_RATE = 0.98
#: the longest stretch of a log a scenario can replay: its duration, rounded up to the
#: second, stays within the 30 days any duration may last
MAX_SPAN_MS = MAX_DURATION_MS - 1000


class _OutOfRange(ValueError):
    """A number no scenario can hold: a latency or hint over 30 days, or a status that is
    not an HTTP error."""


@dataclass
class _Outcome:
    start: int  # when the attempt was sent (the result's time less its latency)
    end: int  # when its result came
    connection: str
    model: str
    error: str | int | None  # None: a success


@dataclass
class _Window:
    """Failures on a provider until an answer from the same scope says it is over."""

    start: int
    connection: str | None
    model: str | None
    end: int | None = None
    last_failure: int = 0
    failures: Counter[str | int] = field(default_factory=Counter)
    successes: int = 0
    #: answers on other connections or models while it lasted: only they show that the
    #: failures were of one connection or one model, not of the whole provider
    others_answered: set[str] = field(default_factory=set)

    def covers(self, outcome: _Outcome) -> bool:
        return ((self.connection is None or self.connection == outcome.connection)
                and (self.model is None or self.model == outcome.model))

    def widen(self, outcome: _Outcome) -> None:
        if self.connection != outcome.connection:
            self.connection = None
        if self.model != outcome.model:
            self.model = None


def _error(kind: str | None, status: int) -> str | int | None:
    """The scenario's `error` for a failed attempt; None for an answer or a cancel."""
    if kind is None or kind == FailureKind.CANCELLED:
        return None
    error = {FailureKind.QUOTA_EXHAUSTED: "quota", FailureKind.NETWORK: "reset",
             FailureKind.TIMEOUT: "timeout"}.get(FailureKind(kind), status or "reset")
    if isinstance(error, int) and not 400 <= error <= 599:
        raise _OutOfRange(f"status {error}")
    return error


def _bounded_ms(value: Any, minimum: int) -> int:
    """A latency or hint from the log, if a scenario can hold it: `minimum` to 30 days."""
    if isinstance(value, float) and not math.isfinite(value):
        raise _OutOfRange(f"{value} ms")
    ms = int(value)
    if not minimum <= ms <= MAX_DURATION_MS:
        raise _OutOfRange(f"{ms} ms")
    return ms


@dataclass
class Recording:
    """What `scenario_from_events` read, for the summary a user sees."""

    requests: int = 0
    answered: int = 0
    results: int = 0
    skipped: int = 0  # lines that were not events we know
    #: events with a time, latency, hint or status no scenario can hold (over 30 days
    #: from the rest, not finite, negative), or requests over the simulator's limit
    out_of_range: int = 0
    arrivals: dict[str, list[int]] = field(default_factory=dict)
    outcomes: dict[str, list[_Outcome]] = field(default_factory=dict)
    hints: dict[str, Counter[int]] = field(default_factory=dict)
    latencies: dict[str, LatencyHistogram] = field(default_factory=dict)
    first_ms: int | None = None
    last_ms: int = 0
    _ids: set[Any] = field(default_factory=set)

    def add(self, event: Mapping[str, Any]) -> None:
        kind, t = event.get("type"), event.get("t")
        if isinstance(t, bool) or not isinstance(t, int | float):
            self.skipped += 1
            return
        if isinstance(t, float) and t.is_integer():
            t = int(t)  # 1500.0, or 1e40 (which `bound` leaves out as far from the rest)
        if not isinstance(t, int) or t < 0:  # NaN, inf, negative, a fraction of a ms
            self.out_of_range += 1
            return
        try:
            if kind == "request":
                self.arrivals.setdefault(_name(event["route"]), []).append(t)
                self.requests += 1
                self._ids.add(event.get("id"))
            elif kind == "result":
                latency = _bounded_ms(event["latency_ms"], 0)
                provider = _name(event["provider"])
                error = _error(event.get("kind"), int(event["status"]))
                if error is None and event.get("kind") is not None:
                    return  # cancelled by the caller: says nothing of the upstream
                self.outcomes.setdefault(provider, []).append(_Outcome(
                    t - latency, t, _name(event["connection"]), _name(event["model"]),
                    error))
                if error is None:
                    self.latencies.setdefault(provider, LatencyHistogram()).add(latency)
                self.results += 1
            elif kind == "response":  # of a request seen arriving: a stream joined late
                if event.get("request") in self._ids:  # starts with answers of earlier ones
                    self.answered += 200 <= int(event["status"]) < 300
            elif kind == "cooldown" and event.get("hint_ms"):
                self.hints.setdefault(_name(event["provider"]), Counter())[
                    _bounded_ms(event["hint_ms"], 1)] += 1
            else:
                return
        except _OutOfRange:
            self.out_of_range += 1
            return
        except (KeyError, TypeError, ValueError, OverflowError):  # int(Infinity) overflows
            self.skipped += 1
            return
        self.first_ms = t if self.first_ms is None else min(self.first_ms, t)
        self.last_ms = max(self.last_ms, t)

    def bound(self) -> None:
        """Keep what one scenario can replay: the 30 days of the log with the most
        requests (a time far from the others, like `t: 1e40`, is left out), and of those
        at most the simulator's limit of requests, the earliest."""
        if self.first_ms is None or not self.requests:
            return
        if self.last_ms - self.first_ms > MAX_SPAN_MS:
            start = _busiest_start(sorted(t for ts in self.arrivals.values() for t in ts))
            self._keep_between(start, start + MAX_SPAN_MS)
        if self.requests > MAX_SIMULATED_REQUESTS:
            ordered = sorted((t, route) for route, ts in self.arrivals.items() for t in ts)
            self.out_of_range += len(ordered) - MAX_SIMULATED_REQUESTS
            self.requests = MAX_SIMULATED_REQUESTS
            self.arrivals = {}
            for t, route in ordered[:MAX_SIMULATED_REQUESTS]:
                self.arrivals.setdefault(route, []).append(t)

    def _keep_between(self, first: int, last: int) -> None:
        """Drop the requests and results outside `first`..`last`, counting them."""
        for route, times in list(self.arrivals.items()):
            kept = [t for t in times if first <= t <= last]
            self.out_of_range += len(times) - len(kept)
            self.requests -= len(times) - len(kept)
            if kept:
                self.arrivals[route] = kept
            else:
                del self.arrivals[route]
        for provider, outcomes in list(self.outcomes.items()):
            inside = [o for o in outcomes if first <= o.end <= last]
            self.out_of_range += len(outcomes) - len(inside)
            self.results -= len(outcomes) - len(inside)
            if inside:
                self.outcomes[provider] = inside
            else:
                del self.outcomes[provider]
        times = [t for ts in self.arrivals.values() for t in ts]
        times += [o.end for outcomes in self.outcomes.values() for o in outcomes]
        self.first_ms, self.last_ms = min(times), max(times)


def _busiest_start(times: list[int]) -> int:
    """The first of the sorted `times` that starts the stretch of `MAX_SPAN_MS` holding
    the most of them."""
    best, best_count, end = times[0], 0, 0
    for index, start in enumerate(times):
        while end < len(times) and times[end] <= start + MAX_SPAN_MS:
            end += 1
        if end - index > best_count:
            best, best_count = start, end - index
    return best


def _name(value: Any) -> str:
    """A route, provider, connection or model name a scenario can hold (docs/design.md
    §8: every character of it shows)."""
    if not isinstance(value, str) or not value or len(value) > 200 or find_hidden(value):
        raise ValueError("not a name")
    return value


def _windows(outcomes: list[_Outcome]) -> list[_Window]:
    windows: list[_Window] = []
    current: _Window | None = None
    for outcome in sorted(outcomes, key=lambda o: o.start):
        if outcome.error is not None:
            if current is None:
                current = _Window(outcome.start, outcome.connection, outcome.model)
                windows.append(current)
            else:
                current.widen(outcome)
            current.failures[outcome.error] += 1
            current.last_failure = outcome.start
        elif current is not None and current.covers(outcome):
            # it ended after the last failure seen and before this answer: halfway is the
            # best guess, and a replay's router, looking again when this one did, answers
            current.end = (current.last_failure + outcome.start + 1) // 2
            current = None
        elif current is not None:
            if current.connection not in (None, outcome.connection):
                current.others_answered.add("connection")
            if current.model not in (None, outcome.model):
                current.others_answered.add("model")
    for window in windows:
        window.connection = window.connection if "connection" in window.others_answered \
            else None
        window.model = window.model if "model" in window.others_answered else None
    merged: list[_Window] = []
    for window in windows:
        last = merged[-1] if merged else None
        if (last is not None and last.end is not None
                and window.start - last.end < MERGE_GAP_MS):
            last.end = window.end
            last.failures.update(window.failures)
            last.successes += 1  # the answer that had closed it
            last.connection = last.connection if last.connection == window.connection else None
            last.model = last.model if last.model == window.model else None
        else:
            merged.append(window)
    return merged


def _ms(value: float) -> str:
    ms = round(value)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scenario_from_events(events: Iterable[Mapping[str, Any]], *, name: str,
                         source: str) -> tuple[dict[str, Any], Recording]:
    """The scenario (a mapping to write as YAML, run with `--config`) and what was read.

    Times start at the first event read; arrivals are kept as they came (`at:` lists per
    route); each provider's failures become faults, a window from its first failure to
    halfway between its last failure and the first answer after it from the same scope
    (the provider, one connection or one model), with the most common error, the
    Retry-After hint the engine heard most, and a `rate` when windows close together
    merged. Raises ValueError when no request was recorded, or for a name that would not
    show as written.
    """
    if reason := hidden_reason(name, "--name"):
        raise ValueError(reason)
    recording = Recording()
    for event in events:
        recording.add(event)
    recording.bound()
    if recording.first_ms is None or not recording.requests:
        raise ValueError(f"{source}: no requests in the recorded events (is it a gateway's "
                         "event log?)")
    t0 = recording.first_ms
    duration = math.ceil((recording.last_ms - t0 + 1) / 1000) * 1000
    traffic = [{"route": route, "at": sorted(t - t0 for t in times)}
               for route, times in sorted(recording.arrivals.items())]
    faults: list[dict[str, Any]] = []
    for provider, outcomes in sorted(recording.outcomes.items()):
        for index, window in enumerate(_windows(outcomes), start=1):
            error = window.failures.most_common(1)[0][0]
            target = "/".join([provider, window.connection or "*", window.model or "*"])
            while target.endswith("/*"):
                target = target[:-2]
            fault: dict[str, Any] = {"name": f"{provider}-{error}-{index}", "target": target,
                                     "error": error, "at": _ms(max(0, window.start - t0))}
            if window.end is not None:
                fault["until"] = _ms(max(window.end - t0, window.start - t0 + 1))
            hints = recording.hints.get(provider)
            if hints and error in (429, 503, "quota"):
                fault["retry_after"] = _ms(hints.most_common(1)[0][0])
            failed = sum(window.failures.values())
            rate = failed / (failed + window.successes)
            if rate < FULL_RATE:
                fault["rate"] = round(rate, 3)
            faults.append(fault)
    latency = {}
    for provider, histogram in sorted(recording.latencies.items()):
        p50, p99 = histogram.percentile(0.50) or 1, histogram.percentile(0.99) or 1
        latency[provider] = {"p50": _ms(max(1, p50)), "p99": _ms(max(1, p50, p99))}
    answered = recording.answered / recording.requests
    scenario: dict[str, Any] = {
        "name": name,
        "description": (
            f"Recorded from {visible(source)}: {recording.requests:,} requests over "
            f"{duration / 1000:g} s, {len(faults)} upstream failure window(s) found in "
            f"{recording.results:,} attempts. Replay it against a changed router config "
            "with --config; the expectation asks the change to answer at least as many "
            "requests as the router did then."),
        "seed": 0,
        "duration": _ms(duration),
        "latency": latency,
        "traffic": traffic,
        "faults": faults,
        "expect": [{"metric": "success_rate",
                    "check": f">= {math.floor(answered * 1000) / 1000:g}"}],
    }
    if not latency:
        del scenario["latency"]
    return scenario, recording
