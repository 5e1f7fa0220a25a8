"""A strategy's remembered answer that every target could serve (docs/design.md §7):
asked again after any change that can stop a provider from serving and when a key's
cooling ends, and never different from asking every time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.engine import Classification, FailureKind
from omniroute_tui.engine.engine import EngineSnapshot, quiet_until
from omniroute_tui.engine.events import LockoutEvent, ResultEvent
from omniroute_tui.router import Attempt, Router, Strategy
from omniroute_tui.router import strategies as strategies_module
from omniroute_tui.router.rate_limits import RateLimitInfo
from omniroute_tui.router.strategies import Chooser

from .helpers import ADMIT, Answer, Recorder, fail, make_engine, play
from .test_strategies import MODEL, STATUS, route_of, serve

PROVIDERS = {"alpha": ("a", "b"), "beta": ("x", "y"), "gamma": ("g",)}


def chooser_of(router: Router) -> Chooser:
    chooser = router._starts["r"][2]
    assert chooser is not None
    return chooser


@pytest.mark.parametrize("strategy", [Strategy.WEIGHTED, Strategy.LEAST_BUSY])
def test_targets_are_asked_again_after_a_change_and_when_a_cooling_ends(
        strategy: Strategy, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, clock, _ = make_engine(PROVIDERS)
    router = Router(engine, {"r": route_of(strategy, "alpha", "beta", "gamma")}, seed=5)
    asked = []
    real = strategies_module.refused_targets

    def counting(asks: Any, now: int) -> list[int] | None:
        asked.append(now)
        return real(asks, now)

    monkeypatch.setattr(strategies_module, "refused_targets", counting)
    serve(router, "1", clock)
    assert len(asked) == 1  # the first request asks
    for i in range(2, 12):
        serve(router, str(i), clock)
    assert len(asked) == 1  # nothing changed: nobody asked again
    # a key starts cooling for 4 s (a quota: the breaker hears nothing): a change, so
    # the next request asks again
    engine.record("beta", "y", MODEL, ADMIT, fail(FailureKind.QUOTA_EXHAUSTED, 4000))
    serve(router, "12", clock)
    assert len(asked) == 2
    assert chooser_of(router).quiet_until == clock.now_ms() + 4000  # y's cooling ends
    clock.advance(3999)
    serve(router, "13", clock)
    assert len(asked) == 2
    clock.advance(1)  # y's cooling ends: asked again (and y is ready once more)
    serve(router, "14", clock)
    assert len(asked) == 3
    for i in range(15, 20):  # least_busy asks only the pair it drew: quiet again once
        serve(router, str(i), clock)  # a pair with beta has read beta's keys again
    assert chooser_of(router).quiet(clock.now_ms())
    assert chooser_of(router).quiet_until > clock.now_ms() + 10**15  # nothing cools now


def test_a_target_that_is_not_quiet_is_asked_about_on_every_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine, clock, _ = make_engine(PROVIDERS)
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta", "gamma")})
    # one failure on gamma's breaker: it could serve, but is not quiet
    engine.record("gamma", "g", MODEL, ADMIT, fail(FailureKind.SERVER_ERROR))
    asked = []
    real = strategies_module.refused_targets
    monkeypatch.setattr(strategies_module, "refused_targets",
                        lambda asks, now: asked.append(now) or real(asks, now))
    for i in range(6):
        serve(router, str(i), clock)
    assert len(asked) == 6
    assert chooser_of(router).quiet_at == -1


def test_a_failure_another_replica_saw_makes_the_next_request_ask(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # heard from a peer, a failure counts on the breaker alone (no key cools here): the
    # breaker's count is the only change, and it is enough
    engine, clock, _ = make_engine(PROVIDERS)
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta", "gamma")})
    serve(router, "1", clock)
    asked = []
    real = strategies_module.refused_targets
    monkeypatch.setattr(strategies_module, "refused_targets",
                        lambda asks, now: asked.append(now) or real(asks, now))
    assert engine.merge(ResultEvent(0, "peer-1", 1, "gamma", "g", MODEL, 500,
                                    FailureKind.SERVER_ERROR, 20))
    assert engine.breaker_snapshot("gamma").failures == 1
    serve(router, "2", clock)
    assert asked == [0]
    assert not chooser_of(router).quiet(clock.now_ms())


def test_a_lockout_makes_the_next_request_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    # gamma's only key locked out of the model: as many lockouts as ready keys
    engine, clock, rec = make_engine(PROVIDERS)
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta", "gamma")})
    serve(router, "1", clock)
    engine.record("gamma", "g", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    assert engine.breaker_snapshot("gamma").failures == 0  # the lockout alone
    for i in range(2, 14):
        serve(router, str(i), clock)
    assert rec.of("skip") == []  # gamma's share went to the others, never tried
    assert not chooser_of(router).quiet(clock.now_ms())


def _force_open(engine: Any, peer: Any) -> None:
    engine.force_open("gamma", 60_000, actor="op")  # a breaker's transition


def _peer_lockout(engine: Any, peer: Any) -> None:
    heard = Recorder(peer.bus)
    peer.record("gamma", "g", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    assert [engine.merge(e) for e in heard.events if isinstance(e, LockoutEvent)] == [True]


def _restore_breakers(engine: Any, peer: Any) -> None:
    peer.force_open("gamma", 60_000, actor="op")
    engine.restore(EngineSnapshot(peer.snapshot().breakers, (), ()))


def _restore_lockouts(engine: Any, peer: Any) -> None:
    peer.record("gamma", "g", MODEL, ADMIT, fail(FailureKind.FORBIDDEN))
    engine.restore(EngineSnapshot((), (), peer.snapshot().lockouts))


def _reload_without_keys(engine: Any, peer: Any) -> None:
    # the engine reloaded on its own (not through the router): gamma keeps no key
    engine.reconfigure([replace(engine.spec(name), connections=())
                        if name == "gamma" else engine.spec(name)
                        for name in engine.providers()])


@pytest.mark.parametrize("change", [_force_open, _peer_lockout, _restore_breakers,
                                    _restore_lockouts, _reload_without_keys])
def test_each_change_that_stops_a_target_makes_the_next_request_ask(
        change: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # gamma weighs 4 of 6: remembered as quiet while it cannot serve, it would be ordered
    # first and skipped by the walk
    engine, clock, rec = make_engine(PROVIDERS)
    peer, _, _ = make_engine(PROVIDERS, clock=clock)
    router = Router(engine, {"r": route_of(Strategy.WEIGHTED, "alpha", "beta", "gamma",
                                           weights=(1, 1, 4))})
    serve(router, "0", clock)
    assert chooser_of(router).quiet(clock.now_ms())
    asked = []
    real = strategies_module.refused_targets
    monkeypatch.setattr(strategies_module, "refused_targets",
                        lambda asks, now: asked.append(now) or real(asks, now))
    change(engine, peer)
    served = [serve(router, str(i), clock).provider for i in range(1, 7)]
    assert asked and rec.of("skip") == []
    assert served == ["alpha", "beta"] * 3  # gamma's share goes to the others


# -- never different from asking every time --------------------------------------------

KINDS = [None, None, None, FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR,
         FailureKind.QUOTA_EXHAUSTED, FailureKind.FORBIDDEN, FailureKind.AUTH_FAILED]
KEYS = [(p, c) for p, conns in PROVIDERS.items() for c in conns]

request = st.tuples(st.just("request"), st.lists(st.tuples(
    st.sampled_from(KINDS), st.integers(min_value=0, max_value=3000)), max_size=3),
    st.booleans())
operator = st.one_of(
    st.tuples(st.just("clear"), st.sampled_from(KEYS)),
    st.tuples(st.just("disable"), st.sampled_from(KEYS)),
    st.tuples(st.just("enable"), st.sampled_from(KEYS)),
    st.tuples(st.just("force_open"), st.sampled_from(list(PROVIDERS)),
              st.integers(min_value=1, max_value=20_000)),
    st.tuples(st.just("reset"), st.sampled_from(list(PROVIDERS))),
    st.tuples(st.just("clear_lockouts"), st.sampled_from(list(PROVIDERS))),
    st.tuples(st.just("peer"), st.sampled_from(KEYS), st.sampled_from(KINDS[3:])),
)
steps = st.lists(st.tuples(st.integers(min_value=0, max_value=8000),
                           st.one_of(request, request, request, operator)), max_size=50)


def run(strategy: Strategy, plan: list[Any], seed: int, check: bool) -> list[str]:
    engine, clock, rec = make_engine(PROVIDERS, seed=seed)
    peer, peer_clock, _ = make_engine(PROVIDERS, clock=clock, seed=seed + 1)
    heard = Recorder(peer.bus)
    router = Router(engine, {"r": route_of(strategy, "alpha", "beta", "gamma",
                                           weights=(1, 3, 2) if strategy is Strategy.WEIGHTED
                                           else None)}, seed=seed)
    for i, (jump, (action, *args)) in enumerate(plan):
        clock.advance(jump)
        if action == "request":
            answers, leave = list(args[0]), args[1]
            if check and "r" in router._starts:
                chooser = chooser_of(router)
                if chooser.quiet(clock.now_ms()):  # what it remembers is still so
                    assert quiet_until(chooser.asks, clock.now_ms()) is not None

            def answer(step: Attempt, answers: list[Any] = answers, leave: bool = leave
                       ) -> Answer | None:
                if leave or not answers:
                    return None
                kind, latency = answers.pop(0)
                return (latency, STATUS[kind], Classification(kind),
                        RateLimitInfo(requests_remaining=5, requests_reset_ms=9000))

            play(router.start(str(i), "r"), clock, answer)
        elif action == "clear":
            engine.clear_cooldown(*args[0], actor="op")
        elif action in ("disable", "enable"):
            engine.set_enabled(*args[0], action == "enable", actor="op")
        elif action == "force_open":
            engine.force_open(args[0], args[1], actor="op")
        elif action == "reset":
            engine.reset_breaker(args[0], actor="op")
        elif action == "clear_lockouts":
            engine.clear_lockouts(args[0], actor="op")
        else:  # another replica saw a failure: its events are merged here
            (provider, connection), kind = args
            del heard.events[:]
            peer.record(provider, connection, MODEL, ADMIT, fail(kind))
            for event in heard.events:
                engine.merge(event)
    return [e.to_json() for e in rec.events]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([Strategy.WEIGHTED, Strategy.LEAST_BUSY]), steps,
       st.integers(min_value=0, max_value=99))
def test_what_a_strategy_remembers_never_changes_a_decision(
        strategy: Strategy, plan: list[Any], seed: int) -> None:
    remembered = run(strategy, plan, seed, check=True)
    with pytest.MonkeyPatch.context() as patch:  # forget it: every request asks
        patch.setattr(Chooser, "found_quiet", lambda self, now: None)
        assert run(strategy, plan, seed, check=False) == remembered
