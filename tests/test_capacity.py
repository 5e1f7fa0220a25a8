"""Concurrency caps (docs/design.md §6): `max_in_flight` per connection and per provider,
the queue for a slot within the admission wait, 429 when it is full, in the sans-IO core."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.engine import (
    AttemptEvent,
    Event,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    ResultEvent,
)
from omniroute_tui.engine.settings import default_settings
from omniroute_tui.router import Attempt, RequestRouting, Response, Router, Wait
from omniroute_tui.router.routes import Route, Target

from .helpers import OK, Recorder, fail

MAX_WAIT = 5000  # admission.max_wait's default
#: a config of one provider with one key, `%s` where its connection's fields may go on
ONE_KEY = """\
providers:
  alpha:
    base_url: http://alpha.test/v1
    models: [m]
    connections: [{id: k0, api_key: sk-alpha-key-0001%s}]
routes:
  r: {targets: [alpha/m]}
"""


def capped(caps: tuple[int, ...] = (2,), provider_cap: int = 0, max_queued: int = 100,
           fallback: bool = False) -> tuple[Router, ManualClock, Recorder]:
    """Route r over alpha/m (connections k0, k1, ... capped by `caps`; 0: no cap), then
    beta/m (one uncapped key) when `fallback`."""
    clock = ManualClock()
    conns = tuple(f"k{i}" for i in range(len(caps)))
    specs = [ProviderSpec("alpha", conns, default_settings(), max_in_flight=provider_cap,
                          connection_caps=caps, max_queued=max_queued)]
    targets = [Target("alpha", "m")]
    if fallback:
        specs.append(ProviderSpec("beta", ("x",), default_settings()))
        targets.append(Target("beta", "m"))
    engine = ResilienceEngine(specs, clock)
    router = Router(engine, {"r": Route("r", tuple(targets))})
    return router, clock, Recorder(engine.bus)


def attempt(routing: RequestRouting) -> Attempt:
    step = routing.next_step()
    assert isinstance(step, Attempt), step
    return step


def queued(routing: RequestRouting) -> Wait:
    step = routing.next_step()
    assert isinstance(step, Wait) and step.queue is not None, step
    return step


def test_a_key_at_its_cap_queues_the_next_request_and_hands_it_the_freed_slot() -> None:
    router, clock, rec = capped((2,))
    first, second, third = (router.start(f"r{i}", "r") for i in range(3))
    assert attempt(first).connection == attempt(second).connection == "k0"
    wait = queued(third)
    assert wait.delay_ms == MAX_WAIT
    assert router.engine.in_flight("alpha") == (2, 1)
    assert [(s["reason"], s["retry_after_ms"]) for s in rec.of("skip")] == [
        ("at_capacity", None)]
    handed: list[bool] = []
    wait.queue.wake = lambda: handed.append(True)  # type: ignore[union-attr]
    clock.advance(700)
    first.record(200, OK)
    assert handed == [True]
    assert router.engine.in_flight("alpha") == (2, 0)  # the slot is the third's
    newcomer = router.start("r3", "r")  # it cannot take the slot handed on
    assert isinstance(newcomer.next_step(), Wait)
    assert attempt(third).connection == "k0"
    assert third.waited_ms == 700
    assert [(w["phase"], w["reason"], w["delay_ms"]) for w in rec.of("wait")
            if w["request"] == "r2"] == [
        ("start", "at_capacity", MAX_WAIT), ("end", "at_capacity", 700)]


def test_waiters_are_handed_slots_oldest_first() -> None:
    router, clock, _ = capped((1,))
    holder = router.start("h", "r")
    held = attempt(holder)
    waiters = [router.start(f"w{i}", "r") for i in range(4)]
    order: list[str] = []
    for routing in waiters:
        queued(routing).queue.wake = (  # type: ignore[union-attr]
            lambda r=routing: order.append(r.request_id))
    current = holder
    for routing in waiters:
        clock.advance(10)
        current.record(200, OK)
        assert attempt(routing).connection == held.connection
        current = routing
    current.record(200, OK)
    assert order == ["w0", "w1", "w2", "w3"]
    assert router.engine.in_flight("alpha") == (0, 0)


def test_a_full_queue_answers_429_with_retry_after_at_once() -> None:
    router, _, rec = capped((1,), max_queued=1)
    attempt(router.start("a", "r"))
    queued(router.start("b", "r"))
    shed = router.start("c", "r")
    response = shed.next_step()
    assert isinstance(response, Response)
    assert response.status == 429
    assert response.headers == {"Retry-After": "1"}
    assert response.body is not None
    assert response.body["error"]["code"] == "all_targets_unavailable"
    assert response.body["error"]["skipped"] == [
        {"target": "alpha/m", "reason": "at_capacity", "retry_after_ms": None}]
    assert "at_capacity" in response.body["error"]["message"]
    assert [w["request"] for w in rec.of("wait")] == ["b"]


def test_a_wait_that_ends_without_a_slot_is_answered_429() -> None:
    router, clock, _ = capped((1,))
    holder = router.start("a", "r")
    attempt(holder)
    waiter = router.start("b", "r")
    wait = queued(waiter)
    clock.advance(wait.delay_ms)
    response = waiter.next_step()
    assert isinstance(response, Response) and response.status == 429
    assert response.waited_ms == MAX_WAIT
    assert router.engine.in_flight("alpha") == (1, 0)  # it left the queue
    holder.record(200, OK)
    assert router.engine.in_flight("alpha") == (0, 0)


def test_a_full_provider_falls_back_before_anyone_waits() -> None:
    router, _, rec = capped((1,), fallback=True)
    attempt(router.start("a", "r"))
    second = attempt(router.start("b", "r"))
    assert second.provider == "beta"
    assert [s["reason"] for s in rec.of("skip")] == ["at_capacity"]


def test_the_provider_cap_counts_every_key() -> None:
    router, _, _ = capped((0, 0, 0), provider_cap=2)
    conns = [attempt(router.start(f"r{i}", "r")).connection for i in range(2)]
    assert conns == ["k0", "k1"] or len(set(conns)) == 2
    queued(router.start("r2", "r"))
    assert router.engine.in_flight("alpha") == (2, 1)


def test_a_capped_key_is_passed_over_for_a_free_one() -> None:
    router, _, rec = capped((1, 0))
    first = attempt(router.start("a", "r"))
    second = attempt(router.start("b", "r"))
    assert (first.connection, second.connection) == ("k0", "k1")
    assert rec.of("skip") == []


def test_a_stream_holds_its_slot_until_it_ends() -> None:
    router, _, _ = capped((1,))
    streaming = router.start("a", "r")
    attempt(streaming)
    streaming.record(200, OK, stream=True)
    assert isinstance(streaming.next_step(), Response)  # answered, still relaying
    assert router.engine.in_flight("alpha") == (1, 0)
    waiter = router.start("b", "r")
    queued(waiter)
    streaming.end_stream()
    assert attempt(waiter).connection == "k0"


def test_a_client_gone_while_queued_hands_its_slot_on() -> None:
    router, _, _ = capped((1,))
    holder = router.start("a", "r")
    attempt(holder)
    gone, next_ = router.start("b", "r"), router.start("c", "r")
    queued(gone)
    queued(next_)
    holder.record(200, OK)  # reserved for b
    assert gone.cancel().status == 499
    assert attempt(next_).connection == "k0"  # b's slot went on to c


def test_a_failed_attempt_frees_its_slot_for_its_own_retry() -> None:
    router, _, _ = capped((1, 1))
    routing = router.start("a", "r")
    first = attempt(routing)
    routing.record(429, fail(FailureKind.RATE_LIMITED))
    retry = attempt(routing)
    assert retry.connection != first.connection
    assert router.engine.in_flight("alpha") == (1, 0)


def test_a_reload_that_raises_the_cap_hands_slots_to_waiters() -> None:
    text = ONE_KEY.replace("%s", ", max_in_flight: %d")
    clock = ManualClock()
    config = load_router_config("c.yaml", text=text % 1)
    router = config.build(clock)
    attempt(router.start("a", "r"))
    waiters = [router.start(f"w{i}", "r") for i in range(3)]
    for routing in waiters:
        queued(routing)
    load_router_config("c.yaml", text=text % 3).reconfigure(router, previous=config)
    assert router.engine.in_flight("alpha") == (3, 1)
    assert [attempt(r).connection for r in waiters[:2]] == ["k0", "k0"]
    load_router_config("c.yaml", text=text.replace(", max_in_flight: %d", "")).reconfigure(
        router, previous=config)
    assert router.engine.in_flight("alpha") is None  # uncapped: the last waiter is free
    assert attempt(waiters[2]).connection == "k0"


def problems_of(text: str) -> list[str]:
    try:
        load_router_config("c.yaml", text=text, env={})
    except ConfigError as error:
        return [str(problem) for problem in error.problems]
    return []


def test_bad_caps_are_refused_naming_the_field() -> None:
    base = """\
