"""Layer 1: the provider circuit breaker (docs/design.md §3), on exact manual-clock times."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from omniroute_tui.engine import BreakerEvent, BreakerState, Event, FailureKind, SkipReason
from omniroute_tui.engine.breaker import ProviderBreaker
from omniroute_tui.engine.settings import (
    AuthKind,
    BreakerKindOverride,
    BreakerSettings,
    default_settings,
)

RATE = FailureKind.RATE_LIMITED


def breaker(
    auth: AuthKind = AuthKind.APIKEY, settings: BreakerSettings | None = None
) -> tuple[ProviderBreaker, list[Event]]:
    events: list[Event] = []
    b = ProviderBreaker(
        "alpha", settings or default_settings(auth).breaker, probe_lease_ms=60_000,
        emit=events.append,
    )
    return b, events


def fail_n(b: ProviderBreaker, n: int, now: int, kind: FailureKind = RATE) -> None:
    for _ in range(n):
        b.record_failure(now, kind, b.admit(now))


def trip(b: ProviderBreaker, now: int) -> None:
    fail_n(b, b.settings.failure_threshold, now)
    assert b.state(now) is BreakerState.OPEN


def transitions(events: list[Event]) -> list[tuple[int, str, str, str]]:
    return [(e.t, e.from_, e.to, e.reason) for e in events if isinstance(e, BreakerEvent)]


def test_degraded_then_open_at_thresholds() -> None:
    b, events = breaker()
    fail_n(b, 2, 0)
    assert b.state(0) is BreakerState.CLOSED
    fail_n(b, 1, 0)
    assert b.state(0) is BreakerState.DEGRADED
    fail_n(b, 1, 0)
    assert b.state(0) is BreakerState.DEGRADED
    fail_n(b, 1, 0)
    assert b.state(0) is BreakerState.OPEN
    assert transitions(events) == [
        (0, "CLOSED", "DEGRADED", "failures"),
        (0, "DEGRADED", "OPEN", "threshold"),
    ]


def test_oauth_thresholds_are_three_and_two() -> None:
    b, _ = breaker(AuthKind.OAUTH)
    fail_n(b, 2, 0)
    assert b.state(0) is BreakerState.DEGRADED
    fail_n(b, 1, 0)
    assert b.state(0) is BreakerState.OPEN


def test_gradual_recovery_one_success_undoes_one_failure() -> None:
    b, events = breaker()
    fail_n(b, 4, 0)
    assert b.state(0) is BreakerState.DEGRADED
    b.record_success(1, b.admit(1))  # f = 3: still DEGRADED
    assert b.state(1) is BreakerState.DEGRADED
    b.record_success(2, b.admit(2))  # f = 2: CLOSED
    assert b.state(2) is BreakerState.CLOSED
    assert b.snapshot(2).failures == 2
    assert transitions(events)[-1] == (2, "DEGRADED", "CLOSED", "recovered")


def test_failure_count_restarts_after_window() -> None:
    b, _ = breaker()
    window = b.settings.failure_window_ms
    fail_n(b, 4, 0)
    fail_n(b, 1, window)  # exactly the window: not older, counts on
    assert b.state(window) is BreakerState.OPEN
    b2, _ = breaker()
    fail_n(b2, 4, 0)
    fail_n(b2, 1, window + 1)  # older than the window: restart from 0
    assert b2.state(window + 1) is BreakerState.CLOSED
    assert b2.snapshot(window + 1).failures == 1


def test_lazy_half_open_exactly_at_reset_not_one_ms_before() -> None:
    b, events = breaker()
    trip(b, 1000)
    assert b.state(1000 + 4_999) is BreakerState.OPEN
    assert b.retry_after_ms(1000 + 4_999) == 1
    assert b.state(1000 + 5_000) is BreakerState.HALF_OPEN
    assert transitions(events)[-1] == (6_000, "OPEN", "HALF_OPEN", "reset_timeout")


def test_half_open_admits_one_probe_only() -> None:
    b, _ = breaker()
    trip(b, 0)
    probe = b.admit(30_000)
    assert probe.allowed and probe.probe
    second = b.admit(30_000)
    assert not second.allowed and second.skip is SkipReason.HALF_OPEN_BUSY
    open_skip = breaker()[0]
    trip(open_skip, 0)
    refused = open_skip.admit(10)
    assert refused.skip is SkipReason.CIRCUIT_OPEN and refused.retry_after_ms == 4_990


def test_probe_success_closes_and_zeroes() -> None:
    b, events = breaker()
    trip(b, 0)
    probe = b.admit(30_000)
    b.record_success(30_100, probe)
    snap = b.snapshot(30_100)
    assert (snap.state, snap.failures, snap.cycles) == (BreakerState.CLOSED, 0, 0)
    assert transitions(events)[-1] == (30_100, "HALF_OPEN", "CLOSED", "probe_succeeded")


def test_probe_answer_that_is_not_a_breaker_failure_closes() -> None:
    b, _ = breaker()
    trip(b, 0)
    b.record_success(30_000, b.admit(30_000))  # e.g. a 404: the provider answered
    assert b.state(30_000) is BreakerState.CLOSED


def test_probe_failure_reopens_with_a_cycle() -> None:
    b, events = breaker()
    trip(b, 0)
    probe = b.admit(30_000)
    b.record_failure(30_200, RATE, probe)
    snap = b.snapshot(30_200)
    assert (snap.state, snap.cycles) == (BreakerState.OPEN, 1)
    assert transitions(events)[-1] == (30_200, "HALF_OPEN", "OPEN", "probe_failed")


@pytest.mark.parametrize(
    ("auth", "expected_s"),
    [
        # worked numbers of docs/design.md §8: resets for cycles 0..10
        (AuthKind.APIKEY, [5, 5, 5, 5, 5, 5, 5, 10, 20, 30, 30]),
        (AuthKind.OAUTH, [10, 10, 10, 10, 10, 10, 10, 20, 40, 60, 60]),
    ],
)
def test_escalation_series(auth: AuthKind, expected_s: list[int]) -> None:
    settings = default_settings(auth).breaker
    assert [settings.effective_reset_ms(c) // 1000 for c in range(11)] == expected_s
    # and through the state machine: each failed probe adds a cycle
    b, _ = breaker(auth)
    now = 0
    trip(b, now)
    observed = []
    for _ in range(10):
        observed.append(b.snapshot(now).open_for_ms // 1000)
        now += b.snapshot(now).open_for_ms
        probe = b.admit(now)
        assert probe.probe
        b.record_failure(now, RATE, probe)
    observed.append(b.snapshot(now).open_for_ms // 1000)
    assert observed == expected_s


def test_leaked_probe_slot_returns_after_request_timeout() -> None:
    b, _ = breaker()
    trip(b, 0)
    lost = b.admit(30_000)
    assert lost.probe
    assert not b.admit(30_000 + 59_999).allowed
    assert b.retry_after_ms(30_000 + 59_999) == 1
    again = b.admit(30_000 + 60_000)
    assert again.allowed and again.probe
    assert b.state(90_000) is BreakerState.HALF_OPEN


def test_late_success_from_before_opening_does_not_close() -> None:
    b, _ = breaker()
    early = b.admit(0)  # admitted while CLOSED
    trip(b, 100)
    b.record_success(200, early)
    assert b.state(200) is BreakerState.OPEN
    assert b.snapshot(200).opened_at == 100
    # nor in HALF_OPEN
    b.record_success(30_100, early)
    assert b.state(30_100) is BreakerState.HALF_OPEN


def test_late_failure_from_before_opening_does_not_extend() -> None:
    b, _ = breaker()
    early = b.admit(0)
    trip(b, 100)
    b.record_failure(20_000, RATE, early)
    snap = b.snapshot(20_000)
    assert snap.opened_at == 100 and snap.cycles == 0
    assert b.state(30_100) is BreakerState.HALF_OPEN


def test_cancelled_probe_gives_its_slot_back() -> None:
    b, _ = breaker()
    trip(b, 0)
    probe = b.admit(30_000)
    b.record_cancelled(probe)
    assert b.admit(30_001).probe


def test_immediate_open_override_for_quota() -> None:
    base = default_settings().breaker
    kinds = MappingProxyType({FailureKind.QUOTA_EXHAUSTED: BreakerKindOverride(
        immediate_open=True, reset_timeout_ms=600_000)})
    settings = BreakerSettings(**{**base.__dict__, "kinds": kinds})
    b, events = breaker(settings=settings)
    assert settings.counts(FailureKind.QUOTA_EXHAUSTED)
    b.record_failure(5, FailureKind.QUOTA_EXHAUSTED, b.admit(5))
    snap = b.snapshot(5)
    assert snap.state is BreakerState.OPEN and snap.open_for_ms == 600_000
    assert transitions(events)[-1][3] == "immediate_quota_exhausted"


def test_counts_override_can_mute_a_kind() -> None:
    base = default_settings().breaker
    kinds = MappingProxyType({FailureKind.RATE_LIMITED: BreakerKindOverride(counts=False)})
    settings = BreakerSettings(**{**base.__dict__, "kinds": kinds})
    assert not settings.counts(FailureKind.RATE_LIMITED)
    assert settings.counts(FailureKind.SERVER_ERROR)
    assert not settings.counts(FailureKind.AUTH_FAILED)


def test_operator_reset_and_force_open() -> None:
    b, events = breaker()
    trip(b, 0)
    b.reset(10)
    snap = b.snapshot(10)
    assert (snap.state, snap.failures, snap.cycles) == (BreakerState.CLOSED, 0, 0)
    b.force_open(20, 300_000)
    assert b.state(20) is BreakerState.OPEN
    assert not b.admit(200_000).allowed  # no probes while forced
    assert b.state(300_019) is BreakerState.OPEN
    assert b.state(300_020) is BreakerState.HALF_OPEN
    reasons = [t[3] for t in transitions(events)]
    assert reasons[-3:] == ["operator_reset", "operator_force_open", "reset_timeout"]


def test_stale_result_of_a_probe_after_force_open_is_ignored() -> None:
    b, _ = breaker()
    trip(b, 0)
    probe = b.admit(30_000)
    b.force_open(30_010, 60_000)
    b.record_success(30_020, probe)
    assert b.state(30_020) is BreakerState.OPEN


def test_forcing_open_an_open_breaker_is_announced_with_its_new_window() -> None:
    from .helpers import make_engine

    engine, clock, recorder = make_engine({"p": ("a",)})
    engine.force_open("p", 60_000, actor="ops")
    clock.advance(10_000)
    engine.force_open("p", 3_600_000, actor="ops")
    events = recorder.of("breaker")
    assert [(e["from"], e["to"], e["retry_after_ms"]) for e in events] == [
        ("CLOSED", "OPEN", 60_000), ("OPEN", "OPEN", 3_600_000)]
    assert engine.breaker_snapshot("p").forced_until == 3_610_000
