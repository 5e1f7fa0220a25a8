"""Layer 2: connection cooldowns (docs/design.md §4) through the engine, on exact times."""

from __future__ import annotations

import pytest

from omniroute_tui.engine import FailureKind
from omniroute_tui.engine.settings import AuthKind

from .helpers import ADMIT, OK, fail, make_engine, settings

RATE = FailureKind.RATE_LIMITED


def ladder(auth: AuthKind, steps: int) -> list[int]:
    """Cooldown durations of one connection failing each time its cooldown ends."""
    engine, clock, rec = make_engine({"p": ("c",)}, settings_=settings(auth))
    durations = []
    for _ in range(steps):
        engine.record("p", "c", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
        snap = engine.connection_snapshot("p", "c")
        durations.append((snap.cooling_until - clock.now_ms()) // 1000)
        clock.set(snap.cooling_until)
    return durations


def test_apikey_ladder_matches_the_spec() -> None:
    assert ladder(AuthKind.APIKEY, 7) == [3, 6, 12, 24, 48, 96, 96]


def test_oauth_ladder_matches_the_spec() -> None:
    assert ladder(AuthKind.OAUTH, 10) == [5, 10, 20, 40, 80, 160, 320, 640, 1200, 1200]


def test_level_after_each_failure_and_cooldown_events() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    clock.set(3000)
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    assert [(e["level"], e["until"], e["kind"]) for e in rec.of("cooldown")] == [
        (1, 3000, "rate_limited"), (2, 9000, "rate_limited"),
    ]


def test_two_concurrent_failures_escalate_once() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    clock.advance(10)
    engine.record("p", "c", "m", ADMIT, fail(RATE))  # in flight before the first landed
    snap = engine.connection_snapshot("p", "c")
    assert (snap.level, snap.cooling_until) == (1, 3000)
    assert len(rec.of("cooldown")) == 1


def test_longer_retry_after_wins_over_backoff() -> None:
    engine, clock, _ = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE, hint_ms=10_000))
    snap = engine.connection_snapshot("p", "c")
    assert (snap.cooling_until, snap.level) == (10_000, 1)


def test_shorter_retry_after_does_not_shorten_backoff() -> None:
    engine, clock, _ = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE, hint_ms=1_000))
    assert engine.connection_snapshot("p", "c").cooling_until == 3_000


def test_hint_while_cooling_extends_but_never_shortens() -> None:
    engine, clock, _ = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE))  # until 3000, level 1
    clock.set(1000)
    engine.record("p", "c", "m", ADMIT, fail(RATE, hint_ms=500))
    assert engine.connection_snapshot("p", "c").cooling_until == 3000
    engine.record("p", "c", "m", ADMIT, fail(RATE, hint_ms=5000))
    snap = engine.connection_snapshot("p", "c")
    assert (snap.cooling_until, snap.level) == (6000, 1)


def test_quota_cooldown_uses_hint_or_an_hour_and_keeps_level() -> None:
    engine, clock, _ = make_engine({"p": ("c", "d")})
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.QUOTA_EXHAUSTED))
    snap = engine.connection_snapshot("p", "c")
    assert (snap.cooling_until, snap.level) == (3_600_000, 0)
    engine.record("p", "d", "m", ADMIT, fail(FailureKind.QUOTA_EXHAUSTED, hint_ms=90_000))
    assert engine.connection_snapshot("p", "d").cooling_until == 90_000


def test_cooling_connection_is_skipped_until_exactly_its_deadline() -> None:
    engine, clock, _ = make_engine({"p": ("c", "d")})
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    clock.set(2999)
    assert list(engine.candidates("p", "m")) == ["d"]
    clock.set(3000)
    assert list(engine.candidates("p", "m")) == ["c", "d"]


def test_success_resets_level_and_last_error() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    clock.set(3000)
    engine.record("p", "c", "m", ADMIT, OK)
    snap = engine.connection_snapshot("p", "c")
    assert (snap.level, snap.last_error) == (0, None)
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    assert engine.connection_snapshot("p", "c").cooling_until == 6000  # 3 s again


def test_401_disables_until_an_operator_enables() -> None:
    engine, clock, rec = make_engine({"p": ("c", "d")})
    engine.record("p", "c", "m", ADMIT, fail(FailureKind.AUTH_FAILED))
    assert engine.connection_snapshot("p", "c").disabled
    clock.advance(10**9)
    assert list(engine.candidates("p", "m")) == ["d"]
    assert engine.set_enabled("p", "c", True, actor="ops")
    assert list(engine.candidates("p", "m")) == ["c", "d"]
    assert [e["type"] for e in rec.of("disabled") + rec.of("enabled")] == ["disabled", "enabled"]
    assert rec.of("operator")[-1]["action"] == "enable"


def test_operator_clear_lifts_cooldown_and_level() -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(RATE))
    clock.set(100)
    assert engine.clear_cooldown("p", "c", actor="ops")
    snap = engine.connection_snapshot("p", "c")
    assert (snap.level, snap.cooling_until) == (0, 100)
    assert list(engine.candidates("p", "m")) == ["c"]
    assert not engine.clear_cooldown("p", "c", actor="ops")
    assert [e["result"] for e in rec.of("operator")] == ["ok", "nothing to clear"]


def test_operator_disable_takes_a_connection_out() -> None:
    engine, clock, _ = make_engine({"p": ("c", "d")})
    engine.set_enabled("p", "d", False, actor="ops")
    assert list(engine.candidates("p", "m")) == ["c"]


@pytest.mark.parametrize("kind", [FailureKind.CLIENT_ERROR, FailureKind.CANCELLED])
def test_client_errors_and_cancels_leave_the_connection_alone(kind: FailureKind) -> None:
    engine, clock, rec = make_engine({"p": ("c",)})
    engine.record("p", "c", "m", ADMIT, fail(kind))
    snap = engine.connection_snapshot("p", "c")
    assert (snap.level, snap.cooling_until, snap.disabled) == (0, 0, False)


def test_a_restart_forgets_an_expired_cooldowns_last_error_and_keeps_a_live_ones() -> None:
    """docs/design.md §10: an expired cooldown comes back cleared, level 0 and no last
    error; one still running keeps all of it; a key disabled by auth_failed keeps the
    error that disabled it."""
    engine, clock, _ = make_engine({"p": ("old", "live", "revoked")})
    clock.set(1_000_000)
    engine.record("p", "old", "m", ADMIT, fail(RATE))  # 3 s
    engine.record("p", "live", "m", ADMIT, fail(RATE, 600_000))  # 10 min
    engine.record("p", "revoked", "m", ADMIT, fail(FailureKind.AUTH_FAILED))
    snapshot = engine.snapshot()
    restarted, later, _ = make_engine({"p": ("old", "live", "revoked")})
    later.set(1_000_000 + 60_000)
    restarted.restore(snapshot)
    rows = {c: restarted.connection_snapshot("p", c) for c in ("old", "live", "revoked")}
    assert [(s.level, s.cooling_until, s.last_error, s.last_error_at, s.disabled)
            for s in rows.values()] == [
        (0, 0, None, None, False),
        (1, 1_600_000, "rate_limited", 1_000_000, False),
        (0, 0, "auth_failed", 1_000_000, True),
    ]
