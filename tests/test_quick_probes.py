"""Quick probes, free keys (docs/design.md §3, §8): short windows, a probe that may use a key
cooling for backoff, a successful probe that frees the provider's backoff keys; and the
hinted window honoured up to the breaker's longest one. Hand-worked on a ManualClock."""

from __future__ import annotations

import io
import json
from typing import Any

from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.console.model.event_lines import describe
from omniroute_tui.console.model.request_steps import request_steps
from omniroute_tui.engine import (
    AttemptEvent,
    BreakerEvent,
    BreakerState,
    CooldownEvent,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.engine.kinds import BreakerReason, CooldownReason, SkipReason
from omniroute_tui.router import Attempt, Response, Wait
from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

from .helpers import ADMIT, OK, fail, make_engine, make_router

SERVER = FailureKind.SERVER_ERROR


def serve(engine: ResilienceEngine, clock: Any, down: tuple[int, int], until: int,
          every: int = 1000) -> int | None:
    """A request every `every` ms from 0 to `until`, each answered at once: alpha answers 503
    while `down[0] <= t < down[1]`, everything else 200. Returns when alpha first served
    after the outage."""
    router = make_router(engine)
    back = None
    for i, t in enumerate(range(0, until, every)):
        clock.set(t)
        routing = router.start(f"r{i}", "r")
        while not isinstance(step := routing.next_step(), Response):
            assert not isinstance(step, Wait), "beta is healthy: nothing waits"
            assert isinstance(step, Attempt)
            failing = step.provider == "alpha" and down[0] <= t < down[1]
            if step.provider == "alpha" and not failing and t >= down[1] and back is None:
                back = t
            routing.record(503 if failing else 200, fail(SERVER) if failing else OK)
    return back


def alpha(events: list[Any], *types: type) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events if isinstance(e, types) and e.provider == "alpha"]


def test_an_unhinted_30s_outage_traffic_is_back_within_2_5s() -> None:
    engine, clock, rec = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    back = serve(engine, clock, down=(500, 30_500), until=34_000)
    # by hand, with the defaults (cooldowns 3, 6, 12, 24 s; breaker 5 failures, 5 s windows;
    # failures of one key within 5 s counted once):
    #  1.0 s a1 fails (f 1), cools to 4.0; 2.0 a2 (f 2) to 5.0; 4.0 a1 (deduped) to 10.0;
    #  5.0 a2 (deduped) to 11.0; 10.0 a1 (f 3, DEGRADED) to 22.0; 11.0 a2 (f 4) to 23.0;
    #  16.0 both keys cooling for backoff, a breaker window (5 s) after the last failure:
    #  a1, whose cooldown ends first, carries the request (docs/design.md §4): it fails
    #  (f 5): OPEN for 5 s; a1 was cooling, so no escalation;
    #  21.0 the probe finds both keys cooling and takes a1 (to 22.0): fails, OPEN 5 s again;
    #  26.0 the probe takes a1 (ready since 22.0): fails, a1 cools 24 s to 50.0;
    #  30.5 alpha recovers;
    #  31.0 the probe takes a2 (ready since 23.0): it succeeds, the breaker closes and both
    #  keys are freed (a1 cooling, a2's level); 32.0 a1 serves as usual.
    cooldowns = [(c["t"], c["connection"], c["kind"], c["level"], c["until"], c.get("reason"))
                 for c in alpha(rec.events, CooldownEvent)]
    assert cooldowns == [
        (1_000, "a1", SERVER, 1, 4_000, None), (2_000, "a2", SERVER, 1, 5_000, None),
        (4_000, "a1", SERVER, 2, 10_000, None), (5_000, "a2", SERVER, 2, 11_000, None),
        (10_000, "a1", SERVER, 3, 22_000, None), (11_000, "a2", SERVER, 3, 23_000, None),
        (26_000, "a1", SERVER, 4, 50_000, None),
        (31_000, "a1", None, 0, 31_000, CooldownReason.PROBE_FREED),
        (31_000, "a2", None, 0, 23_000, CooldownReason.PROBE_FREED),
    ]
    breakers = [(b["t"], b["to"], b["reason"], b["retry_after_ms"])
                for b in alpha(rec.events, BreakerEvent)]
    assert breakers == [
        (10_000, "DEGRADED", "failures", None), (16_000, "OPEN", "threshold", 5_000),
        (21_000, "HALF_OPEN", "reset_timeout", None), (21_000, "OPEN", "probe_failed", 5_000),
        (26_000, "HALF_OPEN", "reset_timeout", None), (26_000, "OPEN", "probe_failed", 5_000),
        (31_000, "HALF_OPEN", "reset_timeout", None), (31_000, "CLOSED", "probe_succeeded", None),
    ]
    on_cooling = [(a["t"], a["connection"], a.get("cooling_until"), a["probe"])
                  for a in alpha(rec.events, AttemptEvent) if "cooling_until" in a]
    assert on_cooling == [(16_000, "a1", 22_000, False), (21_000, "a1", 22_000, True)]
    probes = [(a["t"], a["connection"]) for a in alpha(rec.events, AttemptEvent) if a["probe"]]
    assert probes == [(21_000, "a1"), (26_000, "a1"), (31_000, "a2")]
    assert back == 31_000 and back - 30_500 == 500 <= 2_500
    assert [a["t"] for a in alpha(rec.events, AttemptEvent)][-2:] == [32_000, 33_000]


