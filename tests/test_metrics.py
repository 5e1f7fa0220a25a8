"""Prometheus metrics of a router: exact values after a hand-driven sequence on a manual
clock, the exposition format, bounded labels, and nothing secret in it."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml
from prometheus_client import generate_latest

from omniroute_tui.clock import ManualClock
from omniroute_tui.config.clients import ClientKeys, Tenant
from omniroute_tui.config.status import ConfigStatus
from omniroute_tui.engine import Classification, FailureKind, ProviderSpec, ResilienceEngine
from omniroute_tui.engine.events import LockoutEvent, ResultEvent
from omniroute_tui.fleet.redis_link import FleetHealth
from omniroute_tui.gateway.app import client_error
from omniroute_tui.gateway.client_keys import ClientGate
from omniroute_tui.gateway.request_records import MemoryRecords, RequestRecorder
from omniroute_tui.gateway.tenant_limits import LocalUsage
from omniroute_tui.metrics import OTHER, AnswerCounters, build_registry, exposition
from omniroute_tui.router import Attempt, Response, Route, Router, Strategy, Target, Wait
from omniroute_tui.router.core import MAX_LEARNED_MODELS
from omniroute_tui.store.sqlite_store import StoreHealth

from .helpers import settings
from .metrics_helpers import parse, series, value

T0 = 1_000_000

#: every family the contract names, with its type
CONTRACT = {
    "omniroute_build_info": "gauge",
    "omniroute_config_info": "gauge",
    "omniroute_config_loaded_timestamp_seconds": "gauge",
    "omniroute_config_last_reload_success": "gauge",
    "omniroute_config_reloads": "counter",
    "omniroute_breaker_state": "gauge",
    "omniroute_breaker_forced_open": "gauge",
    "omniroute_breaker_next_probe_seconds": "gauge",
    "omniroute_breaker_transitions": "counter",
    "omniroute_probes_on_cooling_key": "counter",
    "omniroute_probe_freed_keys": "counter",
    "omniroute_carried_on_cooling_key": "counter",
    "omniroute_carrier_freed_keys": "counter",
    "omniroute_connection_cooling": "gauge",
    "omniroute_connection_backoff_level": "gauge",
    "omniroute_connection_disabled": "gauge",
    "omniroute_connection_cooldown_remaining_seconds": "gauge",
    "omniroute_lockouts_active": "gauge",
    "omniroute_route_available_targets": "gauge",
    "omniroute_requests": "counter",
    "omniroute_attempts": "counter",
    "omniroute_skips": "counter",
    "omniroute_retry_budget_tokens": "gauge",
    "omniroute_retry_budget_exhausted": "counter",
    "omniroute_admission_waits": "counter",
    "omniroute_admission_wait_seconds": "counter",
    "omniroute_fallback_waits": "counter",
    "omniroute_fallback_wait_seconds": "counter",
    "omniroute_queue_waits": "counter",
    "omniroute_queue_wait_seconds": "counter",
    "omniroute_queued_requests": "gauge",
    "omniroute_dedup_suppressed": "counter",
    "omniroute_request_duration_seconds": "histogram",
    "omniroute_request_attempts": "histogram",
    "omniroute_upstream_failures": "counter",
    "omniroute_upstream_attempts": "counter",
    "omniroute_upstream_latency_seconds": "histogram",
    "omniroute_upstream_time_to_first_token_seconds": "histogram",
    "omniroute_upstream_tokens": "counter",
    "omniroute_attempts_in_flight": "gauge",
    "omniroute_store_up": "gauge",
    "omniroute_store_pending_changes": "gauge",
    "omniroute_store_failing_since_timestamp_seconds": "gauge",
    "omniroute_fleet_up": "gauge",
    "omniroute_fleet_queued_changes": "gauge",
    "omniroute_fleet_events_applied": "counter",
    "omniroute_fleet_rejected": "counter",
    "omniroute_fleet_dropped": "counter",
    "omniroute_fleet_propagation_lag_seconds": "histogram",
    "omniroute_trace_spans": "counter",
    "omniroute_trace_spans_queued": "gauge",
    "omniroute_client_requests": "counter",
    "omniroute_client_tokens": "counter",
    "omniroute_client_unauthenticated": "counter",
    "omniroute_client_limit_errors": "counter",
    "omniroute_request_records": "counter",
    "omniroute_request_records_dropped": "counter",
    "omniroute_request_records_open": "gauge",
}


@dataclass
class FakeStore:
    """The store as the metrics read it."""

    state: StoreHealth = field(default_factory=lambda: StoreHealth(True))

    def health(self) -> StoreHealth:
        return self.state


@dataclass
class FakeTraces:
    """The traces' exporter as the metrics read it: its three counts."""

    exported: int = 0
    dropped: int = 0
    failed: int = 0
    queued: int = 0


