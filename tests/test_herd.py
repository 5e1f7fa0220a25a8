"""Anti-thundering-herd controls (docs/design.md §6): dedup windows, retry budget, jitter."""

from __future__ import annotations

from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.engine.herd import RetryBudget
from omniroute_tui.engine.jitter import Jitter
from omniroute_tui.engine.settings import RetryBudgetSettings

from .helpers import ADMIT, fail, make_engine, settings

NET = FailureKind.NETWORK


def test_network_blip_across_every_connection_counts_once_per_10s() -> None:
    conns = tuple(f"c{i}" for i in range(8))
    engine, clock, rec = make_engine({"p": conns})
    # a 20 s blip: every connection fails every 500 ms
    for step in range(40):
        clock.set(step * 500)
        for conn in conns:
            engine.record("p", conn, "m", ADMIT, fail(NET))
    counted = [e for e in rec.of("dedup")]
    assert engine.breaker_snapshot("p").failures == 2  # at 0 s and at 10 s
    assert engine.breaker_snapshot("p").state is BreakerState.CLOSED
    assert len(counted) == 40 * 8 - 2
    assert {e["window"] for e in counted} == {"network"}


def test_without_network_dedup_the_same_blip_opens_the_breaker() -> None:
    conns = tuple(f"c{i}" for i in range(8))
    engine, clock, _ = make_engine(
        {"p": conns},
        settings_=settings(dedup={"connection_window_ms": 0, "network_window_ms": 0}),
    )
    for conn in conns:
        engine.record("p", conn, "m", ADMIT, fail(NET))
    assert engine.breaker_snapshot("p").state is BreakerState.OPEN


def test_connection_window_counts_one_failure_per_connection_per_5s() -> None:
    engine, clock, rec = make_engine({"p": ("c", "d")})
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
    clock.set(4999)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
    engine.record("p", "d", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
    clock.set(5000)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
    assert engine.breaker_snapshot("p").failures == 3
    assert [(e["t"], e["connection"], e["window"]) for e in rec.of("dedup")] == [
        (4999, "c", "connection")
    ]


def test_retry_budget_caps_retries_at_ratio_once_burst_is_spent() -> None:
    budget = RetryBudget(RetryBudgetSettings(ratio=0.2, burst=10))
    retries = 0
    firsts = 1000
    for _ in range(firsts):
        budget.deposit()
        while budget.try_spend():  # clients retrying as hard as they can
            retries += 1
    # the burst of 10 (the first deposit finds the bucket full), then one retry per
    # five first attempts: 999 deposits -> 199 retries
    assert retries == 10 + 199


def test_retry_budget_exact_after_burst() -> None:
    budget = RetryBudget(RetryBudgetSettings(ratio=0.25, burst=2))
    assert budget.try_spend() and budget.try_spend() and not budget.try_spend()
    spent = 0
    for _ in range(100):
        budget.deposit()
        spent += budget.try_spend()
    assert spent == 25


def test_jitter_is_seeded_and_bounded() -> None:
    import random

    a = Jitter(0.5, random.Random(7))
    b = Jitter(0.5, random.Random(7))
    values = [a.stretch(1000) for _ in range(100)]
    assert values == [b.stretch(1000) for _ in range(100)]
    assert all(1000 <= v <= 1500 for v in values)
    assert len(set(values)) > 50
    assert Jitter(0.0).stretch(1234) == 1234


def test_jitter_stretches_cooldowns() -> None:
    engine, clock, _ = make_engine({"p": ("c",)}, settings_=settings(jitter=0.5), seed=3)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
    until = engine.connection_snapshot("p", "c").cooling_until
    assert 3000 <= until <= 4500
