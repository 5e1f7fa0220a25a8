"""Route strategies against hostile input (docs/design.md §7): rate-limit headers in
every form providers write them and in none, keys whose answers contradict what they
said, and reloads under load that must leave no count, probe slot or weight behind."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import load_router_config
from omniroute_tui.engine import Classification, FailureKind
from omniroute_tui.router import Attempt, RequestRouting, Response, Router, Strategy, Wait
from omniroute_tui.router.rate_limits import (
    MAX_COUNT,
    MAX_RESET_MS,
    RateLimitInfo,
    parse_rate_limits,
)

from .helpers import OK, fail, make_engine
from .test_strategies import limits, route_of, serve

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000


def reset_of(text: str) -> int | None:
    info = parse_rate_limits({"x-ratelimit-remaining-requests": "7",
                              "x-ratelimit-reset-requests": text}, NOW)
    assert info is not None and info.requests_remaining == 7
    return info.requests_reset_ms


@pytest.mark.parametrize("text", ["١٢", "１２", "12٠", "１s", "1.٥s", "٣m"])
def test_a_reset_in_digits_other_than_ascii_is_ignored(text: str) -> None:
    """`\\d` and float() read "١٢" as 12: a reset was taken from text no provider writes
    (a count in such digits was already refused)."""
    assert reset_of(text) is None


@pytest.mark.parametrize(("text", "ms"), [
    ("1s", 1000), ("6m0s", 360_000), ("20ms", 20), ("0.5", 500), ("0s", 0),
    ("1h2m3.5s", 3_723_500),
    (str(MAX_RESET_MS // 1000), MAX_RESET_MS),  # 7 days: the longest trusted
    (str(MAX_RESET_MS // 1000 + 1), None),
    ("1767225612", None),  # epoch seconds read as a duration: 56 years, ignored
    ("Thu, 01 Jan 2026 00:00:12 GMT", None),  # RFC 1123: not a format read
    ("2026-01-01T00:00:12Z", 12_000),
    ("2025-12-31T23:59:00Z", 0),  # passed: the window has reset
    ("0001-01-01T00:00:00+14:00", 0),
    ("9999-12-31T23:59:59-14:00", None),  # far beyond 7 days
    ("9999-12-31T23:59:59.999999-23:59", None), ("0001-01-01T00:00:00-23:59", 0),
    ("2026-01-01T00:00:12", None),  # no zone: not a time we can place
    ("1s, 1s", None),  # a header repeated: joined with a comma
    ("1e3", None), ("inf", None), ("nan", None), ("-1s", None), ("1_000", None),
    ("9" * 64, None),
])
def test_reset_formats_are_read_or_ignored_never_misread(text: str, ms: int | None) -> None:
    assert reset_of(text) == ms


_TEXTS = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["0", "1", "-1", "1e9", str(MAX_COUNT), str(MAX_COUNT + 1), "nan", "1s",
                     "6m0s", "20ms", "0.5", "1767225612", "Thu, 01 Jan 2026 00:00:12 GMT",
                     "2026-01-01T00:00:12Z", "٣", "9" * 64, "9" * 65, "1s, 1s"]),
    st.integers().map(str), st.floats().map(str))
_NAMES = st.sampled_from([
    "x-ratelimit-remaining-requests", "x-ratelimit-limit-requests",
    "x-ratelimit-reset-requests", "x-ratelimit-remaining-tokens",
    "x-ratelimit-limit-tokens", "X-RateLimit-Reset-Tokens",
    "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_NAMES, _TEXTS), st.one_of(st.none(), st.integers(0, 2**62)))
def test_any_header_text_parses_within_bounds_and_never_raises(
        headers: dict[str, str], now: int | None) -> None:
    info = parse_rate_limits(headers, now)
    if info is None:
        return
    for count in (info.requests_remaining, info.requests_limit, info.tokens_remaining,
                  info.tokens_limit):
        assert count is None or 0 <= count <= MAX_COUNT
    for reset in (info.requests_reset_ms, info.tokens_reset_ms):
        assert reset is None or 0 <= reset <= MAX_RESET_MS


def test_a_key_that_said_it_was_out_and_then_served_without_headers_is_tried_again() -> None:
    """A key at 0 with a reset days away is held back, so nothing would try it and hear
    otherwise: when it does serve (a fallback) and says nothing, what it said is wrong
    and forgotten (it counts as a key that never said: full)."""
    engine, clock, _ = make_engine({"alpha": ("a", "b")})
    router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
    assert serve(router, "1", clock, limits=limits(0, 6 * DAY_MS)).connection == "a"
    assert serve(router, "2", clock, limits=limits(100, 60_000)).connection == "b"
    routing = router.start("3", "r")
    first = routing.next_step()
    assert isinstance(first, Attempt) and first.connection == "b"  # a is held back
    routing.record(429, fail(FailureKind.RATE_LIMITED))
    fallback = routing.next_step()
    assert isinstance(fallback, Attempt) and fallback.connection == "a"
    routing.record(200, OK)  # it served, and said nothing of its limits
    assert isinstance(routing.next_step(), Response)
    assert router.headroom.out == {}
    clock.advance(10_000)  # b's cooldown is over; b has 99 left for 50 s
    assert serve(router, "4", clock).connection == "a"  # before: b, for six days


def config(rng: random.Random) -> Any:
    """A random config: 1-4 providers of 1-4 keys, two routes of any strategy."""
    providers = rng.sample(["p0", "p1", "p2", "p3"], rng.randint(1, 4))
    lines = ["providers:"]
    for p in providers:
        keys = rng.sample(["a", "b", "c", "d", "e"], rng.randint(1, 4))
        lines.append(f"  {p}: {{models: [m], connections: [{', '.join(keys)}]}}")
    lines.append("routes:")
    for name in ("r", "s"):
        strategy = rng.choice(list(Strategy)).value
        targets = rng.sample(providers, rng.randint(1, len(providers)))
        items = ", ".join(f"{{target: {t}/m, weight: {rng.randint(1, 5)}}}"
                          if strategy == "weighted" else f"{t}/m" for t in targets)
        lines.append(f"  {name}: {{strategy: {strategy}, targets: [{items}]}}")
    return load_router_config("router.yaml", text="\n".join(lines) + "\n")


KINDS = [None, None, FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR, FailureKind.TIMEOUT,
         FailureKind.QUOTA_EXHAUSTED, FailureKind.AUTH_FAILED]
STATUS = {None: 200, FailureKind.RATE_LIMITED: 429, FailureKind.SERVER_ERROR: 500,
          FailureKind.QUOTA_EXHAUSTED: 429, FailureKind.AUTH_FAILED: 401, FailureKind.TIMEOUT: 0}
HEADER_TEXTS = ["0", "1", "5", "-1", "1e9", "nan", "1s", "6m0s", "20ms", "604800", "1767225612",
                "2026-01-01T00:00:12Z", "٣"]


def answer(routing: RequestRouting, rng: random.Random, clock: ManualClock) -> None:
    kind = rng.choice(KINDS)
    headers = {name: rng.choice(HEADER_TEXTS) for name in (
        "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
        "x-ratelimit-limit-requests", "x-ratelimit-remaining-tokens",
        "anthropic-ratelimit-requests-reset") if rng.random() < 0.5}
    routing.record(STATUS[kind], Classification(kind),
                   parse_rate_limits(headers, clock.now_ms()))


def drive(routing: RequestRouting, rng: random.Random, clock: ManualClock,
          open_: list[RequestRouting]) -> None:
    """Answer the request's attempts until its response, or leave one in flight."""
    while True:
        step = routing.next_step()
        if isinstance(step, Response):
            return
        if isinstance(step, Wait):
            clock.advance(step.delay_ms)
            continue
        if rng.random() < 0.25:
            open_.append(routing)
            return
        clock.advance(rng.choice([0, 10, 300]))
        answer(routing, rng, clock)


