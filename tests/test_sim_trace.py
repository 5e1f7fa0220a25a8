"""Virtual-time replays of small scenarios, checked against trace facts worked out by hand."""

from __future__ import annotations

import io
import json
from typing import Any

from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

BASE = """\
name: t
seed: 1
duration: {duration}
resilience: {resilience}
providers:
  alpha:
    per_model_quota: {per_model}
    models: [m]
    latency: 100ms
    connections: {alpha_conns}
  beta: {{models: [m], latency: 100ms, connections: [x]}}
routes:
  r: {{strategy: {strategy}, targets: {targets}}}
traffic:
{traffic}
faults:
{faults}
"""


def replay(policy: str = "resilient", **fields: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    values = {"duration": "2m", "resilience": "{admission: {max_wait: 0s}}",
              "per_model": "false", "alpha_conns": "[c]", "targets": "[alpha/m]",
              "strategy": "priority",
              "traffic": "  - {route: r, every: 1s}", "faults": "  []"}
    values.update(fields)
    scenario = load_scenario("t.yaml", text=BASE.format(**values))
    out = io.StringIO()
    metrics = run_virtual(scenario, policy, trace=out)
    return [json.loads(line) for line in out.getvalue().splitlines()], metrics


def of(events: list[dict[str, Any]], type_: str, *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(e[k] for k in ("t", *keys)) for e in events if e["type"] == type_]


def test_cooldown_ladder_and_breaker_times() -> None:
    events, _ = replay(
        duration="2m", faults="  - {name: down, target: alpha, error: 500, at: 0s, for: 5m}")
    # each failure lands 100 ms after the attempt. The ladder (3 s, 6 s) until the key
    # cools past a breaker window (5 s) after the last failure: then the key carries the
    # first request after that window (docs/design.md §4): at 10 s (its cooldown ends as
    # that attempt fails: the ladder's next step, 12 s), 16 s (cooling: no escalation),
    # 22 s (24 s), 28 s, which opens the breaker; from there the probes decide
    assert of(events, "cooldown", "level", "until") == [
        (100, 1, 3_100), (4_100, 2, 10_100), (10_100, 3, 22_100), (22_100, 4, 46_100),
        (46_100, 5, 94_100), (102_100, 5, 198_100),
    ]
    # the failure at 4.1 s is within 5 s of the one counted at 0.1 s: suppressed
    assert of(events, "dedup", "connection", "window") == [(4_100, "c", "connection")]
    # open at 28.1 s for 5 s; each probe (the first request after the window) fails 100 ms
    # later and opens it again: 5 s windows for cycles up to 6, then 10 s, then 20 s
    opens = [34_000, 40_000, 46_000, 52_000, 58_000, 64_000, 70_000, 81_000, 102_000]
    assert of(events, "breaker", "from", "to", "failures") == [
        (16_100, "CLOSED", "DEGRADED", 3), (28_100, "DEGRADED", "OPEN", 5),
        *(step for n, t in enumerate(opens, 5)
          for step in ((t, "OPEN", "HALF_OPEN", n), (t + 100, "HALF_OPEN", "OPEN", n + 1))),
    ]
    # the carried requests and the probes on the cooling key: their failures never
    # escalated it while it cooled (the cooldown events above)
    assert [(e["t"], e["cooling_until"], e["probe"]) for e in events
            if e["type"] == "attempt" and e.get("cooling_until") is not None] == [
        (10_000, 10_100, False), (16_000, 22_100, False), (22_000, 22_100, False),
        (28_000, 46_100, False), (34_000, 46_100, True), (40_000, 46_100, True),
        (46_000, 46_100, True), (52_000, 94_100, True), (58_000, 94_100, True),
        (64_000, 94_100, True), (70_000, 94_100, True), (81_000, 94_100, True)]


def test_probe_times_with_escalation() -> None:
    events, metrics = replay(
        duration="6m",
        resilience="{admission: {max_wait: 0s}, cooldown: {base: 1ms, max: 1ms}, "
                   "dedup: {connection_window: 0s, network_window: 0s}}",
        faults="  - {name: down, target: alpha, error: 503, at: 0s, for: 10m}",
    )
    # five failures (0-4 s) open it at 4.1 s; windows (docs/design.md §8): 5 s for
    # cycles 0-6, then 10, 20 and 30 s; each probe is the first request (every 1 s) after
    probes = [e["t"] for e in events if e["type"] == "attempt" and e["probe"]]
    assert probes == [10_000, 16_000, 22_000, 28_000, 34_000, 40_000, 46_000, 57_000,
                      78_000, *range(109_000, 360_000, 31_000)]
    opens = [(t, r) for t, to, r in of(events, "breaker", "to", "retry_after_ms") if to == "OPEN"]
    assert opens == [*((t, 5_000) for t in range(4_100, 46_100, 6_000)), (46_100, 10_000),
                     (57_100, 20_000), *((t, 30_000) for t in range(78_100, 360_000, 31_000))]
    assert metrics["providers"]["alpha"]["max_attempts_per_open"] == 1
    skips = {e["reason"] for e in events if e["type"] == "skip"}
    assert skips == {"circuit_open"}


def test_lockout_uses_the_upstream_hint_exactly() -> None:
    events, _ = replay(
        duration="20s", per_model="true",
        faults="  - {name: q, target: alpha/*/m, error: 429, retry_after: 7s, at: 0s, for: 1m}",
    )
    assert of(events, "lockout", "model", "failures", "until") == [
        (100, "m", 1, 7_100), (8_100, "m", 2, 15_100), (16_100, "m", 3, 23_100),
    ]
    assert of(events, "cooldown", "level") == []


def test_admission_wait_until_the_cooldown_ends_plus_margin() -> None:
    events, _ = replay(
        resilience="{}", duration="5s",
        traffic="  - {route: r, at: [0s, 1s]}",
        faults="  - {name: blip, target: alpha, error: 429, retry_after: 2s, at: 0s, for: 1ms}",
    )
    # the 429 at 0.1 s cools the key until 3.1 s (3 s backoff beats the 2 s hint)
    responses = of(events, "response", "request", "status", "latency_ms", "waited_ms")
    assert responses[-1] == (3_250, "r2", 200, 2_250, 2_150)
    attempts = of(events, "attempt", "request")
    # r1 made its attempt, so it answers with the upstream 429 and does not wait
    assert attempts == [(0, "r1"), (3_150, "r2")]
    assert responses[0] == (100, "r1", 429, 100, 0)


def test_fallback_order() -> None:
    events, _ = replay(
        duration="1s", alpha_conns="[a, b]", targets="[alpha/m, beta/m]",
        traffic="  - {route: r, at: [0s, 500ms]}",
        faults="  - {name: k, target: alpha/a, error: 429, at: 0s, for: 100ms}\n"
               "  - {name: s, target: alpha, error: 500, at: 500ms, for: 100ms}",
    )
    attempts = of(events, "attempt", "request", "provider", "connection")
    assert attempts == [
        (0, "r1", "alpha", "a"), (100, "r1", "alpha", "b"),  # 429: next connection
        (500, "r2", "alpha", "b"), (600, "r2", "beta", "x"),  # 500: next target
    ]


def test_network_blip_dedup_events() -> None:
    events, _ = replay(
        duration="1s", alpha_conns="[a, b, c]", targets="[alpha/m, beta/m]",
        strategy="round_robin", traffic="  - {route: r, at: [0s, 0s, 0s]}",
        faults="  - {name: blip, target: alpha, error: reset, at: 0s, for: 1s}",
    )
    # three requests at once, one per key (round robin); a reset sends each to beta
    assert of(events, "result", "connection", "kind")[:3] == [
        (100, "a", "network"), (100, "b", "network"), (100, "c", "network")]
    assert of(events, "dedup", "connection", "window") == [
        (100, "b", "network"), (100, "c", "network")]
    assert [e["failures"] for e in events if e["type"] == "breaker"] == []


def test_naive_retries_at_once_then_falls_back() -> None:
    events, metrics = replay(
        "naive", duration="1s", targets="[alpha/m, beta/m]",
        traffic="  - {route: r, at: [0s]}",
        faults="  - {name: s, target: alpha, error: 503, at: 0s, for: 1s}",
    )
    assert of(events, "attempt", "provider") == [
        (0, "alpha"), (100, "alpha"), (200, "alpha"), (300, "alpha"), (400, "beta")]
    assert metrics["amplification"] == 5.0
    assert [e["type"] for e in events if e["type"] in ("breaker", "cooldown")] == []


def test_fault_events_and_trace_shape() -> None:
    events, _ = replay(duration="3s", traffic="  - {route: r, at: [0s]}",
                       faults="  - {name: f, target: alpha/c/m, error: 502, at: 1s, for: 1s}")
    assert of(events, "fault", "name", "phase", "target") == [
        (1000, "f", "start", "alpha/c/m"), (2000, "f", "end", "alpha/c/m")]
    assert list(events[0]) == ["t", "type", "id", "route"]


def test_same_scenario_and_seed_give_a_byte_identical_trace_and_report() -> None:
    scenario = load_scenario("scenarios/demo.yaml")
    first, second = io.StringIO(), io.StringIO()
    report_a = run_virtual(scenario, "resilient", trace=first)
    report_b = run_virtual(scenario, "resilient", trace=second)
    assert first.getvalue() == second.getvalue()
    for volatile in ("wall_s", "sim_rps"):
        report_a.pop(volatile)
        report_b.pop(volatile)
    assert report_a == report_b


def test_hinted_recovery_probes_when_the_provider_said_and_closes_right_after() -> None:
    """A provider-wide 429 storm (0-15 s) with `Retry-After: 10s`, a breaker that opens on
    the first failure. Worked by hand:
    - 0.1 s: the 429 opens it for min(30 s reset, max(10 s hint, 1 s floor)) = 10 s, and
      cools the key for max(10 s hint, 1 ms backoff) = 10 s: both end at 10.1 s;
    - 1-10 s: requests skip (circuit_open); 11 s: the probe, inside the storm: 429 again,
      OPEN for another 10 s (cycles 1: the escalated reset is still 30 s) until 21.1 s;
    - 22 s: the probe, after the storm: 200, CLOSED at 22.1 s; ttr 22.1 - 15 = 7.1 s.
    Under the plain rule the first window would be 30 s: no probe before 31 s."""
    events, metrics = replay(
        duration="30s",
        resilience="{admission: {max_wait: 0s}, cooldown: {base: 1ms, max: 1ms}, "
                   "breaker: {failure_threshold: 1, degraded_threshold: 1}}",
        faults="  - {name: storm, target: alpha, error: 429, retry_after: 10s, at: 0s, "
               "for: 15s}",
    )
    assert of(events, "breaker", "from", "to", "reason", "retry_after_ms") == [
        (100, "CLOSED", "OPEN", "threshold", 10_000),
        (11_000, "OPEN", "HALF_OPEN", "reset_timeout", None),
        (11_100, "HALF_OPEN", "OPEN", "probe_failed", 10_000),
        (22_000, "OPEN", "HALF_OPEN", "reset_timeout", None),
        (22_100, "HALF_OPEN", "CLOSED", "probe_succeeded", None),
    ]
    assert of(events, "cooldown", "level", "until", "hint_ms") == [
        (100, 1, 10_100, 10_000), (11_100, 2, 21_100, 10_000),
        (22_100, 0, 21_100, None)]  # the success puts the key's level back to 0
    probes = [e["t"] for e in events if e["type"] == "attempt" and e["probe"]]
    assert probes == [11_000, 22_000]
    assert metrics["faults"]["storm"]["ttr_ms"] == 7_100


def test_a_hint_below_the_floor_opens_for_min_reset() -> None:
    events, _ = replay(
        duration="5s",
        resilience="{admission: {max_wait: 0s}, cooldown: {base: 1ms, max: 1ms}, "
                   "breaker: {failure_threshold: 1, degraded_threshold: 1, min_reset: 2s}}",
        faults="  - {name: blip, target: alpha, error: 429, retry_after: 200ms, at: 0s, "
               "for: 1s}",
    )
    opens = [(t, r) for t, to, r in of(events, "breaker", "to", "retry_after_ms") if to == "OPEN"]
    assert opens == [(100, 2_000)]  # max(0.2 s hint, 2 s floor), under the 30 s reset
