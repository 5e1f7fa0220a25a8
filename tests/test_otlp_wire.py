"""The gateway's OTLP encoding (tracing/otlp_wire.py) against the OTLP exporter's own:
any span, decoded with the `opentelemetry-proto` messages, is the message the exporter's
encoder builds of the same span; and the exporter's thread under an endpoint that fails,
refuses or is away (nothing raised, every span counted)."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from omniroute_tui.tracing.exporter import ExportSettings, SettingsError, SpanExporter
from omniroute_tui.tracing.otlp_wire import (
    clean_attributes,
    count_attribute,
    encode_attribute,
    encode_attributes,
    encode_export,
    encode_shared,
    encode_span,
    encode_span_parts,
    unique_text_attribute,
)
from omniroute_tui.tracing.spans import CLIENT, ERROR, SERVER, Attributes, SpanRecord
from simulator.otlp_receiver import receiving

from .gateway_helpers import serving

SCOPE = ("omniroute_tui", "1.2.3")
values = st.one_of(st.text(max_size=40), st.integers(-(2**63), 2**63 - 1), st.booleans(),
                   st.floats(allow_nan=False))
attributes = st.dictionaries(st.text(min_size=1, max_size=20), values, max_size=8)
ids = st.integers(1, 2**64 - 1)


@st.composite
def spans(draw: st.DrawFn) -> SpanRecord:
    parent = draw(st.one_of(st.none(), ids))
    start = draw(st.integers(0, 2**63))
    events = draw(st.lists(st.tuples(st.integers(0, 2**63), st.text(max_size=20), attributes),
                           max_size=3))
    status = draw(st.sampled_from([(0, ""), (ERROR, ""), (ERROR, "rate_limited")]))
    return SpanRecord(
        draw(st.integers(1, 2**128 - 1)).to_bytes(16, "big"), draw(ids).to_bytes(8, "big"),
        parent.to_bytes(8, "big") if parent else b"", bool(parent) and draw(st.booleans()),
        draw(st.sampled_from(["", "vendor=abc", "a=1,b=2"])), draw(st.text(max_size=30)),
        draw(st.sampled_from([SERVER, CLIENT])), start, draw(attributes),
        start + draw(st.integers(0, 10**12)), events or None, *status)


def the_exporters(span: SpanRecord, resource: Resource) -> ReadableSpan:
    """The same span as the SDK holds it."""
    trace_id = int.from_bytes(span.trace_id, "big")
    state = TraceState.from_header([span.trace_state]) if span.trace_state else TraceState()
    context = SpanContext(trace_id, int.from_bytes(span.span_id, "big"), False,
                          TraceFlags(1), state)
    parent = (SpanContext(trace_id, int.from_bytes(span.parent_span_id, "big"),
                          span.parent_remote, TraceFlags(1))
              if span.parent_span_id else None)
    code = StatusCode.ERROR if span.status == ERROR else StatusCode.UNSET
    return ReadableSpan(
        span.name, context, parent, resource, span.attributes,
        [Event(name, attrs, at) for at, name, attrs in span.events or ()],
        kind=SpanKind.SERVER if span.kind == SERVER else SpanKind.CLIENT,
        status=Status(code, span.status_message or None), start_time=span.start_ns,
        end_time=span.end_ns, instrumentation_scope=InstrumentationScope(*SCOPE))


@settings(max_examples=300, deadline=None)
@given(st.lists(spans(), min_size=1, max_size=5), attributes)
def test_any_spans_are_the_message_the_exporters_encoder_builds(
        records: list[SpanRecord], resource_attributes: dict[str, object]) -> None:
    resource = Resource(resource_attributes)  # type: ignore[arg-type]
    ours = ExportTraceServiceRequest.FromString(encode_export(
        map(encode_span, records), dict(resource.attributes), SCOPE))  # type: ignore[arg-type]
    theirs = encode_spans([the_exporters(span, resource) for span in records])
    assert ours == theirs


@settings(max_examples=300, deadline=None)
@given(st.lists(spans(), min_size=1, max_size=5), st.data())
def test_a_span_written_from_its_encoded_part_is_the_same_message(
        records: list[SpanRecord], data: st.DataObject) -> None:
    """The gateway's spans carry their shared part encoded (`encode_shared`) and some or
    all of their attributes encoded after it; written so, each is the span it was."""
    whole = ExportTraceServiceRequest.FromString(encode_export(map(encode_span, records), {},
                                                               SCOPE))
    shared = []
    for span in records:
        names = list(span.attributes)
        cut = data.draw(st.integers(0, len(names)))  # the first `cut` are the shared ones
        alone = data.draw(st.integers(cut, len(names)))  # then encoded, alone; the rest kept
        encoded = encode_shared(span.name, span.kind, {k: span.attributes[k] for k in
                                                       names[:cut]},
                                span.status, span.status_message, span.parent_remote)
        encoded += encode_attributes({k: span.attributes[k] for k in names[cut:alone]})
        shared.append(replace(span, encoded=encoded,
                              attributes={k: span.attributes[k] for k in names[alone:]}))
    assert ExportTraceServiceRequest.FromString(encode_export(
        map(encode_span, shared), {}, SCOPE)) == whole


@pytest.mark.parametrize(("environ", "problem"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://x:4317"}, "not an http(s) URL"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:port"}, "Port could not be cast"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http:///v1/traces"}, "not an http(s) URL"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_BSP_SCHEDULE_DELAY": "soon"},
     "OTEL_BSP_SCHEDULE_DELAY: not a whole number"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_BSP_MAX_QUEUE_SIZE": "0"},
     "OTEL_BSP_MAX_QUEUE_SIZE: at least 1"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
     "gzip or none"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"},
     "name=value pairs"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://x",
      "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, "no file '/nonexistent"),
])
def test_a_variable_that_cannot_be_used_is_named(environ: dict[str, str], problem: str
                                                 ) -> None:
    with pytest.raises(SettingsError, match=re.escape(problem)):
        ExportSettings.from_env(environ)


def test_the_variables_as_the_specification_reads_them() -> None:
    settings_ = ExportSettings.from_env({
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example:4318/",
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dcret, X-Team=sre",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9000"})
    assert settings_.endpoint == "https://otel.example:4318/v1/traces"
    assert settings_.headers == {"api-key": "s=cret", "x-team": "sre"}
    assert settings_.timeout_s == 2.5 and settings_.gzip
    assert settings_.max_batch == settings_.max_queue == 2048  # a batch is at most the queue
    assert ExportSettings.from_env({
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored"}).endpoint == "http://c:4318/custom"


def record(n: int) -> SpanRecord:
    return SpanRecord(b"\x01" * 16, n.to_bytes(8, "big"), b"", False, "", f"s{n}", SERVER,
                      1, {"n": n}, 2)


def span(n: int) -> Callable[[], list[bytes]]:
    """What makes one span, as the exporter is given it."""
    return lambda: [encode_span(record(n))]


def answering(status: int, seen: list[bytes]) -> Starlette:
    async def traces(request: Request) -> Response:
        seen.append(await request.body())
        return Response(b"", status)

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


@pytest.mark.parametrize(("status", "tries"), [(400, 1), (503, 3)])
async def test_a_refused_batch_is_counted_logged_and_retried_only_when_it_may_pass(
        status: int, tries: int, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[bytes] = []
    async with serving(answering(status, seen)) as url:
        exporter = SpanExporter(ExportSettings(url.removesuffix("/v1") + "/v1/traces"),
                                {}, SCOPE, backoff_s=(0, 0))
        for n in range(5):
            exporter.add(span(n))
        with caplog.at_level(logging.WARNING, "omniroute.tracing"):
            assert await asyncio.to_thread(exporter.flush)
        await asyncio.to_thread(exporter.shutdown)
    assert len(seen) == tries
    assert (exporter.exported, exporter.failed, exporter.dropped) == (0, 5, 0)
    assert f"5 span(s) not sent to {url.removesuffix('/v1')}/v1/traces: HTTP {status}" in (
        caplog.text)


async def test_an_endpoint_away_costs_nothing_but_the_spans(
        caplog: pytest.LogCaptureFixture) -> None:
    exporter = SpanExporter(ExportSettings("http://127.0.0.1:9/v1/traces", timeout_s=1,
                                           max_queue=3), {}, SCOPE, backoff_s=(0, 0))
    for n in range(5):
        exporter.add(span(n))  # never blocks, never raises
    with caplog.at_level(logging.WARNING, "omniroute.tracing"):
        assert await asyncio.to_thread(exporter.flush)
        await asyncio.to_thread(exporter.shutdown)
    assert (exporter.exported, exporter.failed, exporter.dropped) == (0, 3, 2)
    assert "ConnectionRefusedError" in caplog.text and "2 span(s) dropped" in caplog.text
    assert not exporter.alive


async def test_an_https_endpoint_that_does_not_speak_tls_fails_the_batch_not_the_thread(
        ) -> None:
    """The TLS path, against a plain-HTTP receiver: the handshake fails, the batch is
    counted, the thread goes on."""
    async with receiving() as receiver:
        exporter = SpanExporter(ExportSettings(
            f"https://127.0.0.1:{receiver.port}/v1/traces", timeout_s=2), {}, SCOPE,
            backoff_s=(0, 0))
        exporter.add(span(1))
        assert await asyncio.to_thread(exporter.flush)
        assert exporter.alive
        await asyncio.to_thread(exporter.shutdown)
    assert (exporter.exported, exporter.failed) == (0, 1)
    assert receiver.spans == []


async def test_spans_arrive_gzipped_in_batches_of_the_configured_size() -> None:
    async with receiving() as receiver:
        exporter = SpanExporter(ExportSettings(f"{receiver.endpoint}/v1/traces", gzip=True,
                                               max_batch=2), {"service.name": "t"}, SCOPE)
        for n in range(5):
            exporter.add(span(n))
        assert await asyncio.to_thread(exporter.flush)
        await asyncio.to_thread(exporter.shutdown)
    assert sorted(span.name for span in receiver.spans) == [f"s{n}" for n in range(5)]
    assert exporter.exported == 5
    assert receiver.spans[0].resource == {"service.name": "t"}


def broken() -> list[bytes]:
    """A request's spans that cannot be made (a bug of ours)."""
    raise KeyError("a step of a kind nobody wrote")


