"""Resuming a cut stream (`stream_resume: continue`, docs/design.md §7): the router says
whether and where to continue a stream cut after its first content, as one more attempt
with its why; what was relayed is read back into the text to continue, and a stream that
carried anything but text is not continued."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import load_router_config
from omniroute_tui.config.problems import ConfigError
from omniroute_tui.console.model.request_steps import request_steps
from omniroute_tui.drivers import AsyncDriver, UpstreamClient
from omniroute_tui.drivers.resume import (
    RelayedAnswer,
    ResumeRefusal,
    _Splice,
    continuation_body,
    read_relayed,
    refusal_of_request,
)
from omniroute_tui.engine import FailureKind, StreamCut
from omniroute_tui.engine.engine import ResilienceEngine
from omniroute_tui.router import Attempt, RequestRouting, Response, Route, Router, Target

from .helpers import OK, Recorder, fail, make_engine


def _router(engine: ResilienceEngine, *targets: str, resume: bool = True) -> Router:
    route = Route("r", tuple(Target(*t.split("/")) for t in targets), stream_resume=resume)
    return Router(engine, {"r": route})


def _cut_stream(router: Router, chunks: int = 40) -> tuple[RequestRouting, Attempt]:
    """A request answered with a stream, cut after `chunks` chunks with content."""
    routing = router.start("r1", "r")
    attempt = routing.next_step()
    assert isinstance(attempt, Attempt)
    routing.record(200, OK, stream=True)
    assert isinstance(routing.next_step(), Response)
    routing.end_stream(StreamCut.RESET, relayed_bytes=4000, relayed_chunks=chunks)
    return routing, attempt


def test_a_cut_stream_is_resumed_on_the_next_target_as_one_more_attempt() -> None:
    engine, clock, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    routing, first = _cut_stream(_router(engine, "alpha/m", "beta/m"))
    response = routing.response
    clock.advance(10)
    resumed = routing.resume(StreamCut.RESET, 40)
    assert resumed is not None
    assert (resumed.n, resumed.provider, resumed.connection) == (2, "beta", "x")
    attempt_event = seen.of("attempt")[-1]
    assert attempt_event["why"] == "resume: continues attempt 1's answer, cut (reset) after " \
                                   "40 chunk(s)"
    budget = seen.of("budget")[-1]  # a resume is a retry: it spends a token
    assert (budget["provider"], budget["spent"]) == ("beta", True)
    routing.record(200, OK, stream=True)
    assert routing.next_step() is response  # answered once: no second response
    assert len(seen.of("response")) == 1 and routing.streaming
    clock.advance(500)
    routing.end_stream(relayed_bytes=2000, relayed_chunks=21)
    results = [(r["n"], r["provider"], r["kind"], r.get("reason"), r["relayed_chunks"])
               for r in seen.of("result")]
    assert results == [(1, "alpha", "stream_cut", "reset", 40), (2, "beta", None, None, 21)]
    assert [(r.target, r.kind) for r in routing.records] == [("alpha/m", None),
                                                             ("beta/m", None)]
    assert routing.resume(StreamCut.RESET, 61) is None  # once a request
    assert first.provider == "alpha"


def test_a_refused_continuation_is_recorded_and_the_request_stays_answered() -> None:
    engine, clock, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    routing, _ = _cut_stream(_router(engine, "alpha/m", "beta/m"))
    response = routing.response
    assert routing.resume(StreamCut.RESET, 40) is not None
    routing.record(400, fail(FailureKind.CLIENT_ERROR))
    assert routing.next_step() is response and not routing.streaming
    assert seen.of("result")[-1]["kind"] == "client_error"
    assert engine.breaker_snapshot("beta").failures == 0  # a 400 is no one's failure
    assert len(seen.of("response")) == 1


def test_no_resume_without_the_setting_a_next_target_or_its_admission() -> None:
    engine, _, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    routing, _ = _cut_stream(_router(engine, "alpha/m", "beta/m", resume=False))
    assert routing.resume(StreamCut.RESET, 40) is None
    engine, _, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    routing, _ = _cut_stream(_router(engine, "alpha/m"))  # no next target
    assert routing.resume(StreamCut.RESET, 40) is None
    engine, _, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    engine.force_open("beta", 60_000, actor="test")
    routing, _ = _cut_stream(_router(engine, "alpha/m", "beta/m"))
    assert routing.resume(StreamCut.RESET, 40) is None
    assert seen.of("skip")[-1]["reason"] == "circuit_open"


def test_no_resume_while_the_stream_is_open_or_before_an_answer() -> None:
    engine, _, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    routing = _router(engine, "alpha/m", "beta/m").start("r1", "r")
    assert routing.resume(StreamCut.RESET, 0) is None  # nothing answered yet
    routing.next_step()
    routing.record(200, OK, stream=True)
    routing.next_step()
    assert routing.resume(StreamCut.RESET, 3) is None  # not ended yet


def test_no_resume_without_a_retry_budget_token() -> None:
    engine, _, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    engine.layers("beta").budget.tokens = 0.0
    routing, _ = _cut_stream(_router(engine, "alpha/m", "beta/m"))
    assert routing.resume(StreamCut.RESET, 40) is None
    assert seen.of("skip")[-1]["reason"] == "retry_budget"


def test_a_client_gone_during_the_continuation_counts_it_cancelled() -> None:
    engine, _, seen = make_engine({"alpha": ("a",), "beta": ("x",)})
    routing, _ = _cut_stream(_router(engine, "alpha/m", "beta/m"))
    response = routing.response
    assert routing.resume(StreamCut.IDLE, 40) is not None
    assert routing.cancel() is response
    assert seen.of("result")[-1]["kind"] == "cancelled"


def test_the_route_setting_is_read() -> None:
    text = """\