def three_keys() -> tuple[ResilienceEngine, Any, Any]:
    """alpha with five keys for model m, its breaker OPEN (probe due at 5 s) and beta."""
    engine, clock, rec = make_engine({"alpha": ("k1", "k2", "k3", "k4", "k5"), "beta": ("b",)})
    for _ in range(5):
        engine.layers("alpha").breaker.record_failure(0, SERVER, engine.admit("alpha"))
    assert engine.breaker_snapshot("alpha").state is BreakerState.OPEN
    return engine, clock, rec


def record(engine: ResilienceEngine, conn: str, kind: FailureKind | None,
           hint: int | None = None, model: str = "m") -> None:
    engine.record("alpha", conn, model, ADMIT, fail(kind, hint) if kind else OK)


def probe_once(engine: ResilienceEngine) -> Attempt | Response:
    routing = make_router(engine, ("alpha/m",)).start("probe", "r")
    step = routing.next_step()
    assert not isinstance(step, Wait)
    return step


def test_the_probe_takes_only_a_key_cooling_for_backoff_the_first_to_end() -> None:
    engine, clock, _ = three_keys()  # OPEN at 0 for 5 s
    clock.set(2_000)
    record(engine, "k1", FailureKind.QUOTA_EXHAUSTED, hint=3_200)  # quota: to 5.2 s
    record(engine, "k2", FailureKind.RATE_LIMITED, hint=3_300)  # hinted: to 5.3 s
    clock.set(2_100)
    record(engine, "k3", SERVER)  # backoff to 5.1 s, but disabled
    engine.set_enabled("alpha", "k3", False, actor="ops")
    record(engine, "k4", SERVER)  # backoff to 5.1 s, but model m is locked on it
    record(engine, "k4", FailureKind.MODEL_NOT_FOUND)
    clock.set(2_500)
    record(engine, "k5", SERVER)  # backoff to 5.5 s: the one the probe may use
    clock.set(5_000)
    step = probe_once(engine)
    assert isinstance(step, Attempt) and step.probe and step.connection == "k5"
    assert engine.connection_snapshot("alpha", "k5").cooling_until == 5_500


def test_with_no_backoff_key_the_probe_skips_and_gives_its_slot_back() -> None:
    engine, clock, rec = three_keys()
    record(engine, "k1", FailureKind.QUOTA_EXHAUSTED)
    record(engine, "k2", FailureKind.RATE_LIMITED, hint=60_000)
    for conn in ("k3", "k4", "k5"):
        record(engine, conn, FailureKind.AUTH_FAILED)  # disabled, not cooling
    clock.set(5_000)
    step = probe_once(engine)
    assert isinstance(step, Response) and step.status == 429
    assert [e.reason for e in rec.events if e.TYPE == "skip"] == [SkipReason.ALL_COOLING]
    assert engine.breaker_snapshot("alpha").probes_in_flight == 0
    assert engine.admit("alpha").probe  # the slot is free for the next request