@dataclass
class FakeFleet:
    """The fleet link as the metrics read it: its health, and the lag of what it applies."""

    state: FleetHealth = field(default_factory=lambda: FleetHealth(True))
    listeners: list[Callable[[int], None]] = field(default_factory=list)

    def health(self) -> FleetHealth:
        return self.state

    def on_applied(self, listener: Callable[[int], None]) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def applied(self, lag_ms: int) -> None:
        self.state = replace(self.state, applied=self.state.applied + 1)
        for listener in self.listeners:
            listener(lag_ms)


class Setup:
    """Three providers on a manual clock: a breaker opens at the second counted failure."""

    def __init__(self, **registry: object) -> None:
        self.clock = ManualClock(T0)
        tight = settings(breaker={"failure_threshold": 2, "degraded_threshold": 1})
        self.engine = ResilienceEngine(
            [ProviderSpec("alpha", ("a", "b"), tight), ProviderSpec("beta", ("x",), tight),
             ProviderSpec("gamma", ("g1",), tight)], self.clock)
        self.router = Router(
            self.engine,
            {"chat": Route("chat", (Target("alpha", "m"), Target("beta", "m")),
                           Strategy.PRIORITY),  # alpha's keys in order: a, then b
             "quota": Route("quota", (Target("gamma", "m"),)),
             "solo": Route("solo", (Target("beta", "m"),))},
            models={"alpha": frozenset({"m", "n"}), "beta": frozenset({"m"}),
                    "gamma": frozenset({"m"})})
        #: what a gateway counts of the answers it passes on
        self.answers = AnswerCounters(self.router)
        registry.setdefault("answers", self.answers)
        registry.setdefault("clients", ClientGate(
            ClientKeys(MappingProxyType({}), MappingProxyType({"team": Tenant("team")})),
            LocalUsage(), lambda: T0, client_error))
        registry.setdefault("records", RequestRecorder(
            self.engine.bus, MemoryRecords(), replica=None, wall_ms=self.clock.now_ms))
        self.registry = build_registry(self.router, clock=self.clock, **registry)  # type: ignore[arg-type]

    def request(self, rid: str, model: str,
                *answers: tuple[int, FailureKind | None, int | None, int]) -> Response:
        """Route one request: each answer is (status, kind, hint ms, ms it took)."""
        routing = self.router.start(rid, model)
        for status, kind, hint, took in answers:
            step = routing.next_step()
            assert isinstance(step, Attempt), step
            self.clock.advance(took)
            routing.record(status, Classification(kind, hint))
        step = routing.next_step()
        assert isinstance(step, Response), step
        return step

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return parse(exposition(self.registry))


OK = (200, None, None, 0)