providers:
  alpha:
    base_url: http://alpha.test/v1
    models: [m]
    %s
    connections: [{id: k0, api_key: sk-1, %s}]
routes:
  r: {targets: [alpha/m]}
"""
    for provider, connection, where in (
        ("max_in_flight: 0", "weight: 1", "providers.alpha.max_in_flight"),
        ("max_in_flight: true", "weight: 1", "providers.alpha.max_in_flight"),
        ("max_queued: -1", "weight: 1", "providers.alpha.max_queued"),
        ("max_queued: 1e9", "weight: 1", "providers.alpha.max_queued"),
        ("max_queued: 0", "max_in_flight: '2'", "providers.alpha.connections[0].max_in_flight"),
    ):
        found = problems_of(base % (provider, connection))
        assert any(where in problem for problem in found), (provider, connection, found)
    assert problems_of(base % ("max_queued: 0", "max_in_flight: 2")) == []


# -- invariants ---------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["start", "answer", "fail", "stream", "end",
                                           "cancel", "tick"]),
                          st.integers(0, 7)), max_size=80),
       st.sampled_from([(1,), (2,), (1, 1), (0, 0)]), st.integers(0, 3),
       st.integers(0, 3))
def test_caps_hold_and_no_slot_leaks(ops: list[tuple[str, int]], caps: tuple[int, ...],
                                     provider_cap: int, max_queued: int) -> None:
    """Whatever the order of starts, answers, failures, streams, cancels and time: no key
    and no provider has more attempts in flight than its cap, and once every request
    has ended nothing is held and nobody waits."""
    if not any(caps) and not provider_cap:
        provider_cap = 1
    router, clock, _ = capped(caps, provider_cap, max_queued)
    live: list[RequestRouting] = []
    steps: dict[RequestRouting, object] = {}
    on_key: dict[str, int] = {}

    def step(routing: RequestRouting) -> None:
        current = routing.next_step()
        if isinstance(current, Attempt):
            on_key[current.connection] = on_key.get(current.connection, 0) + 1
        steps[routing] = current

    def ended(routing: RequestRouting) -> None:
        current = steps[routing]
        if isinstance(current, Attempt):
            on_key[current.connection] -= 1
        elif isinstance(current, tuple):  # a stream being relayed
            on_key[current[1]] -= 1

    for n, (op, pick) in enumerate(ops):
        if op == "start":
            routing = router.start(f"r{n}", "r")
            live.append(routing)
            step(routing)
        elif op == "tick":
            clock.advance(pick * 1000)
        elif live:
            routing = live[pick % len(live)]
            current = steps[routing]
            if op == "cancel":
                ended(routing)
                routing.cancel()
                routing.end_stream(cancelled=True)
                live.remove(routing)
            elif isinstance(current, Wait):
                if op == "tick" or current.queue is None or current.queue.reserved \
                        or op == "end":
                    step(routing)
            elif isinstance(current, Attempt) and op in ("answer", "fail", "stream"):
                ended(routing)
                if op == "stream":
                    routing.record(200, OK, stream=True)
                    on_key[current.connection] += 1  # held until its end
                    steps[routing] = ("streaming", current.connection)
                else:
                    routing.record(*((200, OK) if op == "answer"
                                     else (500, fail(FailureKind.SERVER_ERROR))))
                    step(routing)
            elif isinstance(current, tuple) and op == "end":
                routing.end_stream()
                on_key[current[1]] -= 1
                steps[routing] = routing.next_step()
            if isinstance(steps.get(routing), Response) and routing in live:
                live.remove(routing)
        for key, cap in zip(("k0", "k1"), caps, strict=False):
            assert not cap or on_key.get(key, 0) <= cap
        if provider_cap:
            assert sum(on_key.values()) <= provider_cap
    for routing in list(live):
        routing.cancel()
        routing.end_stream(cancelled=True)
    assert router.engine.in_flight("alpha") == (0, 0)


# -- in virtual time ----------------------------------------------------------------------

CAPPED_SCENARIO = """\
name: capped-seat
seed: 7
duration: 30s
providers:
  seat:
    models: [m]
    latency: 1s
    max_queued: 4
    connections: [{id: k1, max_in_flight: 2}]
