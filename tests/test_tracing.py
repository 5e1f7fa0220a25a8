"""OpenTelemetry traces (docs/tracing.md): a gateway exporting to a real OTLP receiver (on
the `opentelemetry-proto` messages), the spans of a request that met a 429 and fell back,
the client's trace context continued and passed upstream, streams, hostile trace headers,
and tracing off unless the standard variables turn it on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import openai
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import TraceState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from omniroute_tui.apis import Endpoint
from omniroute_tui.drivers.usage import Usage
from omniroute_tui.engine.events import (
    AttemptEvent,
    BreakerEvent,
    DedupEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from omniroute_tui.engine.kinds import (
    BreakerReason,
    BreakerState,
    DedupWindow,
    FailureKind,
    SkipReason,
    StreamCut,
)
from omniroute_tui.tracing import MAX_OPEN_TRACES, RequestTracing, tracing_from_env
from omniroute_tui.tracing.exporter import ExportSettings, SpanExporter
from omniroute_tui.tracing.otlp_wire import encode_export, encode_span
from omniroute_tui.tracing.request_spans import RequestTrace
from simulator.otlp_receiver import ReceivedSpan, Receiving, receiving, spans_of

from .gateway_helpers import TOKEN, Running, gateway_for, serving
from .helpers import make_engine
from .waiting import eventually

THROTTLED = "sk-throttled-key-0001"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
AUTH = {"authorization": f"Bearer {TOKEN}"}
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def upstream_app(seen: list[dict[str, str]]) -> Starlette:
    """One upstream for both providers: the throttled key answers 429 (Retry-After 30 s),
    any other a chat completion with its usage (a stream when asked)."""

    async def completions(request: Request) -> Response:
        seen.append(dict(request.headers))
        if request.headers.get("authorization") == f"Bearer {THROTTLED}":
            return JSONResponse({"error": {"message": "Rate limit reached", "type": "requests",
                                           "code": "rate_limit_exceeded"}}, 429,
                                headers={"retry-after": "30"})
        body = json.loads(await request.body())
        if body.get("stream"):
            return StreamingResponse(chunks(body["model"]), media_type="text/event-stream")
        return JSONResponse({"id": "c1", "object": "chat.completion", "created": 1,
                             "model": body["model"], "usage": USAGE, "choices": [{
                                 "index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "hello"}}]})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


async def chunks(model: str) -> AsyncIterator[bytes]:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model}
    for piece in ("hel", "lo"):
        chunk = {**head, "choices": [{"index": 0, "delta": {"content": piece},
                                      "finish_reason": None}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield f"data: {json.dumps({**head, 'choices': [], 'usage': USAGE})}\n\n".encode()
    yield b"data: [DONE]\n\n"


def config(url: str) -> str:
    return yaml.safe_dump({
        "providers": {
            "first": {"base_url": url, "models": ["m"],
                      "connections": [{"id": "k1", "api_key": THROTTLED}]},
            "second": {"base_url": url, "models": ["m"],
                       "connections": [{"id": "k2", "api_key": "sk-second-key-0001"}]}},
        "routes": {"chat": {"targets": ["first/m", "second/m"]}}})


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the machine's own OTEL_* variables: the test's alone."""
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@contextlib.asynccontextmanager
async def traced_gateway(monkeypatch: pytest.MonkeyPatch, app: Starlette
                         ) -> AsyncIterator[tuple[Receiving, Running, httpx.AsyncClient]]:
    """A traced gateway in front of `app`, exporting to a receiver of its own; a client."""
    async with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        async with serving(app) as url, gateway_for(config(url), traced=True) as gw, \
                httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            yield receiver, gw, http


