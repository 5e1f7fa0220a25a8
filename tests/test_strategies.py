"""Route strategies (docs/design.md §7): hand-worked traces on a manual clock for each,
hostile rate-limit headers, config errors, and properties over random runs."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.console.model.request_steps import request_steps
from omniroute_tui.drivers.async_driver import AsyncDriver
from omniroute_tui.drivers.upstream import UpstreamReply
from omniroute_tui.engine import BreakerState, Classification, FailureKind, ResilienceEngine
from omniroute_tui.router import Attempt, Response, Route, Router, Strategy, Target
from omniroute_tui.router.core import _rotation
from omniroute_tui.router.rate_limits import MAX_COUNT, RateLimitInfo, parse_rate_limits
from omniroute_tui.router.strategies import UNSET_WINDOW_MS

from .helpers import ADMIT, OK, Answer, fail, make_engine, play

MODEL = "m"


def route_of(strategy: Strategy, *targets: str, weights: tuple[int, ...] | None = None
             ) -> Route:
    return Route("r", tuple(Target(t, MODEL) for t in targets), strategy, weights)


def serve(router: Router, request_id: str, clock: Any, answer: Classification = OK,
          limits: RateLimitInfo | None = None, latency: int = 0) -> Attempt:
    """One request answered by its first attempt; returns that attempt."""
    routing = router.start(request_id, "r")
    step = routing.next_step()
    assert isinstance(step, Attempt)
    clock.advance(latency)
    routing.record(200 if answer.kind is None else 429, answer, limits)
    if answer.kind is None:
        assert isinstance(routing.next_step(), Response)
    return step


# -- weighted -------------------------------------------------------------------------


def test_weighted_two_to_one_over_100_requests_is_67_and_33_in_a_smooth_order() -> None:
    # smooth WRR on (2, 1): currents [2,1] -> alpha [-1,1]; [1,2] -> beta [1,-1];
    # [3,0] -> alpha [0,0]: the period is alpha, beta, alpha; 33 periods and one alpha
    engine, clock, rec = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta",
                                           weights=(2, 1))})
    chosen = [serve(router, str(i), clock) for i in range(100)]
    assert [a.provider for a in chosen[:6]] == ["alpha", "beta", "alpha"] * 2
    assert Counter(a.provider for a in chosen) == {"alpha": 67, "beta": 33}
    # connections as round_robin: alpha's two keys alternate
    assert Counter(a.connection for a in chosen if a.provider == "alpha") == {"a": 34, "b": 33}
    first, second = rec.of("attempt")[:2]
    assert first["strategy"] == "weighted" and first["why"] == "weighted: alpha/m (weight 2 of 3)"
    assert second["why"] == "weighted: beta/m (weight 1 of 3)"


def test_an_unavailable_target_is_skipped_and_its_share_goes_to_the_others() -> None:
    # weights 3:2:1; beta's only key cools 4 s (a hinted 429); one request every 100 ms.
    # Requests 0..39 (t < 4000): beta left out, (3, 1) gives alpha, alpha, gamma, alpha
    # per 4 with every current back to 0: 30 alpha, 10 gamma. Requests 40..99: the full
    # (3, 2, 1) period of 6, ten times: 30 alpha, 20 beta, 10 gamma.
    engine, clock, rec = make_engine({"alpha": ("a",), "beta": ("x",), "gamma": ("g",)})
    engine.record("beta", "x", MODEL, ADMIT, fail(FailureKind.RATE_LIMITED, 4000))
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta", "gamma",
                                           weights=(3, 2, 1))})
    chosen = []
    for i in range(100):
        chosen.append(serve(router, str(i), clock).provider)
        clock.advance(100)
    assert chosen[:4] == ["alpha", "alpha", "gamma", "alpha"]
    assert Counter(chosen[:40]) == {"alpha": 30, "gamma": 10}
    assert Counter(chosen[40:]) == {"alpha": 30, "beta": 20, "gamma": 10}
    assert rec.of("attempt")[0]["why"] == (
        "weighted: alpha/m (weight 3 of 4; beta/m unavailable, its share to the others)")
    assert rec.of("skip") == []  # ordered around, never tried: nothing to skip


def test_weighted_choice_first_then_the_others_in_route_order_as_fallbacks() -> None:
    engine, clock, rec = make_engine({"alpha": ("a",), "beta": ("x",), "gamma": ("g",)})
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta", "gamma",
                                           weights=(1, 1, 5))})
    routing = router.start("1", "r")
    tried = []
    while isinstance(step := routing.next_step(), Attempt):
        tried.append(step.provider)
        routing.record(500, fail(FailureKind.SERVER_ERROR))
    assert tried == ["gamma", "alpha", "beta"]
    attempts = rec.of("attempt")
    assert [a.get("why") for a in attempts] == [
        "weighted: gamma/m (weight 5 of 7)", None, None]
    assert {a["strategy"] for a in attempts} == {"weighted"}


# -- least_busy -----------------------------------------------------------------------


def two_of(u: float, n: int) -> tuple[int, int]:
    """The two distinct positions of `n` that least_busy draws from one uniform `u`,
    worked out here the long way."""
    first = int(u * n)
    rest = u * n - first  # what is left of the draw, uniform again
    second = int(rest * (n - 1))
    return first, second + 1 if second >= first else second


def test_least_busy_takes_the_less_busy_of_two_drawn_with_the_router_seed() -> None:
    # one key per provider, so only targets are drawn: two of three positions from one
    # draw of Random(seed ^ 0x1EA57), the first int(u * 3), the second int of what is
    # left of it times 2 (shifted past the first); requests stay in flight, so the
    # counts grow
    engine, clock, rec = make_engine({"alpha": ("a",), "beta": ("x",), "gamma": ("g",)})
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha", "beta", "gamma")},
                    seed=7)
    draws = random.Random(7 ^ 0x1EA57)
    names = ["alpha", "beta", "gamma"]
    busy = dict.fromkeys(names, 0)
    expected = []
    for _ in range(12):
        a, b = two_of(draws.random(), 3)
        x, y = names[a], names[b]
        win = x if busy[x] <= busy[y] else y  # no latency yet: a tie goes to the first
        busy[win] += 1
        expected.append(win)
    chosen = []
    for i in range(12):
        routing = router.start(str(i), "r")
        step = routing.next_step()
        assert isinstance(step, Attempt)
        chosen.append(step.provider)  # left in flight
    assert chosen == expected
    # by hand, seed 7: drawn (in flight) -> chosen
    #  beta 0, gamma 0 -> beta   | alpha 0, beta 1 -> alpha  | gamma 0, alpha 1 -> gamma
    #  beta 1, gamma 1 -> beta   | alpha 1, gamma 1 -> alpha | alpha 2, beta 2 -> alpha
    #  beta 2, alpha 3 -> beta   | alpha 3, beta 3 -> alpha  | alpha 4, gamma 1 -> gamma
    #  beta 3, alpha 4 -> beta   | alpha 4, beta 4 -> alpha  | alpha 5, gamma 2 -> gamma
    assert chosen == ["beta", "alpha", "gamma", "beta", "alpha", "alpha", "beta", "alpha",
                      "gamma", "beta", "alpha", "gamma"]
    whys = [a["why"] for a in rec.of("attempt")]
    assert whys[0] == ("least_busy: beta/m and gamma/m 0 in flight each, "
                       "latency 0 ms vs 0 ms")
    assert whys[1] == "least_busy: alpha/m 0 in flight vs 1 on beta/m"
    assert whys[11] == "least_busy: gamma/m 2 in flight vs 5 on alpha/m"


def test_least_busy_draws_again_among_the_usable_when_a_drawn_target_cannot_serve(
) -> None:
    # four targets, beta's only key cooling: a pair with beta in it is drawn again from
    # the three usable (one more draw), so beta is never drawn into a decision and the
    # pair stays uniform over the usable ones. By hand, seed 7 (requests stay in flight):
    #  gamma, alpha (0 vs 0) -> gamma
    #  alpha, beta -> again: delta, alpha (0 vs 0) -> delta
    #  gamma, alpha (1 vs 0) -> alpha
    #  beta, alpha -> again: alpha, gamma (1 vs 1) -> alpha
    #  beta, gamma -> again: alpha, gamma (2 vs 1) -> gamma
    #  alpha, delta (2 vs 1) -> delta
    #  beta, delta -> again: alpha, gamma (2 vs 2) -> alpha
    #  alpha, delta (3 vs 2) -> delta
    names = ["alpha", "beta", "gamma", "delta"]
    engine, clock, rec = make_engine({name: (name[0],) for name in names})
    engine.record("beta", "b", MODEL, ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, *names)}, seed=7)
    chosen = []
    for i in range(8):
        step = router.start(str(i), "r").next_step()
        assert isinstance(step, Attempt)
        chosen.append(step.provider)  # left in flight
    assert chosen == ["gamma", "delta", "alpha", "alpha", "gamma", "delta", "alpha", "delta"]
    whys = [a["why"] for a in rec.of("attempt")]
    assert whys[1] == ("least_busy: delta/m and alpha/m 0 in flight each, "
                       "latency 0 ms vs 0 ms")
    assert whys[4] == "least_busy: gamma/m 1 in flight vs 2 on alpha/m"
    assert rec.of("skip") == []  # beta is ordered around, never tried


def test_least_busy_breaks_a_tie_by_the_ewma_latency() -> None:
    engine, clock, rec = make_engine({"alpha": ("a",), "beta": ("x",)})
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha", "beta")}, seed=3)
    # with two targets both are always drawn: nothing in flight, so latency decides
    first = serve(router, "1", clock, latency=400)  # the first seen has no latency yet
    second = serve(router, "2", clock, latency=100)
    assert {first.provider, second.provider} == {"alpha", "beta"}
    slow, fast = first.provider, second.provider
    # EWMA: the first answer sets it (400, 100); now the faster one wins every tie
    for i in range(3, 8):
        assert serve(router, str(i), clock, latency=100).provider == fast
    # fast's EWMA: 100 each time; slow stays 400
    assert rec.of("attempt")[-1]["why"] == (
        f"least_busy: {fast}/m and {slow}/m 0 in flight each, latency 100 ms vs 400 ms")


def test_least_busy_draws_two_keys_of_a_window_that_moves_one_key_a_request() -> None:
    # six keys: the window is 4 ready keys from a start that moves one key along each
    # request (a, b, ..., f, then a again), and the two keys are drawn from it
    keys = "abcdef"
    engine, clock, rec = make_engine({"alpha": tuple(keys)})
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha")}, seed=1)
    draws = random.Random(1 ^ 0x1EA57)  # one target: only keys are drawn
    busy = dict.fromkeys(keys, 0)
    chosen = []
    for i in range(12):
        x, y = two_of(draws.random(), 4)
        first, second = keys[(i + x) % 6], keys[(i + y) % 6]
        want = second if busy[second] < busy[first] else first
        routing = router.start(str(i), "r")
        step = routing.next_step()
        assert isinstance(step, Attempt) and step.connection == want
        busy[want] += 1  # left in flight
        chosen.append(want)
    # by hand, seed 1 (the window's start: the two drawn (in flight) -> chosen):
    #  a: a 0, b 0 -> a | b: e 0, c 0 -> e | c: e 1, d 0 -> d | d: e 1, d 1 -> e
    #  e: f 0, e 2 -> f | f: f 1, c 0 -> c | a: a 1, b 0 -> b | b: c 1, e 2 -> c
    #  c: d 1, f 1 -> d | d: a 1, d 2 -> a | e: a 2, e 2 -> a | f: c 2, f 1 -> f
    assert "".join(chosen) == "aedefcbcdaaf"
    assert busy == {"a": 3, "b": 1, "c": 2, "d": 2, "e": 2, "f": 2}
    assert rec.of("attempt")[0]["why"].startswith(
        "least_busy: alpha/m is the only target available; key ")


@pytest.mark.parametrize("listened", [True, False])
def test_least_busy_gives_a_locked_key_s_share_to_the_keys_drawn_with_it(listened: bool
                                                                        ) -> None:
    # k2 is locked out of the model: a drawn k2 loses to the other key drawn, so its
    # share spreads over its window's keys; before, the walk went on from it to k3,
    # which took twice a share (about 2,000 of 7,000). With someone listening the
    # attempt says why; without, a shorter path draws the second key only for a k2.
    keys = tuple(f"k{i}" for i in range(8))
    engine, clock, rec = make_engine({"alpha": keys})
    if not listened:
        engine = ResilienceEngine([engine.spec("alpha")], clock)
    engine.record("alpha", "k2", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha")}, seed=3)
    tried = Counter(serve(router, str(i), clock).connection for i in range(7000))
    assert "k2" not in tried and len(tried) == 7
    assert all(850 <= count <= 1150 for count in tried.values()), tried
    if listened:
        assert "least_busy: alpha/m is the only target available; key k3 (key k2 is locked " \
               "out of m)" in [a["why"] for a in rec.of("attempt")]


def _least_busy_keys(listened: bool, seed: int, locks: list[tuple[str, int]],
                     steps: list[tuple[int, bool]]) -> list[str]:
    """The keys least_busy's requests go to, on one provider of six keys with `locks`
    (key, ms), each step a clock jump and whether the request stays in flight."""
    keys = tuple("abcdef")
    engine, clock, _ = make_engine({"alpha": keys})
    if not listened:  # nobody reads why: least_busy takes its shorter path when it can
        engine = ResilienceEngine([engine.spec("alpha")], clock)
    for key, ms in locks:
        engine.record("alpha", key, MODEL, ADMIT, fail(FailureKind.FORBIDDEN, ms))
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha")}, seed=seed)
    chosen = []
    for i, (jump, stays) in enumerate(steps):
        clock.advance(jump)
        routing = router.start(str(i), "r")
        step = routing.next_step()
        if isinstance(step, Attempt):
            chosen.append(step.connection)
            if not stays:
                routing.record(200, OK)
        else:
            chosen.append("-")
    return chosen


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=999),
       st.lists(st.tuples(st.sampled_from("abcdef"),
                          st.integers(min_value=1, max_value=20_000)), max_size=5),
       st.lists(st.tuples(st.integers(min_value=0, max_value=500),
                          st.sampled_from([False, False, False, True])),
                min_size=1, max_size=80))
@example(0, [("a", 60_000), ("c", 60_000)], [(1, False)] * 40)  # both drawn keys locked
def test_least_busy_chooses_the_same_keys_whether_or_not_anyone_reads_why(
        seed: int, locks: list[tuple[str, int]], steps: list[tuple[int, bool]]) -> None:
    assert (_least_busy_keys(False, seed, locks, steps)
            == _least_busy_keys(True, seed, locks, steps))


def test_least_busy_window_spans_the_ready_keys_only() -> None:
    # keys b and d cooling: the window moves over a, c, e, f (4 ready: all of them)
    engine, clock, rec = make_engine({"alpha": tuple("abcdef")})
    for key in "bd":
        engine.record("alpha", key, MODEL, ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha")}, seed=1)
    tried = Counter(serve(router, str(i), clock).connection for i in range(400))
    assert set(tried) == set("acef")
    assert min(tried.values()) >= 70  # each about a quarter


# -- headroom -------------------------------------------------------------------------


def limits(left: int, reset_ms: int, limit: int | None = None) -> RateLimitInfo:
    return RateLimitInfo(requests_remaining=left, requests_reset_ms=reset_ms,
                         requests_limit=limit)


def test_headroom_without_headers_is_round_robin() -> None:
    engine, clock, rec = make_engine({"alpha": ("a", "b", "c"), "beta": ("x",)})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha", "beta")})
    assert [serve(router, str(i), clock).connection for i in range(6)] == list("abcabc")
    assert rec.of("attempt")[0]["why"] == (
        "headroom: no key has said its rate limits yet: in rotation")


def test_headroom_chooses_by_remaining_and_resets_at_the_reset_time() -> None:
    engine, clock, rec = make_engine({"alpha": ("a", "b", "c")})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    # the first three discover the keys (a key that never said counts as full)
    assert serve(router, "1", clock, limits=limits(10, 60_000)).connection == "a"
    assert serve(router, "2", clock, limits=limits(50, 60_000)).connection == "b"
    assert serve(router, "3", clock, limits=limits(30, 60_000)).connection == "c"
    # b has the most left (50 in 60 s); each attempt takes one off until an answer says
    routing = router.start("4", "r")
    step = routing.next_step()
    assert isinstance(step, Attempt) and step.connection == "b"
    assert rec.of("attempt")[-1]["why"] == (
        "headroom: b has 50 requests left for 60.0 s (0.8/s) vs 0.5/s next")
    routing.record(200, OK, limits(31, 60_000))  # b says 31
    assert serve(router, "5", clock).connection == "b"  # 31 vs c's 30; spent to 30
    assert serve(router, "6", clock).connection == "c"  # 30 each: c is next in rotation
    # b (30) vs c (29) vs a (10); b answers that it is out until 5 s from now
    assert serve(router, "7", clock, limits=limits(0, 5000, limit=100)).connection == "b"
    # held back: c, then c again (29, 28 left, against a's 10)
    assert [serve(router, str(i), clock).connection for i in (8, 9)] == ["c", "c"]
    assert "b" not in {a["connection"] for a in rec.of("attempt")[-2:]}
    clock.advance(4999)
    assert serve(router, "10", clock).connection == "c"  # b's reset has not passed
    clock.advance(1)  # it has: b's count is back to its limit, 100, the most by far
    assert serve(router, "11", clock).connection == "b"
    # c spent 4 of its 30 (requests 6, 8, 9, 10): 26 for the 55 s to its reset
    assert rec.of("attempt")[-1]["why"] == (
        "headroom: b has 100 requests left for 60.0 s (1.7/s) vs 0.5/s next")


def test_headroom_leaves_a_key_locked_out_of_the_model_unranked() -> None:
    # d never answered (it counts as full) and is locked out of the model: ranked, it
    # would win, and the walk would go on from it to a, which is nearly out
    engine, clock, rec = make_engine({"alpha": ("a", "b", "c", "d")})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    engine.record("alpha", "d", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    said = {"a": 1, "b": 50, "c": 30}  # what each key says it has left of 60 s
    assert [serve(router, str(i), clock, limits=limits(left, 60_000)).connection
            for i, left in enumerate(said.values())] == list(said)
    # the rotation is at d: the window d, a, b, c ranks a, b and c, and b has the most
    assert serve(router, "4", clock).connection == "b"
    assert rec.of("attempt")[-1]["why"] == (
        "headroom: b has 50 requests left for 60.0 s (0.8/s) vs 0.5/s next")


def test_headroom_with_every_key_of_its_window_locked_walks_on_in_rotation() -> None:
    engine, clock, rec = make_engine({"alpha": tuple("abcdef")})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    assert serve(router, "1", clock, limits=limits(10, 60_000)).connection == "a"
    for key in "bcde":
        engine.record("alpha", key, MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    # the rotation is at b: the window b, c, d, e is locked; the walk goes on to f
    assert serve(router, "2", clock).connection == "f"
    assert rec.of("attempt")[-1]["why"] == (
        "headroom: every key of the window is locked out of m: in rotation")


def test_headroom_holds_back_an_exhausted_key_and_then_an_exhausted_target() -> None:
    engine, clock, rec = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha", "beta")})
    assert serve(router, "1", clock, limits=limits(0, 10_000)).connection == "a"
    assert serve(router, "2", clock, limits=limits(5, 10_000)).connection == "b"
    assert serve(router, "3", clock, limits=limits(1, 10_000)).connection == "b"
    assert serve(router, "4", clock).connection == "b"  # a has none: b's last one
    # every alpha key is out until the reset: beta goes first, alpha stays a fallback
    routing = router.start("5", "r")
    step = routing.next_step()
    assert isinstance(step, Attempt) and (step.provider, step.connection) == ("beta", "x")
    assert rec.of("attempt")[-1]["why"] == (
        "headroom: alpha/m out of requests until the reset, tried last; "
        "no key has said its rate limits yet: in rotation")
    routing.record(500, fail(FailureKind.SERVER_ERROR))
    fallback = routing.next_step()
    assert isinstance(fallback, Attempt) and fallback.provider == "alpha"
    routing.record(200, OK)
    clock.advance(10_000)  # both alpha keys reset (no limit said: unknown again = full)
    assert serve(router, "6", clock).provider == "alpha"


def test_headroom_holds_back_a_target_whose_keys_that_can_serve_are_all_out() -> None:
    # alpha's b never answered (it would count as full) but is locked out of the model:
    # a, out until its reset, is all alpha has for it, so alpha goes after beta
    engine, clock, rec = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha", "beta")})
    engine.record("alpha", "b", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    assert serve(router, "1", clock, limits=limits(0, 10_000)).connection == "a"
    assert serve(router, "2", clock).provider == "beta"
    assert rec.of("attempt")[-1]["why"].startswith(
        "headroom: alpha/m out of requests until the reset, tried last")
    # a locked too: alpha has no key for the model, which is the walk's to say, not
    # headroom's (it is skipped as all locked, not held back as out of requests)
    engine.record("alpha", "a", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    assert serve(router, "3", clock).provider == "beta"
    assert rec.of("skip")[-1]["reason"] == "all_locked"
    assert "out of requests" not in (rec.of("attempt")[-1]["why"] or "")


@pytest.mark.parametrize("headers", [
    {"x-ratelimit-remaining-requests": "-5"},
    {"x-ratelimit-remaining-requests": "1e9999"},
    {"x-ratelimit-remaining-requests": str(MAX_COUNT + 1)},
    {"x-ratelimit-remaining-requests": "9" * 5000},
    {"x-ratelimit-remaining-requests": "NaN"},
    {"x-ratelimit-remaining-requests": "٣"},  # a digit, but not ASCII
    {"x-ratelimit-remaining-requests": 12},  # not text
    {"x-ratelimit-remaining-requests": None},
    {"x-ratelimit-reset-requests": "1s"},  # a reset without a count
    {"content-type": "application/json"},
    {},
])
def test_garbage_rate_limit_headers_are_ignored(headers: dict[str, Any]) -> None:
    assert parse_rate_limits(headers, 0) is None


def test_rate_limit_headers_parse_durations_timestamps_and_drop_nonsense_fields() -> None:
    got = parse_rate_limits({
        "X-RateLimit-Remaining-Requests": " 42 ", "x-ratelimit-limit-requests": "500",
        "x-ratelimit-reset-requests": "1m30.5s", "x-ratelimit-remaining-tokens": "9000",
        "x-ratelimit-reset-tokens": "-3s"}, 0)
    assert got == RateLimitInfo(42, 500, 90_500, 9000, None, None)
    assert parse_rate_limits({"x-ratelimit-remaining-requests": "1",
                              "x-ratelimit-reset-requests": "20ms"}) == RateLimitInfo(
        requests_remaining=1, requests_reset_ms=20)
    assert parse_rate_limits({"x-ratelimit-remaining-requests": "1",
                              "x-ratelimit-reset-requests": "0.25"}) == RateLimitInfo(
        requests_remaining=1, requests_reset_ms=250)
    for nonsense in ("99999999h", "1e400", "inf", "s", "1x", "--", "1h2q"):
        info = parse_rate_limits({"x-ratelimit-remaining-requests": "7",
                                  "x-ratelimit-reset-requests": nonsense}, 0)
        assert info == RateLimitInfo(requests_remaining=7), nonsense
    now = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    anthropic = {"anthropic-ratelimit-requests-remaining": "3",
                 "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:12Z",
                 "anthropic-ratelimit-tokens-remaining": "80000",
                 "anthropic-ratelimit-tokens-reset": "2025-12-31T23:59:00Z"}  # passed: 0
    assert parse_rate_limits(anthropic, now) == RateLimitInfo(3, None, 12_000, 80_000, None, 0)
    assert parse_rate_limits(anthropic, None) == RateLimitInfo(
        requests_remaining=3, tokens_remaining=80_000)  # no clock to read a time against
    assert parse_rate_limits({"anthropic-ratelimit-requests-remaining": "3",
                              "anthropic-ratelimit-requests-reset": "2026-13-45T99:00:00Z"},
                             now) == RateLimitInfo(requests_remaining=3)


def test_a_hostile_header_mapping_never_raises() -> None:
    class Hostile(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def, override]
            raise RuntimeError("boom")

    assert parse_rate_limits(Hostile(), 0) is None
    assert parse_rate_limits({b"x": "1", 3: "4"}, 0) is None  # type: ignore[dict-item]


def test_huge_and_zero_values_from_headers_order_keys_without_failing() -> None:
    engine, clock, _ = make_engine({"alpha": ("a", "b")})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    huge = parse_rate_limits({"x-ratelimit-remaining-requests": str(MAX_COUNT),
                              "x-ratelimit-reset-requests": "0s"}, 0)
    assert serve(router, "1", clock, limits=huge).connection == "a"
    assert serve(router, "2", clock, limits=limits(0, 1)).connection == "b"
    clock.advance(1)  # a's reset passed (0 ms from its answer); b's after 1 ms
    assert [serve(router, str(i), clock).connection for i in range(3, 7)] == list("abab")


def drive(headers: dict[str, dict[str, str]], served: list[str], wall: Any = None
          ) -> Router:
    """Requests through the async driver to a headroom route over keys a and b, on a
    manual clock at 0; each answer carries the headers of the key that served it."""
    from omniroute_tui.config.router_config import ConnectionConfig, ProviderConfig
    from omniroute_tui.engine import default_settings
    from omniroute_tui.engine.settings import AuthKind

    engine, clock, _ = make_engine({"alpha": ("a", "b")})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    provider = ProviderConfig("alpha", AuthKind.APIKEY, (MODEL,),
                              (ConnectionConfig("a"), ConnectionConfig("b")),
                              default_settings(), base_url="http://127.0.0.1:9")
    keys = list(served)

    async def post(url: str, request_headers: Any, payload: bytes, *, timeout_ms: int,
                   stream: bool, now_epoch_ms: int, **options: Any) -> UpstreamReply:
        return UpstreamReply(200, OK, headers[keys.pop(0)], b"{}")

    client = type("Client", (), {"post": staticmethod(post)})()
    driver = AsyncDriver(router, {"alpha": provider}, client,  # type: ignore[arg-type]
                         wall=wall)
    order = [asyncio.run(driver.complete({"model": "r"})).response.upstream for _ in served]
    assert [a.connection for a in order if a is not None] == served
    return router


def test_the_async_driver_hands_the_parsed_headers_to_the_core() -> None:
    router = drive({key: {"x-ratelimit-remaining-requests": left,
                          "x-ratelimit-reset-requests": "60s"}
                    for key, left in (("a", "5"), ("b", "50"))}, ["a", "b", "b"])
    known = router.headroom.keys["alpha"]
    assert known["b"].requests_left == 50 and known["a"].requests_left == 5


def test_dated_headers_are_read_against_the_wall_clock_the_driver_is_given() -> None:
    # the router's clock counts from 0 (a live replay's); the answer's reset is a date
    dated = {"anthropic-ratelimit-requests-remaining": "3",
             "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:12Z"}
    wall = ManualClock(1_767_225_600_000)  # 2026-01-01T00:00:00Z
    known = drive({"a": dated}, ["a"], wall).headroom.keys["alpha"]
    assert known["a"].requests_reset_at == 12_000
    # read against the router's clock, the date is 56 years away: ignored, and the count
    # is trusted for a typical window
    known = drive({"a": dated}, ["a"]).headroom.keys["alpha"]
    assert known["a"].requests_reset_at == UNSET_WINDOW_MS


# -- config ---------------------------------------------------------------------------

PROVIDERS = """\
providers:
  alpha: {models: [gpt-4o], connections: [k1]}
  beta: {models: [gpt-4o], connections: [k2]}