def several(first: int) -> Callable[[], list[bytes]]:
    """What makes a request's three spans."""
    return lambda: [encode_span(record(first + n)) for n in range(3)]


async def test_a_record_whose_spans_cannot_be_made_is_counted_logged_once_and_passed(
        caplog: pytest.LogCaptureFixture) -> None:
    """The export thread makes each request's spans: one that raises costs that request's
    spans alone (counted failed, its traceback logged the first time), not the batch, not
    the thread."""
    async with receiving() as receiver:
        exporter = SpanExporter(ExportSettings(f"{receiver.endpoint}/v1/traces",
                                               max_batch=4), {}, SCOPE)
        with caplog.at_level(logging.WARNING, "omniroute.tracing"):
            exporter.add(several(0), 3)
            exporter.add(broken, 2)
            exporter.add(several(3), 3)
            exporter.add(broken, 2)
            assert await asyncio.to_thread(exporter.flush)
            assert exporter.alive
            await asyncio.to_thread(exporter.shutdown)
    assert sorted(span.name for span in receiver.spans) == [f"s{n}" for n in range(6)]
    assert (exporter.exported, exporter.failed, exporter.dropped) == (6, 4, 0)
    assert caplog.text.count("Traceback") == 1  # the first; the second a line
    assert "making the spans of a request failed: 2 span(s) not sent" in caplog.text
    assert "making the spans of a request failed again: 2 span(s)" in caplog.text
    assert "KeyError" in caplog.text


