"""Layer 3: model lockouts (docs/design.md §5)."""

from __future__ import annotations

from omniroute_tui.engine import FailureKind

from .helpers import ADMIT, OK, fail, make_engine

NF = FailureKind.MODEL_NOT_FOUND
MIN = 60_000


def until(engine, provider="p", connection="c", model="m") -> int | None:  # type: ignore[no-untyped-def]
    for snap in engine.lockout_snapshots(provider):
        if (snap.connection, snap.model) == (connection, model):
            return snap.until
    return None


def test_404_on_one_model_leaves_other_models_usable() -> None:
    engine, clock, _ = make_engine({"p": ("c",)})
    engine.record("p", "c", "m1", ADMIT, fail(NF))
    assert list(engine.candidates("p", "m1")) == []
    assert list(engine.candidates("p", "m2")) == ["c"]
    assert engine.connection_snapshot("p", "c").cooling_until == 0


def test_backoff_doubles_and_caps_at_max() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    durations = []
    for _ in range(6):
        engine.record("p", "c", "m", ADMIT, fail(FailureKind.FORBIDDEN))
        end = until(engine)
        assert end is not None
        durations.append((end - clock.now_ms()) // MIN)
        clock.set(end)
    assert durations == [2, 4, 8, 16, 30, 30]
    assert [e["failures"] for e in rec.of("lockout")] == [1, 2, 3, 4, 5, 6]


def test_exponent_is_capped_by_max_steps() -> None:
    from omniroute_tui.engine.settings import LockoutSettings

    s = LockoutSettings(base_ms=1, max_ms=10**12, max_steps=3, window_ms=10**9)
    assert [s.duration_ms(n) for n in (1, 2, 3, 4, 5, 9)] == [1, 2, 4, 8, 8, 8]


def test_upstream_hint_is_used_exactly_even_beyond_max() -> None:
    engine, clock, _ = make_engine({"p": ("c",)}, per_model_quota=True)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.RATE_LIMITED, hint_ms=7_777))
    assert until(engine) == 7_777
    engine.record("p", "c", "n", ADMIT, fail(FailureKind.RATE_LIMITED, hint_ms=3 * 3600_000))
    assert until(engine, model="n") == 3 * 3600_000


def test_quota_on_per_model_provider_locks_for_max() -> None:
    engine, clock, _ = make_engine({"p": ("c",)}, per_model_quota=True)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.QUOTA_EXHAUSTED))
    assert until(engine) == 30 * MIN
    assert engine.connection_snapshot("p", "c").cooling_until == 0


def test_count_restarts_after_the_window() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(NF))
    clock.set(30 * MIN)  # exactly the window: continues
    engine.record("p", "c", "m", ADMIT, fail(NF))
    clock.set(60 * MIN + 1)  # older than the window: restarts at 1
    engine.record("p", "c", "m", ADMIT, fail(NF))
    assert [e["failures"] for e in rec.of("lockout")] == [1, 2, 1]


def test_never_shortens_an_active_lockout() -> None:
    engine, clock, _ = make_engine({"p": ("c",)}, per_model_quota=True)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.RATE_LIMITED, hint_ms=600_000))
    clock.set(1000)
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.RATE_LIMITED, hint_ms=1000))
    assert until(engine) == 600_000


def test_success_halves_and_drops_history_at_zero() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    for _ in range(3):
        engine.record("p", "c", "m", ADMIT, fail(NF))
        clock.set(until(engine) or 0)
    engine.record("p", "c", "m", ADMIT, OK)  # 3 -> 1
    assert [s.failures for s in engine.lockout_snapshots("p")] == [1]
    engine.record("p", "c", "m", ADMIT, OK)  # 1 -> 0: dropped
    assert engine.lockout_snapshots("p") == ()
    engine.record("p", "c", "m", ADMIT, fail(NF))
    assert rec.of("lockout")[-1]["failures"] == 1


def test_operator_clear_by_key_model_provider_all() -> None:
    engine, clock, rec = make_engine({"p": ("c", "d"), "q": ("e",)})
    for provider, conn, model in [("p", "c", "m"), ("p", "d", "m"), ("p", "c", "n"),
                                  ("q", "e", "m")]:
        engine.record(provider, conn, model, ADMIT, fail(NF))
    assert engine.clear_lockouts("p", "c", "n", actor="ops") == 1
    assert engine.clear_lockouts("p", model="m", actor="ops") == 2
    assert engine.clear_lockouts("q", actor="ops") == 1
    engine.record("p", "c", "m", ADMIT, fail(NF))
    assert engine.clear_lockouts(actor="ops") == 1
    assert [e["target"] for e in rec.of("operator")] == ["p/c/n", "p/*/m", "q/*/*", "*/*/*"]
    assert list(engine.candidates("p", "m")) == ["c", "d"]
