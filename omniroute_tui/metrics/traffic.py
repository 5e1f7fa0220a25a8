"""Counters fed from the event bus: requests, attempts, skips, waits, dedup, transitions.

Each handler is subscribed to the one event type it counts (docs/design.md §9: an event
nobody asked for is never built, and these are asked for). A count is a plain integer in a
dictionary keyed by its label values, so the cost per event is a lookup and an add; the
collector turns them into metric families only when Prometheus scrapes. Labels are bounded
by `LabelBounds`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..engine.bus import EventBus
from ..engine.consequences import CONSEQUENCES, Wait
from ..engine.events import (
    AttemptEvent,
    BreakerEvent,
    BudgetEvent,
    CooldownEvent,
    DedupEvent,
    ReloadEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from ..engine.kinds import CooldownReason, DedupWindow, FailureKind, SkipReason
from .buckets import ATTEMPT_BUCKETS, DURATION_BUCKETS_MS, Buckets
from .labels import OTHER, LabelBounds, status_class
from .text_format import Labels, sample

__all__ = ["COOLING_REASONS", "TrafficCounters", "cooling_reason"]

#: an attempt's outcome label: `ok`, or its failure kind
OUTCOMES = ("ok", *(kind.value for kind in FailureKind))
#: what a cooling connection waits for: its backoff, a spent quota, or the server's hint
COOLING_REASONS = ("backoff", "quota", "hinted")

#: requests between their `request` and `response` events, at most: a driver that never
#: answers one (a bug) must not grow this without bound
MAX_OPEN_REQUESTS = 100_000



def cooling_reason(kind: FailureKind | str | None, hint_ms: int | None) -> str:
    """The reason of a cooldown set by a failure of `kind` with the server's `hint_ms`."""
    if kind is not None and CONSEQUENCES[FailureKind(kind)].wait is Wait.QUOTA:
        return "quota"
    return "hinted" if hint_ms is not None else "backoff"


