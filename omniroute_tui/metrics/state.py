"""Gauges read from the engine at scrape time, through its public snapshot methods.

Breakers, connections, lockouts, routes and retry budgets are read when Prometheus asks,
never kept: what a scrape says is the engine's state at that moment of its clock (the
engine's lazy transitions, an OPEN window ending, happen then as they would for a
request; docs/design.md §3). The store's and the fleet link's health, and the config's
status, are read the same way.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..clock import Clock
from ..config.status import ConfigStatus
from ..engine.breaker import BreakerSnapshot
from ..engine.cooldown import ConnectionSnapshot
from ..engine.kinds import BreakerState
from ..engine.lockout import LockoutSnapshot
from ..router.core import Router
from .answers import AnswerCounters
from .buckets import Buckets
from .labels import LabelBounds
from .text_format import Labels, sample
from .traffic import COOLING_REASONS, TrafficCounters, cooling_reason

if TYPE_CHECKING:
    from ..fleet.redis_link import FleetHealth
    from ..store.sqlite_store import StoreHealth

__all__ = ["FleetSource", "StateCollector", "StoreSource"]

_STATES = tuple(BreakerState)
_OPEN, _HALF_OPEN = BreakerState.OPEN, BreakerState.HALF_OPEN


class StoreSource(Protocol):
    """The state database, as the metrics read it (`SqliteStore`)."""

    def health(self) -> StoreHealth: ...


class FleetSource(Protocol):
    """The fleet link, as the metrics read it (`RedisLink`)."""

    def health(self) -> FleetHealth: ...

    def on_applied(self, listener: Callable[[int], None]) -> Callable[[], None]: ...


class TraceSource(Protocol):
    """The traces' exporter, as the metrics read it (`tracing.SpanExporter`): spans sent,
    dropped for a full queue, and not sent for a failure (their batch's, or a bug); spans
    waiting in its queue."""

    @property
    def queued(self) -> int: ...

    @property
    def exported(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    @property
    def failed(self) -> int: ...


class StateCollector:
    """A prometheus_client collector: every family, state read now and traffic counted."""

    def __init__(self, router: Router, *, clock: Clock, traffic: TrafficCounters,
                 labels: LabelBounds, store: StoreSource | None, fleet: FleetSource | None,
                 fleet_lag: Buckets | None, config_status: ConfigStatus | None,
                 build_version: str, answers: AnswerCounters | None = None,
                 traces: TraceSource | None = None) -> None:
        self._router = router
        self._engine = router.engine
        self._clock = clock
        self._traffic = traffic
        self._labels = labels
        self._store = store
        self._fleet = fleet
        self._fleet_lag = fleet_lag
        self._config = config_status
        self._answers = answers
        self._traces = traces
        self._build = (build_version, platform.python_version())
        #: (provider, connection) -> its label dicts: both names, and with each reason
        self._connection_labels: dict[tuple[str, str], _ConnectionLabels] = {}

    def collect(self) -> Iterator[Metric]:
        now = self._clock.now_ms()
        build = GaugeMetricFamily("omniroute_build_info", "The running build: 1, labelled.",
                                  labels=("version", "python"))
        build.add_metric(self._build, 1)
        yield build
        if self._config is not None:
            yield from self._config_families(self._config)
        state = self._engine.snapshot()  # one read of every breaker, connection and lockout
        breakers = {b.provider: b for b in state.breakers}
        yield from _breaker_families(state.breakers)
        yield from self._connection_families(state.connections, now)
        yield self._lockouts(state.lockouts, now)
        yield self._routes(breakers)
        tokens = GaugeMetricFamily("omniroute_retry_budget_tokens",
                                   "Retry tokens the provider's budget holds now.",
                                   labels=("provider",))
        for name in breakers:
            tokens.add_metric((name,), self._engine.retry_budget_tokens(name))
        yield tokens
        queued = GaugeMetricFamily("omniroute_queued_requests",
                                   "Requests waiting for a slot of the provider "
                                   "(max_in_flight).", labels=("provider",))
        for name in breakers:
            capacity = self._engine.in_flight(name)
            queued.add_metric((name,), 0 if capacity is None else capacity[1])
        yield queued
        yield from self._traffic.families()
        if self._answers is not None:
            yield from self._answers.families()
        if self._store is not None:
            yield from _store_families(self._store.health())
        if self._fleet is not None:
            yield from self._fleet_families(self._fleet.health())
        if self._traces is not None:
            spans = CounterMetricFamily(
                "omniroute_trace_spans", "Trace spans sent to the OTLP receiver, or dropped: "
                "for a full queue, or with a batch that could not be sent.", labels=("result",))
            traces = self._traces
            for result, count in (("exported", traces.exported), ("dropped", traces.dropped),
                                  ("failed", traces.failed)):
                spans.add_metric((result,), count)
            yield spans
            yield GaugeMetricFamily(
                "omniroute_trace_spans_queued", "Trace spans waiting to be sent: a part "
                "batch waits for more, the schedule delay or the exit.", value=traces.queued)

    def _config_families(self, status: ConfigStatus) -> Iterator[Metric]:
        info = GaugeMetricFamily("omniroute_config_info",
                                 "The config in force: 1, labelled with its version (hash).",
                                 labels=("version",))
        info.add_metric((status.version,), 1)
        yield info
        yield GaugeMetricFamily("omniroute_config_loaded_timestamp_seconds",
                                "When the config in force was loaded (Unix time).",
                                value=status.loaded_at_ms / 1000)
        yield GaugeMetricFamily("omniroute_config_last_reload_success",
                                "Whether the last reload was taken (1) or refused (0).",
                                value=1 if status.last_reload_ok else 0)
        reloads = CounterMetricFamily("omniroute_config_reloads",
                                      "Config reloads since start, taken or refused.",
                                      labels=("result",))
        reloads.add_metric(("ok",), status.reloads)
        reloads.add_metric(("refused",), status.failures)
        yield reloads

    def _connection_families(self, connections: Iterable[ConnectionSnapshot], now: int
                             ) -> Iterator[Metric]:
        """Four gauges per connection: the samples are appended as they are, their label
        dicts shared and kept from one scrape to the next (there can be thousands)."""
        pc = ("provider", "connection")
        cooling = GaugeMetricFamily(
            "omniroute_connection_cooling",
            "Whether the connection cools down (1), by what it waits for.",
            labels=(*pc, "reason"))
        level = GaugeMetricFamily("omniroute_connection_backoff_level",
                                  "The connection's backoff level.", labels=pc)
        disabled = GaugeMetricFamily("omniroute_connection_disabled",
                                     "Whether the connection is disabled (1).", labels=pc)
        remaining = GaugeMetricFamily("omniroute_connection_cooldown_remaining_seconds",
                                      "Seconds until the connection's cooldown ends.",
                                      labels=pc)
        cooling_s, level_s = cooling.samples.append, level.samples.append
        disabled_s, remaining_s = disabled.samples.append, remaining.samples.append
        cooling_n, level_n = cooling.name, level.name
        disabled_n, remaining_n = disabled.name, remaining.name
        reasons = self._traffic.cooling
        cache = self._connection_labels
        for snap in connections:
            key = (snap.provider, snap.connection)
            labels = cache.get(key)
            if labels is None:
                labels = cache[key] = _connection_labels(*key)
            both, by_reason = labels
            left = snap.cooling_until - now
            if left > 0:
                reason = reasons.get(key) or cooling_reason(snap.last_error, None)
                for word, reason_labels in zip(COOLING_REASONS, by_reason, strict=True):
                    cooling_s(sample(cooling_n, reason_labels, 1 if word == reason else 0))
                remaining_s(sample(remaining_n, both, left / 1000))
            else:
                for reason_labels in by_reason:
                    cooling_s(sample(cooling_n, reason_labels, 0))
                remaining_s(sample(remaining_n, both, 0))
            level_s(sample(level_n, both, snap.level))
            disabled_s(sample(disabled_n, both, 1 if snap.disabled else 0))
        yield cooling
        yield level
        yield disabled
        yield remaining

    def _lockouts(self, lockouts: Iterable[LockoutSnapshot], now: int) -> Metric:
        counts: dict[tuple[str, str], int] = dict.fromkeys(self._labels.declared, 0)
        label = self._labels.model
        models = self._labels.models
        for lockout in lockouts:
            if lockout.until > now:
                key = (lockout.provider, lockout.model)
                model = models.get(key) or label(*key)
                counts[(lockout.provider, model)] = counts.get((lockout.provider, model), 0) + 1
        family = GaugeMetricFamily("omniroute_lockouts_active",
                                   "Connections locked out for the model now.",
                                   labels=("provider", "model"))
        for key, count in counts.items():
            family.add_metric(key, count)
        return family

    def _routes(self, breakers: dict[str, BreakerSnapshot]) -> Metric:
        """Per route, the targets a request could be sent to now: the breaker admits (or
        has a probe slot) and a connection is free for the model."""
        family = GaugeMetricFamily("omniroute_route_available_targets",
                                   "Targets of the route a request could be sent to now.",
                                   labels=("route",))
        available: dict[tuple[str, str], bool] = {}
        for name, route in self._router.routes.items():
            count = 0
            for target in route.targets:
                key = (target.provider, target.model)
                ok = available.get(key)
                if ok is None:
                    ok = available[key] = self._target_available(breakers, *key)
                count += ok
            family.add_metric((name,), count)
        return family

    def _target_available(self, breakers: dict[str, BreakerSnapshot], provider: str,
                          model: str) -> bool:
        breaker = breakers.get(provider)
        if breaker is None or breaker.state is _OPEN or (
                breaker.state is _HALF_OPEN and breaker.retry_after_ms is not None):
            return False
        return next(self._engine.candidates(provider, model), None) is not None

    def _fleet_families(self, health: FleetHealth) -> Iterator[Metric]:
        yield GaugeMetricFamily("omniroute_fleet_up",
                                "Whether the fleet link reaches Redis and keeps up (1).",
                                value=1 if health.ok else 0)
        yield GaugeMetricFamily("omniroute_fleet_queued_changes",
                                "Changes queued to go out to the fleet.", value=health.pending)
        yield CounterMetricFamily("omniroute_fleet_events_applied",
                                  "Other replicas' events applied here.", value=health.applied)
        yield CounterMetricFamily("omniroute_fleet_rejected",
                                  "Fleet entries read and refused, or failed to apply.",
                                  value=health.rejected)
        yield CounterMetricFamily("omniroute_fleet_dropped",
                                  "Changes the full outgoing queue dropped.",
                                  value=health.dropped)
        if self._fleet_lag is not None:
            lag = HistogramMetricFamily(
                "omniroute_fleet_propagation_lag_seconds",
                "From another replica's event to its being applied here.")
            lag.add_metric((), list(self._fleet_lag.cumulative()), self._fleet_lag.sum / 1000)
            yield lag


def _breaker_families(breakers: Iterable[BreakerSnapshot]) -> Iterator[Metric]:
    state = GaugeMetricFamily("omniroute_breaker_state",
                              "The breaker's state: 1 for the current one, 0 for the others.",
                              labels=("provider", "state"))
    forced = GaugeMetricFamily("omniroute_breaker_forced_open",
                               "Whether an operator forced the breaker open (1).",
                               labels=("provider",))
    probe = GaugeMetricFamily("omniroute_breaker_next_probe_seconds",
                              "Seconds until an OPEN breaker lets a probe through (0 when "
                              "not OPEN).", labels=("provider",))
    for snap in breakers:
        provider = snap.provider
        for word in _STATES:
            state.add_metric((provider, word.value), 1 if snap.state is word else 0)
        is_open = snap.state is _OPEN
        forced.add_metric((provider,), 1 if is_open and snap.forced_until is not None else 0)
        probe.add_metric((provider,), (snap.retry_after_ms or 0) / 1000 if is_open else 0)
    yield state
    yield forced
    yield probe


_ConnectionLabels = tuple[Labels, tuple[Labels, ...]]


def _connection_labels(provider: str, connection: str) -> _ConnectionLabels:
    return (Labels({"provider": provider, "connection": connection}),
            tuple(Labels({"provider": provider, "connection": connection, "reason": word})
                  for word in COOLING_REASONS))


def _store_families(health: StoreHealth) -> Iterator[Metric]:
    yield GaugeMetricFamily("omniroute_store_up", "Whether writes reach the state database (1).",
                            value=1 if health.ok else 0)
    yield GaugeMetricFamily("omniroute_store_pending_changes",
                            "Changes waiting to be written to the state database.",
                            value=health.pending)
    yield GaugeMetricFamily("omniroute_store_failing_since_timestamp_seconds",
                            "When the state database's writes began to fail (Unix time; 0 "
                            "when they work).",
                            value=(health.failing_since or 0) / 1000)
