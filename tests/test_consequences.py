"""The consequences table is what the engine and the router do, kind by kind."""

from __future__ import annotations

import pytest

from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.engine.consequences import (
    BREAKER_FAILURE_KINDS,
    CONSEQUENCES,
    BreakerEffect,
    Layer,
    Then,
    Wait,
)
from omniroute_tui.engine.kinds import DedupWindow
from omniroute_tui.router.steps import Attempt

from .helpers import fail, make_engine, make_router, settings


def test_the_table_says_what_the_design_says() -> None:
    """docs/design.md §2, row by row (a change here is a change of the design)."""
    rows = {kind.value: (c.layer.value, c.quota_layer.value, c.breaker.value, c.dedup.value,
                         c.wait.value, c.awaited, c.then.value)
            for kind, c in CONSEQUENCES.items()}
    assert rows == {
        "network": ("cooldown", "cooldown", "failure", "network", "backoff", True,
                    "next_target"),
        "timeout": ("cooldown", "cooldown", "failure", "connection", "backoff", True,
                    "next_target"),
        "auth_failed": ("disable", "disable", "success", "connection", "backoff", False,
                        "next_connection"),
        "quota_exhausted": ("cooldown", "lockout", "success", "connection", "quota", True,
                            "next_connection"),
        "forbidden": ("lockout", "lockout", "success", "connection", "backoff", True,
                      "next_connection"),
        "model_not_found": ("lockout", "lockout", "success", "connection", "backoff", False,
                            "next_connection"),
        "rate_limited": ("cooldown", "lockout", "failure", "connection", "backoff", True,
                         "next_connection"),
        "server_error": ("cooldown", "cooldown", "failure", "connection", "backoff", True,
                         "next_target"),
        "client_error": ("none", "none", "success", "connection", "backoff", False, "respond"),
        "context_length": ("none", "none", "success", "connection", "backoff", False,
                           "next_target"),
        "cancelled": ("none", "none", "none", "connection", "backoff", False, "respond"),
        "stream_cut": ("cooldown", "cooldown", "failure", "connection", "backoff", True,
                       "next_target"),
    }
    counted = sorted(BREAKER_FAILURE_KINDS)
    assert counted == ["network", "rate_limited", "server_error", "stream_cut", "timeout"]


@pytest.mark.parametrize("per_model_quota", [False, True])
@pytest.mark.parametrize("kind", [k for k in FailureKind if k is not FailureKind.CANCELLED])
def test_one_attempt_of_each_kind_does_what_its_row_says(
        kind: FailureKind, per_model_quota: bool) -> None:
    # one counted failure opens the breaker, so the breaker's column shows at once
    engine, clock, seen = make_engine(
        {"alpha": ("a", "b"), "beta": ("x",)}, per_model_quota=per_model_quota,
        settings_=settings(breaker={"failure_threshold": 1, "degraded_threshold": 1}))
    routing = make_router(engine).start("r1", "r")
    first = routing.next_step()
    assert isinstance(first, Attempt) and first.connection == "a"
    clock.advance(100)
    routing.record(0 if kind in (FailureKind.NETWORK, FailureKind.TIMEOUT) else 500,
                   fail(kind))
    row = CONSEQUENCES[kind]
    layer = row.quota_layer if per_model_quota else row.layer
    cooled = {e["connection"] for e in seen.of("cooldown")}
    locked = {(e["connection"], e["model"]) for e in seen.of("lockout")}
    disabled = {e["connection"] for e in seen.of("disabled")}
    assert cooled == ({"a"} if layer is Layer.COOLDOWN else set())
    assert locked == ({("a", "m")} if layer is Layer.LOCKOUT else set())
    assert disabled == ({"a"} if layer is Layer.DISABLE else set())
    if layer is Layer.COOLDOWN:
        until = seen.of("cooldown")[0]["until"]
        quota_wait = 3_600_000 if row.wait is Wait.QUOTA else 3_000
        assert until == 100 + quota_wait
    state = engine.breaker_snapshot("alpha").state
    assert state is (BreakerState.OPEN if row.breaker is BreakerEffect.FAILURE
                     else BreakerState.CLOSED)
    after = routing.next_step()
    if row.then is Then.RESPOND:
        assert routing.response is not None and routing.response.status == 500
    elif row.then is Then.NEXT_TARGET or row.breaker is BreakerEffect.FAILURE:
        assert isinstance(after, Attempt) and after.provider == "beta"
    else:
        assert isinstance(after, Attempt) and (after.provider, after.connection) == (
            "alpha", "b")


def test_network_failures_dedup_per_provider_the_others_per_connection() -> None:
    engine, clock, seen = make_engine(
        {"alpha": ("a", "b")}, settings_=settings(breaker={"failure_threshold": 10}))

    for connection in ("a", "b"):
        for kind in (FailureKind.NETWORK, FailureKind.SERVER_ERROR):
            engine.record("alpha", connection, "m", engine.admit("alpha"), fail(kind))
    windows = [(e["connection"], e["kind"], e["window"]) for e in seen.of("dedup")]
    # a's network failure counts; a's 500 is within a's connection window; b's network
    # failure is the same incident as a's; b's 500 is b's first counted failure
    assert windows == [("a", "server_error", DedupWindow.CONNECTION),
                       ("b", "network", DedupWindow.NETWORK)]
    assert engine.breaker_snapshot("alpha").failures == 2
