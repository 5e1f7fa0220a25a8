"""Engine invariants under random results and clock jumps (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import (
    AttemptEvent,
    BreakerEvent,
    BreakerState,
    Classification,
    CooldownEvent,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.engine.kinds import BreakerReason, CooldownReason
from omniroute_tui.engine.settings import AuthKind, ResilienceSettings
from omniroute_tui.router import Attempt, Response, Route, Router, Target, Wait

from .helpers import Answer, play
from .helpers import settings as make_settings

KINDS = [None, *FailureKind]
CONNS = ("a", "b", "c")

step = st.tuples(
    st.integers(min_value=0, max_value=120_000),  # clock jump before the request
    st.lists(  # answers for the attempts of this request
        st.tuples(
            st.sampled_from(KINDS),
            st.one_of(st.none(), st.integers(min_value=1, max_value=600_000)),
            st.integers(min_value=0, max_value=70_000),  # latency
        ),
        max_size=5,
    ),
    st.booleans(),  # abandon the request mid-way (a leaked attempt)
)


#: the route's targets: the provider with three keys, a `per_model_quota` one, and the
#: first again for another model
TARGETS = (Target("p", "m"), Target("q", "m"), Target("p", "n"))


def build(auth: AuthKind, jitter: float, targets: tuple[Target, ...] = TARGETS,
          config: ResilienceSettings | None = None
          ) -> tuple[ResilienceEngine, Router, ManualClock]:
    clock = ManualClock()
    if config is None:
        config = make_settings(auth, jitter=jitter) if jitter else default_settings(auth)
    engine = ResilienceEngine(
        [ProviderSpec("p", CONNS, config), ProviderSpec("q", ("x",), config,
                                                       per_model_quota=True)],
        clock, seed=11,
    )
    routes = {"r": Route("r", targets)}
    return engine, Router(engine, routes), clock


def run(ops: list[Any], auth: AuthKind, jitter: float, targets: tuple[Target, ...] = TARGETS,
        config: ResilienceSettings | None = None
        ) -> tuple[ResilienceEngine, ManualClock, list[dict[str, Any]]]:
    engine, router, clock = build(auth, jitter, targets, config)
    events: list[dict[str, Any]] = []
    deadlines: dict[tuple[str, str], int] = {}
    max_level = engine.spec("p").settings.cooldown.max_level

    waits: dict[tuple[str, str], str] = {}  # what each cooldown waits for, by its events
    last_close: list[Any] = []  # the latest breaker event, when a probe just closed it

    def check(event: Any) -> None:
        events.append(event.to_dict())
        if isinstance(event, BreakerEvent):
            closed = event.reason is BreakerReason.PROBE_SUCCEEDED
            last_close[:] = [event] if closed else []
        if isinstance(event, CooldownEvent):
            key = (event.provider, event.connection)
            if event.kind is not None:
                # no deadline moves earlier ...
                assert event.until >= deadlines.get(key, 0), "a cooldown deadline moved earlier"
                deadlines[key] = event.until
                assert 0 <= event.level <= max_level
                waits[key] = ("quota" if event.kind is FailureKind.QUOTA_EXHAUSTED
                              else "hinted" if event.hint_ms is not None else "backoff")
            elif event.reason is CooldownReason.PROBE_FREED:
                # ... except by the documented clearing: a probe of this provider has just
                # succeeded, and what it frees is a backoff cooldown, never a quota or a
                # server's hint (docs/design.md §3)
                assert last_close and last_close[0].provider == event.provider
                assert last_close[0].t == event.t
                assert waits.get(key) == "backoff", (key, waits.get(key))
                assert event.level == 0 and event.until <= event.t
                deadlines[key] = event.until
        if isinstance(event, AttemptEvent):
            snap = engine.connection_snapshot(event.provider, event.connection)
            assert not snap.disabled
            locked = engine.layers(event.provider).lockouts.locked_until(
                event.connection, event.model, event.t)
            assert locked is None, "an attempt on a locked key"
            if event.cooling_until is None:
                assert not snap.cooling(event.t), "an ordinary attempt on a cooling key"
            else:  # the probe, or the one request a provider with every key cooling
                # lets ride a key (docs/design.md §4), on a key cooling for backoff alone
                assert snap.cooling(event.t)
                if not event.probe:
                    layers = engine.layers(event.provider)
                    assert layers.breaker.admits_traffic(event.t)
                    assert layers.carried_until > event.t
                assert snap.cooling_until == event.cooling_until
                assert waits.get((event.provider, event.connection)) == "backoff"

    engine.bus.subscribe(check)
    for n, (jump, answers, abandon) in enumerate(ops):
        clock.advance(jump)
        routing = router.start(str(n), "r")
        pending = list(answers)

        def answer(_: Attempt, pending: list[Any] = pending) -> Answer | None:
            if not pending:
                return None
            kind, hint, latency = pending.pop(0)
            return latency, 200 if kind is None else 500, Classification(kind, hint), None

        if play(routing, clock, answer) is not None and not abandon:
            routing.cancel()  # else never answered: a crashed driver
        for provider in ("p", "q"):
            for conn in engine.spec(provider).connections:
                level = engine.connection_snapshot(provider, conn).level
                assert 0 <= level <= engine.spec(provider).settings.cooldown.max_level
    return engine, clock, events


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(step, max_size=40), auth=st.sampled_from(list(AuthKind)),
       jitter=st.sampled_from([0.0, 0.3]))
def test_invariants_hold_for_any_history(ops: list[Any], auth: AuthKind, jitter: float) -> None:
    engine, clock, _ = run(ops, auth, jitter)
    no_slot_leaks_nor_stuck_breaker(engine, clock)


def no_slot_leaks_nor_stuck_breaker(engine: ResilienceEngine, clock: ManualClock) -> None:
    # no probe slot leaks: once request.timeout has passed, every slot is free again
    clock.advance(engine.spec("p").settings.request.timeout_ms)
    for provider in ("p", "q"):
        snap = engine.breaker_snapshot(provider)
        assert snap.probes_in_flight == 0 or snap.state is not BreakerState.HALF_OPEN
        # nor does the slot of a request riding a cooling key (§4)
        assert engine.layers(provider).carried_until <= clock.now_ms()
        # and a breaker never stays stuck: given enough time, it admits a probe or traffic
        clock.advance(engine.spec(provider).settings.breaker.reset_timeout_ms * 16)
        assert engine.admit(provider).allowed


#: histories that open breakers and probe them: short jumps, mostly breaker failures, now
#: and then a quota, a hint, a lockout, a revoked key or a success
storm_step = st.tuples(
    st.integers(min_value=0, max_value=4_000),
    st.lists(
        st.tuples(
            st.sampled_from([FailureKind.SERVER_ERROR] * 4 + [FailureKind.RATE_LIMITED] * 2 + [
                None, None, FailureKind.QUOTA_EXHAUSTED, FailureKind.MODEL_NOT_FOUND,
                FailureKind.AUTH_FAILED, FailureKind.TIMEOUT]),
            st.one_of(st.none(), st.none(), st.integers(min_value=1, max_value=15_000)),
            st.integers(min_value=0, max_value=2_000),
        ),
        min_size=1, max_size=4,
    ),
    st.sampled_from([False] * 9 + [True]),  # now and then a request never answered
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(storm_step, min_size=10, max_size=80),
       auth=st.sampled_from(list(AuthKind)))
def test_probes_use_backoff_keys_only_and_leak_no_slot(ops: list[Any], auth: AuthKind
                                                       ) -> None:
    """Under storms the probe meets cooling keys: it takes only a backoff one (never a
    quota, a hinted, a disabled or a locked key), only a successful probe frees keys,
    and no slot leaks (the checks of `run`). The route stays on the one provider, whose
    keys are what is being watched, and every failure counts (no dedup), so that its
    breaker opens often."""
    config = make_settings(auth, dedup={"connection_window_ms": 0, "network_window_ms": 0})
    engine, clock, _ = run(ops, auth, 0.0, (Target("p", "m"), Target("p", "n")), config)
    no_slot_leaks_nor_stuck_breaker(engine, clock)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(step, max_size=30), jitter=st.sampled_from([0.0, 0.5]))
def test_same_inputs_same_events(ops: list[Any], jitter: float) -> None:
    _, _, first = run(ops, AuthKind.APIKEY, jitter)
    _, _, second = run(ops, AuthKind.APIKEY, jitter)
    assert first == second


@settings(max_examples=100, deadline=None)
@given(
    failures=st.lists(
        st.tuples(st.integers(min_value=0, max_value=50_000),
                  st.one_of(st.none(), st.integers(min_value=1, max_value=10**7)),
                  st.sampled_from([FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR,
                                   FailureKind.QUOTA_EXHAUSTED, FailureKind.TIMEOUT])),
        max_size=60,
    )
)
def test_cooldown_never_shortens(failures: list[tuple[int, int | None, FailureKind]]) -> None:
    """Failures alone never shorten a cooldown; the one thing that does is a successful
    probe's freeing of backoff cooldowns (checked in `run` above)."""
    clock = ManualClock()
    engine = ResilienceEngine([ProviderSpec("p", ("c",), default_settings())], clock)
    from .helpers import ADMIT

    previous = 0
    for jump, hint, kind in failures:
        clock.advance(jump)
        engine.record("p", "c", "m", ADMIT, Classification(kind, hint))
        snap = engine.connection_snapshot("p", "c")
        assert snap.cooling_until >= previous
        assert 0 <= snap.level <= 5
        previous = snap.cooling_until


