"""The routing decision (docs/design.md §7): fallback, skips, aggregated errors, admission waits."""

from __future__ import annotations

from omniroute_tui.engine import BreakerState, Classification, FailureKind, classify
from omniroute_tui.router import Attempt, RequestRouting, Response, Strategy, Wait

from .helpers import ADMIT, OK, fail, make_engine, make_router, settings


def drive(routing: RequestRouting, answers: list[Classification], clock, latency=100):  # type: ignore[no-untyped-def]
    """Answer attempts in order; returns (attempts, response)."""
    attempts: list[Attempt] = []
    answers = list(answers)
    while True:
        step = routing.next_step()
        if isinstance(step, Response):
            return attempts, step
        if isinstance(step, Wait):
            clock.advance(step.delay_ms)
            continue
        attempts.append(step)
        clock.advance(latency)
        outcome = answers.pop(0)
        status = 200 if outcome.kind is None else {
            FailureKind.RATE_LIMITED: 429, FailureKind.SERVER_ERROR: 500,
            FailureKind.CLIENT_ERROR: 400, FailureKind.AUTH_FAILED: 401,
            FailureKind.MODEL_NOT_FOUND: 404, FailureKind.TIMEOUT: 0,
            FailureKind.NETWORK: 0, FailureKind.QUOTA_EXHAUSTED: 429,
            FailureKind.FORBIDDEN: 403,
        }[outcome.kind]
        routing.record(status, outcome)


def where(attempts: list[Attempt]) -> list[str]:
    return [f"{a.provider}/{a.connection}" for a in attempts]


def test_success_on_first_target() -> None:
    engine, clock, rec = make_engine()
    attempts, response = drive(make_router(engine).start("1", "r"), [OK], clock)
    assert where(attempts) == ["alpha/a"]
    assert response.status == 200 and response.upstream is attempts[0]
    assert rec.of("response")[0] == {
        "t": 100, "type": "response", "request": "1", "status": 200, "attempts": 1,
        "latency_ms": 100, "waited_ms": 0, "served_by": "alpha/a/m",
    }


def test_rate_limit_moves_to_next_connection_then_server_error_to_next_target() -> None:
    engine, clock, _ = make_engine({"alpha": ("a", "b", "c"), "beta": ("x",)})
    attempts, response = drive(
        make_router(engine).start("1", "r"),
        [fail(FailureKind.RATE_LIMITED), fail(FailureKind.SERVER_ERROR), OK], clock,
    )
    assert where(attempts) == ["alpha/a", "alpha/b", "beta/x"]
    assert response.status == 200


def test_client_error_is_returned_at_once_without_fallback() -> None:
    engine, clock, _ = make_engine()
    attempts, response = drive(make_router(engine).start("1", "r"),
                               [fail(FailureKind.CLIENT_ERROR)], clock)
    assert where(attempts) == ["alpha/a"]
    assert response.status == 400 and response.upstream is attempts[0]
    assert engine.connection_snapshot("alpha", "a").level == 0


def test_all_cooling_gives_429_with_retry_after_and_skipped_list() -> None:
    engine, clock, rec = make_engine({"alpha": ("a",), "beta": ("x",)},
                                     settings_=settings(admission={"max_wait_ms": 0}))
    engine.record("alpha", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 20_000))
    engine.record("beta", "x", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 8_500))
    router = make_router(engine, admission=settings(admission={"max_wait_ms": 0}).admission)
    attempts, response = drive(router.start("1", "r"), [], clock)
    assert attempts == []
    assert response.status == 429
    assert response.headers == {"Retry-After": "9"}
    assert response.body == {"error": {
        "type": "rate_limit_error", "code": "all_targets_unavailable",
        "message": response.body["error"]["message"],  # type: ignore[index]
        "retry_after_ms": 8_500,
        "skipped": [
            {"target": "alpha/m", "reason": "all_cooling", "retry_after_ms": 20_000},
            {"target": "beta/m", "reason": "all_cooling", "retry_after_ms": 8_500},
        ],
    }}
    assert [e["reason"] for e in rec.of("skip")] == ["all_cooling", "all_cooling"]