def test_a_successful_probe_frees_backoff_cooldowns_and_levels_only() -> None:
    engine, clock, rec = three_keys()
    record(engine, "k1", FailureKind.QUOTA_EXHAUSTED)  # quota: stays
    record(engine, "k2", FailureKind.RATE_LIMITED, hint=60_000)  # hinted: stays
    record(engine, "k3", SERVER)  # backoff: freed, though an operator disabled it
    engine.set_enabled("alpha", "k3", False, actor="ops")
    record(engine, "k4", SERVER)  # backoff, and model m locked: the cooldown goes
    record(engine, "k4", FailureKind.MODEL_NOT_FOUND)
    record(engine, "k5", SERVER)  # the probe's key
    clock.set(5_000)
    step = probe_once(engine)
    assert isinstance(step, Attempt) and step.connection == "k5"
    rec.clear()
    clock.set(5_200)
    engine.record("alpha", "k5", "m", step.admission, OK)
    assert [(e.TYPE, getattr(e, "connection", None), getattr(e, "reason", None))
            for e in rec.events] == [
        ("breaker", None, BreakerReason.PROBE_SUCCEEDED),
        ("cooldown", "k3", CooldownReason.PROBE_FREED),
        ("cooldown", "k4", CooldownReason.PROBE_FREED),
        ("cooldown", "k5", CooldownReason.PROBE_FREED),
    ]
    snap = {c: engine.connection_snapshot("alpha", c) for c in ("k1", "k2", "k3", "k4", "k5")}
    assert snap["k1"].cooling_until == 3_600_000 and snap["k2"].cooling_until == 60_000
    assert snap["k2"].level == 1  # a hinted cooldown keeps its level too
    assert snap["k3"].disabled and snap["k3"].cooling_until <= 5_200 and snap["k3"].level == 0
    assert (snap["k4"].cooling_until, snap["k4"].level) == (3_000, 0)
    assert engine.layers("alpha").lockouts.locked_until("k4", "m", 5_200) == 120_000
    assert (snap["k5"].cooling_until, snap["k5"].level) == (3_000, 0)


def test_a_failed_probe_frees_nothing_and_a_success_outside_half_open_neither() -> None:
    engine, clock, rec = three_keys()
    clock.set(2_500)
    for conn in ("k1", "k2", "k3", "k4", "k5"):
        record(engine, conn, SERVER)  # all cooling to 5.5 s
    clock.set(5_000)
    step = probe_once(engine)
    assert isinstance(step, Attempt) and step.connection == "k1"
    engine.record("alpha", "k1", "m", step.admission, fail(SERVER))
    k1 = engine.connection_snapshot("alpha", "k1")
    assert (k1.cooling_until, k1.level) == (5_500, 1)  # an active cooldown: not escalated
    assert not [e for e in rec.events if getattr(e, "reason", None) == "probe_freed"]
    engine.reset_breaker("alpha", actor="ops")  # an operator's reset frees nothing either
    assert engine.connection_snapshot("alpha", "k2").level == 1


def test_the_hinted_window_is_the_hint_up_to_the_longest_window() -> None:
    for hint, window in ((20_000, 20_000), (100_000, 30_000), (10, 1_000), (None, 5_000)):
        engine, _, rec = make_engine()
        breaker = engine.layers("alpha").breaker
        for _ in range(5):
            breaker.record_failure(0, FailureKind.RATE_LIMITED, engine.admit("alpha"), hint)
        (opened,) = [e for e in rec.events if isinstance(e, BreakerEvent) and e.to == "OPEN"]
        assert opened.retry_after_ms == window, hint
        assert engine.breaker_snapshot("alpha").open_for_ms == window


# -- a fleet ---------------------------------------------------------------------------------

def two_replicas() -> tuple[ResilienceEngine, ResilienceEngine, Any]:
    from omniroute_tui.clock import ManualClock

    clock = ManualClock()
    spec = [ProviderSpec("alpha", ("k1", "k2"), default_settings())]
    return ResilienceEngine(spec, clock), ResilienceEngine(spec, clock), clock