routes:
  chat: {targets: [seat/m]}
traffic:
  - {route: chat, rate: 3/s}
"""


class InFlight:
    """Attempts in flight, from the events, and the most at once."""

    def __init__(self) -> None:
        self.held = self.most = 0

    def hear(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            self.held += 1
            self.most = max(self.most, self.held)
        elif isinstance(event, ResultEvent):
            self.held -= 1


def test_the_simulator_replays_a_capped_key_with_its_queue() -> None:
    """Two slots of 1 s for 3 requests a second: never more than 2 in flight, the queue
    serves some of the rest and refuses the others with 429, to the same bytes twice."""
    import io

    from simulator.scenario import load_scenario
    from simulator.virtual import VirtualRun

    scenario = load_scenario("capped.yaml", text=CAPPED_SCENARIO)
    traces = []
    for _ in range(2):
        counts = InFlight()
        trace = io.StringIO()
        run = VirtualRun(scenario, trace=trace, subscribers=(counts.hear,))
        run.advance_to(40_000)
        metrics = run.finish()
        traces.append(trace.getvalue())
        assert counts.most == 2
    assert traces[0] == traces[1]
    events = [json.loads(line) for line in traces[0].splitlines()]
    waits = [e for e in events if e["type"] == "wait" and e["phase"] == "end"]
    responses = [e["status"] for e in events if e["type"] == "response"]
    assert waits and all(e["reason"] == "at_capacity" for e in waits)
    assert responses.count(200) == 60  # two slots of 1 s for 30 s
    assert responses.count(429) == len(responses) - 60 > 0
    assert metrics["requests"] == len(responses)


# -- found in review ----------------------------------------------------------------------

def test_a_retry_on_the_same_provider_waits_its_turn_behind_the_queue() -> None:
    """Provider cap 1: when A's attempt fails, its slot goes to the waiting B; A's retry
    on the provider's other key is not taken past the cap."""
    router, clock, _ = capped((0, 0), provider_cap=1)
    a = router.start("a", "r")
    attempt(a)
    b = router.start("b", "r")
    queued(b)
    clock.advance(100)
    a.record(429, fail(FailureKind.RATE_LIMITED))
    retried = a.next_step()
    assert isinstance(retried, Response) and retried.status == 429  # nothing else to try
    assert router.engine.in_flight("alpha") == (1, 0)  # B's reserved slot
    assert attempt(b).connection == "k1"  # k0 cools: B takes the other key