def test_open_breaker_makes_it_503() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    engine.force_open("alpha", 60_000, actor="ops")
    engine.set_enabled("beta", "x", False, actor="ops")
    attempts, response = drive(make_router(engine).start("1", "r"), [], clock)
    assert response.status == 503
    assert [s["reason"] for s in response.body["error"]["skipped"]] == [  # type: ignore[index]
        "circuit_open", "all_disabled"]
    assert response.headers == {"Retry-After": "60"}


def test_a_probe_held_by_another_replica_gives_a_503_with_a_retry_after() -> None:
    """In a fleet another replica may hold the probe lease: the skip is half_open_busy and
    nothing says when the probe answers, yet the 503 says when to come back."""
    engine, clock, _ = make_engine({"alpha": ("a",)})
    engine.set_probe_gate(lambda provider, now: False)
    engine.force_open("alpha", 1000, actor="ops")
    clock.set(1000)
    attempts, response = drive(make_router(engine, targets=("alpha/m",)).start("1", "r"),
                               [], clock)
    assert attempts == [] and response.status == 503
    assert response.body["error"]["skipped"] == [  # type: ignore[index]
        {"target": "alpha/m", "reason": "half_open_busy", "retry_after_ms": None}]
    assert response.headers == {"Retry-After": "1"}


def test_every_key_disabled_is_a_503_with_a_retry_after() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",)})
    engine.set_enabled("alpha", "a", False, actor="ops")
    _, response = drive(make_router(engine, targets=("alpha/m",)).start("1", "r"), [], clock)
    assert response.status == 503 and response.headers == {"Retry-After": "1"}


def test_a_last_429_says_when_the_key_it_met_comes_back() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",)})
    _, response = drive(make_router(engine, targets=("alpha/m",)).start("1", "r"),
                        [fail(FailureKind.RATE_LIMITED, 12_300)], clock)
    assert response.status == 429 and response.body["error"]["code"] == (  # type: ignore[index]
        "all_attempts_failed")
    assert response.headers == {"Retry-After": "13"}


def test_only_429_and_503_carry_a_retry_after_when_nothing_says_when() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",)})
    _, response = drive(make_router(engine, targets=("alpha/m",)).start("1", "r"),
                        [fail(FailureKind.TIMEOUT)], clock)
    assert response.status == 504 and response.headers == {}


def test_locked_model_is_skipped_as_all_locked() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    engine.record("alpha", "a", "m", ADMIT, fail(FailureKind.FORBIDDEN))
    attempts, response = drive(make_router(engine).start("1", "r"), [OK], clock)
    assert where(attempts) == ["beta/x"]


def test_all_attempts_failed_returns_last_status_and_lists_attempts() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    attempts, response = drive(make_router(engine).start("1", "r"),
                               [fail(FailureKind.SERVER_ERROR), fail(FailureKind.RATE_LIMITED)],
                               clock)
    assert response.status == 429
    assert response.body["error"]["attempts"] == [  # type: ignore[index]
        {"target": "alpha/m", "connection": "a", "status": 500, "kind": "server_error"},
        {"target": "beta/m", "connection": "x", "status": 429, "kind": "rate_limited"},
    ]


def test_transport_failure_last_maps_to_gateway_statuses() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",)})
    router = make_router(engine, targets=("alpha/m",))
    _, response = drive(router.start("1", "r"), [fail(FailureKind.TIMEOUT)], clock)
    assert response.status == 504


def test_max_attempts_stops_the_walk() -> None:
    conns = tuple(f"c{i}" for i in range(10))
    engine, clock, _ = make_engine({"alpha": conns})
    router = make_router(engine, targets=("alpha/m",), max_attempts=3)
    attempts, response = drive(router.start("1", "r"),
                               [fail(FailureKind.AUTH_FAILED)] * 3, clock)
    assert len(attempts) == 3 and response.status == 401


def test_retry_budget_skip_sends_request_to_next_target() -> None:
    engine, clock, rec = make_engine(
        {"alpha": ("a", "b", "c"), "beta": ("x",)},
        settings_=settings(retry_budget={"burst": 1, "ratio": 0.0}),
    )
    router = make_router(engine)
    attempts, _ = drive(router.start("1", "r"),
                        [fail(FailureKind.RATE_LIMITED), fail(FailureKind.RATE_LIMITED), OK],
                        clock)
    assert where(attempts) == ["alpha/a", "alpha/b", "beta/x"]
    assert [e["reason"] for e in rec.of("skip")] == ["retry_budget"]
    # the budget says why: one token (the burst) spent on the retry to b, then none left
    assert [(e["provider"], e["spent"], e["tokens"]) for e in rec.of("budget")] == [
        ("alpha", True, 0.0), ("alpha", False, 0.0)]


