"""A fleet: the engine's merge rules for what other replicas saw, and a fleet of routers in
virtual time sharing state through them (or not)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.engine.events import (
    BreakerEvent,
    CooldownEvent,
    LockoutEvent,
    OperatorEvent,
    ResultEvent,
)
from omniroute_tui.engine.kinds import BreakerReason
from omniroute_tui.fleet.commands import (
    ClearCooldown,
    ClearLockouts,
    Disable,
    ForceOpen,
    Reset,
)
from simulator.scenario import load_scenario, resolve_scenario
from simulator.virtual import run_virtual

from .helpers import ADMIT, fail, make_engine


def test_a_merged_cooldown_extends_and_never_shortens() -> None:
    engine, clock, rec = make_engine({"p": ("a",)})
    clock.set(1_000)
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 30_000))  # until 31 s
    longer = CooldownEvent(900, "p", "a", FailureKind.RATE_LIMITED, 3, 50_000, None)
    shorter = CooldownEvent(900, "p", "a", FailureKind.RATE_LIMITED, 0, 20_000, None)
    assert engine.merge(shorter) is False
    assert engine.connection_snapshot("p", "a").cooling_until == 31_000
    assert engine.merge(longer) is True
    snap = engine.connection_snapshot("p", "a")
    assert (snap.cooling_until, snap.level) == (50_000, 3)
    assert engine.merge(longer) is False  # twice is once
    assert list(engine.candidates("p", "m")) == []
    assert rec.of("cooldown")[-1]["until"] == 50_000  # announced as its own event


def test_a_merged_lockout_extends_and_a_foreign_connection_is_ignored() -> None:
    engine, clock, _ = make_engine({"p": ("a",)})
    event = LockoutEvent(0, "p", "a", "m", FailureKind.FORBIDDEN, 2, 60_000)
    assert engine.merge(event) is True
    assert engine.merge(LockoutEvent(0, "p", "a", "m", FailureKind.FORBIDDEN, 1, 10_000)) \
        is False
    assert engine.merge(LockoutEvent(0, "p", "zz", "m", FailureKind.FORBIDDEN, 1, 10_000)) \
        is False
    (snap,) = engine.lockout_snapshots("p")
    assert (snap.failures, snap.until) == (2, 60_000)


def test_an_open_breaker_is_adopted_until_the_same_deadline_and_a_close_follows() -> None:
    engine, clock, rec = make_engine({"p": ("a",)})
    clock.set(10_050)  # 50 ms after the other replica opened for 10 s
    opened = BreakerEvent(10_000, "p", BreakerState.CLOSED, BreakerState.OPEN, "threshold",
                          5, 10_000)
    assert engine.merge(opened) is True
    snap = engine.breaker_snapshot("p")
    assert snap.state is BreakerState.OPEN and snap.retry_after_ms == 9_950
    assert rec.of("breaker")[-1]["reason"] == "fleet_open"
    closed = BreakerEvent(21_000, "p", BreakerState.HALF_OPEN, BreakerState.CLOSED,
                          "probe_succeeded", 0, None)
    clock.set(21_050)
    assert engine.merge(closed) is True
    assert engine.breaker_snapshot("p").state is BreakerState.CLOSED


def test_failures_count_fleet_wide_once_an_incident() -> None:
    engine, clock, _ = make_engine({"p": ("a", "b")})
    for t in range(5):  # five failures another replica saw on one key within 5 s
        assert engine.merge(ResultEvent(t, "p", 1, "p", "a", "m", 500,
                                        FailureKind.SERVER_ERROR, 10)) is (t == 0)
    assert engine.breaker_snapshot("p").failures == 1  # one incident (connection window)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 120_000), st.integers(0, 6),
                          st.integers(1, 600_000)), max_size=30),
       st.randoms(use_true_random=False))
def test_merged_deadlines_never_shorten_and_converge(
        changes: list[tuple[int, int, int]], rng: object) -> None:
    """Three replicas, each merging every cooldown change in its own order, end with the
    same deadline and level, the latest and highest of them all, never shortening one on
    the way."""
    replicas = [make_engine({"p": ("a",)})[0] for _ in range(3)]
    events = [CooldownEvent(t, "p", "a", FailureKind.RATE_LIMITED, level, t + length, None)
              for t, level, length in changes]
    for engine in replicas:
        order = list(events)
        rng.shuffle(order)  # type: ignore[attr-defined]
        for event in order:
            before = engine.connection_snapshot("p", "a").cooling_until
            engine.merge(event)
            assert engine.connection_snapshot("p", "a").cooling_until >= before
    expected = max([0, *(e.until for e in events)])
    level = max([0, *(e.level for e in events)])
    for engine in replicas:
        snap = engine.connection_snapshot("p", "a")
        assert (snap.cooling_until, snap.level) == (expected, level)


def test_a_shared_fleet_sends_a_third_of_the_probes_of_an_isolated_one() -> None:
    scenario = load_scenario(resolve_scenario("fleet-429-storm"))
    assert (scenario.replicas, scenario.shared_state, scenario.propagation_ms) == (3, True, 50)
    shared = run_virtual(scenario, "resilient")
    isolated = run_virtual(scenario, "isolated")
    probes = (shared["providers"]["alpha"]["probes"], isolated["providers"]["alpha"]["probes"])
    assert probes == (19, 60)  # 24 reset windows in the storm: one probe each, or three
    assert shared["success_rate"] == isolated["success_rate"] == 1.0
    assert scenario.policies == ("resilient", "naive", "backoff", "no-dedup", "isolated")


def test_fleet_fields_are_checked() -> None:
    import pytest

    from omniroute_tui.config.problems import ConfigError

    base = (resolve_scenario("fleet-429-storm")).read_text()
    for bad, words in (("replicas: 3", "replicas: 40"), ("shared_state: true", "shared_state: 2"),
                       ("propagation: 50ms", "propagation: 2m")):
        with pytest.raises(ConfigError) as caught:
            load_scenario("fleet.yaml", text=base.replace(bad, words))
        assert words.split(":")[0] in str(caught.value)


def test_an_operators_action_elsewhere_is_done_here_without_a_second_audit() -> None:
    engine, clock, rec = make_engine({"p": ("a", "b"), "q": ("x",)})
    llama = "meta-llama/Llama-3.1-8B"
    engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
    engine.record("p", "b", "m", ADMIT, fail(FailureKind.FORBIDDEN))
    engine.record("p", "b", llama, ADMIT, fail(FailureKind.FORBIDDEN))
    engine.record("q", "x", "n", ADMIT, fail(FailureKind.FORBIDDEN))
    engine.force_open("p", 60_000, actor="here")
    rec.clear()
    for command in (ClearCooldown(0, "there", "p", "a"), Disable(0, "there", "p", "b"),
                    ClearLockouts(0, "there", None, None, "m"),
                    ClearLockouts(0, "there", "p", "b", llama), Reset(0, "there", "p")):
        assert engine.merge_command(command) is True
    assert engine.connection_snapshot("p", "a").cooling_until <= clock.now_ms()
    assert engine.connection_snapshot("p", "b").disabled
    assert engine.lockout_snapshots("p") == () and len(engine.lockout_snapshots("q")) == 1
    assert engine.breaker_snapshot("p").state is BreakerState.CLOSED
    assert rec.of("operator") == []  # audited where the operator acted
    assert engine.merge_command(ClearCooldown(0, "there", "p", "nope")) is False
    assert engine.merge_command(Reset(0, "there", "zz")) is False
    # the audit record travels for the fleet's one audit log, and changes nothing
    assert engine.merge(OperatorEvent(0, "enable", "p/b", "there", "ok")) is False
    assert engine.connection_snapshot("p", "b").disabled


def test_an_operators_action_is_told_as_its_command_before_it_is_done() -> None:
    engine, clock, _ = make_engine({"p": ("a",)})
    clock.set(5_000)
    told: list[object] = []
    engine.subscribe_commands(told.append)
    engine.bus.subscribe(told.append, BreakerEvent, OperatorEvent)
    engine.force_open("p", 60_000, actor="ops")
    assert [type(x).__name__ for x in told] == ["ForceOpen", "BreakerEvent", "OperatorEvent"]
    assert told[0] == ForceOpen(5_000, "ops", "p", 65_000)
    engine.clear_lockouts("p", "a", "org/model", actor="ops")
    assert told[-2] == ClearLockouts(5_000, "ops", "p", "a", "org/model")
    told.clear()
    for bad in (lambda: engine.reset_breaker("zz", actor="ops"),
                lambda: engine.clear_cooldown("p", "zz", actor="ops"),
                lambda: engine.clear_lockouts(None, "a", actor="ops")):
        with pytest.raises((KeyError, ValueError)):
            bad()
    assert told == []  # refused: nothing to tell


def test_a_force_open_heard_is_forced_by_its_actor_and_only_a_reset_ends_it() -> None:
    engine, clock, rec = make_engine({"p": ("a",)})
    clock.set(1_000)
    assert engine.merge_command(ForceOpen(900, "ops", "p", 61_000)) is True
    snap = engine.breaker_snapshot("p")
    assert (snap.state, snap.forced_until, snap.forced_by, snap.retry_after_ms) == (
        BreakerState.OPEN, 61_000, "ops", 60_000)
    assert rec.of("breaker")[-1]["reason"] == "operator_force_open"
    closed = BreakerEvent(2_000, "p", BreakerState.HALF_OPEN, BreakerState.CLOSED,
                          BreakerReason.PROBE_SUCCEEDED, 0, None)
    probe_failed = ResultEvent(2_000, "r1", 1, "p", "a", "m", 500, FailureKind.SERVER_ERROR,
                               3)
    clock.set(2_000)
    assert engine.merge(closed) is False and engine.merge(probe_failed) is False
    assert engine.breaker_snapshot("p").forced_until == 61_000
    assert engine.merge_command(ForceOpen(900, "ops", "p", 1_500)) is False  # already over
    assert engine.merge_command(Reset(2_500, "other", "p")) is True
    snap = engine.breaker_snapshot("p")
    assert (snap.state, snap.forced_until, snap.forced_by) == (BreakerState.CLOSED, None, None)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 60_000), st.integers(0, 2), st.sampled_from("abc"),
                          st.integers(1, 600_000), st.integers(0, 500), st.integers(0, 500)),
                max_size=25))
def test_three_replicas_end_with_the_deadlines_of_one_engine_that_saw_every_failure(
        failures: list[tuple[int, int, str, int, int, int]]) -> None:
    """Quota failures with the server's word (Retry-After) land on 3 replicas in any
    interleaving, each told to the other two after its own random delay: every replica
    ends with exactly the deadlines of one engine that saw them all."""
    import heapq

    from omniroute_tui.clock import ManualClock
    from omniroute_tui.engine import Classification

    def quota(hint: int) -> Classification:
        return Classification(FailureKind.QUOTA_EXHAUSTED, hint)

    one, one_clock, _ = make_engine({"p": ("a", "b", "c")}, clock=ManualClock())
    for t, _, conn, hint, _, _ in sorted(failures):
        one_clock.set(max(one_clock.now_ms(), t))
        one.record("p", conn, "m", ADMIT, quota(hint))
    made = [make_engine({"p": ("a", "b", "c")}, clock=ManualClock()) for _ in range(3)]
    replicas = [(engine, clock) for engine, clock, _ in made]
    told: list[list[CooldownEvent]] = [[] for _ in range(3)]
    for index, (engine, _) in enumerate(replicas):
        engine.bus.subscribe(told[index].append, CooldownEvent)
    queue: list[tuple[int, int, int, object]] = []
    for seq, (t, where, conn, hint, delay_1, delay_2) in enumerate(failures):
        heapq.heappush(queue, (t, seq, where, ("fail", conn, hint, (delay_1, delay_2))))
    seq = len(failures)
    while queue:
        t, _, where, job = heapq.heappop(queue)
        engine, clock = replicas[where]
        clock.set(max(clock.now_ms(), t))
        if job[0] == "fail":  # type: ignore[index]
            _, conn, hint, delays = job  # type: ignore[misc]
            before = len(told[where])
            engine.record("p", conn, "m", ADMIT, quota(hint))
            for event in told[where][before:]:
                others = [i for i in range(3) if i != where]
                for other, delay in zip(others, delays, strict=True):
                    seq += 1
                    heapq.heappush(queue, (t + delay, seq, other, ("tell", event)))
        else:
            engine.merge(job[1])  # type: ignore[index]
    for conn in "abc":
        expected = one.connection_snapshot("p", conn).cooling_until
        assert [e.connection_snapshot("p", conn).cooling_until for e, _ in replicas] == [
            expected] * 3