"""


def load(routes: str) -> Any:
    return load_router_config("router.yaml", text=PROVIDERS + "routes:\n" + routes)


def test_weights_in_the_config() -> None:
    config = load("  fast:\n    strategy: weighted\n    targets:\n"
                  "      - {target: alpha/gpt-4o, weight: 2}\n      - beta/gpt-4o\n")
    route = config.routes["fast"]
    assert route.strategy is Strategy.WEIGHTED and route.weights == (2, 1)
    assert load("  fast: {strategy: weighted, targets: [alpha/gpt-4o, beta/gpt-4o]}\n"
                ).routes["fast"].weights is None
    for name in ("least_busy", "headroom", "priority", "round_robin"):
        assert load(f"  fast: {{strategy: {name}, targets: [alpha/gpt-4o]}}\n"
                    ).routes["fast"].strategy is Strategy(name)


@pytest.mark.parametrize(("routes", "expected"), [
    ("  fast: {strategy: fastest, targets: [alpha/gpt-4o]}\n",
     "router.yaml:5: routes.fast.strategy: expected one of priority, round_robin, weighted, "
     "least_busy, headroom, got 'fastest'"),
    ("  fast: {strategy: [weighted], targets: [alpha/gpt-4o]}\n",
     "router.yaml:5: routes.fast.strategy: expected one of"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {target: alpha/gpt-4o, weight: 0}\n",
     "router.yaml:8: routes.fast.targets[0].weight: expected a whole number from 1 to "
     "1,000,000, got 0"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {target: alpha/gpt-4o, weight: -2}\n",
     "routes.fast.targets[0].weight: expected a whole number from 1 to 1,000,000, got -2"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {target: alpha/gpt-4o, weight: 1.5}\n",
     "routes.fast.targets[0].weight: expected a whole number from 1 to 1,000,000, got 1.5"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {target: alpha/gpt-4o, weight: '2'}\n",
     "got '2'"),
    ("  fast:\n    strategy: weighted\n    targets:\n"
     "      - {target: alpha/gpt-4o, weight: true}\n", "got True"),
    ("  fast:\n    strategy: weighted\n    targets:\n"
     "      - {target: alpha/gpt-4o, weight: 10000000}\n", "got 10000000"),
    ("  fast:\n    targets:\n      - {target: alpha/gpt-4o, weight: 2}\n",
     "router.yaml:7: routes.fast.targets[0].weight: a weight is read only by strategy "
     "weighted; this route's is round_robin (it names none) (write strategy: weighted, or "
     "drop the weight)"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {target: alpha/gpt-4o, wieght: 2}\n",
     "router.yaml:8: routes.fast.targets[0].wieght: unknown field"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {weight: 2}\n",
     "routes.fast.targets[0].target: expected provider/model or {target: provider/model, "
     "weight: N}, got NoneType"),
    pytest.param("  fast:\n    strategy: weighted\n    targets:\n"
     f"      - {{target: alpha/gpt-4o, weight: {10**100}}}\n",
     "router.yaml:8: routes.fast.targets[0].weight: expected a whole number from 1 to "
     "1,000,000, got a number of 101 digits", id="weight-10**100"),
    pytest.param("  fast:\n    strategy: weighted\n    targets:\n"
     f"      - {{target: alpha/gpt-4o, weight: {'9' * 5000}}}\n",
     "router.yaml:8: routes.fast.targets[0].weight: not a value: Exceeds the limit (4300 "
     "digits) for integer string conversion: value has 5000 digits", id="weight-5000-digits"),
    ("  fast: {targets: [alpha/gpt-4o, beta/gpt-4o, alpha/gpt-4o]}\n",
     "router.yaml:5: routes.fast.targets[2]: target alpha/gpt-4o is listed twice"),
    ("  fast:\n    strategy: weighted\n    targets:\n      - {target: beta/gpt-4o, weight: 2}\n"
     "      - {target: beta/gpt-4o, weight: 3}\n",
     "router.yaml:9: routes.fast.targets[1].target: target beta/gpt-4o is listed twice"),
])
def test_strategy_and_weight_errors_name_file_line_and_field(routes: str, expected: str
                                                             ) -> None:
    with pytest.raises(ConfigError) as info:
        load(routes)
    assert expected in str(info.value)
    assert str(info.value).startswith("1 problem:")  # one mistake, one problem


def test_a_weight_under_a_strategy_that_could_not_be_read_is_not_blamed_on_priority(
        ) -> None:
    with pytest.raises(ConfigError) as info:
        load("  fast:\n    strategy: wieghted\n    targets:\n"
             "      - {target: alpha/gpt-4o, weight: 2}\n"
             "      - {target: beta/gpt-4o, weight: 0}\n")
    assert [str(p) for p in info.value.problems] == [
        "router.yaml:6: routes.fast.strategy: expected one of priority, round_robin, "
        "weighted, least_busy, headroom, got 'wieghted'",
        "router.yaml:9: routes.fast.targets[1].weight: expected a whole number from 1 to "
        "1,000,000, got 0"]


@pytest.mark.parametrize(("connections", "expected"), [
    pytest.param(f"[{{id: a, weight: {10**100}}}, b]", "router.yaml:2: providers.alpha."
                 "connections[0].weight: expected a whole number from 1 to 10,000, got a "
                 "number of 101 digits", id="weight-10**100"),
    ("[{id: a, weight: true}, b]", "router.yaml:2: providers.alpha.connections[0].weight: "
     "expected a whole number from 1 to 10,000, got True"),
    ("[{id: a, weight: 2.5}, b]", "router.yaml:2: providers.alpha.connections[0].weight: "
     "expected a whole number from 1 to 10,000, got 2.5"),
    ("[{id: a, weight: 10000}, b]", "router.yaml:2: providers.alpha.connections: the "
     "connections' weights add up to 10,001: at most 10,000 (a rotation is that many "
     "requests long)"),
])
def test_connection_weights_are_capped_where_a_rotation_would_be_too_long(
        connections: str, expected: str) -> None:
    """A provider's rotation is as long as its connections' weights add up to, and built
    on its first request: a weight of 10**100 next to 1 never finished building."""
    text = (f"providers:\n  alpha: {{models: [m], connections: {connections}}}\n"
            "routes:\n  fast: {strategy: round_robin, targets: [alpha/m]}\n")
    with pytest.raises(ConfigError) as info:
        load_router_config("router.yaml", text=text)
    assert [str(p) for p in info.value.problems] == [expected]


def naive_rotation(weights: tuple[int, ...]) -> tuple[int, ...]:
    """nginx's smooth weighted round robin, step by step over every connection."""
    total, current, order = sum(weights), [0] * len(weights), []
    for _ in range(total):
        for i, weight in enumerate(weights):
            current[i] += weight
        best = max(range(len(weights)), key=current.__getitem__)
        current[best] -= total
        order.append(best)
    return tuple(order) if len(set(weights)) > 1 else tuple(range(len(weights)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1, 1, 2, 3, 5, 8, 40]), min_size=1, max_size=12))