def test_state_and_traffic_after_a_hand_driven_sequence() -> None:
    s = Setup()
    assert s.request("r1", "chat", (200, None, None, 120)).status == 200
    # a 403 locks model n out on a; b serves it
    assert s.request("r2", "alpha/n", (403, FailureKind.FORBIDDEN, None, 0), OK).status == 200
    # a 500 cools a (backoff, 3 s) and degrades alpha's breaker; beta serves
    assert s.request("r3", "chat", (500, FailureKind.SERVER_ERROR, None, 0), OK).status == 200
    # a 429 with a 10 s hint cools b for 10 s and opens the breaker for 10 s
    assert s.request("r4", "chat", (429, FailureKind.RATE_LIMITED, 10_000, 0), OK).status == 200
    m = s.scrape()
    assert value(m, "omniroute_connection_cooling", provider="alpha", connection="a",
                 reason="backoff") == 1
    assert value(m, "omniroute_connection_cooling", provider="alpha", connection="b",
                 reason="hinted") == 1
    assert value(m, "omniroute_connection_cooldown_remaining_seconds", provider="alpha",
                 connection="a") == 3.0
    assert value(m, "omniroute_breaker_next_probe_seconds", provider="alpha") == 10.0
    # alpha is OPEN: skipped
    assert s.request("r5", "chat", OK).status == 200
    # a spent quota on gamma's only key: cools it for the quota's hour; the answer is a 429
    assert s.request("r6", "quota", (429, FailureKind.QUOTA_EXHAUSTED, None, 0)).status == 429
    s.engine.force_open("gamma", 60_000, actor="ops")
    assert s.request("r7", "solo", (500, FailureKind.SERVER_ERROR, None, 0)).status == 500
    s.clock.advance(4_000)
    m = s.scrape()

    def states(provider: str) -> dict[str, float]:
        return {word: value(m, "omniroute_breaker_state", provider=provider, state=word)
                for word in ("CLOSED", "DEGRADED", "OPEN", "HALF_OPEN")}

    assert states("alpha") == {"CLOSED": 0, "DEGRADED": 0, "OPEN": 1, "HALF_OPEN": 0}
    assert states("beta") == {"CLOSED": 0, "DEGRADED": 1, "OPEN": 0, "HALF_OPEN": 0}
    assert states("gamma") == {"CLOSED": 0, "DEGRADED": 0, "OPEN": 1, "HALF_OPEN": 0}
    assert value(m, "omniroute_breaker_next_probe_seconds", provider="alpha") == 6.0
    assert value(m, "omniroute_breaker_next_probe_seconds", provider="gamma") == 56.0
    assert value(m, "omniroute_breaker_next_probe_seconds", provider="beta") == 0
    assert [value(m, "omniroute_breaker_forced_open", provider=p)
            for p in ("alpha", "beta", "gamma")] == [0, 0, 1]
    transitions = {(t["provider"], t["from"], t["to"], t["reason"]): value(
        m, "omniroute_breaker_transitions_total", **t)
        for t in series(m, "omniroute_breaker_transitions_total")}
    assert transitions == {
        ("alpha", "CLOSED", "DEGRADED", "failures"): 1,
        ("alpha", "DEGRADED", "OPEN", "threshold"): 1,
        ("gamma", "CLOSED", "OPEN", "operator_force_open"): 1,
        ("beta", "CLOSED", "DEGRADED", "failures"): 1,
    }
    cooling = {(c["provider"], c["connection"], c["reason"]) for c in series(
        m, "omniroute_connection_cooling") if value(m, "omniroute_connection_cooling", **c)}
    assert cooling == {("alpha", "b", "hinted"), ("gamma", "g1", "quota")}  # a's 3 s are over
    assert len(series(m, "omniroute_connection_cooling")) == 4 * 3  # each reason, each key
    remaining = {c: value(m, "omniroute_connection_cooldown_remaining_seconds",
                          provider=p, connection=c)
                 for p, c in (("alpha", "a"), ("alpha", "b"), ("beta", "x"), ("gamma", "g1"))}
    assert remaining == {"a": 0, "b": 6.0, "x": 0, "g1": 3596.0}
    assert [value(m, "omniroute_connection_backoff_level", provider=p, connection=c)
            for p, c in (("alpha", "a"), ("alpha", "b"), ("beta", "x"), ("gamma", "g1"))
            ] == [1, 1, 1, 0]  # a quota does not raise the level
    assert value(m, "omniroute_connection_disabled", provider="alpha", connection="a") == 0
    assert value(m, "omniroute_lockouts_active", provider="alpha", model="n") == 1
    assert value(m, "omniroute_lockouts_active", provider="alpha", model="m") == 0
    assert value(m, "omniroute_route_available_targets", route="chat") == 1  # beta only
    assert value(m, "omniroute_route_available_targets", route="quota") == 0
    assert value(m, "omniroute_route_available_targets", route="solo") == 1  # x is back
    # first attempts deposit 0.2 (from a full 10, capped); r2's retry on alpha spent one
    assert value(m, "omniroute_retry_budget_tokens", provider="alpha") == pytest.approx(9.4)
    assert value(m, "omniroute_retry_budget_tokens", provider="beta") == 10
    requests = {(r["route"], r["status_class"]): value(m, "omniroute_requests_total", **r)
                for r in series(m, "omniroute_requests_total")}
    assert {k: v for k, v in requests.items() if v} == {
        ("chat", "2xx"): 4, ("alpha/n", "2xx"): 1, ("quota", "4xx"): 1, ("solo", "5xx"): 1}
    attempts = {(a["provider"], a["connection"], a["model"], a["outcome"]): value(
        m, "omniroute_attempts_total", **a) for a in series(m, "omniroute_attempts_total")}
    assert attempts == {
        ("alpha", "a", "m", "ok"): 1, ("alpha", "a", "n", "forbidden"): 1,
        ("alpha", "b", "n", "ok"): 1, ("alpha", "a", "m", "server_error"): 1,
        ("beta", "x", "m", "ok"): 3, ("alpha", "b", "m", "rate_limited"): 1,
        ("gamma", "g1", "m", "quota_exhausted"): 1, ("beta", "x", "m", "server_error"): 1,
    }
    failures = {(f["provider"], f["kind"]): value(m, "omniroute_upstream_failures_total", **f)
                for f in series(m, "omniroute_upstream_failures_total")}
    assert {k: v for k, v in failures.items() if v} == {
        ("alpha", "forbidden"): 1, ("alpha", "rate_limited"): 1, ("alpha", "server_error"): 1,
        ("beta", "server_error"): 1, ("gamma", "quota_exhausted"): 1}
    outcomes = {(a["provider"], a["outcome"]): value(m, "omniroute_upstream_attempts_total", **a)
                for a in series(m, "omniroute_upstream_attempts_total")}
    # every provider's every outcome, 0 or not: the attempts without connection and model
    assert len(outcomes) == 3 * (len(FailureKind) + 1)
    assert {k: v for k, v in outcomes.items() if v} == {
        ("alpha", "ok"): 2, ("alpha", "forbidden"): 1, ("alpha", "server_error"): 1,
        ("alpha", "rate_limited"): 1, ("beta", "ok"): 3, ("beta", "server_error"): 1,
        ("gamma", "quota_exhausted"): 1}
    assert value(m, "omniroute_skips_total", provider="alpha", reason="circuit_open") == 1
    assert sum(value(m, "omniroute_skips_total", **k)
               for k in series(m, "omniroute_skips_total")) == 1
    # histograms: r1 took 120 ms, the rest 0 ms; chat's requests took 1, 2, 2 and 1 attempts
    buckets = {b["le"]: value(m, "omniroute_request_duration_seconds_bucket", **b)
               for b in series(m, "omniroute_request_duration_seconds_bucket")
               if b["route"] == "chat"}
    assert buckets == {"0.05": 3, "0.1": 3, "0.25": 4, "0.5": 4, "1.0": 4, "2.5": 4, "5.0": 4,
                       "10.0": 4, "20.0": 4, "30.0": 4, "60.0": 4, "120.0": 4, "+Inf": 4}
    assert value(m, "omniroute_request_duration_seconds_sum", route="chat") == 0.12
    assert value(m, "omniroute_request_duration_seconds_count", route="chat") == 4
    tries = {b["le"]: value(m, "omniroute_request_attempts_bucket", **b)
             for b in series(m, "omniroute_request_attempts_bucket") if b["route"] == "chat"}
    assert tries == {"1.0": 2, "2.0": 4, "3.0": 4, "4.0": 4, "6.0": 4, "8.0": 4, "12.0": 4,
                     "16.0": 4, "+Inf": 4}
    assert value(m, "omniroute_request_attempts_sum", route="chat") == 6

    # 6 s on, alpha's OPEN window is over: the scrape itself sees it HALF_OPEN
    s.clock.advance(6_000)
    m = s.scrape()
    assert states("alpha") == {"CLOSED": 0, "DEGRADED": 0, "OPEN": 0, "HALF_OPEN": 1}
    assert value(m, "omniroute_breaker_next_probe_seconds", provider="alpha") == 0
    assert value(m, "omniroute_breaker_transitions_total", provider="alpha", from_="OPEN",
                 to="HALF_OPEN", reason="reset_timeout") == 1


