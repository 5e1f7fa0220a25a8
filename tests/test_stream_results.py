"""A streamed answer's result is known when its stream ends (docs/design.md §2, §7): the
router answers with the stream at its first content, and `end_stream` tells the layers
how it ended, so a cut stream is a failure the breaker, the cooldowns and dedup see."""

from __future__ import annotations

import pytest

from omniroute_tui.config import load_router_config
from omniroute_tui.config.problems import ConfigError
from omniroute_tui.console.model.request_steps import request_steps
from omniroute_tui.engine import BreakerState, FailureKind, StreamCut
from omniroute_tui.engine.events import event_from_dict
from omniroute_tui.router import Attempt, RequestRouting, Response, Router

from .helpers import OK, fail, make_engine, make_router, settings


def _attempt(routing: RequestRouting) -> Attempt:
    step = routing.next_step()
    assert isinstance(step, Attempt), step
    return step


def _stream(router: Router, request_id: str) -> tuple[RequestRouting, Attempt]:
    """A request whose first attempt answers with a stream: answered with it at once."""
    routing = router.start(request_id, "r")
    attempt = _attempt(routing)
    routing.record(200, OK, stream=True)
    response = routing.next_step()
    assert isinstance(response, Response) and response.upstream == attempt
    assert routing.streaming
    return routing, attempt


def test_a_cut_stream_is_a_stream_cut_failure_when_it_ends() -> None:
    engine, clock, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    router = make_router(engine)
    clock.advance(100)
    routing, attempt = _stream(router, "r1")
    assert seen.of("result") == []  # the answer has started, its result is not known
    assert seen.of("response")[0]["status"] == 200
    clock.advance(2500)
    routing.end_stream(StreamCut.RESET, relayed_bytes=4321, relayed_chunks=40)
    assert not routing.streaming
    [result] = seen.of("result")
    assert result == {"t": 2600, "type": "result", "request": "r1", "n": 1,
                      "provider": "alpha", "connection": "a", "model": "m", "status": 200,
                      "kind": "stream_cut", "latency_ms": 2500, "reason": "reset",
                      "relayed_bytes": 4321, "relayed_chunks": 40}
    assert event_from_dict(result).to_dict() == result  # a trace line reads back
    # the connection cools (3 s, apikey) and the breaker counts the failure
    [cooldown] = seen.of("cooldown")
    assert (cooldown["connection"], cooldown["kind"], cooldown["until"]) == (
        "a", "stream_cut", 2600 + 3000)
    assert engine.breaker_snapshot("alpha").failures == 1
    routing.end_stream(StreamCut.IDLE)  # a second end changes nothing
    assert len(seen.of("result")) == 1


def test_a_whole_stream_is_a_success_with_what_it_relayed() -> None:
    engine, clock, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    router = make_router(engine)
    engine.record("alpha", "a", "m", engine.admit("alpha"), fail(FailureKind.SERVER_ERROR))
    clock.advance(10_000)
    routing, _ = _stream(router, "r1")
    assert engine.breaker_snapshot("alpha").failures == 1  # not yet: the stream is open
    clock.advance(800)
    routing.end_stream(relayed_bytes=900, relayed_chunks=60)
    [result] = seen.of("result")
    assert (result["kind"], result.get("reason"), result["relayed_chunks"]) == (None, None, 60)
    assert engine.breaker_snapshot("alpha").failures == 0  # gradual recovery (§3)
    assert seen.of("cooldown")[-1]["kind"] is None  # the connection's level is back to 0


def test_six_cuts_in_a_row_open_the_breaker_as_section_3_says() -> None:
    """Five counted failures open an apikey breaker (three make it DEGRADED); a stream's
    start must not count as a success in between, or the count would never climb."""
    keys = ("a", "b", "c", "d", "e", "f")
    engine, clock, seen = make_engine({"alpha": keys, "beta": ("x",)})
    router = make_router(engine)
    states = []
    for i in range(5):
        clock.advance(100)  # within every dedup window, but each on another key
        routing, attempt = _stream(router, f"r{i}")
        assert attempt.connection == keys[i]  # the keys cut before are cooling
        clock.advance(50)
        routing.end_stream(StreamCut.RESET, relayed_bytes=100, relayed_chunks=40)
        states.append(engine.breaker_snapshot("alpha").state)
    assert states == [BreakerState.CLOSED, BreakerState.CLOSED, BreakerState.DEGRADED,
                      BreakerState.DEGRADED, BreakerState.OPEN]
    moves = [(e["to"], e["reason"], e["failures"]) for e in seen.of("breaker")]
    assert moves == [("DEGRADED", "failures", 3), ("OPEN", "threshold", 5)]
    # the sixth request does not go to alpha again
    clock.advance(100)
    sixth = router.start("r5", "r")
    attempt = _attempt(sixth)
    assert attempt.provider == "beta"
    assert [(s["provider"], s["reason"]) for s in seen.of("skip")] == [
        ("alpha", "circuit_open")]


