"""Stream faults in virtual time: each one's outcome and timing as the gateway would see
them (docs/simulator.md, "Streams"), worked out by hand. Both providers answer their
headers after 100 ms; a streamed answer's token k comes k·20 ms after them (50/s). A
stream relays its tokens as chunks, and its finish event as one more when it comes."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.config.problems import ConfigError
from omniroute_tui.engine.breaker import BreakerAdmission
from omniroute_tui.engine.classify import Classification
from omniroute_tui.engine.kinds import FailureKind, StreamCut
from omniroute_tui.router.steps import Attempt
from simulator.fake_streams import DONE, chunk, stream_fate
from simulator.fakes import FakeAnswer
from simulator.fault_traffic import silent_faults
from simulator.scenario import Fault, FaultAction, FaultTarget, StreamSpec, load_scenario
from simulator.virtual import run_virtual

BASE = """\
name: streams
duration: 20s
resilience: {{request: {{stream_idle: 5s}}}}
providers:
  alpha: {{models: [m], latency: 100ms, connections: [a]}}
  beta: {{models: [m], latency: 100ms, connections: [b]}}
routes:
  r: {{{route}targets: [alpha/m, beta/m]}}
traffic:
  - {{route: r, at: [1s], stream: {stream}}}
faults:
  - {{name: f, target: alpha, at: 0s, for: 5s, {fault}}}