def test_a_probe_that_closed_the_breaker_elsewhere_frees_backoff_keys_here() -> None:
    here, there, clock = two_replicas()
    told: list[Any] = []
    there.bus.subscribe(told.append)
    for engine in (here, there):
        for conn in ("k1", "k2"):
            engine.record("alpha", conn, "m", ADMIT, fail(SERVER))
        for _ in range(3):
            engine.layers("alpha").breaker.record_failure(0, SERVER, engine.admit("alpha"))
    here.record("alpha", "k2", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 9_000))  # hinted
    clock.set(5_000)
    probe = there.admit("alpha")
    assert probe.probe
    told.clear()
    there.record("alpha", "k1", "m", probe, OK)
    close = next(e for e in told if isinstance(e, BreakerEvent))
    freed = [e for e in told if isinstance(e, CooldownEvent)]
    assert [e.connection for e in freed] == ["k1", "k2"]
    # a lifted cooldown heard on its own is not applied (a merge only extends) ...
    assert not any(here.merge(e) for e in freed)
    assert here.connection_snapshot("alpha", "k1").level == 1
    # ... but the probe's success closes the breaker here and frees the backoff keys
    assert here.merge(close)
    assert here.breaker_snapshot("alpha").state is BreakerState.CLOSED
    assert engine_levels(here) == {"k1": (0, 3_000), "k2": (1, 9_000)}  # k2 was hinted here
    assert not here.merge(close)  # merging twice is once
    assert engine_levels(here) == {"k1": (0, 3_000), "k2": (1, 9_000)}


def engine_levels(engine: ResilienceEngine) -> dict[str, tuple[int, int]]:
    snaps = (engine.connection_snapshot("alpha", c) for c in ("k1", "k2"))
    return {s.connection: (s.level, s.cooling_until) for s in snaps}


# -- the simulator: variants of shipped scenarios without retry hints -----------------------

def variant(shipped: str, *edits: tuple[str, str]) -> tuple[dict[str, Any], list[dict]]:
    from simulator.scenario import SCENARIOS_DIR

    text = (SCENARIOS_DIR / f"{shipped}.yaml").read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    out = io.StringIO()
    metrics = run_virtual(load_scenario(f"{shipped}-variant.yaml", text=text), "resilient",
                          trace=out)
    return metrics, [json.loads(line) for line in out.getvalue().splitlines()]


def test_an_unhinted_45s_storm_first_success_within_6s_one_probe_a_window() -> None:
    metrics, events = variant("429-storm", ("retry_after: 10s, ", ""), ("for: 4m}", "for: 45s}"),
                              ("duration: 5m", "duration: 2m"))
    # storm from 30 s to 75 s; the breaker opens at 39.6 s, six probes fail in 5 s windows;
    # the seventh, at 77.7 s, finds every key cooling, takes a1 (backoff to 80.4 s) and
    # succeeds at 78.8 s (its latency): the breaker closes and the four keys are freed
    assert metrics["faults"]["storm"]["ttr_ms"] == 3_793 <= 6_000
    assert metrics["providers"]["alpha"]["max_attempts_per_open"] == 1
    opens = [(e["t"], e["retry_after_ms"]) for e in events
             if e["type"] == "breaker" and e["provider"] == "alpha" and e["to"] == "OPEN"]
    assert [w for _, w in opens] == [5_000] * 7
    probes = [e for e in events if e["type"] == "attempt" and e["provider"] == "alpha"
              and e["probe"]]
    assert len(probes) == len(opens)  # one probe a window, the last one succeeding
    assert [(p["t"], p["connection"], p.get("cooling_until")) for p in probes][-1] == (
        77_739, "a1", 80_367)
    freed = [(e["t"], e["connection"]) for e in events
             if e["type"] == "cooldown" and e.get("reason") == "probe_freed"]
    assert freed == [(78_793, c) for c in ("a1", "a2", "a3", "a4")]
    assert metrics["success_rate"] == 1.0


def test_an_unhinted_30s_outage_in_the_simulator_is_back_within_2_5s() -> None:
    metrics, _ = variant("provider-outage", ("for: 3m}", "for: 30s}"),
                         ("duration: 6m", "duration: 2m"))
    # 1,821 when the route's requests all went to a1 first (priority, the default then)
    assert metrics["faults"]["outage"]["ttr_ms"] == 947
    assert metrics["providers"]["alpha"]["max_attempts_per_open"] == 1


# -- the console ------------------------------------------------------------------------------