def test_waits_and_dedup_are_counted() -> None:
    s = Setup()
    # x, beta's only key, cools 3 s: the next request waits that and the 50 ms margin
    s.request("r1", "solo", (500, FailureKind.SERVER_ERROR, None, 0))
    routing = s.router.start("r2", "solo")
    step = routing.next_step()
    assert isinstance(step, Wait) and step.delay_ms == 3_050
    s.clock.advance(3_050)
    step = routing.next_step()
    assert isinstance(step, Attempt) and step.connection == "x"
    routing.record(200, Classification(None))
    assert isinstance(routing.next_step(), Response)
    m = s.scrape()
    assert value(m, "omniroute_admission_waits_total", provider="beta") == 1
    assert value(m, "omniroute_admission_wait_seconds_total", provider="beta") == 3.05
    assert value(m, "omniroute_admission_waits_total", provider="alpha") == 0
    assert value(m, "omniroute_skips_total", provider="beta", reason="all_cooling") == 1
    # the same connection failing twice within its window counts once for the breaker
    s.request("r3", "solo", (500, FailureKind.SERVER_ERROR, None, 0))
    s.clock.advance(3_000)
    s.request("r4", "solo", (500, FailureKind.SERVER_ERROR, None, 0))
    m = s.scrape()
    assert value(m, "omniroute_dedup_suppressed_total", provider="beta",
                 window="connection") == 1
    assert value(m, "omniroute_dedup_suppressed_total", provider="beta", window="network") == 0
    assert value(m, "omniroute_retry_budget_exhausted_total", provider="beta") == 0