def test_half_open_probe_then_busy_then_close() -> None:
    engine, clock, rec = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    engine.force_open("alpha", 1000, actor="ops")
    clock.set(1000)
    router = make_router(engine)
    first = router.start("1", "r")
    probe = first.next_step()
    assert isinstance(probe, Attempt) and probe.probe and probe.provider == "alpha"
    # a second request while the probe is out skips alpha as half_open_busy
    attempts, _ = drive(router.start("2", "r"), [OK], clock)
    assert where(attempts) == ["beta/x"]
    assert rec.of("skip")[-1]["reason"] == "half_open_busy"
    first.record(200, OK)
    assert isinstance(first.next_step(), Response)
    assert engine.breaker_snapshot("alpha").state is BreakerState.CLOSED


def test_failed_probe_sends_request_on_and_reopens() -> None:
    engine, clock, _ = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    engine.force_open("alpha", 1000, actor="ops")
    clock.set(1000)
    attempts, response = drive(make_router(engine).start("1", "r"),
                               [fail(FailureKind.RATE_LIMITED), OK], clock)
    assert where(attempts) == ["alpha/a", "beta/x"]
    assert engine.breaker_snapshot("alpha").state is BreakerState.OPEN


def test_probe_slot_released_when_no_connection_can_take_it() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    engine.force_open("alpha", 1000, actor="ops")
    engine.set_enabled("alpha", "a", False, actor="ops")
    clock.set(1000)
    drive(make_router(engine).start("1", "r"), [OK], clock)
    assert engine.breaker_snapshot("alpha").probes_in_flight == 0
    assert engine.admit("alpha").probe


def test_admission_wait_when_a_cooldown_ends_soon() -> None:
    engine, clock, rec = make_engine({"alpha": ("a",)})
    engine.record("alpha", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 4_000))
    clock.set(500)
    router = make_router(engine, targets=("alpha/m",))
    attempts, response = drive(router.start("1", "r"), [OK], clock)
    assert response.status == 200
    assert attempts[0].started_at == 4_050  # until + the 50 ms margin
    assert response.waited_ms == 3_550
    assert rec.of("response")[0]["waited_ms"] == 3_550
    # the wait says what it waited for, when it started and when it ended
    assert [(e["t"], e["phase"], e["delay_ms"], e["target"], e["reason"])
            for e in rec.of("wait")] == [(500, "start", 3_550, "alpha/m", "all_cooling"),
                                         (4_050, "end", 3_550, "alpha/m", "all_cooling")]


def test_no_admission_wait_beyond_max_wait_or_for_missing_models() -> None:
    engine, clock, _ = make_engine({"alpha": ("a",)})
    engine.record("alpha", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 5_001))
    engine.record("alpha", "a", "n", ADMIT, fail(FailureKind.MODEL_NOT_FOUND))
    router = make_router(engine, targets=("alpha/m",))
    _, response = drive(router.start("1", "r"), [], clock)
    assert response.status == 429 and response.waited_ms == 0
    _, response = drive(router.start("2", "alpha/n"), [], clock)
    assert response.status == 429 and response.waited_ms == 0
    assert response.body["error"]["skipped"][0]["retry_after_ms"] is None  # type: ignore[index]


def test_round_robin_rotates_connections_per_request() -> None:
    engine, clock, _ = make_engine({"alpha": ("a", "b", "c")})
    router = make_router(engine, targets=("alpha/m",), strategy=Strategy.ROUND_ROBIN)
    served = [where(drive(router.start(str(i), "r"), [OK], clock)[0])[0] for i in range(6)]
    assert served == ["alpha/a", "alpha/b", "alpha/c"] * 2


def test_round_robin_wraps_past_cooling_connections() -> None:
    engine, clock, _ = make_engine({"alpha": ("a", "b", "c")})
    engine.record("alpha", "c", "m", ADMIT, fail(FailureKind.SERVER_ERROR))
    router = make_router(engine, targets=("alpha/m",), strategy=Strategy.ROUND_ROBIN)
    served = [where(drive(router.start(str(i), "r"), [OK], clock, latency=1)[0])[0]
              for i in range(3)]
    assert served == ["alpha/a", "alpha/b", "alpha/a"]