def test_a_rotation_by_distinct_weights_is_nginx_s_order(weights: list[int]) -> None:
    assert _rotation(tuple(weights)) == naive_rotation(tuple(weights))


# -- properties -----------------------------------------------------------------------

KINDS = [None, None, None, FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR,
         FailureKind.QUOTA_EXHAUSTED, FailureKind.FORBIDDEN, FailureKind.TIMEOUT,
         FailureKind.AUTH_FAILED]
STATUS = {None: 200, FailureKind.RATE_LIMITED: 429, FailureKind.SERVER_ERROR: 500,
          FailureKind.QUOTA_EXHAUSTED: 429, FailureKind.FORBIDDEN: 403,
          FailureKind.TIMEOUT: 0, FailureKind.AUTH_FAILED: 401}

requests = st.lists(st.tuples(
    st.integers(min_value=0, max_value=20_000),  # clock jump before the request
    st.lists(st.tuples(st.sampled_from(KINDS),
                       st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
                       st.integers(min_value=0, max_value=90_000)), max_size=4),
    st.booleans(),  # left in flight (never answered)
), max_size=40)


def run(strategy: Strategy, steps: list[Any], seed: int, check: bool) -> list[str]:
    engine, clock, rec = make_engine({"alpha": ("a", "b", "c"), "beta": ("x", "y"),
                                      "gamma": ("g",)}, seed=seed)
    route = route_of(strategy, "alpha", "beta", "gamma",
                     weights=(3, 2, 1) if strategy is Strategy.WEIGHTED else None)
    router = Router(engine, {"r": route}, seed=seed)
    for i, (jump, answers, leave) in enumerate(steps):
        clock.advance(jump)
        answers = list(answers)

        def answer(step: Attempt, answers: list[Any] = answers, leave: bool = leave
                   ) -> Answer | None:
            if check:
                refused(engine, step, rec, clock.now_ms())
            if leave or not answers:
                return None
            kind, left, latency = answers.pop(0)
            info = None if left is None else RateLimitInfo(requests_remaining=left,
                                                           requests_reset_ms=30_000)
            return latency, STATUS[kind], Classification(kind), info

        play(router.start(str(i), "r"), clock, answer)
    return [e.to_json() for e in rec.events]