def test_a_slot_on_a_key_that_starts_cooling_wakes_no_one() -> None:
    """k0 answers 429 (30 s): its slot goes back without waking a waiter, who would find
    k0 cooling and k1 full and be answered 429; k1's end hands its slot on."""
    router, clock, _ = capped((1, 1))
    a, b = router.start("a", "r"), router.start("b", "r")
    assert (attempt(a).connection, attempt(b).connection) == ("k0", "k1")
    waiters = [router.start(f"w{i}", "r") for i in range(3)]
    tickets = [queued(w).queue for w in waiters]
    clock.advance(50)
    a.record(429, fail(FailureKind.RATE_LIMITED, 30_000))
    assert all(t is not None and t.reserved is None for t in tickets)
    assert router.engine.in_flight("alpha") == (1, 3)
    b.record(200, OK)
    assert [t.reserved is not None for t in tickets if t is not None] == [True, False, False]
    assert attempt(waiters[0]).connection == "k1"


def test_a_wait_for_a_full_key_ends_when_a_cooling_one_is_back() -> None:
    router, clock, rec = capped((1, 0))
    holder = router.start("h", "r")
    assert attempt(holder).connection == "k0"
    other = router.start("o", "r")
    assert attempt(other).connection == "k1"
    other.record(429, fail(FailureKind.RATE_LIMITED, 2000))  # k1 cools (our floor: 3 s)
    other.cancel()
    back = router.engine.connection_snapshot("alpha", "k1").cooling_until - clock.now_ms()
    waiter = router.start("w", "r")
    wait = queued(waiter)
    assert wait.delay_ms == back + 50  # k1's return and the admission margin, not 5 s
    assert rec.of("skip")[-1]["retry_after_ms"] == back