def test_cuts_on_one_key_are_deduplicated_as_any_failure_of_it() -> None:
    engine, clock, seen = make_engine(
        {"alpha": ("a",), "beta": ("x",)}, settings_=settings(cooldown={"base_ms": 1}))
    router = make_router(engine)
    for i in range(2):
        clock.advance(100)
        routing, _ = _stream(router, f"r{i}")
        routing.end_stream(StreamCut.NO_DONE)
    assert engine.breaker_snapshot("alpha").failures == 1
    assert [(e["connection"], e["kind"], e["window"]) for e in seen.of("dedup")] == [
        ("a", "stream_cut", "connection")]


def test_a_probe_is_decided_by_its_stream_end() -> None:
    engine, clock, seen = make_engine(
        {"alpha": ("a", "b"), "beta": ("x",)},
        settings_=settings(breaker={"failure_threshold": 1, "degraded_threshold": 1}))
    router = make_router(engine)
    engine.record("alpha", "a", "m", engine.admit("alpha"), fail(FailureKind.SERVER_ERROR))
    clock.advance(5_000)  # the OPEN window: HALF_OPEN now
    routing, attempt = _stream(router, "probe")
    assert attempt.probe
    # while the probe streams, its slot stays taken: the next request goes to beta
    other = router.start("other", "r")
    assert _attempt(other).provider == "beta"
    other.record(200, OK)
    routing.end_stream(StreamCut.UPSTREAM_ERROR)
    assert engine.breaker_snapshot("alpha").state is BreakerState.OPEN
    assert seen.of("breaker")[-1]["reason"] == "probe_failed"
    clock.advance(5_000)
    routing, attempt = _stream(router, "probe2")
    assert attempt.probe
    routing.end_stream()
    assert engine.breaker_snapshot("alpha").state is BreakerState.CLOSED


def test_a_client_that_leaves_mid_stream_ends_it_cancelled() -> None:
    engine, clock, seen = make_engine(
        {"alpha": ("a",), "beta": ("x",)},
        settings_=settings(breaker={"failure_threshold": 1, "degraded_threshold": 1}))
    router = make_router(engine)
    engine.record("alpha", "a", "m", engine.admit("alpha"), fail(FailureKind.SERVER_ERROR))
    clock.advance(5_000)
    routing, attempt = _stream(router, "probe")
    assert attempt.probe
    routing.end_stream(StreamCut.RESET, cancelled=True, relayed_bytes=10)
    [result] = seen.of("result")
    assert (result["kind"], result.get("reason")) == ("cancelled", None)
    # neither success nor failure: the probe slot is free for the next request
    assert engine.breaker_snapshot("alpha").state is BreakerState.HALF_OPEN
    assert _attempt(router.start("next", "r")).probe


def test_failures_before_the_first_content_move_on_with_their_reason() -> None:
    """A first token that does not come in time, or a stream broken before its first
    content: nothing reached the client, so the request goes to the next target."""
    engine, clock, seen = make_engine({"alpha": ("a",), "beta": ("x",), "gamma": ("g",)})
    router = make_router(engine, ("alpha/m", "beta/m", "gamma/m"))
    routing = router.start("r1", "r")
    _attempt(routing)
    clock.advance(300)
    routing.record(0, fail(FailureKind.TIMEOUT), reason=StreamCut.FIRST_TOKEN)
    assert _attempt(routing).provider == "beta"
    routing.record(0, fail(FailureKind.STREAM_CUT), reason=StreamCut.BAD_EVENT)
    assert _attempt(routing).provider == "gamma"
    routing.record(0, fail(FailureKind.TIMEOUT), reason=StreamCut.FIRST_TOKEN)
    response = routing.next_step()
    assert isinstance(response, Response) and response.status == 504
    assert [(r["provider"], r["kind"], r["reason"]) for r in seen.of("result")] == [
        ("alpha", "timeout", "first_token"), ("beta", "stream_cut", "bad_event"),
        ("gamma", "timeout", "first_token")]
    assert engine.breaker_snapshot("alpha").failures == 1


ROUTES_YAML = """\
resilience: {{request: {{stream_idle: 5s{global_first}}}}}
providers:
  alpha:
    models: [m, o]
    resilience: {{request: {{first_token: 40s}}}}
    connections: [{{id: a}}, {{id: b}}]
  beta:
    models: [m]
    connections: [{{id: x}}]
routes:
  r:
    {route_first}targets: [alpha/m, {{target: alpha/o, first_token: 2m}}, beta/m]
"""


