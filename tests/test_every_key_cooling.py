"""A provider with every key cooling (docs/design.md §4): when none of a provider's keys is
ready and every key a request could still use cools for backoff, the breaker's cadence
decides, not the ladder: one breaker window after the provider's last failure, the key whose
backoff ends first carries the request. Hand-worked on a ManualClock."""

from __future__ import annotations

from typing import Any

from omniroute_tui.engine import AttemptEvent, CooldownEvent, FailureKind
from omniroute_tui.engine.kinds import CooldownReason, SkipReason
from omniroute_tui.router import Attempt, Response

from .helpers import OK, fail, make_engine, make_router, play

SERVER = FailureKind.SERVER_ERROR
#: an attempt on alpha takes this long to fail or succeed
LATENCY = 50


def one_key_outage(until: int, recovered_at: int = 60_000) -> tuple[list[int], int | None,
                                                                        Any]:
    """The worked case: alpha has one key and answers 503 (no hint) before `recovered_at`,
    beta serves; a request every 4 s from 0.1 s. Returns when alpha was tried, when it first
    served, and the recorder."""
    engine, clock, rec = make_engine({"alpha": ("a1",), "beta": ("b1",)})
    router = make_router(engine)
    tried: list[int] = []
    back = None
    for i, t in enumerate(range(100, until, 4_000)):
        clock.set(t)

        def answer(step: Attempt) -> tuple[int, int, Any, None]:
            nonlocal back
            if step.provider != "alpha":
                return 0, 200, OK, None
            tried.append(clock.now_ms())
            if clock.now_ms() < recovered_at:
                return LATENCY, 503, fail(SERVER), None
            if back is None:
                back = clock.now_ms()
            return LATENCY, 200, OK, None

        assert play(router.start(f"r{i}", "r"), clock, answer) is None
    return [t for t in tried if back is None or t < back], back, rec


def test_the_worked_case_one_key_is_back_at_60_1_s() -> None:
    tried, back, rec = one_key_outage(70_000)
    # 0.1 fails (f 1), cools 3 s; 4.1 (deduped: within 5 s of the last counted) cools 6 s
    # to 10.15; 8.1 skipped (4 s since the last failure, the window is 5 s); 12.1 (f 2)
    # cools 12 s to 24.15; 16.1 skipped; 20.1: 8 s since the last failure, the key carries
    # it (f 3, DEGRADED; cooling, so no escalation: still to 24.15); 24.1 skipped; 28.1 the
    # key is ready (f 4), cools 24 s to 52.15; 32.1 skipped; 36.1 carried (f 5): OPEN 5 s;
    # 44.1 and 52.1 the probes fail; 60.1 the probe succeeds
    assert tried == [100, 4_100, 12_100, 20_100, 28_100, 36_100, 44_100, 52_100]
    assert back == 60_100
    carried = [e for e in rec.events if isinstance(e, AttemptEvent) and e.provider == "alpha"
               and e.cooling_until is not None and not e.probe]
    assert [(e.t, e.cooling_until) for e in carried] == [(20_100, 24_150), (36_100, 52_150)]
    levels = [(e.t, e.level, e.until) for e in rec.events
              if isinstance(e, CooldownEvent) and e.kind is not None]
    # the probe at 52.1 takes the key as its cooldown ends (52.15 when it fails): the
    # ladder's next step; the probe at 60.1 takes it cooling and frees it
    assert levels == [(150, 1, 3_150), (4_150, 2, 10_150), (12_150, 3, 24_150),
                      (28_150, 4, 52_150), (52_150, 5, 100_150)]


def cooling_both() -> tuple[Any, Any, Any, Any]:
    """alpha's two keys fail at 0 (cooling 3 s) and again at 3 s (level 2: cooling to 9 s,
    backoff), each time through a request that beta then serves."""
    engine, clock, rec = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    router = make_router(engine)
    for t in (0, 3_000):
        clock.set(t)
        for i in range(2):
            routing = router.start(f"f{t}-{i}", "r")
            step = routing.next_step()
            assert isinstance(step, Attempt) and step.provider == "alpha"
            routing.record(503, fail(SERVER))
            while not isinstance(step := routing.next_step(), Response):
                routing.record(200, OK)
    return engine, router, clock, rec