"""

ROLE = len(chunk("m", {"role": "assistant", "content": ""}))
TOKEN = len(chunk("m", {"content": "token "}))
FINISH = len(chunk("m", {}, "stop"))
WHOLE = ROLE + 60 * TOKEN + FINISH + len(DONE)


def replay(fault: str, *, route: str = "", stream: str = "{tokens: 60, rate: 50/s}",
           policy: str = "resilient") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    scenario = load_scenario("s.yaml", text=BASE.format(route=route, stream=stream,
                                                        fault=fault))
    out = io.StringIO()
    metrics = run_virtual(scenario, policy, trace=out)
    return [json.loads(line) for line in out.getvalue().splitlines()], metrics


def results(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["t"], e["provider"], e["status"], e["kind"], e.get("reason"),
             e["latency_ms"], e.get("relayed_chunks"), e.get("relayed_bytes"))
            for e in events if e["type"] == "result"]


def responses(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["t"], e["status"], e["latency_ms"], e.get("served_by"))
            for e in events if e["type"] == "response"]


#: answered at the first token (1,000 + 100 + 20 ms), the result when the stream ends
ANSWERED = [(1120, 200, 120, "alpha/a/m")]


@pytest.mark.parametrize(("fault", "result"), [
    # reset right after token 40: 1,100 + 40·20
    ("stream_cut: {after_tokens: 40}",
     (1900, "alpha", 200, "stream_cut", "reset", 900, 40, ROLE + 40 * TOKEN)),
    # token 20 at 1,500, then nothing: cut at 1,500 + stream_idle (5 s)
    ("stream_stall: {after_tokens: 20, for: 30s}",
     (6500, "alpha", 200, "stream_cut", "idle", 5500, 20, ROLE + 20 * TOKEN)),
    # token 11 would have come at 1,100 + 11·20
    ("bad_chunk: {after_tokens: 10}",
     (1320, "alpha", 200, "stream_cut", "bad_event", 320, 10, ROLE + 10 * TOKEN)),
    # all 60 tokens and the finish event, the body ends at 1,100 + 60·20 with no [DONE]
    ("no_done: true",
     (2300, "alpha", 200, "stream_cut", "no_done", 1300, 61, WHOLE - len(DONE))),
    # a stall shorter than stream_idle: token 21 at 1,500 + 2,000, 39 more 20 ms apart
    ("stream_stall: {after_tokens: 20, for: 2s}",
     (4280, "alpha", 200, None, None, 3280, 61, WHOLE)),
    # a fault on the 60th token of a 60-token answer: the answer ends first
    ("stream_cut: {after_tokens: 60}",
     (2300, "alpha", 200, None, None, 1300, 61, WHOLE)),
])
def test_a_stream_fault_ends_the_answered_stream_as_the_gateway_sees_it(
        fault: str, result: tuple[Any, ...]) -> None:
    events, metrics = replay(fault)
    assert responses(events) == ANSWERED
    assert results(events) == [result]
    assert metrics["successes"] == (1 if result[3] is None else 0)
    assert metrics["providers"]["alpha"]["failures"] == (
        {"stream_cut": 1} if result[3] else {})


def test_a_cut_stream_cools_its_key_and_counts_for_the_breaker() -> None:
    events, _ = replay("stream_cut: {after_tokens: 40}")
    [cooldown] = [e for e in events if e["type"] == "cooldown"]
    assert (cooldown["t"], cooldown["kind"], cooldown["until"]) == (1900, "stream_cut", 4900)
    # the event order: answered with the stream, then its result when it broke
    assert [e["type"] for e in events if e["type"] in ("response", "result")] == [
        "response", "result"]


def test_a_late_first_token_moves_the_request_to_the_next_target() -> None:
    """`first_token: 8s` on the route, the first token 20 s after alpha's headers: a
    `timeout` (first_token) 8 s after the attempt's start, nothing relayed; beta answers
    from 9,000 ms: its first token at 9,120, its stream whole at 9,000 + 100 + 1,200."""
    events, metrics = replay("first_token: 20s", route="first_token: 8s, ")
    assert results(events) == [
        (9000, "alpha", 0, "timeout", "first_token", 8000, None, None),
        (10_300, "beta", 200, None, None, 1300, 61, WHOLE)]
    assert responses(events) == [(9120, 200, 8120, "beta/b/m")]
    assert metrics["successes"] == 1


def test_a_late_first_token_is_waited_for_without_a_first_token_limit() -> None:
    events, _ = replay("first_token: 3s")
    assert responses(events) == [(4100, 200, 3100, "alpha/a/m")]  # 1,000 + 100 + 3,000
    assert results(events) == [(5280, "alpha", 200, None, None, 4280, 61, WHOLE)]


def test_without_a_first_token_limit_the_timeout_bounds_the_first_content() -> None:
    events, _ = replay("first_token: 90s")  # request.timeout: 60 s
    assert results(events)[0] == (61_000, "alpha", 0, "timeout", None, 60_000, None, None)
    assert responses(events) == [(61_120, 200, 60_120, "beta/b/m")]


@pytest.mark.parametrize(("fault", "failed", "answered"), [
    # the headers, then a reset before any token: at 1,100; beta's first token at 1,220
    ("stream_cut: {after_tokens: 0}", (1100, "alpha", 0, "stream_cut", "reset", 100,
                                       None, None), 1220),
    # the first event is malformed: at 1,120, where token 1 would be; beta's at 1,240
    ("bad_chunk: {after_tokens: 0}", (1120, "alpha", 0, "stream_cut", "bad_event", 120,
                                      None, None), 1240),
])
def test_a_stream_broken_before_its_first_token_moves_on(
        fault: str, failed: tuple[Any, ...], answered: int) -> None:
    events, metrics = replay(fault)
    assert results(events)[0] == failed
    assert responses(events) == [(answered, 200, answered - 1000, "beta/b/m")]
    assert metrics["successes"] == 1


def test_stream_faults_leave_requests_that_do_not_stream_alone() -> None:
    events, _ = replay("stream_cut: {after_tokens: 0}", stream="false")
    assert results(events) == [(1100, "alpha", 200, None, None, 100, None, None)]


def test_the_default_stream_is_60_tokens_at_50_a_second() -> None:
    events, _ = replay("no_done: true", stream="true")
    assert results(events) == [
        (2300, "alpha", 200, "stream_cut", "no_done", 1300, 61, WHOLE - len(DONE))]


def test_the_baselines_answer_at_the_first_token_and_hear_of_the_cut_at_its_end() -> None:
    events, metrics = replay("stream_cut: {after_tokens: 40}", policy="naive")
    assert responses(events) == ANSWERED
    assert results(events) == [
        (1900, "alpha", 200, "stream_cut", "reset", 900, 40, ROLE + 40 * TOKEN)]
    assert metrics["successes"] == 0


@pytest.mark.parametrize(("fault", "problem"), [
    ("stream_cut: {after_tokens: -1}",
     "faults[0].stream_cut.after_tokens: expected a whole number >= 0, got -1"),
    ("stream_cut: {after_tokens: '40'}",
     "faults[0].stream_cut.after_tokens: expected a whole number >= 0, got '40'"),
    ("stream_cut: {after_tokens: true}",
     "faults[0].stream_cut.after_tokens: expected a whole number >= 0, got true"),
    ("stream_cut: {after_tokens: 100001}",
     "faults[0].stream_cut.after_tokens: at most 100,000 tokens, got 100,001"),
    ("stream_cut: {}", "faults[0].stream_cut.after_tokens: missing"),
    ("stream_cut: 40", "faults[0].stream_cut: expected a mapping, got 40"),
    ("stream_cut: {after_tokens: 4, when: 1s}", "faults[0].stream_cut.when: unknown field"),
    ("stream_stall: {after_tokens: 0, for: 30s}",
     "faults[0].stream_stall.after_tokens: expected a whole number >= 1, got 0"),
    ("stream_stall: {after_tokens: 20}", "faults[0].stream_stall.for: missing"),
    ("stream_stall: {after_tokens: 20, for: 0s}", "faults[0].stream_stall.for:"),
    ("stream_stall: {after_tokens: 20, for: forever}",
     "faults[0].stream_stall.for: 'forever' is not a duration"),
    ("bad_chunk: {after_tokens: 1.5}",
     "faults[0].bad_chunk.after_tokens: expected a whole number >= 0, got 1.5"),
    ("no_done: false", "faults[0].no_done: expected true, got False"),
    ("no_done: 'yes'", "faults[0].no_done: expected true, got 'yes'"),
    ("first_token: -5s", "faults[0].first_token: '-5s' is not a duration"),
    ("first_token: -5000", "faults[0].first_token: a duration cannot be negative"),
    ("first_token: 0s", "faults[0].first_token:"),
    ("first_token: [1s]", "faults[0].first_token:"),
    ("no_done: true, error: 503", "faults[0]: give exactly one of error, bad_chunk"),
    ("no_done: true, first_token: 2s", "faults[0]: give exactly one of error, bad_chunk"),
    ("no_done: true, retry_after: 2s", "faults[0].retry_after: no_done breaks a streamed"),
])
def test_hostile_stream_faults_are_refused_with_the_field(fault: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_scenario("s.yaml", text=BASE.format(route="", stream="true", fault=fault))
    assert problem in str(refused.value)


@pytest.mark.parametrize(("stream", "problem"), [
    ("{tokens: 0}", "traffic[0].stream.tokens: expected a whole number >= 1, got 0"),
    ("{tokens: 100001}", "traffic[0].stream.tokens: at most 100,000 tokens"),
    ("{rate: 5000/s}", "traffic[0].stream.rate: from 0.01/s to 1000/s tokens, got 5000/s"),
    ("{rate: fast}", "traffic[0].stream.rate: 'fast' is not a rate"),
    ("{rate: -1}", "traffic[0].stream.rate: a rate must be positive"),
    ("{tokens: 5, words: 3}", "traffic[0].stream.words: unknown field"),
    ("'yes'", "traffic[0].stream: expected a mapping, got 'yes'"),
])
def test_hostile_stream_traffic_is_refused_with_the_field(stream: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_scenario("s.yaml", text=BASE.format(route="", stream=stream,
                                                fault="no_done: true"))
    assert problem in str(refused.value)


_ACTIONS = [None, FaultAction.STREAM_CUT, FaultAction.STREAM_STALL, FaultAction.BAD_CHUNK,
            FaultAction.NO_DONE, FaultAction.FIRST_TOKEN]


@settings(max_examples=300, deadline=None)
@given(latency=st.integers(1, 5_000), gap=st.integers(1, 1_000), tokens=st.integers(1, 200),
       action=st.sampled_from(_ACTIONS), after=st.integers(0, 250),
       hold=st.integers(1, 120_000), first_token=st.sampled_from([0, 1_000, 8_000, 60_000]),
       idle=st.integers(1, 30_000))
def test_a_streams_fate_is_told_as_the_stream_unfolded(
        latency: int, gap: int, tokens: int, action: FaultAction | None, after: int,
        hold: int, first_token: int, idle: int) -> None:
    """Whatever the fault: an answered stream relays at most its tokens, all of them when
    whole; it ends no sooner than its first token; a cut relays what came before it; an
    attempt that fails before its first content relays nothing, within its bounds."""
    if action is FaultAction.STREAM_STALL:
        after = max(1, after)
    fault = None if action is None else Fault("f", 0, 1, FaultTarget(), action,
                                              after_tokens=after, hold_ms=hold)
    attempt = Attempt("r", 1, "alpha", "a", "m", False, 60_000, 0,
                      BreakerAdmission(True, 0), first_token, idle)
    fate = stream_fate(FakeAnswer(latency, 200, Classification(None)), fault,
                       StreamSpec(tokens, gap), attempt)
    if fate.stream is None:  # failed before its first content: the request moves on
        assert fate.status == 0 and fate.classification.kind in (
            FailureKind.STREAM_CUT, FailureKind.TIMEOUT)
        assert fate.delay_ms <= max(first_token or 60_000, latency + gap)
        if fate.classification.kind is FailureKind.TIMEOUT:  # no content in time
            assert fate.delay_ms == (first_token or 60_000)
            assert fate.reason is (StreamCut.FIRST_TOKEN if first_token else None)
        return
    end = fate.stream
    assert fate.status == 200 and fate.classification.kind is None
    assert latency < fate.delay_ms and end.after_ms >= 0
    assert fate.delay_ms < (first_token or 60_000)
    assert 1 <= end.relayed_chunks <= tokens + 1
    relayed_tokens = end.relayed_chunks
    if end.cut is None or end.cut is StreamCut.NO_DONE:  # every token, and the finish
        assert end.relayed_chunks == tokens + 1
        relayed_tokens = tokens
    else:
        assert action is not None and end.relayed_chunks == after < tokens
    if end.cut is StreamCut.IDLE:
        assert hold >= idle and fate.delay_ms + end.after_ms == latency + after * gap + idle
    assert end.relayed_bytes == ROLE + relayed_tokens * TOKEN + (
        FINISH + len(DONE) if end.cut is None else FINISH if end.cut is StreamCut.NO_DONE
        else 0)


def test_a_stream_fault_on_traffic_that_does_not_stream_is_said_to_see_none() -> None:
    text = BASE.format(route="", stream="false", fault="no_done: true")
    scenario = load_scenario("s.yaml", text=text)
    assert silent_faults(scenario, run_virtual(scenario, "resilient")) == [
        "s.yaml:12: fault 'f' saw no traffic: no streamed traffic runs while it does (it "
        "acts on `stream:` traffic only)"]
    streamed = load_scenario("s.yaml", text=BASE.format(route="", stream="true",
                                                        fault="no_done: true"))
    assert silent_faults(streamed, run_virtual(streamed, "resilient")) == []