def test_weighted_round_robin() -> None:
    from omniroute_tui.clock import ManualClock
    from omniroute_tui.engine import ProviderSpec, ResilienceEngine, default_settings

    clock = ManualClock()
    engine = ResilienceEngine(
        [ProviderSpec("alpha", ("a", "b"), default_settings(), weights=(3, 1))], clock)
    router = make_router(engine, targets=("alpha/m",), strategy=Strategy.ROUND_ROBIN)
    served = [where(drive(router.start(str(i), "r"), [OK], clock)[0])[0] for i in range(8)]
    assert served.count("alpha/a") == 6 and served.count("alpha/b") == 2


def test_direct_provider_model_and_unknown_route() -> None:
    import pytest

    from omniroute_tui.router import UnknownRoute

    engine, clock, _ = make_engine()
    router = make_router(engine)
    attempts, _ = drive(router.start("1", "beta/m"), [OK], clock)
    assert where(attempts) == ["beta/x"]
    with pytest.raises(UnknownRoute):
        router.start("2", "nope")
    with pytest.raises(UnknownRoute):
        router.start("3", "gamma/m")


def test_cancel_releases_probe_and_answers_499() -> None:
    engine, clock, rec = make_engine({"alpha": ("a",)})
    engine.force_open("alpha", 1000, actor="ops")
    clock.set(1000)
    routing = make_router(engine, targets=("alpha/m",)).start("1", "r")
    assert isinstance(routing.next_step(), Attempt)
    response = routing.cancel()
    assert response.status == 499
    assert rec.of("result")[-1]["kind"] == "cancelled"
    assert engine.admit("alpha").probe


def test_event_sequence_of_one_request() -> None:
    engine, clock, rec = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    drive(make_router(engine).start("1", "r"),
          [classify(429, {"Retry-After": "10"}), OK], clock)
    assert [(e.TYPE, e.t) for e in rec.events] == [
        ("request", 0), ("attempt", 0), ("result", 100), ("cooldown", 100),
        ("budget", 100), ("attempt", 100), ("result", 200), ("response", 200),
    ]


def test_a_finished_request_is_freed_without_the_cycle_collector() -> None:
    import gc

    engine, clock, _ = make_engine()
    router = make_router(engine)
    gc.collect()
    gc.disable()
    try:
        for i in range(100):
            routing = router.start(f"r{i}", "r")
            routing.next_step()
            routing.record(200, OK)
            assert isinstance(routing.next_step(), Response)
        del routing
        # none is left for the cycle collector: reference counting freed them all
        assert not any(isinstance(o, RequestRouting) for o in gc.get_objects())
    finally:
        gc.enable()


def test_round_robin_over_ten_thousand_equal_keys_starts_at_once() -> None:
    from omniroute_tui.router.core import _rotation

    assert _rotation((1,) * 10_000) == tuple(range(10_000))  # not computed: O(n) not O(n²)
    assert _rotation((2, 1)) == (0, 1, 0)  # weights still follow nginx's smooth order
    conns = tuple(f"k{i}" for i in range(10_000))
    engine, clock, _ = make_engine({"alpha": conns, "beta": ("x",)})
    router = make_router(engine, ("alpha/m",), Strategy.ROUND_ROBIN)
    served = []
    for i in range(3):
        routing = router.start(f"r{i}", "r")
        step = routing.next_step()
        served.append(step.connection)
        routing.record(200, OK)
        routing.next_step()
    assert served == ["k0", "k1", "k2"]


def test_after_cancel_the_next_step_is_the_499_answer() -> None:
    engine, clock, recorder = make_engine()
    routing = make_router(engine).start("r1", "r")
    assert isinstance(routing.next_step(), Attempt)
    cancelled = routing.cancel()
    assert cancelled.status == 499
    assert routing.next_step() is cancelled
    assert [e["kind"] for e in recorder.of("result")] == ["cancelled"]


def test_the_answer_status_after_a_transport_failure() -> None:
    assert FailureKind.answer_status(0, "timeout") == 504
    assert FailureKind.answer_status(0, "network") == 502
    assert FailureKind.answer_status(0, None) == 502
    assert FailureKind.answer_status(429, "rate_limited") == 429