@settings(max_examples=120, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_reloads_under_load_leave_no_count_probe_or_weight_behind(seed: int) -> None:
    """Requests of every strategy, answered with hostile headers, some left in flight
    across reloads that change the strategies, weights, providers and keys, then
    answered or cancelled: nothing raises, and once every request has ended nothing is
    counted in flight, no probe slot is held, each weighted route's current weights
    add up to 0, and the rate limits kept are of keys in the config."""
    rng = random.Random(seed)
    clock = ManualClock(NOW)
    current = config(rng)
    router = current.build(clock, seed=seed)
    open_: list[RequestRouting] = []
    for i in range(rng.randint(5, 80)):
        roll = rng.random()
        if roll < 0.08:
            new = config(rng)
            new.reconfigure(router, previous=current)
            current = new
        elif roll < 0.2 and open_:
            routing = open_.pop(rng.randrange(len(open_)))
            if rng.random() < 0.5:
                routing.cancel()
            else:
                answer(routing, rng, clock)
                drive(routing, rng, clock, open_)
        else:
            clock.advance(rng.choice([0, 1, 50, 1000, 5000, 60_000]))
            drive(router.start(str(i), rng.choice(["r", "s"])), rng, clock, open_)
    for routing in open_:
        routing.cancel()
    config(random.Random(seed + 1)).reconfigure(router, previous=current)  # a last reload
    assert {name: busy.total for name, busy in router.load.providers.items()
            if busy.total or busy.by_connection} == {}
    assert set(router.load.providers) <= set(router.engine.providers())
    for name in router.engine.providers():
        assert router.engine.breaker_snapshot(name).probes_in_flight == 0
    assert all(sum(weights) == 0 for weights in router._weighted.values())
    for provider, known in router.headroom.keys.items():
        assert set(known) <= set(router.engine.spec(provider).connections)
        out = router.headroom.out.get(provider, set())
        assert all(name in known for name in out)
        assert {name for name, k in known.items()
                if k.requests_left == 0 or k.tokens_left == 0} <= out


def test_a_reload_drops_the_rate_limits_and_counts_of_what_it_removed() -> None:
    """What the keys said and the counts in flight are kept by name: a reload drops
    those of removed providers and keys (least_busy's once nothing is in flight on it),
    so they hold the config's keys, not every key ever named."""
    def config_of(alpha: str, busy: str, beta: bool) -> Any:
        return load_router_config("router.yaml", text=(
            f"providers:\n  alpha: {{models: [m], connections: [{alpha}]}}\n"
            + ("  beta: {models: [m], connections: [x]}\n" if beta else "")
            + "routes:\n  r: {strategy: headroom, targets: [alpha/m]}\n"
            + f"  s: {{strategy: least_busy, targets: [{busy}/m]}}\n"))

    clock = ManualClock()
    first = config_of("a, b", "beta", beta=True)
    router = first.build(clock)
    for conn, provider in (("a", "alpha"), ("b", "alpha"), ("x", "beta")):
        router.headroom.note(provider, conn, 0, limits(0, 60_000))
    held = router.start("held", "s")  # an attempt on beta, in flight across the reload
    step = held.next_step()
    assert isinstance(step, Attempt) and step.provider == "beta"
    second = config_of("a", "alpha", beta=False)
    second.reconfigure(router, previous=first)
    assert {p: set(known) for p, known in router.headroom.keys.items()} == {"alpha": {"a"}}
    assert router.headroom.out == {"alpha": {"a"}}
    assert {name: b.total for name, b in router.load.providers.items()} == {"beta": 1}
    held.record(200, OK)  # it ends on the Busy it counted on
    assert router.load.providers["beta"].total == 0
    second.reconfigure(router, previous=second)
    assert set(router.load.providers) == set()


_INFOS = st.one_of(st.none(), st.builds(
    RateLimitInfo,
    requests_remaining=st.one_of(st.none(), st.integers(0, 3), st.just(MAX_COUNT)),
    requests_limit=st.one_of(st.none(), st.integers(0, 5)),
    requests_reset_ms=st.one_of(st.none(), st.integers(0, 3000), st.just(MAX_RESET_MS)),
    tokens_remaining=st.one_of(st.none(), st.integers(0, 3)),
    tokens_limit=st.one_of(st.none(), st.integers(0, 5)),
    tokens_reset_ms=st.one_of(st.none(), st.integers(0, 3000))))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2500), _INFOS, st.booleans()), max_size=40))
def test_headroom_chooses_the_same_key_whether_or_not_anyone_reads_why(
        steps: list[tuple[int, RateLimitInfo | None, bool]]) -> None:
    """The choice read inline (nobody subscribed) and the one that says why are the
    same, whatever a key's answers say and however they flip between requests only,
    tokens only, both and nothing."""
    from omniroute_tui.engine import ProviderSpec, ResilienceEngine, default_settings

    chosen = []
    for watched in (True, False):
        clock = ManualClock()
        engine = ResilienceEngine([ProviderSpec("alpha", ("a", "b", "c"), default_settings())],
                                  clock)
        if watched:
            engine.bus.subscribe(lambda event: None)
        router = Router(engine, {"r": route_of(Strategy.HEADROOM, "alpha")})
        picks = []
        for i, (jump, info, ok) in enumerate(steps):
            clock.advance(jump)
            routing = router.start(str(i), "r")
            step = routing.next_step()
            if not isinstance(step, Attempt):
                picks.append(None)
                continue
            picks.append(step.connection)
            routing.record(200 if ok else 500, OK if ok else fail(FailureKind.SERVER_ERROR),
                           info)
            routing.cancel()
        chosen.append(picks)
    assert chosen[0] == chosen[1]