async def traced_calls(receiver: Receiving, monkeypatch: pytest.MonkeyPatch,
                       seen: list[dict[str, str]], *, stream: bool) -> list[ReceivedSpan]:
    """Two chat requests from the official client, each with its own trace context: the
    first meets the 429 and falls back, the second skips the cooling key."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    async with serving(upstream_app(seen)) as url, gateway_for(config(url), traced=True) as gw:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        async with client:
            for n in (1, 2):
                headers = {"traceparent": f"00-{TRACE_ID[:-1]}{n}-{PARENT}-01",
                           "tracestate": "vendor=abc"}
                messages: Any = [{"role": "user", "content": "hi"}]
                if stream:
                    answer = await client.chat.completions.create(
                        model="chat", messages=messages, stream=True,
                        stream_options={"include_usage": True}, extra_headers=headers)
                    text = "".join([c.choices[0].delta.content or "" async for c in answer
                                    if c.choices])
                else:
                    done = await client.chat.completions.create(
                        model="chat", messages=messages, extra_headers=headers)
                    text = done.choices[0].message.content or ""
                assert text == "hello"
        assert gw.gateway.tracing is not None
        assert await asyncio.to_thread(gw.gateway.tracing.exporter.flush)
    return receiver.spans


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_the_spans_of_a_request_that_met_a_429_and_fell_back(
        otel_env: None, monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    seen: list[dict[str, str]] = []
    async with receiving() as receiver:
        spans = await traced_calls(receiver, monkeypatch, seen, stream=stream)
    servers = sorted((s for s in spans if s.kind == "server"),
                     key=lambda s: s.trace_id)
    assert [s.trace_id for s in servers] == [TRACE_ID[:-1] + "1", TRACE_ID[:-1] + "2"]
    first, second = servers
    # the client's context continued: its span is the parent, its tracestate kept
    assert first.parent_span_id == PARENT and first.trace_state == "vendor=abc"
    assert first.name == "POST /v1/chat/completions"
    assert first.resource["service.name"] == "omniroute-gateway"
    assert first.resource["service.instance.id"] == "test-replica"
    assert {k: first.attributes[k] for k in (
        "http.response.status_code", "omniroute.route", "omniroute.attempts",
        "omniroute.served_by", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
    } == {"http.response.status_code": 200, "omniroute.route": "chat",
          "omniroute.attempts": 2, "omniroute.served_by": "second/k2/m",
          "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7}
    attempts = sorted((s for s in spans if s.kind == "client" and s.trace_id == first.trace_id),
                      key=lambda s: s.attributes["omniroute.attempt"])
    assert [s.parent_span_id for s in attempts] == [first.span_id] * 2
    throttled, served = attempts
    assert throttled.name == served.name == "chat m"
    assert throttled.status == "error"
    assert {k: throttled.attributes.get(k) for k in (
        "omniroute.provider", "omniroute.connection", "gen_ai.request.model",
        "http.response.status_code", "omniroute.outcome", "error.type",
        "omniroute.breaker.before", "omniroute.breaker.after")} == {
        "omniroute.provider": "first", "omniroute.connection": "k1",
        "gen_ai.request.model": "m", "http.response.status_code": 429,
        "omniroute.outcome": "rate_limited", "error.type": "rate_limited",
        "omniroute.breaker.before": "CLOSED", "omniroute.breaker.after": "CLOSED"}
    assert served.status == "unset"
    assert {k: served.attributes.get(k) for k in (
        "omniroute.provider", "omniroute.connection", "omniroute.outcome",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "omniroute.provider": "second", "omniroute.connection": "k2", "omniroute.outcome": "ok",
        "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7}
    assert throttled.start_ns <= throttled.end_ns <= served.start_ns <= first.end_ns
    # the second request skipped the cooling key: an event of its span, and one attempt
    ((name, skip),) = second.events
    assert 0 < skip.pop("omniroute.retry_after_ms") <= 30_000  # the key's cooldown left
    assert (name, skip) == ("skip", {"omniroute.provider": "first", "gen_ai.request.model": "m",
                                     "omniroute.reason": "all_cooling"})
    assert [s.attributes["omniroute.provider"] for s in spans
            if s.kind == "client" and s.trace_id == second.trace_id] == ["second"]
    # upstream, each attempt carried its own span's context, and the client's tracestate
    sent = [(h["traceparent"], h.get("tracestate")) for h in seen]
    assert sent == [(f"00-{first.trace_id}-{throttled.span_id}-01", "vendor=abc"),
                    (f"00-{first.trace_id}-{served.span_id}-01", "vendor=abc"),
                    (f"00-{second.trace_id}-{seen_span(spans, second)}-01", "vendor=abc")]


def seen_span(spans: list[ReceivedSpan], server: ReceivedSpan) -> str:
    """The span id of the one attempt under `server`."""
    (attempt,) = [s for s in spans if s.kind == "client" and s.parent_span_id == server.span_id]
    return attempt.span_id


async def one_request(monkeypatch: pytest.MonkeyPatch, headers: list[tuple[bytes, bytes]]
                      ) -> tuple[list[ReceivedSpan], dict[str, str]]:
    """One chat request with `headers` through a traced gateway: the spans the receiver
    got, and the headers the upstream got."""
    seen: list[dict[str, str]] = []
    async with traced_gateway(monkeypatch, upstream_app(seen)) as (receiver, gw, http):
        answer = await http.post("/v1/chat/completions", json={
            "model": "second/m", "messages": [{"role": "user", "content": "hi"}]},
            headers=headers)
        assert answer.status_code == 200, answer.text
        assert gw.gateway.tracing is not None
        assert await asyncio.to_thread(gw.gateway.tracing.exporter.flush)
        scraped = (await http.get("/metrics", headers=AUTH)).text
    (upstream,) = seen
    # what the exporter sent is on /metrics, the first scrape's rendering read after it
    exported = f'omniroute_trace_spans_total{{result="exported"}} {len(receiver.spans)}.0'
    assert exported in scraped.splitlines()
    assert "omniroute_trace_spans_queued 0.0" in scraped.splitlines()  # a flush left none
    return receiver.spans, upstream


@pytest.mark.parametrize("traceparent", [
    b"garbage", b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01",  # all-zero ids are invalid
    f"00-{TRACE_ID}-{PARENT}-01".encode() + b"x" * 10_000, f"ff-{TRACE_ID}-{PARENT}-01".encode(),
    "00-\u00e9".encode() * 20], ids=["garbage", "zero-ids", "oversized", "version-ff", "utf-8"])
async def test_a_hostile_traceparent_starts_a_new_trace_and_the_request_is_served(
        otel_env: None, monkeypatch: pytest.MonkeyPatch, traceparent: bytes) -> None:
    spans, upstream = await one_request(monkeypatch, [
        (b"traceparent", traceparent), (b"tracestate", b"a=" + b"b" * 5_000)])
    (server,) = [s for s in spans if s.kind == "server"]
    assert server.parent_span_id == "" and server.trace_id not in (TRACE_ID, "0" * 32)
    assert server.trace_state == ""  # a tracestate without a valid traceparent is dropped
    assert upstream["traceparent"].split("-")[1] == server.trace_id


async def test_two_requests_sent_at_once_under_one_id_keep_their_own_traces(
        otel_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two clients send one `x-request-id` at once (ours are easy to guess). Both meet
    the 429 together and fall back after the second has begun: each fallback carries its
    own client's context upstream, never the other's, and each request has its spans."""
    seen: list[dict[str, str]] = []
    both_throttled = asyncio.Event()
    throttled = 0

    async def completions(request: Request) -> Response:
        nonlocal throttled
        seen.append(dict(request.headers))
        if request.headers.get("authorization") == f"Bearer {THROTTLED}":
            throttled += 1
            if throttled == 2:
                both_throttled.set()
            await asyncio.wait_for(both_throttled.wait(), 10)
            return JSONResponse({"error": {"message": "slow down"}}, 429,
                                headers={"retry-after": "30"})
        return JSONResponse({"id": "c1", "object": "chat.completion", "created": 1,
                             "model": "m", "usage": USAGE, "choices": [{
                                 "index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "hello"}}]})

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with traced_gateway(monkeypatch, app) as (receiver, gw, http):
        async def call(n: int) -> httpx.Response:
            return await http.post("/v1/chat/completions", json={
                "model": "chat", "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-request-id": "shared-1",
                         "traceparent": f"00-{TRACE_ID[:-1]}{n}-{PARENT}-01",
                         "tracestate": f"who=client{n}"})

        answers = await asyncio.gather(call(1), call(2))
        assert [a.status_code for a in answers] == [200, 200]
        assert gw.gateway.tracing is not None
        assert await asyncio.to_thread(gw.gateway.tracing.exporter.flush)
        assert gw.gateway.request_ids.in_flight == 0
    ids = sorted(a.headers["x-request-id"] for a in answers)
    assert ids[1] == "shared-1" and ids[0].startswith(gw.gateway.request_ids.prefix + "-")
    # upstream, every call's trace context is its own client's, with its own tracestate
    assert sorted(h["traceparent"].split("-")[1][-1] for h in seen) == ["1", "1", "2", "2"]
    for headers in seen:
        n = headers["traceparent"].split("-")[1][-1]
        assert headers["tracestate"] == f"who=client{n}", headers
    spans = receiver.spans
    for n in (1, 2):
        trace_id = TRACE_ID[:-1] + str(n)
        (server,) = [s for s in spans if s.kind == "server" and s.trace_id == trace_id]
        assert server.trace_state == f"who=client{n}"
        attempts = [s for s in spans if s.kind == "client" and s.trace_id == trace_id]
        assert sorted(s.attributes["omniroute.provider"] for s in attempts) == [
            "first", "second"]
        assert {s.parent_span_id for s in attempts} == {server.span_id}


@pytest.mark.parametrize("environ", [
    {}, {"OTEL_SERVICE_NAME": "gw"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
])
def test_tracing_is_off_unless_an_endpoint_is_set_and_nothing_turns_it_off(
        environ: dict[str, str]) -> None:
    engine, _clock, _rec = make_engine()
    assert tracing_from_env(environ, engine) is None


def test_the_start_line_says_where_traces_go_without_credentials() -> None:
    from omniroute_tui.gateway.cli import _traced

    engine, _clock, _rec = make_engine()
    tracing = tracing_from_env(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:secret@otel.example:4318/"}, engine)
    assert tracing is not None
    try:
        assert _traced(tracing) == "traces to https://otel.example:4318/v1/traces (OTLP)"
    finally:
        tracing.shutdown(timeout_s=0)
    assert _traced(None).startswith("no traces")


def decoded(spans: list[bytes]) -> list[ReceivedSpan]:
    """The spans as a receiver has them."""
    return spans_of(ExportTraceServiceRequest.FromString(
        encode_export(spans, {"service.name": "t"}, ("omniroute_tui", "0"))))


class Kept:
    """An exporter that keeps the spans of what it is given."""

    def __init__(self) -> None:
        self.spans: list[bytes] = []
        self.threads: list[str] = []  # the threads spans were added from, then stopped on

    def add(self, make: Callable[[], Sequence[bytes]], spans: int = 1) -> None:
        made = list(make())
        assert len(made) == spans  # what the queue's bound counts is what is sent
        self.spans += made
        self.threads.append(threading.current_thread().name)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self.threads.append(threading.current_thread().name)


def test_a_request_never_ended_is_ended_abandoned_once_the_table_is_full() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept, ALWAYS_ON)  # type: ignore[arg-type]
    for n in range(MAX_OPEN_TRACES + 1):
        tracing.begin(f"r{n}", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    (ended,) = decoded(kept.spans)
    assert ended.attributes["omniroute.request_id"] == "r0"
    assert ended.attributes["omniroute.abandoned"] is True
    tracing.end("r0", 200)  # too late: nothing more, nothing raised
    tracing.shutdown()  # the rest end abandoned
    assert len(kept.spans) == MAX_OPEN_TRACES + 1


async def test_the_receiver_refuses_what_is_not_an_export() -> None:
    async with receiving() as receiver, httpx.AsyncClient(timeout=10) as http:
        url = f"{receiver.endpoint}/v1/traces"
        assert (await http.post(url, content=b"\xff" * 100)).status_code == 400
        assert (await http.post(url, content=b"\x1f\x8b junk",
                                headers={"content-encoding": "gzip"})).status_code == 400
        assert (await http.post(url, content=b"")).status_code == 200  # an empty export
        # a head that announces 17 MB is refused before any of the body is read
        reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
        writer.write(b"POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-length: "
                     + str(17 * 1024 * 1024).encode() + b"\r\n\r\n")
        assert (await reader.readline()).startswith(b"HTTP/1.1 413")
        writer.close()
    assert receiver.spans == []


@pytest.mark.parametrize(("sampler", "flags", "spans_expected"), [
    ("always_off", "01", 0),  # the gateway's sampler says no
    ("", "00", 0),  # parent-based (the default): the client's context is not sampled
    ("parentbased_always_on", "01", 2),
])
async def test_a_request_not_sampled_sends_no_span_and_says_so_upstream(
        otel_env: None, monkeypatch: pytest.MonkeyPatch, sampler: str, flags: str,
        spans_expected: int) -> None:
    if sampler:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    spans, upstream = await one_request(
        monkeypatch, [(b"traceparent", f"00-{TRACE_ID}-{PARENT}-{flags}".encode())])
    assert len(spans) == spans_expected
    version, trace_id, _span_id, sent_flags = upstream["traceparent"].split("-")
    assert (version, trace_id) == ("00", TRACE_ID)  # the client's trace goes on upstream
    assert sent_flags == ("01" if spans_expected else "00")


async def test_a_stream_cut_after_its_first_byte_ends_its_attempt_span_with_the_cut(
        otel_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client has its 200 and an error event; the trace says the attempt's stream was
    cut, and why, and the request's span ends when the stream does."""

    async def cut(model: str) -> AsyncIterator[bytes]:
        head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
                "choices": [{"index": 0, "delta": {"content": "hel"}, "finish_reason": None}]}
        yield f"data: {json.dumps(head)}\n\n".encode()
        raise ConnectionResetError("the upstream went away")

    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        return StreamingResponse(cut(body["model"]), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with traced_gateway(monkeypatch, app) as (receiver, gw, http):
        answer = await http.post("/v1/chat/completions", json={
            "model": "second/m", "stream": True,
            "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200
        assert b"hel" in answer.content and b'"error"' in answer.content
        assert gw.gateway.tracing is not None
        assert await asyncio.to_thread(gw.gateway.tracing.exporter.flush)
        (server,) = [s for s in receiver.spans if s.kind == "server"]
        (attempt,) = [s for s in receiver.spans if s.kind == "client"]
    assert server.attributes["http.response.status_code"] == 200
    assert attempt.attributes["omniroute.outcome"] == "stream_cut"
    assert attempt.status == "error" and "omniroute.stream_cut" in attempt.attributes
    assert attempt.end_ns <= server.end_ns


def _one_request(tracing: RequestTracing, bus: Any, request_id: str) -> None:
    """A request that met a 429 (deduplicated, opening the breaker), skipped and waited,
    then was served by its second attempt."""
    tracing.begin(request_id, "POST", "/v1/chat/completions",
                  [(b"traceparent", f"00-{TRACE_ID}-{PARENT}-01".encode()),
                   (b"tracestate", b"vendor=abc")], Endpoint.CHAT)
    for event in (
        AttemptEvent(1, request_id, 1, "alpha", "a", "m", True, why="weighted: 3 of 4"),
        ResultEvent(2, request_id, 1, "alpha", "a", "m", 429, FailureKind.RATE_LIMITED, 1),
        DedupEvent(2, "alpha", "a", FailureKind.RATE_LIMITED, DedupWindow.CONNECTION),
        BreakerEvent(2, "alpha", BreakerState.CLOSED, BreakerState.OPEN,
                     BreakerReason.THRESHOLD, 3, None),
        SkipEvent(3, request_id, "alpha", "m", SkipReason.CIRCUIT_OPEN, 30_000),
        WaitEvent(4, request_id, "start", 10, "beta/m", SkipReason.ALL_COOLING),
        AttemptEvent(14, request_id, 2, "beta", "x", "m", False),
        ResultEvent(15, request_id, 2, "beta", "x", "m", 200, None, 1),
        ResponseEvent(15, request_id, 200, 2, 15, 10, "beta/x/m"),
    ):
        bus.emit(event)
    trace = tracing.trace(request_id)
    assert trace is not None
    trace.route = "chat"
    tracing.end(request_id, 200, Usage(11, 7))


def test_the_spans_written_from_a_requests_record_hold_every_attribute_and_event() -> None:
    """What a request recorded becomes its spans when it ends, their shared parts encoded
    once: decoded, each span says all it said when each was written whole. The same
    request twice: the second is written from what the first encoded."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept, ALWAYS_ON)  # type: ignore[arg-type]
    _one_request(tracing, engine.bus, "r1")
    _one_request(tracing, engine.bus, "r2")
    tracing.begin("r3", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    engine.bus.emit(AttemptEvent(20, "r3", 1, "beta", "x", "m", False))
    tracing.end("r3", 503)  # its attempt never had a result: a stream its client left
    tracing.begin("r4", "POST", "/v1/embeddings", [], Endpoint.EMBEDDINGS)
    tracing.shutdown()  # never answered: abandoned
    received = decoded(kept.spans)
    by_request = {}
    for span in received:
        if span.kind == "server":
            by_request[span.attributes["omniroute.request_id"]] = span
    for request_id in ("r1", "r2"):
        server = by_request[request_id]
        assert (server.name, server.parent_span_id, server.trace_state, server.status) == (
            "POST /v1/chat/completions", PARENT, "vendor=abc", "unset")
        assert server.attributes == {
            "http.request.method": "POST", "url.path": "/v1/chat/completions",
            "omniroute.request_id": request_id, "omniroute.route": "chat",
            "omniroute.attempts": 2, "omniroute.waited_ms": 10,
            "omniroute.served_by": "beta/x/m", "http.response.status_code": 200,
            "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7}
        assert server.events == [
            ("skip", {"omniroute.provider": "alpha", "gen_ai.request.model": "m",
                      "omniroute.reason": "circuit_open", "omniroute.retry_after_ms": 30_000}),
            ("wait start", {"omniroute.delay_ms": 10, "omniroute.target": "beta/m",
                            "omniroute.reason": "all_cooling"})]
        first, second = sorted(
            (s for s in received if s.parent_span_id == server.span_id),
            key=lambda s: s.attributes["omniroute.attempt"])
        assert (first.name, first.kind, first.status) == ("chat m", "client", "error")
        assert first.attributes == {
            "gen_ai.request.model": "m", "omniroute.provider": "alpha",
            "omniroute.connection": "a", "omniroute.attempt": 1, "omniroute.probe": True,
            "omniroute.why": "weighted: 3 of 4", "omniroute.breaker.before": "CLOSED",
            "omniroute.breaker.after": "OPEN", "http.response.status_code": 429,
            "omniroute.outcome": "rate_limited", "error.type": "rate_limited"}
        assert first.events == [
            ("dedup", {"omniroute.connection": "a", "omniroute.kind": "rate_limited",
                       "omniroute.window": "connection"}),
            ("breaker", {"omniroute.from": "CLOSED", "omniroute.to": "OPEN",
                         "omniroute.reason": "threshold"})]
        assert (second.status, second.events) == ("unset", [])
        assert second.attributes == {
            "gen_ai.request.model": "m", "omniroute.provider": "beta",
            "omniroute.connection": "x", "omniroute.attempt": 2,
            "omniroute.breaker.before": "CLOSED", "omniroute.breaker.after": "CLOSED",
            "http.response.status_code": 200, "omniroute.outcome": "ok",
            "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7}
        assert server.start_ns <= first.start_ns <= first.end_ns <= second.start_ns
        assert second.end_ns == server.end_ns
    cut = by_request["r3"]
    assert cut.status == "error" and cut.attributes["error.type"] == "503"
    (cancelled,) = [s for s in received if s.parent_span_id == cut.span_id]
    assert cancelled.attributes["omniroute.outcome"] == "cancelled"
    abandoned = by_request["r4"]
    assert abandoned.attributes["omniroute.abandoned"] is True
    assert "http.response.status_code" not in abandoned.attributes
    assert len(received) == 3 + 3 + 2 + 1


def test_what_spans_share_is_kept_within_its_bound_whatever_the_clients_send() -> None:
    """A client choosing a new model name, route or token count each time (provider/model
    passes through) churns the kept encodings; they stay within their bound."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    from omniroute_tui.tracing import request_spans

    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept, ALWAYS_ON)  # type: ignore[arg-type]
    for n in range(request_spans._SHARED_MAX + 50):
        request_id = f"r{n}"
        tracing.begin(request_id, "POST", "/v1/chat/completions", [], Endpoint.CHAT)
        engine.bus.emit(AttemptEvent(1, request_id, 1, "beta", "x", f"m{n}", False))
        engine.bus.emit(ResultEvent(2, request_id, 1, "beta", "x", f"m{n}", 200, None, 1))
        trace = tracing.trace(request_id)
        assert trace is not None
        trace.route, trace.usage = f"beta/m{n}", Usage(n, n)
        tracing.end(request_id, 200)
    tracing.shutdown()
    for cache in (request_spans._ATTEMPTS, request_spans._REQUESTS):
        assert 0 < len(cache) <= request_spans._SHARED_MAX
    last = decoded(kept.spans[-2:])
    assert {s.attributes["gen_ai.request.model"] for s in last if s.kind == "client"} == {
        f"m{request_spans._SHARED_MAX + 49}"}


async def test_a_lone_surrogate_from_a_client_costs_no_other_requests_spans() -> None:
    """`{"model": "beta/\\ud800"}` is JSON: the text reaches skip and wait events, written
    only when the batch is. It is written as `?`, and every span of the batch is sent."""
    engine, _clock, _rec = make_engine()
    async with receiving() as receiver:
        exporter = SpanExporter(ExportSettings(f"{receiver.endpoint}/v1/traces",
                                               schedule_delay_s=3600), {}, ("s", "0"))
        tracing = RequestTracing(engine, exporter)
        emit = engine.bus.emit
        tracing.begin("ok", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
        emit(AttemptEvent(1, "ok", 1, "beta", "x", "m", False))
        emit(ResultEvent(2, "ok", 1, "beta", "x", "m", 200, None, 1))
        tracing.end("ok", 200)
        tracing.begin("evil", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
        emit(SkipEvent(3, "evil", "beta", "\ud800", SkipReason.ALL_COOLING, 1000))
        emit(WaitEvent(3, "evil", "start", 1000, "beta/\ud800", SkipReason.ALL_COOLING))
        emit(AttemptEvent(4, "evil", 1, "beta", "x", "\ud800", False))
        tracing.end("evil", 499)  # its client left while its attempt ran
        assert await asyncio.to_thread(exporter.flush, 5)
        await asyncio.to_thread(tracing.shutdown, 5)
    assert (exporter.exported, exporter.failed, exporter.dropped) == (4, 0, 0)
    evil = next(s for s in receiver.spans if s.attributes.get("omniroute.request_id") == "evil")
    assert evil.events[0][1]["gen_ai.request.model"] == "?"
    assert any(s.name == "chat ?" for s in receiver.spans)


async def test_the_gateways_exit_ends_open_traces_on_the_loops_thread() -> None:
    """A request still going at exit ends its trace on the loop: the exit ends the open
    traces there too (no two threads on one table), and waits for the export off it."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept, ALWAYS_ON)  # type: ignore[arg-type]
    for n in range(3):
        tracing.begin(f"r{n}", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    await tracing.aclose(timeout_s=5)
    loop = threading.current_thread().name
    assert kept.threads[:3] == [loop] * 3 and kept.threads[3] != loop
    tracing.end("r1", 200)  # the request ends after: nothing more, nothing raised
    assert len(decoded(kept.spans)) == 3


async def test_a_bug_in_tracing_frees_the_requests_id_and_ends_its_record(
        otel_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing raising as a request begins (a 500) or as a stream ends: the request's id
    is free again and its record ended, whatever the bug."""
    seen: list[dict[str, str]] = []
    async with traced_gateway(monkeypatch, upstream_app(seen)) as (receiver, gw, http):
        tracing = gw.gateway.tracing
        assert tracing is not None

        def broken(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("a bug of ours")

        body = {"model": "second/m", "messages": [{"role": "user", "content": "hi"}]}
        with monkeypatch.context() as patched:
            patched.setattr(tracing, "begin", broken)
            answer = await http.post("/v1/chat/completions", json=body,
                                     headers={"x-request-id": "mine-1"})
        assert answer.status_code == 500
        with monkeypatch.context() as patched:
            patched.setattr(tracing, "end", broken)
            async with http.stream("POST", "/v1/chat/completions",
                                   json={**body, "stream": True},
                                   headers={"x-request-id": "mine-2"}) as streamed:
                assert streamed.status_code == 200
                await streamed.aread()
        await eventually(lambda: not gw.gateway.records._open, what="records ended")
        assert gw.gateway.request_ids.in_flight == 0
        answer = await http.post("/v1/chat/completions", json=body,
                                 headers={"x-request-id": "mine-1"})
        assert answer.headers["x-request-id"] == "mine-1"  # the client's again


class _Odd:
    def __str__(self) -> str:
        return "odd"


def _sampler(attributes: dict[Any, Any] | None, fails: bool = False,
             state: Any = None) -> Any:
    """A sampler of the operator's (OTEL_TRACES_SAMPLER names a plugin): it samples
    every request and adds `attributes` to its span (and `state` as its trace state), or
    raises."""
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    class Plugin(Sampler):
        def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
            if fails:
                raise RuntimeError("the plugin's bug")
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, state)

        def get_description(self) -> str:
            return "plugin"

    return Plugin()


def test_every_attribute_a_request_span_carries_is_one_a_sampler_may_not_name() -> None:
    """A sampler's attribute of one of the request span's own names is left out: the
    list of those names holds every one a request span is written with (one attempt and
    its answer, with tokens and a wait; the general path; a 5xx; an abandoned trace)."""
    from omniroute_tui.tracing.request_spans import _SERVER_KEYS

    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept)  # type: ignore[arg-type]
    emit = engine.bus.emit
    _one_request(tracing, engine.bus, "general")
    for request_id, status in (("ok", 200), ("failed", 503)):
        tracing.begin(request_id, "POST", "/v1/chat/completions",
                      [(b"traceparent", f"00-{TRACE_ID}-{PARENT}-01".encode())], Endpoint.CHAT)
        emit(AttemptEvent(1, request_id, 1, "beta", "x", "m", False))
        emit(ResultEvent(2, request_id, 1, "beta", "x", "m", status, None, 1))
        emit(ResponseEvent(2, request_id, status, 1, 1, 5, "beta/x/m"))
        trace = tracing.trace(request_id)
        assert trace is not None
        trace.route = "chat"
        tracing.end(request_id, status, Usage(3, 4))
    tracing.begin("abandoned", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    tracing.shutdown()
    keys = {key for span in decoded(kept.spans) if span.kind == "server"
            for key in span.attributes}
    assert "error.type" in keys and "omniroute.abandoned" in keys
    assert keys <= _SERVER_KEYS, keys - _SERVER_KEYS


def test_a_samplers_attributes_are_cleaned_into_what_a_span_holds(
        caplog: pytest.LogCaptureFixture) -> None:
    """A sequence, an int past 64 bits, an object, a key not a text: each written as a
    receiver reads it, the other spans and attributes whole, nothing logged."""
    engine, _clock, _rec = make_engine()
    kept = Kept()
    class Loud(str):
        def __str__(self) -> Loud:  # type: ignore[override]
            return self

        def encode(self, *args: Any) -> bytes:  # type: ignore[override]
            raise TypeError("not bytes")

    odd = {"seq": [1, 2], "big": 2**64, "neg0": -0.0, 3: "three", "obj": _Odd(),
           Loud("loud"): Loud("quiet"), "omniroute.request_id": "spoofed",
           "http.response.status_code": 999}
    tracing = RequestTracing(engine, kept, _sampler(odd))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "omniroute.tracing"):
        _one_request(tracing, engine.bus, "r1")
    received = decoded(kept.spans)
    assert len(received) == 3
    (server,) = [s for s in received if s.kind == "server"]
    assert {k: server.attributes[k] for k in ("seq", "big", "3", "obj")} == {
        "seq": "[1, 2]", "big": str(2**64), "3": "three", "obj": "odd"}
    assert math.copysign(1, server.attributes["neg0"]) == -1
    assert server.attributes["loud"] == "quiet"
    # a span's keys are unique: ours win over the sampler's of the same name
    assert server.attributes["omniroute.request_id"] == "r1"
    assert server.attributes["http.response.status_code"] == 200
    (raw,) = [span for span in ExportTraceServiceRequest.FromString(encode_export(
        kept.spans, {}, ("t", "0"))).resource_spans[0].scope_spans[0].spans
        if span.kind == 2]
    keys = [attribute.key for attribute in raw.attributes]
    assert len(keys) == len(set(keys))
    assert caplog.records == []


class _Unwritable(TraceState):
    def to_header(self) -> str:
        raise ValueError("a trace state that cannot be written")


@pytest.mark.parametrize("state", [
    "vendor=x", 42, object(), "", {}, _Unwritable([("a", "b")])],
    ids=["text", "int", "object", "empty-text", "empty-dict", "unwritable"])
def test_a_samplers_trace_state_that_is_not_one_costs_the_trace_alone(
        state: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The request is served untraced; the client's trace state goes upstream."""
    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept, _sampler(None, state=state))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "omniroute.tracing"):
        _one_request(tracing, engine.bus, "r1")
        tracing.begin("r2", "POST", "/v1/chat/completions",
                      [(b"traceparent", f"00-{TRACE_ID}-{PARENT}-01".encode()),
                       (b"tracestate", b"vendor=abc")], Endpoint.CHAT)
        sent = tracing.outbound("r2")
    assert kept.spans == [] and tracing.sampler_failures == 2
    assert sent["tracestate"] == "vendor=abc" and sent["traceparent"].endswith("-00")
    assert [r.levelname for r in caplog.records] == ["ERROR"]


def test_a_sampler_that_raises_costs_the_request_its_trace_alone(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its first traceback is logged, then a line at the 10th and 100th failure; the
    requests go on untraced, and their trace context upstream says not sampled."""
    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept, _sampler(None, fails=True))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "omniroute.tracing"):
        for n in range(100):
            tracing.begin(f"r{n}", "POST", "/v1/chat/completions",
                          [(b"traceparent", f"00-{TRACE_ID}-{PARENT}-01".encode())],
                          Endpoint.CHAT)
            sent = tracing.outbound(f"r{n}")
            tracing.end(f"r{n}", 200)
    assert kept.spans == [] and tracing.sampler_failures == 100
    assert sent["traceparent"].startswith(f"00-{TRACE_ID}-") and sent["traceparent"][-2:] == "00"
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records] == [
        ("ERROR", True), ("WARNING", False), ("WARNING", False)]
    assert "failed 100 times" in caplog.records[-1].getMessage()


def test_a_result_not_of_this_trace_moves_none_of_its_attempts() -> None:
    """Two requests begun under one id (the gateway gives each its own; a caller of the
    class may not): the first's result and the breaker move it caused on `alpha` are
    not the second's attempt on `beta`."""
    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept)  # type: ignore[arg-type]
    emit = engine.bus.emit
    tracing.begin("X", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    emit(AttemptEvent(1, "X", 1, "alpha", "a", "m", False))
    tracing.begin("X", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    emit(AttemptEvent(2, "X", 1, "beta", "x", "m", False))
    emit(ResultEvent(3, "X", 1, "beta", "x", "m", 500, FailureKind.SERVER_ERROR, 1))
    emit(ResponseEvent(3, "X", 500, 1, 1, 0, None))
    emit(ResultEvent(4, "X", 1, "alpha", "a", "m", 500, FailureKind.SERVER_ERROR, 1))
    emit(BreakerEvent(4, "alpha", BreakerState.CLOSED, BreakerState.OPEN,
                      BreakerReason.THRESHOLD, 3, None))
    tracing.end("X", 500)
    (attempt,) = [s for s in decoded(kept.spans) if s.kind == "client"]
    assert attempt.attributes["omniroute.provider"] == "beta"
    assert attempt.attributes["omniroute.breaker.after"] == "CLOSED"
    assert attempt.events == []


def test_an_attempt_begun_again_under_its_number_is_still_a_span() -> None:
    """Each attempt the trace counted is a span (the queue's bound counts them): one whose
    number came again before its result ends cancelled."""
    engine, _clock, _rec = make_engine()
    kept = Kept()  # asserts the spans made are the spans counted
    tracing = RequestTracing(engine, kept)  # type: ignore[arg-type]
    tracing.begin("X", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    engine.bus.emit(AttemptEvent(1, "X", 1, "alpha", "a", "m", False))
    engine.bus.emit(AttemptEvent(2, "X", 1, "beta", "x", "m", False))
    engine.bus.emit(ResultEvent(3, "X", 1, "beta", "x", "m", 200, None, 1))
    tracing.end("X", 200)
    attempts = [s for s in decoded(kept.spans) if s.kind == "client"]
    assert sorted((s.attributes["omniroute.provider"], s.attributes["omniroute.outcome"])
                  for s in attempts) == [("alpha", "cancelled"), ("beta", "ok")]


def test_a_trace_queued_takes_no_later_breaker_move() -> None:
    """A trace ended (or evicted as abandoned) while its attempt's result was the one
    being recorded: a later breaker move of that provider, an operator's say, is not
    added to its spans, written when it ended."""
    engine, _clock, _rec = make_engine()
    kept = Kept()
    tracing = RequestTracing(engine, kept)  # type: ignore[arg-type]
    tracing.begin("r", "POST", "/v1/chat/completions", [], Endpoint.CHAT)
    engine.bus.emit(AttemptEvent(1, "r", 1, "alpha", "a", "m", False))
    engine.bus.emit(ResultEvent(2, "r", 1, "alpha", "a", "m", 200, None, 1))
    tracing.end("r", 200)
    engine.bus.emit(BreakerEvent(9, "alpha", BreakerState.CLOSED, BreakerState.OPEN,
                                 BreakerReason.THRESHOLD, 3, None))
    (attempt,) = [s for s in decoded(kept.spans) if s.kind == "client"]
    assert attempt.events == [] and attempt.attributes["omniroute.breaker.after"] == "CLOSED"


_texts = st.text(max_size=12)


@settings(max_examples=300, deadline=None)
@given(model=_texts, provider=_texts, connection=_texts, n=st.integers(1, 5),
       probe=st.booleans(), why=st.none() | _texts, before=st.sampled_from(BreakerState),
       upstream=st.integers(100, 599), kind=st.none() | st.sampled_from(FailureKind),
       cut=st.none() | st.sampled_from(StreamCut), status=st.none() | st.integers(100, 599),
       waited_ms=st.integers(0, 10**6),
       usage=st.none() | st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)),
       extra=st.none() | st.dictionaries(_texts, _texts | st.integers(-2**63, 2**63 - 1),
                                         max_size=2),
       parent=st.integers(0, 2**64 - 1), state=st.sampled_from(["", "vendor=abc"]),
       served_by=st.none() | _texts, endpoint=st.sampled_from(Endpoint))
def test_a_request_of_one_attempt_is_written_as_its_spans_would_be(
        model: str, provider: str, connection: str, n: int, probe: bool, why: str | None,
        before: BreakerState, upstream: int, kind: FailureKind | None, cut: StreamCut | None,
        status: int | None, waited_ms: int, usage: tuple[int, int] | None,
        extra: dict[str, str | int] | None, parent: int, state: str, served_by: str | None,
        endpoint: Endpoint) -> None:
    """Most requests are one attempt and its answer, written straight to their bytes:
    byte for byte what the spans made from the same record (`records`) are."""
    trace = RequestTrace(
        "r1", (2**100 + 7).to_bytes(16), (2**60 + 3).to_bytes(8),
        parent.to_bytes(8) if parent else b"", "POST", "/v1/chat/completions", 1_000,
        endpoint, state, True,
        extra, [(2_000, AttemptEvent(1, "r1", n, provider, connection, model, probe,
                                     why=why), (2**62 + 1).to_bytes(8), before),
                (3_000, ResultEvent(2, "r1", n, provider, connection, model, upstream, kind,
                                    1, cut), b"", None)],
        route="chat", response=ResponseEvent(3, "r1", upstream, 1, 2, waited_ms, served_by),
        usage=None if usage is None else Usage(*usage), status=status, end_ns=4_000)
    assert trace.spans() == [encode_span(span) for span in trace.records()]