class TrafficCounters:
    """What the bus said since the registry was built, counted by label values."""

    def __init__(self, bus: EventBus, labels: LabelBounds, *, providers: Sequence[str] = (),
                 routes: Sequence[str] = ()) -> None:
        self._labels = labels
        self._model_labels = labels.models
        self._open: dict[str, str] = {}  # request id -> its route's label, until answered
        self.requests: dict[tuple[str, str], int] = {}  # (route, status class)
        self.durations: dict[str, Buckets] = {}  # route -> ms
        self.attempt_counts: dict[str, Buckets] = {}  # route -> attempts per request
        #: (provider, connection, model label, kind or None)
        self.attempts: dict[tuple[str, str, str, FailureKind | None], int] = {}
        #: (provider, model label) -> an attempt's time to its answer, in ms
        self.latency: dict[tuple[str, str], Buckets] = {
            declared: Buckets(DURATION_BUCKETS_MS, 0.001) for declared in labels.declared}
        self.failures: dict[tuple[str, FailureKind], int] = {}
        self.skips: dict[tuple[str, str], int] = {}
        self.budget_exhausted: dict[str, int] = {}
        self.waits: dict[str, list[int]] = {}  # provider -> [count, ms waited]
        self.fallback_waits: dict[str, list[int]] = {}  # the same, of `fallback_wait`
        self.queue_waits: dict[str, list[int]] = {}  # the same, for a slot (`max_in_flight`)
        self.dedup: dict[tuple[str, str], int] = {}
        self.transitions: dict[tuple[str, str, str, str], int] = {}
        #: provider -> breaker probes sent on a key still cooling for backoff, and keys a
        #: successful probe freed (docs/design.md §3)
        self.cooling_probes: dict[str, int] = {}
        self.freed_keys: dict[str, int] = {}
        #: provider -> requests carried on a cooling key, and the keys their success freed
        #: (a provider with every key cooling, §4)
        self.carried: dict[str, int] = {}
        self.carrier_freed: dict[str, int] = {}
        #: provider -> attempts announced and not yet ended (every attempt ends with its
        #: result event, answered or cancelled: docs/design.md §7)
        self.in_flight: dict[str, int] = {}
        self._labels_of: dict[tuple[str, str, str, FailureKind | None], Labels] = {}
        #: (provider, connection) -> the reason of its latest cooldown
        self.cooling: dict[tuple[str, str], str] = {}
        #: the providers whose series are there from 0, in order (a dict: a set keeps none)
        self.providers: dict[str, None] = {}
        self._zeros(providers, routes)
        self._unsubscribe = [
            bus.on(RequestEvent, self._request),
            bus.on(ResponseEvent, self._response),
            bus.on(ResultEvent, self._result),
            bus.on(SkipEvent, self._skip),
            bus.on(BudgetEvent, self._budget),
            bus.on(WaitEvent, self._wait),
            bus.on(DedupEvent, self._dedup),
            bus.on(BreakerEvent, self._breaker),
            bus.on(CooldownEvent, self._cooldown),
            bus.on(AttemptEvent, self._attempt),
            bus.on(ReloadEvent, self._reload),
        ]

    def _zeros(self, providers: Sequence[str], routes: Sequence[str]) -> None:
        """The series the config bounds, at 0 from the start (and, for a provider a reload
        adds, from the reload): a counter that appears only at its first increase hides
        that increase from `rate()` and `increase()`, and a ratio of two such counters
        leaves [0, 1]. A series already counting keeps its count."""
        for route in routes:
            for status in ("2xx", "4xx", "5xx"):
                self.requests.setdefault((route, status), 0)
            if route not in self.durations:
                self.durations[route] = Buckets(DURATION_BUCKETS_MS, 0.001)
                self.attempt_counts[route] = Buckets(ATTEMPT_BUCKETS)
        for provider in providers:
            self.providers.setdefault(provider, None)
            for kind in FailureKind:
                self.failures.setdefault((provider, kind), 0)
            for reason in SkipReason:
                if reason is SkipReason.FALLBACK_WAIT:  # a wait's reason, never a skip's
                    continue
                self.skips.setdefault((provider, reason.value), 0)
            for window in DedupWindow:
                self.dedup.setdefault((provider, window.value), 0)
            for per_provider in (self.budget_exhausted, self.cooling_probes, self.freed_keys,
                                 self.carried, self.carrier_freed, self.in_flight):
                per_provider.setdefault(provider, 0)
            for waits in (self.waits, self.fallback_waits, self.queue_waits):
                waits.setdefault(provider, [0, 0])

    def _reload(self, event: ReloadEvent) -> None:
        self._zeros(event.providers_added, ())

    def close(self) -> None:
        """Stop counting (the registry is dropped)."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []

    # -- the handlers: one event type each, on the request path ------------------------------

    def _request(self, event: RequestEvent) -> None:
        open_ = self._open
        if len(open_) >= MAX_OPEN_REQUESTS:
            del open_[next(iter(open_))]  # the oldest, never answered
        open_[event.id] = self._labels.routes.get(event.route) or self._labels.route(event.route)

    def _response(self, event: ResponseEvent) -> None:
        route = self._open.pop(event.request, None)
        if route is None:
            return  # its request began before this registry
        key = (route, status_class(event.status))
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        durations = self.durations.get(route)
        if durations is None:
            durations = self.durations[route] = Buckets(DURATION_BUCKETS_MS, 0.001)
            self.attempt_counts[route] = Buckets(ATTEMPT_BUCKETS)
        durations.observe(event.latency_ms)
        self.attempt_counts[route].observe(event.attempts)

    def _result(self, event: ResultEvent) -> None:
        provider, kind = event.provider, event.kind
        flying = self.in_flight.get(provider, 0)
        if flying:  # 0: the attempt began before this registry
            self.in_flight[provider] = flying - 1
        model = (self._model_labels.get((provider, event.model))
                 or self._labels.model(provider, event.model))
        key = (provider, event.connection, model, kind)
        attempts = self.attempts
        attempts[key] = attempts.get(key, 0) + 1
        if kind is not FailureKind.CANCELLED:  # a hang-up says nothing of the upstream
            # a histogram per model the config declares; the learned ones share `other`
            latency = self.latency.get((provider, model)) or self._learned_latency(provider)
            latency.observe(event.latency_ms)
        if kind is not None:
            failures = self.failures
            failure = (provider, kind)
            failures[failure] = failures.get(failure, 0) + 1

    def _learned_latency(self, provider: str) -> Buckets:
        latency = self.latency.get((provider, OTHER))
        if latency is None:
            latency = self.latency[(provider, OTHER)] = Buckets(DURATION_BUCKETS_MS, 0.001)
        return latency

    def _skip(self, event: SkipEvent) -> None:
        key = (event.provider, event.reason.value)
        self.skips[key] = self.skips.get(key, 0) + 1

    def _budget(self, event: BudgetEvent) -> None:
        if not event.spent:
            exhausted = self.budget_exhausted
            exhausted[event.provider] = exhausted.get(event.provider, 0) + 1

    def _wait(self, event: WaitEvent) -> None:
        if event.phase != "end":  # an end says how long it waited
            return
        provider = event.target.partition("/")[0]
        reason = event.reason
        waits = (self.fallback_waits if reason is SkipReason.FALLBACK_WAIT
                 else self.queue_waits if reason is SkipReason.AT_CAPACITY else self.waits)
        waited = waits.get(provider)
        if waited is None:
            waited = waits[provider] = [0, 0]
        waited[0] += 1
        waited[1] += event.delay_ms

    def _dedup(self, event: DedupEvent) -> None:
        key = (event.provider, event.window.value)
        self.dedup[key] = self.dedup.get(key, 0) + 1

    def _breaker(self, event: BreakerEvent) -> None:
        key = (event.provider, event.from_.value, event.to.value, event.reason.value)
        self.transitions[key] = self.transitions.get(key, 0) + 1

    def _attempt(self, event: AttemptEvent) -> None:
        in_flight = self.in_flight
        in_flight[event.provider] = in_flight.get(event.provider, 0) + 1
        if event.cooling_until is not None:
            counts = self.cooling_probes if event.probe else self.carried
            counts[event.provider] = counts.get(event.provider, 0) + 1

    def _cooldown(self, event: CooldownEvent) -> None:
        if event.reason is not None:
            freed = (self.freed_keys if event.reason is CooldownReason.PROBE_FREED
                     else self.carrier_freed)
            freed[event.provider] = freed.get(event.provider, 0) + 1
        if event.kind is not None:  # None: lifted, or its level reset; the deadline decides
            self.cooling[(event.provider, event.connection)] = cooling_reason(
                event.kind, event.hint_ms)

    # -- the families, at scrape time -------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "omniroute_requests", "Requests answered, by route and status class.",
            labels=("route", "status_class"))
        for (route, status), count in self.requests.items():
            requests.add_metric((route, status), count)
        yield requests
        durations = HistogramMetricFamily(
            "omniroute_request_duration_seconds",
            "Time from a request's arrival to its answer, waits included.", labels=("route",))
        attempts_per = HistogramMetricFamily(
            "omniroute_request_attempts", "Upstream attempts per answered request.",
            labels=("route",))
        for route, buckets in self.durations.items():
            durations.add_metric((route,), list(buckets.cumulative()), buckets.sum / 1000)
            counts = self.attempt_counts[route]
            attempts_per.add_metric((route,), list(counts.cumulative()), counts.sum)
        yield durations
        yield attempts_per
        attempts = CounterMetricFamily(
            "omniroute_attempts", "Upstream attempts, by outcome (ok, or the failure kind).",
            labels=("provider", "connection", "model", "outcome"))
        add, name, labels = attempts.samples.append, attempts.name + "_total", self._labels_of
        for key, count in self.attempts.items():
            pairs = labels.get(key)
            if pairs is None:  # as bounded as the counts: one per key
                provider, connection, model, kind = key
                pairs = labels[key] = Labels({"provider": provider, "connection": connection,
                                              "model": model, "outcome": kind or "ok"})
            add(sample(name, pairs, count))
        yield attempts
        latency = HistogramMetricFamily(
            "omniroute_upstream_latency_seconds",
            "Time from sending an attempt to its answer (a stream's: its first bytes), "
            "failures included, cancelled attempts not.", labels=("provider", "model"))
        for (provider, model), buckets in self.latency.items():
            latency.add_metric((provider, model), list(buckets.cumulative()), buckets.sum / 1000)
        yield latency
        yield _counter("omniroute_upstream_attempts",
                       "Upstream attempts by provider and outcome (ok, or the failure kind): "
                       "every outcome of every provider from 0.", ("provider", "outcome"),
                       self.provider_outcomes().items())
        failures = CounterMetricFamily(
            "omniroute_upstream_failures", "Failed upstream attempts, by failure kind.",
            labels=("provider", "kind"))
        for (provider, kind), count in self.failures.items():
            failures.add_metric((provider, kind.value), count)
        yield failures
        yield _counter("omniroute_skips", "Targets passed over without an attempt, by reason.",
                       ("provider", "reason"), self.skips.items())
        yield _counter("omniroute_retry_budget_exhausted",
                       "Retries refused because the provider's retry budget was empty.",
                       ("provider",), [((k,), v) for k, v in self.budget_exhausted.items()])
        yield _counter("omniroute_admission_waits",
                       "Admission waits for a target of the provider to come back.",
                       ("provider",), [((k,), v[0]) for k, v in self.waits.items()])
        yield _counter("omniroute_fallback_waits",
                       "Requests that waited for a target's short Retry-After (or a quick "
                       "retry after a 5xx) before falling back to another model.",
                       ("provider",), [((k,), v[0]) for k, v in self.fallback_waits.items()])
        yield _counter("omniroute_fallback_wait_seconds",
                       "The time those fallback waits took.",
                       ("provider",),
                       [((k,), v[1] / 1000) for k, v in self.fallback_waits.items()])
        yield _counter("omniroute_admission_wait_seconds",
                       "Time spent in admission waits.",
                       ("provider",), [((k,), v[1] / 1000) for k, v in self.waits.items()])
        yield _counter("omniroute_queue_waits",
                       "Requests that waited in the queue for a slot of the provider "
                       "(max_in_flight), handed one or not.",
                       ("provider",), [((k,), v[0]) for k, v in self.queue_waits.items()])
        yield _counter("omniroute_queue_wait_seconds",
                       "The time those queue waits took.",
                       ("provider",), [((k,), v[1] / 1000) for k, v in self.queue_waits.items()])
        yield _counter("omniroute_dedup_suppressed",
                       "Failures not counted by the breaker: already counted in this window.",
                       ("provider", "window"), self.dedup.items())
        yield _counter("omniroute_breaker_transitions",
                       "Breaker state changes, by from, to and reason.",
                       ("provider", "from", "to", "reason"), self.transitions.items())
        yield _counter("omniroute_probes_on_cooling_key",
                       "Breaker probes sent on a key still cooling for backoff (every key "
                       "was cooling).", ("provider",), [((k,), v) for k, v in
                                                         self.cooling_probes.items()])
        yield _counter("omniroute_probe_freed_keys",
                       "Backoff cooldowns a successful breaker probe ended.",
                       ("provider",), [((k,), v) for k, v in self.freed_keys.items()])
        yield _counter("omniroute_carried_on_cooling_key",
                       "Requests carried on a key cooling for backoff (every key they could "
                       "use was cooling, a breaker window after the last failure).",
                       ("provider",), [((k,), v) for k, v in self.carried.items()])
        yield _counter("omniroute_carrier_freed_keys",
                       "Backoff cooldowns a carried request's success ended.",
                       ("provider",), [((k,), v) for k, v in self.carrier_freed.items()])
        in_flight = GaugeMetricFamily(
            "omniroute_attempts_in_flight",
            "Upstream attempts sent and not yet answered or cancelled.", labels=("provider",))
        for provider, count in self.in_flight.items():
            in_flight.add_metric((provider,), count)
        yield in_flight


    def provider_outcomes(self) -> dict[tuple[str, str], int]:
        """The attempts without their connection and model, read at the scrape (the
        request path counts each attempt once): every provider's every outcome, 0 or not."""
        totals = {(provider, outcome): 0 for provider in self.providers
                  for outcome in OUTCOMES}
        for (provider, _, _, kind), count in self.attempts.items():
            key = (provider, kind or "ok")
            totals[key] = totals.get(key, 0) + count
        return totals


def _counter(name: str, documentation: str, labels: tuple[str, ...],
             values: Iterable[tuple[Sequence[str], float]]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, value in values:
        family.add_metric(key, value)
    return family