def refused(engine: Any, attempt: Attempt, rec: Any, now: int) -> None:
    """Fail when the layers would refuse the attempt: breaker OPEN, key cooling (unless
    the breaker's probe, or the one request a provider with every key cooling lets ride
    one (docs/design.md §4), on a backoff key, as announced) or disabled, model locked."""
    assert engine.breaker_snapshot(attempt.provider).state is not BreakerState.OPEN
    conn = engine.connection_snapshot(attempt.provider, attempt.connection)
    assert not conn.disabled
    announced = rec.events[-1]
    if conn.cooling(now):
        assert announced.cooling_until == conn.cooling_until
        assert attempt.probe or engine.layers(attempt.provider).carried_until > now
    for lock in engine.lockout_snapshots(attempt.provider):
        assert not (lock.connection == attempt.connection and lock.model == attempt.model
                    and lock.until > now)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(Strategy)), requests, st.integers(min_value=0, max_value=99))
def test_no_strategy_tries_what_the_layers_refuse_and_a_replay_is_identical(
        strategy: Strategy, steps: list[Any], seed: int) -> None:
    first = run(strategy, steps, seed, check=True)
    assert run(strategy, steps, seed, check=False) == first


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=20), min_size=2, max_size=4))
def test_weighted_shares_are_within_one_percent_over_10000_requests(weights: list[int]
                                                                    ) -> None:
    names = ["p0", "p1", "p2", "p3"][:len(weights)]
    engine, clock, _ = make_engine({name: ("k",) for name in names})
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, *names,
                                           weights=tuple(weights))})
    counts = Counter(serve(router, str(i), clock).provider for i in range(10_000))
    total = sum(weights)
    for name, weight in zip(names, weights, strict=True):
        assert abs(counts[name] / 10_000 - weight / total) <= 0.01