async def test_a_batch_that_cannot_be_written_is_counted_and_the_next_one_sent(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in writing one batch costs that batch (counted failed), not the thread, the
    batches after it or `flush`."""
    where = "omniroute_tui.tracing.exporter.encode_export"

    def fails_once(batch: list[bytes], *args: object) -> bytes:
        monkeypatch.setattr(where, encode_export)
        raise ValueError("a span nobody can write")

    monkeypatch.setattr(where, fails_once)
    async with receiving() as receiver:
        exporter = SpanExporter(ExportSettings(f"{receiver.endpoint}/v1/traces",
                                               max_batch=2), {}, SCOPE)
        with caplog.at_level(logging.WARNING, "omniroute.tracing"):
            for n in range(4):
                exporter.add(span(n))
            assert await asyncio.to_thread(exporter.flush)
            assert exporter.alive
            await asyncio.to_thread(exporter.shutdown)
    assert (exporter.exported, exporter.failed) == (2, 2)
    assert sorted(span.name for span in receiver.spans) == ["s2", "s3"]
    assert "writing a batch of spans failed: 2 span(s) not sent" in caplog.text


def test_the_queue_bound_counts_spans_not_requests() -> None:
    exporter = SpanExporter(ExportSettings("http://127.0.0.1:9/v1/traces", max_queue=5,
                                           schedule_delay_s=3600), {}, SCOPE)
    exporter.add(several(0), 3)
    exporter.add(several(3), 3)  # 6 > 5: its three spans are dropped, the first kept
    exporter.add(span(9))
    exporter.add(span(10))
    exporter.add(span(11))  # the queue holds 5 spans
    assert exporter.dropped == 4
    exporter.shutdown(timeout_s=5)


@pytest.mark.parametrize("parent", [b"", b"\x03" * 8])
@pytest.mark.parametrize("state", ["", "vendor=abc"])
def test_a_span_written_from_its_parts_is_the_span_whatever_its_length(
        parent: bytes, state: str) -> None:
    """A span's head is written in one piece when its length takes two bytes: each
    length where that starts and ends, and past them, is the span written whole."""
    for size in [*range(0, 200), *range(16_200, 16_400), 70_000]:
        attributes: Attributes = {"k": "v" * size}
        whole = encode_span(SpanRecord(b"\x01" * 16, b"\x02" * 8, parent, False, state, "n",
                                       SERVER, 5, attributes, 9))
        parts = encode_span_parts(b"\x01" * 16, b"\x02" * 8, parent, state, 5, 9,
                                  encode_shared("n", SERVER, attributes))
        assert (ExportTraceServiceRequest.FromString(encode_export([parts], {}, SCOPE))
                == ExportTraceServiceRequest.FromString(encode_export([whole], {}, SCOPE)))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.sampled_from(
    ["\ud800", "id-\udfff-1", *("x" * n for n in range(95, 130))]))
def test_a_unique_text_is_written_as_any_attribute_is(value: str) -> None:
    """A request's id, written in a few steps (`unique_text_attribute`), is the attribute
    `encode_attribute` writes, short or long, a lone surrogate included."""
    write = unique_text_attribute("omniroute.test_id")
    assert write(value) == encode_attribute("omniroute.test_id", value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, 300), st.integers(-(2**64), 2**65), st.booleans(),
                 st.floats(),
                 st.sampled_from([0x7F, 0x80, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000, 2**63 - 1,
                                  2**63, -1])))
def test_a_count_is_written_as_any_attribute_is(value: int | float) -> None:
    """`count_attribute` writes a count in a few steps, as `encode_attribute` writes it:
    at each varint's length, negative and past 64 bits included (and a bool or a float,
    which no count is, as any attribute)."""
    assert count_attribute("omniroute.test_count")(value) == encode_attribute(
        "omniroute.test_count", value)


def test_spans_added_as_the_exporter_stops_are_sent_not_lost() -> None:
    """The last requests' spans (tracing's shutdown ends the open traces) can be added
    while the export thread is between its last look at the queue and its stop: it
    sends them before it stops, and every span is counted."""
    drained, go = threading.Event(), threading.Event()

    class Held(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            return 200

        def _send_queued(self, part: bool) -> None:
            super()._send_queued(part)
            if not go.is_set():  # the thread pauses just after a round found nothing
                drained.set()
                go.wait(10)

    exporter = Held(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=0.01),
                    {}, SCOPE)
    assert drained.wait(10)
    for n in range(3):
        exporter.add(span(n))
    exporter._stopping = True  # what `shutdown` does first
    exporter._wake.set()
    go.set()
    exporter.shutdown(timeout_s=10)
    assert (exporter.exported, exporter.dropped, exporter.failed) == (3, 0, 0)
    assert not exporter.alive


def _spans_in(body: bytes) -> int:
    (resource,) = ExportTraceServiceRequest.FromString(body).resource_spans
    return len(resource.scope_spans[0].spans)


def test_a_part_batch_waits_while_full_ones_go_then_goes_at_a_flush() -> None:
    """Woken by a full batch, the thread sends full batches alone: what is left waits for
    more spans, the schedule delay or a flush (under steady traffic, a part batch sent as
    soon as the last one is would make every POST a few spans)."""
    first_sent, go, round_over = (threading.Event() for _ in range(3))
    posted: list[int] = []

    class Counted(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            posted.append(_spans_in(body))
            if not first_sent.is_set():  # more come while the first batch is sent
                first_sent.set()
                go.wait(10)
            return 200

        def _send_queued(self, part: bool) -> None:
            super()._send_queued(part)
            round_over.set()

    exporter = Counted(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600,
                                      max_batch=4), {}, SCOPE)
    for n in range(4):
        exporter.add(span(n))  # a batch's worth: the thread is woken
    assert first_sent.wait(10)
    for n in range(4, 6):
        exporter.add(span(n))
    go.set()
    assert round_over.wait(10)
    assert posted == [4] and len(exporter._queue) == 2
    assert exporter.queued == 2  # on /metrics: what waits
    assert exporter.flush(10)
    assert posted == [4, 2] and exporter.exported == 6
    exporter.shutdown(timeout_s=10)


def test_the_thread_is_woken_when_a_full_batch_is_queued_not_before() -> None:
    """After a part batch went (a flush, or the delay), a batch's worth of adds may find
    fewer than a batch queued: the thread is woken once a full batch is, so a queue no
    bigger than a batch does not fill and drop every span until the delay."""
    posted: list[int] = []
    full = threading.Event()

    class Counted(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            posted.append(_spans_in(body))
            if posted[-1] == 4:
                full.set()
            return 200

    exporter = Counted(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600,
                                      max_queue=4, max_batch=4), {}, SCOPE)
    exporter.add(span(0))
    assert exporter.flush(10)  # a part batch of one
    for n in range(1, 4):
        exporter.add(span(n))  # 4 added since the start, 3 queued: not yet a batch
    assert not exporter._wake.is_set()  # no round asked for them (it would send nothing)
    exporter.add(span(4))
    assert full.wait(10)
    assert posted == [1, 4] and exporter.dropped == 0
    exporter.shutdown(timeout_s=10)


def test_flush_returns_once_its_spans_are_sent_though_a_later_one_waits() -> None:
    """A round sending full batches takes every span a flush waits for and leaves one
    added after the flush: the flush's ask still gets a round that sends the part batch,
    and it returns True at once, not at its timeout."""
    first_post, go, waiting = (threading.Event() for _ in range(3))

    class Idle(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            if threading.current_thread().name == "flusher":
                waiting.set()  # the flush has counted what it waits for
            return super().wait(timeout)

    class Held(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            if not first_post.is_set():
                first_post.set()
                go.wait(10)
            return 200

    exporter = Held(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600,
                                   max_batch=2), {}, SCOPE)
    exporter._idle = Idle()
    exporter._idle.set()
    for n in range(2):
        exporter.add(span(n))  # a batch: sent, its POST held
    assert first_post.wait(10)
    for n in range(2, 4):
        exporter.add(span(n))
    flushed: list[bool] = []
    flushing = threading.Thread(target=lambda: flushed.append(exporter.flush(5)),
                                name="flusher")
    flushing.start()
    assert waiting.wait(10)
    exporter.add(span(4))  # after the flush: a part batch once the full ones are sent
    go.set()
    flushing.join(10)
    assert flushed == [True]
    exporter.shutdown(timeout_s=10)
    assert exporter.exported == 5


def test_a_part_batch_goes_at_the_schedule_delay() -> None:
    posted: list[int] = []

    class Counted(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            posted.append(_spans_in(body))
            return 200

    exporter = Counted(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=0.05,
                                      max_batch=4), {}, SCOPE)
    exporter.add(span(1))  # idle no more until it is sent
    assert exporter._idle.wait(10)
    assert posted == [1] and exporter.exported == 1
    exporter.shutdown(timeout_s=10)


def test_flush_waits_for_a_span_added_as_a_round_ends() -> None:
    """A span added while the export thread ends a round (the adder saw it busy, the
    thread then found the queue empty and said so): `flush` still waits for it."""
    drained = threading.Event()
    hold = threading.Event()

    class Slow(list[bytes]):
        def __iadd__(self, spans: Iterable[bytes]) -> Slow:  # type: ignore[override]
            if hold.is_set():  # the adding thread is switched out before it queues them
                drained.wait(10)
            return super().__iadd__(spans)

    class Told(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            return 200

        def _send_queued(self, part: bool) -> None:
            super()._send_queued(part)
            drained.set()

    exporter = Told(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600),
                    {}, SCOPE)
    exporter._queue = Slow()
    exporter.add(span(1))
    hold.set()
    adder = threading.Thread(target=exporter.add, args=(span(2),))
    adder.start()
    exporter._flush_asked = next(exporter._asks)  # the round sends a part batch, as a flush's does
    exporter._wake.set()  # the thread sends the first span and ends its round
    adder.join(10)
    hold.clear()
    assert exporter.flush(10)
    assert exporter.exported == 2
    exporter.shutdown(timeout_s=10)


def _one_value(encoded: bytes) -> object:
    """The value of the one attribute of a span written with `encoded` as its own."""
    text = encode_export([encode_span(replace(record(1), attributes={}, encoded=encoded
                                              + encode_shared("s", SERVER, {})))],
                         {}, ("t", "0"))
    (span_,) = ExportTraceServiceRequest.FromString(text).resource_spans[0].scope_spans[0].spans
    (attribute,) = span_.attributes
    kind = attribute.value.WhichOneof("value")
    return getattr(attribute.value, kind)


def test_a_float_is_written_as_itself_whatever_was_written_before() -> None:
    """-0.0 equals 0.0 and NaN equals nothing: a float is never taken from what was
    written before."""
    assert math.copysign(1, _one_value(encode_attribute("f", 0.0))) == 1  # type: ignore[arg-type]
    assert math.copysign(1, _one_value(encode_attribute("f", -0.0))) == -1  # type: ignore[arg-type]
    assert math.isnan(_one_value(encode_attribute("f", math.nan)))  # type: ignore[arg-type]


@pytest.mark.parametrize("value, read", [
    (2**63 - 1, 2**63 - 1), (-(2**63), -(2**63)), (2**63, str(2**63)),
    (-(2**63) - 1, str(-(2**63) - 1)), (10**40, str(10**40))])
def test_an_int_past_64_bits_is_written_as_its_text(value: int, read: object) -> None:
    assert _one_value(encode_attribute("i", value)) == read


def test_attributes_from_code_not_ours_are_cleaned_to_what_a_span_holds() -> None:
    class Shouting(str):
        def __str__(self) -> str:
            return "LOUD"

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    many = {f"k{n}": n for n in range(300)}
    cleaned = clean_attributes({"seq": (1, 2), "list": ["a"], "big": 2**70, "b": True,
                                "neg0": -0.0, 7: "seven", "s": Shouting("quiet"),
                                "thing": Thing(), "none": None, **many})
    assert len(cleaned) == 128
    assert {k: cleaned[k] for k in ("seq", "list", "big", "b", "7", "s", "thing", "none")} == {
        "seq": "(1, 2)", "list": "['a']", "big": 2**70, "b": True, "7": "seven",
        "s": "quiet", "thing": "a thing", "none": "None"}
    assert type(cleaned["s"]) is str and math.copysign(1, cleaned["neg0"]) == -1
    # and every one of them is written as a receiver reads it
    for key, value in cleaned.items():
        _one_value(encode_attribute(key, value))


def test_flush_waits_for_a_span_added_as_the_thread_says_it_is_idle() -> None:
    """The adder appends after the thread's last look at the queue and reads the idle
    flag before the thread sets it: `_idle` is set for a moment with a span queued. A
    flush that comes then waits for that span to be sent."""
    round_over, go, idle_was_set, go_on = (threading.Event() for _ in range(4))
    exporter: SpanExporter

    class Queue(list[bytes]):
        def __bool__(self) -> bool:
            empty = not len(self)
            if (empty and threading.current_thread().name == "omniroute-otlp-export"
                    and exporter.exported and not round_over.is_set()):
                round_over.set()  # the round found the queue empty: it pauses here
                go.wait(10)
            return not empty

    class Idle(threading.Event):
        def set(self) -> None:
            super().set()
            if (threading.current_thread().name == "omniroute-otlp-export" and go.is_set()
                    and not idle_was_set.is_set()):
                idle_was_set.set()  # between `_idle.set()` and the queue's second look
                go_on.wait(10)

    class Told(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            return 200

    exporter = Told(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600),
                    {}, SCOPE)
    exporter._queue, exporter._idle = Queue(), Idle()
    exporter._idle.set()
    exporter.add(span(1))
    exporter._flush_asked = next(exporter._asks)  # the round sends a part batch, as a flush's does
    exporter._wake.set()
    assert round_over.wait(10)
    exporter.add(span(2))  # its idle flag read still unset: `_idle` is not cleared
    go.set()
    assert idle_was_set.wait(10)
    flushed: list[tuple[bool, int]] = []  # what it said, and what was sent then
    flushing = threading.Thread(
        target=lambda: flushed.append((exporter.flush(10), exporter.exported)))
    flushing.start()
    go_on.set()
    flushing.join(10)
    assert flushed == [(True, 2)]
    exporter.shutdown(timeout_s=10)


def test_spans_left_once_the_thread_has_stopped_are_counted_not_sent(
        caplog: pytest.LogCaptureFixture) -> None:
    class Told(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            return 200

    exporter = Told(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600),
                    {}, SCOPE)
    exporter.shutdown(timeout_s=10)
    # an add that passed its checks as the thread took its last look: queued for nobody
    exporter._queue += span(1)()
    exporter._added += 1
    with caplog.at_level(logging.WARNING, "omniroute.tracing"):
        exporter.shutdown(timeout_s=10)
    assert (exporter.exported, exporter.failed, exporter.dropped) == (0, 1, 0)
    assert not exporter._queue and exporter.flush(0)
    assert [r.getMessage() for r in caplog.records] == [
        "1 span(s) not sent: added as the exporter stopped"]
    exporter.add(span(2))  # once stopped: counted at once, not queued for nobody
    assert (exporter.exported, exporter.failed, exporter.dropped) == (0, 2, 0)
    assert not exporter._queue and exporter.flush(0)


def test_an_add_halfway_as_the_exporter_stops_counts_nothing_twice() -> None:
    """`shutdown` runs off the loop while a request may still add: an add between its
    queueing and its count, whose spans the thread sent, leaves the counters even once it
    ends (no span counted as failed below zero)."""
    class Told(SpanExporter):
        def _post(self, body: bytes, headers: dict[str, str]) -> int:
            return 200

    exporter = Told(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=3600),
                    {}, SCOPE)
    exporter._queue += span(1)()  # queued, not yet counted as added
    exporter.shutdown(timeout_s=10)  # the thread sends it as it stops
    exporter._added += 1  # the add's count, after
    assert (exporter.exported, exporter.failed, exporter._added - exporter._taken) == (1, 0, 0)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_export_thread_that_dies_all_the_same_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    """Something no `except Exception` catches ends the thread: it is logged, and the
    spans that come after are counted as dropped once the queue is full."""
    class Dying(SpanExporter):
        def _send_queued(self, part: bool) -> None:
            raise SystemExit("gone")

    with caplog.at_level(logging.ERROR, "omniroute.tracing"):
        exporter = Dying(ExportSettings("http://127.0.0.1:9/v1/traces", schedule_delay_s=0.01,
                                        max_queue=2, max_batch=2), {}, SCOPE)
        exporter._thread.join(10)
    assert not exporter.alive
    assert ["the trace export thread stopped" in r.getMessage() for r in caplog.records] == [
        True]
    for n in range(3):
        exporter.add(span(n))
    assert (exporter.exported, exporter.dropped) == (0, 1)