def test_an_empty_retry_budget_is_counted() -> None:
    s = Setup()
    layers = s.engine.layers("alpha")
    layers.budget.tokens = 0.0  # the budget spent by earlier traffic
    routing = s.router.start("r1", "alpha/m")
    step = routing.next_step()
    assert isinstance(step, Attempt)
    routing.record(403, Classification(FailureKind.FORBIDDEN))
    assert isinstance(routing.next_step(), Response)  # no token for the retry on b
    m = s.scrape()
    assert value(m, "omniroute_retry_budget_exhausted_total", provider="alpha") == 1
    assert value(m, "omniroute_skips_total", provider="alpha", reason="retry_budget") == 1
    assert value(m, "omniroute_retry_budget_tokens", provider="alpha") == pytest.approx(0.2)


def test_every_contract_name_with_store_fleet_and_config() -> None:
    store, fleet = FakeStore(), FakeFleet()
    status = ConfigStatus("router.yaml", "0123456789ab", T0, reloads=2, failures=1,
                          last_reload_ok=False, last_error="bad", last_attempt_ms=T0)
    traces = FakeTraces(exported=40, dropped=2, failed=512, queued=17)
    s = Setup(store=store, fleet=fleet, config_status=status, build_version="9.9.9",
              traces=traces)
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f.type for f in text_string_to_metric_families(
        exposition(s.registry).decode())}
    assert families == CONTRACT
    store.state = StoreHealth(False, failing_since=T0 - 5_000, error="disk full", pending=7)
    fleet.state = FleetHealth(False, pending=3, rejected=2, dropped=4)
    fleet.applied(30)
    fleet.applied(700)
    m = s.scrape()
    assert value(m, "omniroute_build_info", version="9.9.9",
                 python=__import__("platform").python_version()) == 1
    assert value(m, "omniroute_config_info", version="0123456789ab") == 1
    assert value(m, "omniroute_config_loaded_timestamp_seconds") == T0 / 1000
    assert value(m, "omniroute_config_last_reload_success") == 0
    assert [value(m, "omniroute_trace_spans_total", result=r)
            for r in ("exported", "dropped", "failed")] == [40, 2, 512]
    assert value(m, "omniroute_trace_spans_queued") == 17
    assert value(m, "omniroute_config_reloads_total", result="ok") == 2
    assert value(m, "omniroute_config_reloads_total", result="refused") == 1
    assert value(m, "omniroute_store_up") == 0
    assert value(m, "omniroute_store_pending_changes") == 7
    assert value(m, "omniroute_store_failing_since_timestamp_seconds") == (T0 - 5_000) / 1000
    assert value(m, "omniroute_fleet_up") == 0
    assert value(m, "omniroute_fleet_queued_changes") == 3
    assert value(m, "omniroute_fleet_events_applied_total") == 2
    assert value(m, "omniroute_fleet_rejected_total") == 2
    assert value(m, "omniroute_fleet_dropped_total") == 4
    lag = {b["le"]: value(m, "omniroute_fleet_propagation_lag_seconds_bucket", **b)
           for b in series(m, "omniroute_fleet_propagation_lag_seconds_bucket")}
    assert (lag["0.025"], lag["0.05"], lag["0.5"], lag["1.0"], lag["+Inf"]) == (0, 1, 1, 2, 2)
    assert value(m, "omniroute_fleet_propagation_lag_seconds_sum") == 0.73
    store.state = StoreHealth(True)
    assert value(s.scrape(), "omniroute_store_failing_since_timestamp_seconds") == 0