def test_priority_and_round_robin_events_carry_no_strategy_fields() -> None:
    for strategy in (Strategy.PRIORITY, Strategy.ROUND_ROBIN):
        engine, clock, rec = make_engine({"alpha": ("a",), "beta": ("x",)})
        engine.record("alpha", "a", MODEL, ADMIT, fail(FailureKind.RATE_LIMITED, 4000))
        router = Router(engine, {"r": route_of(strategy, "alpha", "beta")})
        serve(router, "1", clock)
        assert "strategy" not in rec.of("attempt")[0] and "why" not in rec.of("attempt")[0]
        assert "strategy" not in rec.of("skip")[0]


def test_the_why_view_says_which_strategy_chose_and_why() -> None:
    from omniroute_tui.console.model.console_model import ConsoleModel

    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    model = ConsoleModel({}, clock.now_ms)
    engine.bus.subscribe(model.on_event)
    router = Router(engine, {"r": route_of(Strategy.LEAST_BUSY, "alpha", "beta")}, seed=7)
    held = router.start("1", "r")
    first = held.next_step()  # stays in flight
    assert isinstance(first, Attempt)
    other = serve(router, "2", clock)
    assert other.provider != first.provider
    steps = request_steps(model.requests["2"].events)
    assert steps[1] == (0, "strategy", f"least_busy: {other.provider}/m 0 in flight vs 1 on "
                                       f"{first.provider}/m")
    assert steps[2][1:] == ("router", f"attempt 1 on {other.provider}/{other.connection}/m")


