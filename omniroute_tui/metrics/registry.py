"""One registry per router: the state collector and the counters behind it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from .. import __version__
from ..clock import Clock
from ..config.status import ConfigStatus
from ..router.core import Router
from .answers import AnswerCounters
from .buckets import LAG_BUCKETS_MS, Buckets
from .labels import LabelBounds
from .state import FleetSource, StateCollector, StoreSource, TraceSource
from .text_format import render
from .traffic import TrafficCounters

__all__ = ["build_registry", "exposition"]


def build_registry(router: Router, *, clock: Clock, store: StoreSource | None = None,
                   fleet: FleetSource | None = None, config_status: ConfigStatus | None = None,
                   answers: AnswerCounters | None = None,
                   traces: TraceSource | None = None,
                   clients: Collector | None = None,
                   records: Collector | None = None,
                   build_version: str = __version__) -> CollectorRegistry:
    """A fresh registry for `router`: counters subscribe to its bus now, and the engine's
    state is read at each scrape at `clock`'s time; `answers` are what the gateway counts
    of the answers it passes on (time to first token, tokens); `traces`, the counts of the
    trace spans' exporter; `clients`, the client keys' counts (`gateway.ClientGate`);
    `records`, the request records' (`gateway.RequestRecorder`).
    Performs no I/O."""
    labels = LabelBounds(router)
    traffic = TrafficCounters(router.engine.bus, labels, providers=router.engine.providers(),
                              routes=tuple(router.routes))
    lag = None
    if fleet is not None:
        lag = Buckets(LAG_BUCKETS_MS, 0.001)
        fleet.on_applied(lag.observe)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(router, clock=clock, traffic=traffic, labels=labels,
                                     store=store, fleet=fleet, fleet_lag=lag,
                                     config_status=config_status, answers=answers,
                                     traces=traces, build_version=build_version))
    for extra in (clients, records):
        if extra is not None:
            registry.register(extra)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format (`CONTENT_TYPE_LATEST`): the bytes of
    `prometheus_client.generate_latest`, written faster (`text_format`)."""
    return render(registry)