def test_without_store_fleet_or_config_those_families_are_absent() -> None:
    names = {name for name, _ in Setup().scrape()}
    assert not any(n.startswith(("omniroute_store_", "omniroute_fleet_",
                                 "omniroute_config_")) for n in names)


def test_the_exposition_is_generate_latests_bytes() -> None:
    """The fast writer against prometheus_client's own, escapes included."""
    clock = ManualClock(T0)
    engine = ResilienceEngine([ProviderSpec("alpha", ("a", "b"), settings())], clock)
    router = Router(engine, {}, models=None)  # alpha learns model names
    registry = build_registry(router, clock=clock)
    for i, name in enumerate(['say "hi"', "back\\slash", "new\nline", "ünï", "plain"]):
        engine.bus.emit(ResultEvent(T0, f"r{i}", 1, "alpha", "a", name, 500,
                                    FailureKind.SERVER_ERROR, 1234567))
        engine.bus.emit(LockoutEvent(T0, "alpha", "a", name, FailureKind.FORBIDDEN, 1, T0))
    s = Setup(store=FakeStore(), fleet=FakeFleet(),
              config_status=ConfigStatus(None, "abc", T0))
    s.request("r1", "chat", (500, FailureKind.SERVER_ERROR, None, 1_234_567), OK)
    for reg in (registry, s.registry):
        text = exposition(reg)
        assert text == generate_latest(reg)
    assert b'model="say \\"hi\\""' in exposition(registry)


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian's prometheus package: make test "
                           "installs it as root)")
def test_promtool_finds_nothing_to_lint() -> None:
    s = Setup(store=FakeStore(), fleet=FakeFleet(), config_status=ConfigStatus(None, "a", T0),
              traces=FakeTraces())
    s.request("r1", "chat", (500, FailureKind.SERVER_ERROR, None, 10), OK)
    s.request("r2", "alpha/n", (403, FailureKind.FORBIDDEN, None, 0))  # a cools, b locks n
    text = exposition(s.registry)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert done.stdout.strip() == b"" and done.stderr.strip() == b""


def test_labels_stay_bounded_with_a_thousand_learned_names() -> None:
    clock = ManualClock(T0)
    engine = ResilienceEngine([ProviderSpec("open", ("k1", "k2"), settings()),
                               ProviderSpec("listed", ("l1",), settings())], clock)
    router = Router(engine, {}, models={"listed": frozenset({"m"})})  # `open` learns names
    registry = build_registry(router, clock=clock)
    names = [f"model-{i}" for i in range(1_200)]
    for i, name in enumerate(names):
        bus = engine.bus
        bus.emit(ResultEvent(T0, f"r{i}", 1, "open", "k1", name, 200, None, 5))
        # lockouts of names the router never resolved (another replica's, say)
        engine.layers("open").lockouts.merge(T0, "k2", name, FailureKind.FORBIDDEN, 1,
                                             T0 + 60_000)
    m = parse(exposition(registry))
    models = {a["model"] for a in series(m, "omniroute_attempts_total")}
    assert len(models) == MAX_LEARNED_MODELS + 1
    assert OTHER in models
    assert value(m, "omniroute_attempts_total", provider="open", connection="k1",
                 model=OTHER, outcome="ok") == 1_200 - MAX_LEARNED_MODELS
    locked = {lk["model"] for lk in series(m, "omniroute_lockouts_active")
              if lk["provider"] == "open"}
    assert len(locked) == MAX_LEARNED_MODELS + 1
    assert sum(value(m, "omniroute_lockouts_active", **lk)
               for lk in series(m, "omniroute_lockouts_active")) == 1_200
    assert len(m) < 2_000  # every family together