def test_the_console_says_a_probe_used_a_cooling_key_and_what_it_freed() -> None:
    scenario = load_scenario("console.yaml", text=SCENARIO)
    model = ConsoleModel(scenario.providers, lambda: 40_000)
    engine, clock, rec = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    serve(engine, clock, down=(500, 21_000), until=23_000)  # the probe at 21 s succeeds
    for event in rec.events:
        model.on_event(event)
    trail = model.requests["r21"]
    steps = [what for _, _, what in request_steps(trail.events)]
    assert ("attempt 1 on alpha/a1/m as the breaker's probe, on a key cooling for backoff "
            "until 00:22.0 (every key was cooling: the probe tests the provider, not the key)"
            ) in steps
    assert [what for _, layer, what in request_steps(trail.events) if layer == "cooldown"] == [
        "the probe's success freed alpha/a1 (its backoff was the provider's failing)",
        "the probe's success freed alpha/a2 (its backoff was the provider's failing)"]
    carried = [what for _, _, what in request_steps(model.requests["r16"].events)]
    assert ("attempt 1 on alpha/a1/m, carried on a key cooling for backoff until 00:22.0 "
            "(every key it could use was cooling and a breaker window had passed since the "
            "provider's last failure)") in carried
    lines = [entry.line for entry in model.events]
    assert ("probe alpha/a1/m on a key cooling for backoff until 00:22.0 (every key was "
            "cooling) for r21") in lines
    assert ("carried alpha/a1/m on a key cooling for backoff until 00:22.0 (every key was "
            "cooling) for r16") in lines
    assert "cooldown alpha/a1: freed by the breaker's successful probe (backoff), level 0" \
        in lines
    assert model.connections[("alpha", "a1")].level == 0


def test_the_console_says_a_carried_request_freed_the_keys() -> None:
    scenario = load_scenario("console.yaml", text=SCENARIO)
    model = ConsoleModel(scenario.providers, lambda: 40_000)
    engine, clock, rec = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    serve(engine, clock, down=(500, 16_000), until=17_000)  # the carried request at 16 s
    for event in rec.events:
        model.on_event(event)
    carried_steps = request_steps(model.requests["r16"].events)
    assert [what for _, layer, what in carried_steps if layer == "cooldown"] == [
        "the carried request's success freed alpha/a1 (its backoff was the provider's failing)",
        "the carried request's success freed alpha/a2 (its backoff was the provider's failing)"]
    lines = [entry.line for entry in model.events]
    assert "cooldown alpha/a2: freed by a carried request's success (backoff), level 0" in lines


def test_freed_describes_itself_for_any_until() -> None:
    event = CooldownEvent(5, "p", "c", None, 0, 1, None, CooldownReason.PROBE_FREED)
    assert describe(event) == "cooldown p/c: freed by the breaker's successful probe " \
        "(backoff), level 0"


SCENARIO = """\
name: console
duration: 1m
providers:
  alpha: {models: [m], connections: [a1, a2]}
  beta: {models: [m], connections: [b1]}
routes:
  r: {targets: [alpha/m, beta/m]}
traffic:
  - {route: r, every: 1s}
"""


def test_metrics_count_the_probe_on_a_cooling_key_and_the_keys_it_freed() -> None:
    """The hand-worked outage above, scraped: one probe on a cooling key, two keys freed."""
    from omniroute_tui.metrics import build_registry, exposition

    from .metrics_helpers import parse, value

    engine, clock, _ = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    registry = build_registry(make_router(engine), clock=clock)
    serve(engine, clock, down=(500, 30_500), until=34_000)
    samples = parse(exposition(registry))
    assert value(samples, "omniroute_probes_on_cooling_key_total", provider="alpha") == 1
    assert value(samples, "omniroute_probe_freed_keys_total", provider="alpha") == 2
    assert value(samples, "omniroute_probes_on_cooling_key_total", provider="beta") == 0
    assert value(samples, "omniroute_carried_on_cooling_key_total", provider="alpha") == 1
    assert value(samples, "omniroute_carrier_freed_keys_total", provider="alpha") == 0
    engine, clock, _ = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    registry = build_registry(make_router(engine), clock=clock)
    serve(engine, clock, down=(500, 16_000), until=17_000)  # the carried request succeeds
    samples = parse(exposition(registry))
    assert value(samples, "omniroute_carrier_freed_keys_total", provider="alpha") == 2
    assert value(samples, "omniroute_probe_freed_keys_total", provider="alpha") == 0


def test_the_readme_quotes_these_recovery_times() -> None:
    """3,793 and 1,821 ms, pinned above, are what the README's "Back within seconds" says."""
    from pathlib import Path

    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    assert "After a 30 s outage without a hint traffic is back 1.8 s after the provider" in readme
    assert "after a 45 s 429 storm without Retry-After 3.8 s" in readme