def test_headroom_compares_a_window_of_4_ready_keys_from_the_rotation() -> None:
    keys = tuple(f"k{i}" for i in range(12))
    engine, clock, _ = make_engine({"alpha": keys})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    for i in range(12):  # the rotation discovers each key: k_i has 10 * (i + 1) left
        assert serve(router, str(i), clock, limits=limits(10 * (i + 1), 60_000)
                     ).connection == f"k{i}"
    # the rotation is back at k0: the window is k0..k3, and k3 (40 left) is its best,
    # though k11 (120) is better; one position on, the window k1..k4 gives k4
    assert serve(router, "12", clock).connection == "k3"
    assert serve(router, "13", clock).connection == "k4"
    for i in range(14, 20):  # the windows k2..k5 to k7..k10: each its last key
        assert serve(router, str(i), clock).connection == f"k{i - 9}"
    assert serve(router, "20", clock).connection == "k11"  # k8..k11
    # at k9 the window wraps (k9..k11, k0): k11 again, the most left
    assert serve(router, "21", clock).connection == "k11"


def test_a_reload_keeps_the_weighted_counters_of_an_unchanged_route_only() -> None:
    text = PROVIDERS + ("routes:\n  fast:\n    strategy: weighted\n    targets:\n"
                        "      - {target: alpha/gpt-4o, weight: 2}\n      - beta/gpt-4o\n")
    config = load_router_config("router.yaml", text=text)
    clock = ManualClock()
    router = config.build(clock)

    def pick() -> str:
        routing = router.start("x", "fast")
        step = routing.next_step()
        assert isinstance(step, Attempt)
        routing.record(200, OK)
        return step.provider

    assert [pick(), pick()] == ["alpha", "beta"]
    load_router_config("router.yaml", text=text + "\n").reconfigure(router, previous=config)
    assert pick() == "alpha"  # unchanged route: the period goes on (alpha, beta, alpha)
    changed = load_router_config("router.yaml", text=text.replace("weight: 2", "weight: 3"))
    changed.reconfigure(router, previous=config)
    assert [pick() for _ in range(4)] == ["alpha", "alpha", "beta", "alpha"]  # from zero


def test_headroom_reads_a_reloaded_provider_s_keys_along_its_new_order() -> None:
    def config(keys: str) -> Any:
        return load_router_config("router.yaml", text=(
            f"providers:\n  alpha: {{models: [m], connections: [{keys}]}}\n"
            "routes:\n  fast: {strategy: headroom, targets: [alpha/m]}\n"))

    def pick(info: RateLimitInfo | None = None) -> str:
        routing = router.start("x", "fast")
        step = routing.next_step()
        assert isinstance(step, Attempt)
        routing.record(200, OK, info)
        return step.connection

    first = config("k1, k2, k3")
    router = first.build(ManualClock())
    assert [pick(limits(10, 60_000)), pick(limits(50, 60_000)), pick(limits(30, 60_000))] == [
        "k1", "k2", "k3"]
    assert pick() == "k2"  # 50 left, the most
    # the keys in another order, one more: k2 (49 left) is still the best of those heard
    # of, k0 has not said (full) and goes first; then k0 says it has none left
    config("k3, k0, k2, k1").reconfigure(router, previous=first)
    assert pick(limits(0, 60_000)) == "k0"
    assert [pick() for _ in range(3)] == ["k2", "k2", "k2"]