def test_requests_that_never_answer_do_not_grow_the_table() -> None:
    from omniroute_tui.engine.events import RequestEvent
    from omniroute_tui.metrics.traffic import MAX_OPEN_REQUESTS

    s = Setup()
    for i in range(MAX_OPEN_REQUESTS + 10):
        s.engine.bus.emit(RequestEvent(T0, f"lost-{i}", "chat"))
    s.request("r1", "chat", OK)  # still counted
    assert value(s.scrape(), "omniroute_requests_total", route="chat", status_class="2xx") == 1


# -- the manual's page is the code's ------------------------------------------------------

DOCS = Path(__file__).parent.parent / "docs" / "metrics.md"


def test_the_metric_table_is_what_a_scrape_exposes() -> None:
    rows = re.findall(r"^\| `(omniroute_\w+)` \| (\w+) \|([^|]*)\|", DOCS.read_text(),
                      re.MULTILINE)
    documented = {name: kind for name, kind, _ in rows}
    exposed = {f"{name}_total" if kind == "counter" else name: kind
               for name, kind in CONTRACT.items()}
    assert documented == exposed
    s = Setup(store=FakeStore(), fleet=FakeFleet(), config_status=ConfigStatus(None, "a", T0),
              traces=FakeTraces())
    s.request("r1", "chat", (500, FailureKind.SERVER_ERROR, None, 10), OK)
    from prometheus_client.parser import text_string_to_metric_families

    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition(s.registry).decode()):
        for sample in family.samples:
            labels.setdefault(family.name if family.type != "counter"
                              else f"{family.name}_total", set()).update(
                k for k in sample.labels if k != "le")
    for name, _, cells in rows:  # the label names, without the values in parentheses
        assert set(re.findall(r"`(\w+)`", re.sub(r"\(.*?\)", "", cells))) == labels[name], name


def test_the_config_example_loads() -> None:
    from omniroute_tui.config import MetricsAccess, load_router_config

    block = re.findall(r"```yaml\n(gateway:.*?)```", DOCS.read_text(), re.DOTALL)[0]
    config = load_router_config("metrics.md", text="providers:\n  p:\n    models: [m]\n"
                                "    connections: [k]\nroutes: {}\n" + block)
    assert config.gateway_metrics is MetricsAccess.PUBLIC


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian's prometheus package: make test "
                           "installs it as root)")