providers:
  alpha: {{models: [m], connections: [a]}}
  beta: {{models: [m], connections: [x]}}
routes:
  r: {{stream_resume: {value}, targets: [alpha/m, beta/m]}}
"""
    for value, resumed in (("continue", True), ("off", False), ("false", False)):
        config = load_router_config("r.yaml", text=text.format(value=value))
        assert config.routes["r"].stream_resume is resumed
    with pytest.raises(ConfigError, match="stream_resume: expected continue or off, got 'yes "):
        load_router_config("r.yaml", text=text.format(value="'yes please'"))


# -- what was relayed, and the continuation ---------------------------------------------------


def _event(delta: dict[str, object], finish: str | None = None, index: int = 0,
           **extra: object) -> bytes:
    data = {"id": "chatcmpl-1", "model": "m", "created": 7,
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def test_the_relayed_text_is_read_back() -> None:
    pieces = [_event({"role": "assistant", "content": ""}) + b": keep-alive\n\n",
              _event({"content": "Hel"}) + _event({"content": "lo \"wo\\nrld\""})]
    assert read_relayed(pieces) == RelayedAnswer(
        'Hello "wo\\nrld"', {"id": "chatcmpl-1", "model": "m", "created": 7})


@pytest.mark.parametrize(("event", "refusal"), [
    (_event({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a"}}]}),
     ResumeRefusal.TOOL_CALLS),
    (_event({"reasoning_content": "hmm"}), ResumeRefusal.NOT_TEXT),
    (_event({"content": "x"}, index=1), ResumeRefusal.CHOICES),
    (_event({"content": "x"}, finish="stop"), ResumeRefusal.FINISHED),
    (_event({"content": 3}), ResumeRefusal.SHAPE),
    (b'data: {"choices": 3}\n\n', ResumeRefusal.SHAPE),
    (b'data: {"choices": [[]]}\n\n', ResumeRefusal.SHAPE),
])
def test_a_stream_of_more_than_text_is_not_continued(event: bytes,
                                                     refusal: ResumeRefusal) -> None:
    assert read_relayed([_event({"content": "Hi "}) + event]) is refusal


def test_nothing_to_continue_and_requests_that_cannot_be() -> None:
    assert read_relayed([_event({"role": "assistant"})]) is ResumeRefusal.EMPTY
    assert refusal_of_request({"n": 2}) is ResumeRefusal.CHOICES
    assert refusal_of_request({"logprobs": True}) is ResumeRefusal.LOGPROBS
    assert refusal_of_request({"n": 1, "logprobs": False}) is None


def test_the_continuation_asks_for_the_rest() -> None:
    body = {"model": "r", "messages": [{"role": "user", "content": "count"}],
            "max_tokens": 100, "stream": True}
    assert continuation_body(body, "t0 t1 ", 2) == {
        "model": "r", "stream": True, "max_tokens": 98,
        "messages": [{"role": "user", "content": "count"},
                     {"role": "assistant", "content": "t0 t1 "}]}
    assert body["messages"] == [{"role": "user", "content": "count"}]  # the client's kept
    prefilled = {"messages": [{"role": "user", "content": "q"},
                              {"role": "assistant", "content": "A: "}],
                 "max_completion_tokens": 3}
    assert continuation_body(prefilled, "yes", 5) == {
        "messages": [{"role": "user", "content": "q"},
                     {"role": "assistant", "content": "A: yes"}],
        "max_completion_tokens": 1}


def test_the_continuation_is_spliced_under_the_first_streams_head() -> None:
    splice = _Splice({"id": "chatcmpl-1", "model": "m", "created": 7})
    theirs = (b'data: {"id":"other","model":"n","created":9,"choices":[{"index":0,'
              b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
              b': ping\n\n'
              b'data: {"id":"other","model":"n","created":9,"choices":[{"index":0,'
              b'"delta":{"role":"assistant","content":"t40 "},"finish_reason":null}]}\n\n'
              b'data: [DONE]\n\n')
    # a strange shape is passed on as it is, under the head
    assert splice.feed(b'data: {"choices": 5, "usage": {"total_tokens": 3}}\n\n') == (
        b'data: {"choices":5,"usage":{"total_tokens":3},"id":"chatcmpl-1","model":"m",'
        b'"created":7}\n\n')
    out = splice.feed(theirs[:50]) + splice.feed(theirs[50:])
    assert out == (b'data: {"id":"chatcmpl-1","model":"m","created":7,"choices":[{"index":0,'
                   b'"delta":{"content":"t40 "},"finish_reason":null}]}\n\n'
                   b'data: [DONE]\n\n')


# -- the driver: a client that leaves while the continuation is asked for ----------------------


class _Body:
    status = 200
    headers = {"content-type": "text/event-stream"}

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def _chunks(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece
        raise ConnectionResetError("the peer closed the connection mid-body")

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def aclose(self) -> None:
        return None


#: alpha's stream is continued on beta's other model when it breaks
RESUMING = """\
providers:
  alpha: {base_url: "http://alpha/v1", models: [m], connections: [a]}
  beta: {base_url: "http://beta/v1", models: [n], connections: [x]}