def _attempts_of(text: str) -> list[tuple[str, int, int]]:
    router = load_router_config("r.yaml", text=text).build(make_engine()[1])
    routing = router.start("r1", "r")
    seen = []
    while True:
        step = routing.next_step()
        if not isinstance(step, Attempt):
            return seen
        seen.append((f"{step.provider}/{step.model}", step.first_token_ms, step.stream_idle_ms))
        routing.record(500, fail(FailureKind.SERVER_ERROR))  # on to the next target


@pytest.mark.parametrize(("route_first", "expected"), [
    ("", [("alpha/m", 40_000, 5_000), ("alpha/o", 120_000, 5_000), ("beta/m", 0, 5_000)]),
    ("first_token: 10s\n    ", [("alpha/m", 10_000, 5_000), ("alpha/o", 120_000, 5_000),
                            ("beta/m", 10_000, 5_000)]),
    ("first_token: off\n    ", [("alpha/m", 0, 5_000), ("alpha/o", 120_000, 5_000),
                            ("beta/m", 0, 5_000)]),
])
def test_first_token_is_read_per_target_then_route_then_provider(
        route_first: str, expected: list[tuple[str, int, int]]) -> None:
    text = ROUTES_YAML.format(global_first="", route_first=route_first)
    assert _attempts_of(text) == expected


def test_the_stream_settings_default_to_a_30s_idle_and_no_first_token_limit() -> None:
    text = ROUTES_YAML.format(global_first="", route_first="").replace(
        "resilience: {request: {stream_idle: 5s}}\n", "").replace(
        "    resilience: {request: {first_token: 40s}}\n", "")
    assert _attempts_of(text) == [("alpha/m", 0, 30_000), ("alpha/o", 120_000, 30_000),
                                  ("beta/m", 0, 30_000)]


@pytest.mark.parametrize(("change", "problem"), [
    (("stream_idle: 5s", "stream_idle: 0s"),
     "resilience.request.stream_idle: must be longer than 0"),
    (("stream_idle: 5s", "stream_idle: soon"),
     "resilience.request.stream_idle: 'soon' is not a duration"),
    (("first_token: 40s", "first_token: -1"),
     "providers.alpha.resilience.request.first_token: a duration cannot be negative"),
    (("first_token: 2m", "first_token: never"),
     "routes.r.targets[1].first_token: 'never' is not a duration"),
    (("first_token: 2m", "first_token: 2m, wait: 1s"),
     "routes.r.targets[1].wait: unknown field"),
])
def test_bad_stream_settings_are_refused_with_where(change: tuple[str, str],
                                                     problem: str) -> None:
    text = ROUTES_YAML.format(global_first="", route_first="").replace(*change)
    with pytest.raises(ConfigError) as refused:
        load_router_config("r.yaml", text=text)
    assert problem in str(refused.value)


def test_the_console_says_how_a_stream_ended_and_what_it_relayed() -> None:
    from omniroute_tui.console.model.console_model import ConsoleModel

    engine, clock, _ = make_engine({"alpha": ("a", "b"), "beta": ("x",)})
    model = ConsoleModel({}, clock.now_ms)
    engine.bus.subscribe(model.on_event)
    router = make_router(engine)
    cut, _ = _stream(router, "cut")
    clock.advance(2500)
    cut.end_stream(StreamCut.RESET, relayed_bytes=4321, relayed_chunks=40)
    whole, _ = _stream(router, "whole")
    clock.advance(800)
    whole.end_stream(relayed_bytes=9000, relayed_chunks=61)
    steps = {request: [what for _, layer, what in request_steps(trail.events)
                       if layer == "upstream"]
             for request, trail in model.requests.items()}
    assert steps == {
        "cut": ["failed: stream_cut (200): reset after 2.5s, streamed 40 chunk(s), 4,321 bytes"],
        "whole": ["answered 200 in 800ms, streamed 61 chunk(s), 9,000 bytes"]}
    assert any("failure alpha/a/m: stream_cut reset (200) for cut" in text
               for text in (entry.line for entry in model.events))


def test_the_metrics_count_a_cut_stream_and_hold_it_in_flight_until_it_ends() -> None:
    from omniroute_tui.metrics import build_registry, exposition

    from .metrics_helpers import parse, value

    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    router = make_router(engine)
    registry = build_registry(router, clock=clock)
    routing, _ = _stream(router, "r1")
    samples = parse(exposition(registry))
    assert value(samples, "omniroute_attempts_in_flight", provider="alpha") == 1
    routing.end_stream(StreamCut.IDLE, relayed_bytes=10, relayed_chunks=1)
    samples = parse(exposition(registry))
    assert value(samples, "omniroute_attempts_in_flight", provider="alpha") == 0
    assert value(samples, "omniroute_attempts_total", provider="alpha", connection="a",
                 model="m", outcome="stream_cut") == 1