event_text = st.text(max_size=20)
optional_int = st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40))


@settings(max_examples=200, deadline=None)
@given(
    t=st.integers(min_value=0, max_value=2**45), a=event_text, b=event_text, c=event_text,
    n=st.integers(min_value=0, max_value=10**6), flag=st.booleans(), maybe=optional_int,
    kind=st.one_of(st.none(), event_text),
)
def test_to_json_is_exactly_json_dumps_of_to_dict(
    t: int, a: str, b: str, c: str, n: int, flag: bool, maybe: int | None, kind: str | None
) -> None:
    import json

    from omniroute_tui.engine import events as ev

    samples = [
        ev.RequestEvent(t, a, b), ev.AttemptEvent(t, a, n, b, c, a, flag),
        ev.AttemptEvent(t, a, n, b, c, a, flag, maybe),
        ev.CooldownEvent(t, a, b, kind, n, n, maybe, kind),  # type: ignore[arg-type]
        ev.ResultEvent(t, a, n, b, c, a, n, kind, n), ev.SkipEvent(t, a, b, c, a, maybe),
        ev.ResponseEvent(t, a, n, n, n, n, kind), ev.BreakerEvent(t, a, b, c, a, n, maybe),
        ev.CooldownEvent(t, a, b, kind, n, n, maybe), ev.DisabledEvent(t, a, b, c),
        ev.EnabledEvent(t, a, b, c), ev.LockoutEvent(t, a, b, c, kind, n, n),
        ev.DedupEvent(t, a, b, c, a), ev.OperatorEvent(t, a, b, c, a),
        ev.FaultEvent(t, a, b, c),
    ]
    for event in samples:
        expected = json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)
        assert event.to_json() == expected