routes:
  r: {stream_resume: continue, targets: [alpha/m, beta/n]}
"""


class _Pool:
    """The primary streams 3 tokens and breaks; the continuation never answers."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> _Body:
        if b'"model":"m"' in body:
            return _Body([_event({"role": "assistant", "content": ""})]
                         + [_event({"content": f"t{i} "}) for i in range(3)])
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        return None


async def test_a_client_gone_while_the_continuation_is_asked_for_ends_it_at_once() -> None:
    config = load_router_config("r.yaml", text=RESUMING)
    router = config.build(ManualClock())
    seen = Recorder(router.engine.bus)
    pool = _Pool()
    driver = AsyncDriver(router, config.providers, UpstreamClient(pool=pool))
    completion = await driver.complete({"model": "r", "messages": [], "stream": True},
                                       stream=True)
    read: list[bytes] = []

    async def client() -> None:
        async for piece in completion.pieces():
            read.append(piece)

    task = asyncio.get_running_loop().create_task(client())
    await pool.asked.wait()
    completion.client_gone()
    await task  # ends, not cancelled: the interruption was the relay's own
    await completion.finish()
    assert completion.gone and b"error" not in b"".join(read)  # no one to tell
    assert b"".join(read).count(b"t2 ") == 1
    assert [(r["n"], r["kind"]) for r in seen.of("result")] == [(1, "stream_cut"),
                                                                (2, "cancelled")]
    assert completion.resume is not None and completion.resume.outcome == "failed: cancelled"