def test_the_scrape_config_is_one_prometheus_takes(tmp_path: Path) -> None:
    block = re.findall(r"```yaml\n(scrape_configs:.*?)```", DOCS.read_text(), re.DOTALL)[0]
    token = tmp_path / "token.txt"
    token.write_text("a-token-of-sixteen-or-more\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(block.replace("/etc/prometheus/omniroute-token.txt", str(token)))
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert yaml.safe_load(block)["scrape_configs"][0]["authorization"] == {
        "type": "Bearer", "credentials_file": "/etc/prometheus/omniroute-token.txt"}


ROUTER_A = """\
providers:
  alpha: {base_url: 'http://127.0.0.1:9/v1', models: [m], connections: [a]}
routes:
  chat: {targets: [alpha/m]}
"""


def test_a_provider_a_reload_adds_has_its_counters_at_zero_and_the_others_keep_theirs(
) -> None:
    from omniroute_tui.config import load_router_config

    first = load_router_config("router.yaml", text=ROUTER_A)
    router = first.build(ManualClock(T0))
    registry = build_registry(router, clock=router.engine.clock)
    routing = router.start("r1", "chat")
    assert isinstance(routing.next_step(), Attempt)
    routing.record(429, Classification(FailureKind.RATE_LIMITED, None))
    routing.next_step()
    second = load_router_config("router.yaml", text=ROUTER_A.replace(
        "routes:", "  delta: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
                   "connections: [d]}\nroutes:"))
    second.reconfigure(router, previous=first)
    m = parse(exposition(registry))
    for kind in ("ok", *FailureKind):
        assert value(m, "omniroute_upstream_attempts_total", provider="delta",
                     outcome=kind) == 0
        assert value(m, "omniroute_upstream_attempts_total", provider="alpha",
                     outcome=kind) == (1 if kind == "rate_limited" else 0)
    for kind in FailureKind:
        assert value(m, "omniroute_upstream_failures_total", provider="delta", kind=kind) == 0
    assert value(m, "omniroute_upstream_failures_total", provider="alpha",
                 kind="rate_limited") == 1
    assert value(m, "omniroute_skips_total", provider="delta", reason="circuit_open") == 0
    assert value(m, "omniroute_retry_budget_exhausted_total", provider="delta") == 0


def test_upstream_latency_per_provider_and_model_from_every_answered_attempt() -> None:
    """r1: alpha's 500 after 10 ms, beta's success after 300 ms; r2: alpha/n's 403 at
    once. Every model a provider declares has its histogram from the start."""
    s = Setup()
    fresh = s.scrape()
    assert value(fresh, "omniroute_upstream_latency_seconds_count", provider="gamma",
                 model="m") == 0
    s.request("r1", "chat", (500, FailureKind.SERVER_ERROR, None, 10),
              (200, None, None, 300))
    s.request("r2", "alpha/n", (403, FailureKind.FORBIDDEN, None, 0))
    m = s.scrape()

    def histogram(provider: str, model: str) -> dict[str, float]:
        return {b["le"]: value(m, "omniroute_upstream_latency_seconds_bucket", **b)
                for b in series(m, "omniroute_upstream_latency_seconds_bucket")
                if (b["provider"], b["model"]) == (provider, model)}

    assert histogram("alpha", "m")["0.05"] == 1
    assert histogram("beta", "m")["0.25"] == 0 and histogram("beta", "m")["0.5"] == 1
    assert histogram("alpha", "n")["0.05"] == 1
    assert value(m, "omniroute_upstream_latency_seconds_sum", provider="beta", model="m") \
        == pytest.approx(0.3)
    assert {(p["provider"], p["model"]) for p in
            series(m, "omniroute_upstream_latency_seconds_count")} == {
        ("alpha", "m"), ("alpha", "n"), ("beta", "m"), ("gamma", "m")}


def test_time_to_first_token_and_tokens_from_the_gateway_bounded_by_the_config() -> None:
    from omniroute_tui.drivers.usage import Usage

    s = Setup()
    m = s.scrape()
    # every target of every route, and every declared provider/model asked for by name
    zero = {(t["provider"], t["route"], t["model"], t["type"])
            for t in series(m, "omniroute_upstream_tokens_total")}
    assert len(zero) == 2 * (4 + 4) and ("gamma", "quota", "m", "prompt") in zero
    assert all(value(m, "omniroute_upstream_tokens_total", provider=p, route=r, model=mo,
                     type=t) == 0 for p, r, mo, t in zero)
    s.answers.usage("alpha", "chat", "m", Usage(120, 30))
    s.answers.usage("alpha", "chat", "m", Usage(5, 1))
    s.answers.streamed("beta", "m", 180)
    s.answers.streamed("beta", "m", 40)
    for i in range(1_500):  # names no config declares: one `other` histogram, routes capped
        s.answers.streamed("alpha", f"learned-{i}", 10)
        s.answers.usage("alpha", f"alpha/learned-{i}", f"learned-{i}", Usage(1, 1))
    m = s.scrape()
    assert value(m, "omniroute_upstream_tokens_total", provider="alpha", route="chat",
                 model="m", type="prompt") == 125
    assert value(m, "omniroute_upstream_tokens_total", provider="alpha", route="chat",
                 model="m", type="completion") == 31
    assert value(m, "omniroute_upstream_time_to_first_token_seconds_count", provider="beta",
                 model="m") == 2
    assert value(m, "omniroute_upstream_time_to_first_token_seconds_bucket", provider="beta",
                 model="m", le="0.05") == 1
    assert value(m, "omniroute_upstream_time_to_first_token_seconds_count", provider="alpha",
                 model=OTHER) == 1_500
    assert len(series(m, "omniroute_upstream_time_to_first_token_seconds_count")) == 5
    routes = {t["route"] for t in series(m, "omniroute_upstream_tokens_total")}
    assert len(routes) <= 3 + 4 + MAX_LEARNED_MODELS + 1
    assert sum(value(m, "omniroute_upstream_tokens_total", **t)
               for t in series(m, "omniroute_upstream_tokens_total")
               if t["type"] == "prompt") == 125 + 1_500