#: what a key of the probed provider is doing when the probe comes (at 5 s)
KEY_STATES = ("free", "backoff", "hinted", "quota", "disabled", "locked")


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.tuples(st.sampled_from(KEY_STATES),
                               # how long before the probe it failed (0.1 to 4 s)
                               st.integers(min_value=100, max_value=4_000),
                               st.integers(min_value=1, max_value=9_000)),  # its hint
                     min_size=1, max_size=6))
def test_the_probe_picks_by_the_rule_and_its_success_frees_only_backoff(
        keys: list[tuple[str, int, int]]) -> None:
    """Any mix of keys: the probe takes a key that is not cooling if there is one, else the
    backoff-only key (enabled, not locked) that ends first, else nothing; its success frees
    exactly the backoff cooldowns and changes no other key (docs/design.md §3)."""
    from omniroute_tui.engine.breaker import BreakerAdmission

    names = tuple(f"k{i}" for i in range(len(keys)))
    clock = ManualClock()
    engine = ResilienceEngine([ProviderSpec("p", names, default_settings())], clock)
    breaker = engine.layers("p").breaker
    for _ in range(5):
        breaker.record_failure(0, FailureKind.SERVER_ERROR, engine.admit("p"))  # OPEN to 5 s
    stale = BreakerAdmission(True, 0)  # what the keys' failures carry: ignored by the breaker
    for (state, ago, hint), name in sorted(zip(keys, names, strict=True),
                                           key=lambda k: -k[0][1]):
        clock.set(5_000 - ago)
        outcome = {"backoff": Classification(FailureKind.SERVER_ERROR),
                   "hinted": Classification(FailureKind.RATE_LIMITED, hint),
                   "quota": Classification(FailureKind.QUOTA_EXHAUSTED, hint),
                   "disabled": Classification(FailureKind.SERVER_ERROR),
                   "locked": Classification(FailureKind.SERVER_ERROR)}.get(state)
        if outcome is not None:
            engine.record("p", name, "m", stale, outcome)
        if state == "disabled":
            engine.set_enabled("p", name, False, actor="ops")
        if state == "locked":
            engine.record("p", name, "m", stale, Classification(FailureKind.MODEL_NOT_FOUND))
    clock.set(5_000)
    before = {n: engine.connection_snapshot("p", n) for n in names}
    lockouts = engine.layers("p").lockouts
    usable = [n for n, (state, _, _) in zip(names, keys, strict=True)
              if not before[n].disabled and lockouts.locked_until(n, "m", 5_000) is None]
    free = [n for n in usable if not before[n].cooling(5_000)]
    backoff = [n for n, (state, _, _) in zip(names, keys, strict=True)
               if n in usable and state == "backoff" and before[n].cooling(5_000)]
    routing = Router(engine, {"r": Route("r", (Target("p", "m"),))}).start("x", "r")
    step_ = routing.next_step()
    if free:
        assert isinstance(step_, Attempt) and step_.probe and step_.connection == free[0]
    elif backoff:
        first = min(backoff, key=lambda n: (before[n].cooling_until, names.index(n)))
        assert isinstance(step_, Attempt) and step_.probe and step_.connection == first
    else:
        assert isinstance(step_, Response | Wait)  # nothing to probe with: skipped, or a
        assert engine.breaker_snapshot("p").probes_in_flight == 0  # wait; the slot is back
        return
    routing.record(200, Classification(None))
    assert engine.breaker_snapshot("p").state is BreakerState.CLOSED
    for n, (state, _, _) in zip(names, keys, strict=True):
        after = engine.connection_snapshot("p", n)
        if state in ("backoff", "disabled", "locked") or n == step_.connection:
            if state in ("backoff", "disabled", "locked"):  # backoff cooldowns: freed
                assert after.level == 0 and not after.cooling(5_000), (n, state)
            assert after.disabled == before[n].disabled
        else:  # quota, hinted, free: as they were (but the probe key's level)
            assert after.cooling_until == before[n].cooling_until, (n, state)
            assert after.level == before[n].level, (n, state)