def test_the_console_why_view_names_the_resume_and_both_attempts() -> None:
    from omniroute_tui.console.model.console_model import ConsoleModel

    engine, clock, _ = make_engine({"alpha": ("a",), "beta": ("x",)})
    model = ConsoleModel({}, clock.now_ms)
    engine.bus.subscribe(model.on_event)
    routing, _ = _cut_stream(_router(engine, "alpha/m", "beta/m"))
    assert routing.resume(StreamCut.RESET, 40) is not None
    routing.record(200, OK, stream=True)
    clock.advance(300)
    routing.end_stream(relayed_bytes=2000, relayed_chunks=21)
    trail = model.requests["r1"]
    steps = [(layer, what) for _, layer, what in request_steps(trail.events)
             if layer in ("resume", "upstream") or what.startswith("attempt")]
    assert steps == [
        ("router", "attempt 1 on alpha/a/m"),
        ("upstream", "failed: stream_cut (200): reset after 0ms, streamed 40 chunk(s), "
                     "4,000 bytes"),
        ("resume", "resume: continues attempt 1's answer, cut (reset) after 40 chunk(s)"),
        ("router", "attempt 2 on beta/x/m"),
        ("upstream", "answered 200 in 300ms, streamed 21 chunk(s), 2,000 bytes")]
    assert trail.attempts == 2


class _SplitPool:
    """The primary streams tokens 0..cut-1 in pieces split at `splits` and breaks; the
    next target continues from the prefill's last token, split the same way."""

    def __init__(self, cut: int, splits: list[int]) -> None:
        self.cut, self.splits = cut, splits

    def _pieces(self, body: bytes) -> list[bytes]:
        points = sorted({min(s, len(body)) for s in self.splits})
        return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)
                if body[a:b]]

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> _Body:
        request = json.loads(body)
        role = _event({"role": "assistant", "content": ""})
        if request["model"] == "m":
            tokens = b"".join(_event({"content": f"t{i} "}) for i in range(self.cut))
            return _Body(self._pieces(role + tokens))
        start = len(request["messages"][-1]["content"].split())
        rest = b"".join(_event({"content": f"t{i} "}) for i in range(start, 60))
        return _WholeBody(self._pieces(role + rest + _event({}, finish="stop")
                                       + b"data: [DONE]\n\n"))

    async def aclose(self) -> None:
        return None


class _WholeBody(_Body):
    async def _chunks(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 59), st.lists(st.integers(1, 6000), max_size=8))
def test_any_cut_resumed_gives_the_whole_answer_once(cut: int, splits: list[int]) -> None:
    """Wherever the primary breaks after its first token, and however the network splits
    either stream, the client reads the 60 tokens once, then one `[DONE]`, and the
    results say a cut after `cut` chunks and a continuation of the rest."""
    config = load_router_config("r.yaml", text=RESUMING)
    router = config.build(ManualClock())
    seen = Recorder(router.engine.bus)
    driver = AsyncDriver(router, config.providers,
                         UpstreamClient(pool=_SplitPool(cut, splits)))

    async def read() -> bytes:
        completion = await driver.complete(
            {"model": "r", "messages": [{"role": "user", "content": "count"}],
             "stream": True}, stream=True)
        body = b"".join([piece async for piece in completion.pieces()])
        await completion.finish()
        return body

    body = asyncio.run(read())
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]" and body.count(b"[DONE]") == 1
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "".join(
        f"t{i} " for i in range(60))
    assert {c["id"] for c in chunks} == {"chatcmpl-1"}
    assert [(r["n"], r["kind"], r["relayed_chunks"]) for r in seen.of("result")] == [
        (1, "stream_cut", cut), (2, None, 60 - cut + 1)]