def test_a_resume_refused_for_the_retry_budget_gives_its_probe_slot_back() -> None:
    from omniroute_tui.engine import StreamCut

    clock = ManualClock()
    engine = ResilienceEngine([ProviderSpec("alpha", ("a",), default_settings()),
                               ProviderSpec("beta", ("b",), default_settings())], clock)
    router = Router(engine, {"r": Route("r", (Target("alpha", "m"), Target("beta", "m")),
                                        stream_resume=True)})
    engine.force_open("beta", 1000, actor="test")
    clock.advance(1001)  # beta HALF_OPEN
    engine.layers("beta").budget.tokens = 0
    routing = router.start("x", "r")
    assert attempt(routing).provider == "alpha"
    routing.record(200, OK, stream=True)
    routing.end_stream(StreamCut.RESET, relayed_bytes=10, relayed_chunks=2)
    assert routing.resume(StreamCut.RESET, 2) is None
    assert engine.layers("beta").breaker.snapshot(clock.now_ms()).probes_in_flight == 0
    probe = attempt(router.start("y", "r"))  # alpha's key cools for the cut: beta probes
    assert (probe.provider, probe.probe) == ("beta", True)


def test_a_cap_a_reload_adds_counts_the_attempts_that_start_after_it() -> None:
    """As docs/design.md §6 says: what was in flight uncapped is not counted."""
    text = ONE_KEY
    clock = ManualClock()
    config = load_router_config("c.yaml", text=text % "")
    router = config.build(clock)
    for i in range(3):
        streaming = router.start(f"s{i}", "r")
        attempt(streaming)
        streaming.record(200, OK, stream=True)
    load_router_config("c.yaml", text=text % ", max_in_flight: 2").reconfigure(
        router, previous=config)
    assert router.engine.in_flight("alpha") == (0, 0)
    for i in range(2):
        attempt(router.start(f"n{i}", "r"))
    queued(router.start("n2", "r"))