def test_at_most_one_request_rides_a_cooling_key() -> None:
    engine, router, clock, rec = cooling_both()
    clock.set(7_999)  # less than a window (5 s) after the last failure: nothing carries
    step = router.start("early", "r").next_step()
    assert isinstance(step, Attempt) and step.provider == "beta"
    clock.set(8_000)
    first = router.start("first", "r")
    carried = first.next_step()
    assert isinstance(carried, Attempt) and carried.provider == "alpha" and not carried.probe
    assert carried.connection == "a1"  # both end at 9 s: config order breaks the tie
    second = router.start("second", "r")
    step = second.next_step()
    assert isinstance(step, Attempt) and step.provider == "beta"
    assert [s.reason for s in second.skips] == [SkipReason.ALL_COOLING]
    first.cancel()  # the slot is free again, and a cancel is no failure
    third = router.start("third", "r").next_step()
    assert isinstance(third, Attempt) and third.provider == "alpha"


def test_a_lost_carried_attempt_holds_its_slot_for_the_request_timeout_only() -> None:
    engine, router, clock, rec = cooling_both()
    clock.set(8_000)
    lost = router.start("lost", "r").next_step()  # a driver that never reports
    assert isinstance(lost, Attempt) and lost.connection == "a1"
    layers = engine.layers("alpha")
    timeout = engine.spec("alpha").settings.request.timeout_ms
    assert layers.carried_until == 8_000 + timeout
    assert layers.carrier(8_500, "m", ()) is None


def test_a_carried_success_frees_every_backoff_key() -> None:
    engine, router, clock, rec = cooling_both()
    clock.set(8_500)
    routing = router.start("carry", "r")
    step = routing.next_step()
    assert isinstance(step, Attempt) and step.connection == "a1"
    routing.record(200, OK)
    freed = [(e.connection, e.level, e.reason) for e in rec.events
             if isinstance(e, CooldownEvent) and e.t == 8_500]
    assert freed == [("a1", 0, CooldownReason.CARRIER_SERVED),
                     ("a2", 0, CooldownReason.CARRIER_SERVED)]
    nxt = router.start("after", "r").next_step()
    assert isinstance(nxt, Attempt) and nxt.provider == "alpha"


def test_a_carried_failure_does_not_escalate() -> None:
    engine, router, clock, rec = cooling_both()
    before = engine.connection_snapshot("alpha", "a1")
    clock.set(8_000)
    routing = router.start("carry", "r")
    step = routing.next_step()
    assert isinstance(step, Attempt) and step.connection == "a1"
    clock.set(8_200)
    routing.record(503, fail(SERVER))
    after = engine.connection_snapshot("alpha", "a1")
    assert (after.level, after.cooling_until) == (before.level, before.cooling_until) == (2, 9_000)


def test_a_hinted_or_quota_key_blocks_the_carrier() -> None:
    for hint, kind in ((20_000, SERVER), (None, FailureKind.QUOTA_EXHAUSTED)):
        engine, router, clock, rec = cooling_both()
        clock.set(3_000)
        engine.layers("alpha").pool.record_failure(1, 3_000, kind, hint)  # a2: not backoff
        engine.layers("alpha").pool.record_failure(0, 3_000, SERVER, None)  # a1 backoff
        engine.layers("alpha").last_failure_at = 0
        clock.set(8_000)
        routing = router.start("x", "r")
        step = routing.next_step()
        assert isinstance(step, Attempt) and step.provider == "beta", (hint, kind)


def test_a_key_this_request_tried_does_not_carry_it() -> None:
    engine, clock, rec = make_engine({"alpha": ("a1", "a2"), "beta": ("b1",)})
    router = make_router(engine, ("alpha/m",))
    clock.set(0)
    routing = router.start("one", "r")
    step = routing.next_step()
    assert isinstance(step, Attempt) and step.connection == "a1"
    engine.layers("alpha").pool.record_failure(1, 0, SERVER, None)  # a2 cooling, backoff
    engine.layers("alpha").last_failure_at = -10_000
    routing.record(429, fail(FailureKind.RATE_LIMITED))  # the next connection: a2 cools
    # a2 is cooling for backoff and was not tried, but the failure just now is this
    # request's own: no window has passed, so nothing carries it
    step = routing.next_step()
    assert not isinstance(step, Attempt) or step.connection != "a1"