#: what may happen to a pool between two steps of a walk over it: a key fails (cools),
#: is disabled or enabled, has its cooldown cleared, or the clock moves on
pool_change = st.tuples(st.sampled_from(["fail", "disable", "enable", "clear", "wait"]),
                        st.integers(min_value=0, max_value=11),
                        st.integers(min_value=0, max_value=20_000))


@settings(max_examples=300, deadline=None)
@given(size=st.integers(min_value=1, max_value=12), start=st.integers(0, 40),
       locked=st.sets(st.integers(0, 11)), before=st.lists(pool_change, max_size=12),
       during=st.lists(st.lists(pool_change, max_size=2), max_size=14))
def test_a_walk_offers_what_a_plain_scan_of_the_index_offers(
    size: int, start: int, locked: set[int], before: list[tuple[str, int, int]],
    during: list[list[tuple[str, int, int]]]
) -> None:
    """`ConnectionPool.candidates` against the rule it implements, read off the pool's
    index at every step: from the cursor, the next ready position (wrapping, never more
    than one lap in all), offered unless locked for the model; the pool may change
    between two steps (docs/design.md §4)."""
    from omniroute_tui.engine.jitter import Jitter
    from omniroute_tui.engine.lockout import ModelLockouts
    from omniroute_tui.engine.pool import ConnectionPool

    names = tuple(f"k{i}" for i in range(size))
    config = default_settings()
    pool = ConnectionPool("p", names, config.cooldown, emit=lambda _: None, jitter=Jitter())
    lockouts = ModelLockouts("p", config.lockout, emit=lambda _: None)
    now = 1_000_000

    def apply(change: tuple[str, int, int]) -> None:
        nonlocal now
        what, pos, ms = change
        pos %= size
        if what == "fail":
            pool.record_failure(pos, now, FailureKind.SERVER_ERROR, ms or None)
        elif what in ("disable", "enable"):
            pool.set_enabled(pos, now, what == "enable", "operator")
        elif what == "clear":
            pool.clear(pos, now)
        else:
            now += ms

    for change in before:
        apply(change)
    for pos in locked:
        if pos < size:
            lockouts.record_failure(now, names[pos], "m", FailureKind.FORBIDDEN, None)
    walk = pool.candidates(now, "m", lockouts, start)
    offered = next(walk, None)
    # the scan: the same cursor and lap, the index read afresh at each step
    pool.ready(now)  # the walk refreshed the index when it started
    cursor, visited, expected = start % size, 0, None
    for step, changes in enumerate([[], *during]):
        if step:  # the first was offered above
            for change in changes:
                apply(change)
            offered = next(walk, None)
        expected = None
        while expected is None:
            gap = next((d for d in range(size - visited)
                        if pool._is_ready[(cursor + d) % size]), None)
            if gap is None:
                break
            visited += gap + 1
            pos = (cursor + gap) % size
            cursor = (pos + 1) % size
            lock = lockouts.entries.get((names[pos], "m"))
            if lock is None or lock.until <= now:
                expected = names[pos]
        assert offered == expected
        if offered is None:
            break
