"""The spans of the gateway's requests, built from the engine's events (docs/tracing.md).

Each proxied request is a server span, continued from the client's trace context (the
propagators of `OTEL_PROPAGATORS`: W3C `traceparent` and `tracestate` by default), and each
attempt a client span under it whose context goes upstream in the attempt's own headers.
An attempt's span starts on its `AttemptEvent` and is given its result on its
`ResultEvent`; skips and waits are events of the request's span. The engine records a
result right after its event, synchronously: the dedup and the breaker's move it causes
come before any other event, so they are added to the attempt's span, which ends on the
next event of another kind (or, for the attempt that served, with the request, once its
answer's tokens are known).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
    get_current_span,
    set_span_in_context,
)

from ..apis import Endpoint
from ..drivers.usage import Usage
from ..engine.engine import ResilienceEngine
from ..engine.events import (
    AttemptEvent,
    BreakerEvent,
    DedupEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from .spans import CLIENT, ERROR, SERVER, Attributes, SpanRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

    from .exporter import SpanExporter

__all__ = ["MAX_OPEN_TRACES", "RequestTracing"]

log = logging.getLogger("omniroute.tracing")

#: requests traced at once: one that never ends (a bug) is ended as `abandoned` when this
#: many more have begun, so a leak costs a bounded table, not the process's memory
MAX_OPEN_TRACES = 10_000

_OPERATIONS = {Endpoint.CHAT: "chat", Endpoint.MESSAGES: "chat", Endpoint.RESPONSES: "chat",
               Endpoint.COMPLETIONS: "text_completion", Endpoint.EMBEDDINGS: "embeddings",
               Endpoint.COUNT_TOKENS: "count_tokens"}
_SAMPLED, _NOT_SAMPLED = TraceFlags(TraceFlags.SAMPLED), TraceFlags(TraceFlags.DEFAULT)
_random_bits = random.getrandbits
#: W3C trace context's `traceparent`, as OpenTelemetry's own propagator reads it
_TRACEPARENT = re.compile(
    r"\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*")
_EMPTY_STATE = TraceState()


def _traceparent(header: str) -> tuple[int, int, int] | None:
    """The trace id, parent id and flags a `traceparent` header gives; None when there is
    none or it is not one (version ff, an all-zero id, extra fields on version 00)."""
    if len(header) > 512:
        return None
    match = _TRACEPARENT.fullmatch(header)
    if match is None:
        return None
    version, trace_hex, parent_hex, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, parent_id = int(trace_hex, 16), int(parent_hex, 16)
    if not trace_id or not parent_id:
        return None
    return trace_id, parent_id, int(flags, 16)


def _context_of(parent: tuple[int, int, int] | None, state: TraceState) -> Context:
    """The context a sampler is asked in: the client's span as the parent, if any."""
    if parent is None:
        return Context()
    return set_span_in_context(NonRecordingSpan(SpanContext(
        parent[0], parent[1], True, TraceFlags(parent[2]), state)))


def _new_id(bits: int) -> int:
    value = _random_bits(bits)
    while not value:
        value = _random_bits(bits)
    return value


@dataclass(slots=True)
class _Trace:
    """What one request's tracing holds while it runs (`span` None: not sampled)."""

    trace_id: int
    span_id: int
    span: SpanRecord | None
    operation: str
    flags: TraceFlags
    state: TraceState
    state_header: str  # `state` as the `tracestate` header writes it
    #: its attempts' spans not ended yet, by number (a stream's ends when the stream does)
    attempts: dict[int, SpanRecord] = field(default_factory=dict)
    current: int = 0  # the span id of the attempt sent last: its context goes upstream
    served: SpanRecord | None = None  # the attempt whose answer the client is given


class RequestTracing:
    """Spans of the requests `begin` is told of, from `engine`'s events, sampled by
    `sampler` (`OTEL_TRACES_SAMPLER`; None: the default, parent-based and always on) and
    handed to `exporter` as they end. `w3c`: the propagators are the default ones
    (`tracecontext`, with or without `baggage`), whose headers are read and written here
    directly (a fifth of a traced request's cost through the propagation API); otherwise
    the configured propagators do it."""

    def __init__(self, engine: ResilienceEngine, exporter: SpanExporter,
                 sampler: Sampler | None = None, *, w3c: bool = True) -> None:
        self._engine = engine
        self.exporter = exporter
        self._sampler = sampler
        self._w3c = w3c
        self._traces: dict[str, _Trace] = {}
        #: the attempt whose result the engine is recording now: its span, provider and
        #: request, and whether it succeeded (its answer is then the client's)
        self._recording: tuple[SpanRecord, str, _Trace, bool] | None = None
        bus = engine.bus
        self._unsubscribe = [
            bus.on(AttemptEvent, self._attempt),
            bus.on(ResultEvent, self._result),
            bus.on(SkipEvent, self._skip),
            bus.on(WaitEvent, self._wait),
            bus.on(DedupEvent, self._dedup),
            bus.on(BreakerEvent, self._breaker),
            bus.on(ResponseEvent, self._response),
        ]

    # -- what the gateway tells -------------------------------------------------------------

    def begin(self, request_id: str, method: str, path: str,
              headers: Iterable[tuple[bytes, bytes]], endpoint: Endpoint) -> None:
        """A request has come (its raw ASGI headers: names in lower case): its span,
        continued from the client's trace context."""
        name = f"{method} {path}"
        context: Context | None = None
        state = _EMPTY_STATE
        if self._w3c:
            raw_parent = raw_state = None
            for key, value in headers:
                if key == b"traceparent":
                    raw_parent = value
                elif key == b"tracestate":
                    raw_state = value
            parent = (None if raw_parent is None
                      else _traceparent(raw_parent.decode("latin-1")))
            if parent is not None and raw_state:
                state = TraceState.from_header([raw_state.decode("latin-1")])
        else:
            context = propagate.extract({key.decode("latin-1"): value.decode("latin-1")
                                         for key, value in headers})
            found = get_current_span(context).get_span_context()
            parent = None
            if found.is_valid:
                parent = (found.trace_id, found.span_id, found.trace_flags)
                state = found.trace_state
        trace_id = parent[0] if parent is not None else _new_id(128)
        if self._sampler is None:  # parent-based, always on
            sampled = parent is None or bool(parent[2] & TraceFlags.SAMPLED)
            extra: Mapping[str, Any] = {}
        else:
            if context is None:
                context = _context_of(parent, state)
            decision = self._sampler.should_sample(context, trace_id, name, SpanKind.SERVER)
            sampled = decision.decision.is_sampled()  # type: ignore[no-untyped-call]
            state = decision.trace_state or state
            extra = decision.attributes or {}
        span_id = _new_id(64)
        state_header = "" if state is _EMPTY_STATE or not state else state.to_header()
        span = None
        if sampled:
            attributes: Attributes = {"http.request.method": method, "url.path": path,
                                      "omniroute.request_id": request_id}
            if extra:
                attributes.update(extra)
            span = SpanRecord(
                trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big"),
                parent[1].to_bytes(8, "big") if parent is not None else b"",
                parent is not None, state_header, name, SERVER, time.time_ns(), attributes)
        traces = self._traces
        traces[request_id] = _Trace(trace_id, span_id, span, _OPERATIONS.get(endpoint, "chat"),
                                    _SAMPLED if sampled else _NOT_SAMPLED, state,
                                    state_header)
        if len(traces) > MAX_OPEN_TRACES:
            oldest = next(iter(traces))
            self._end(oldest, traces.pop(oldest), None, abandoned=True)

    def outbound(self, request_id: str) -> dict[str, str]:
        """The trace headers of the request's attempt being sent (none if untraced)."""
        trace = self._traces.get(request_id)
        if trace is None:
            return {}
        span_id = trace.current or trace.span_id
        if self._w3c:
            headers = {"traceparent": f"00-{trace.trace_id:032x}-{span_id:016x}-"
                                      f"{trace.flags:02x}"}
            if trace.state_header:
                headers["tracestate"] = trace.state_header
            return headers
        context = SpanContext(trace.trace_id, span_id, False, trace.flags, trace.state)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, set_span_in_context(NonRecordingSpan(context)))
        return carrier

    def sampled(self, request_id: str) -> bool:
        """Whether the request's spans are recorded (else its answer's tokens need not be
        read for them)."""
        trace = self._traces.get(request_id)
        return trace is not None and trace.span is not None

    def route(self, request_id: str, route: str) -> None:
        """The route (or provider/model) the request asked for."""
        trace = self._traces.get(request_id)
        if trace is not None and trace.span is not None:
            trace.span.attributes["omniroute.route"] = route

    def usage(self, request_id: str, usage: Usage) -> None:
        """The tokens the answer said it took: on the request's span and on the span of
        the attempt that served it."""
        trace = self._traces.get(request_id)
        if trace is None or trace.span is None:
            return
        tokens = {"gen_ai.usage.input_tokens": usage.prompt_tokens,
                  "gen_ai.usage.output_tokens": usage.completion_tokens}
        trace.span.attributes.update(tokens)
        recording = self._recording  # a stream's attempt, whose result came last
        served = recording[0] if recording is not None and recording[2] is trace else (
            trace.served)
        if served is not None:
            served.attributes.update(tokens)

    def end(self, request_id: str, status: int) -> None:
        """The request is answered (a stream: its last byte sent or its client gone)."""
        self._settle()
        trace = self._traces.pop(request_id, None)
        if trace is not None:
            self._end(request_id, trace, status)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """End what is open, send what is queued and stop (the gateway's exit; blocks for
        up to `timeout_s`: call it off the event loop)."""
        self._settle()
        for request_id in list(self._traces):
            self._end(request_id, self._traces.pop(request_id), None, abandoned=True)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self.exporter.shutdown(timeout_s)

    def _end(self, request_id: str, trace: _Trace, status: int | None, *,
             abandoned: bool = False) -> None:
        span = trace.span
        if span is None:
            return
        now = time.time_ns()
        add = self.exporter.add
        for attempt in trace.attempts.values():  # a stream its client left, say
            attempt.attributes["omniroute.outcome"] = "cancelled"
            attempt.end_ns = now
            add(attempt)
        if trace.served is not None:
            trace.served.end_ns = now
            add(trace.served)
        if status is not None:
            span.attributes["http.response.status_code"] = status
            if status >= 500:
                span.status = ERROR
                span.attributes["error.type"] = str(status)
        if abandoned:
            span.attributes["omniroute.abandoned"] = True
            log.warning("the trace of request %s was ended unanswered", request_id)
        span.end_ns = now
        add(span)

    # -- what the engine tells --------------------------------------------------------------

    def _settle(self) -> None:
        """The result being recorded is recorded: its attempt's span ends, or, if it
        served the request, waits for the answer's tokens and ends with the request."""
        recording = self._recording
        if recording is not None:
            self._recording = None
            span, _provider, trace, ok = recording
            if ok:
                trace.served = span
            else:
                span.end_ns = time.time_ns()
                self.exporter.add(span)

    def _attempt(self, event: AttemptEvent) -> None:
        self._settle()
        trace = self._traces.get(event.request)
        if trace is None:
            return
        trace.current = span_id = _new_id(64)
        if trace.span is None:
            return
        breaker = self._engine.breaker_state(event.provider).value
        attributes: Attributes = {
            "gen_ai.request.model": event.model, "omniroute.provider": event.provider,
            "omniroute.connection": event.connection, "omniroute.attempt": event.n,
            "omniroute.breaker.before": breaker, "omniroute.breaker.after": breaker}
        if event.probe:
            attributes["omniroute.probe"] = True
        if event.why:
            attributes["omniroute.why"] = event.why
        trace.attempts[event.n] = SpanRecord(
            trace.span.trace_id, span_id.to_bytes(8, "big"), trace.span.span_id, False,
            trace.span.trace_state, f"{trace.operation} {event.model}", CLIENT,
            time.time_ns(), attributes)

    def _result(self, event: ResultEvent) -> None:
        self._settle()
        trace = self._traces.get(event.request)
        if trace is None:
            return
        span = trace.attempts.pop(event.n, None)
        if span is None:
            return
        outcome = "ok" if event.kind is None else event.kind.value
        attributes = span.attributes
        attributes["http.response.status_code"] = event.status
        attributes["omniroute.outcome"] = outcome
        if event.kind is not None:
            attributes["error.type"] = outcome
            span.status, span.status_message = ERROR, outcome
        if event.reason is not None:
            attributes["omniroute.stream_cut"] = str(event.reason)
        self._recording = (span, event.provider, trace, event.kind is None)  # see _settle

    def _skip(self, event: SkipEvent) -> None:
        self._settle()
        trace = self._traces.get(event.request)
        if trace is not None and trace.span is not None:
            attributes: Attributes = {"omniroute.provider": event.provider,
                                      "gen_ai.request.model": event.model,
                                      "omniroute.reason": event.reason.value}
            if event.retry_after_ms is not None:
                attributes["omniroute.retry_after_ms"] = event.retry_after_ms
            trace.span.event("skip", attributes)

    def _wait(self, event: WaitEvent) -> None:
        self._settle()
        trace = self._traces.get(event.request)
        if trace is not None and trace.span is not None:
            trace.span.event(f"wait {event.phase}", {
                "omniroute.delay_ms": event.delay_ms, "omniroute.target": event.target,
                "omniroute.reason": event.reason.value})

    def _dedup(self, event: DedupEvent) -> None:
        recording = self._recording
        if recording is not None and recording[1] == event.provider:
            recording[0].event("dedup", {
                "omniroute.connection": event.connection, "omniroute.kind": event.kind.value,
                "omniroute.window": str(event.window)})

    def _breaker(self, event: BreakerEvent) -> None:
        recording = self._recording
        if recording is not None and recording[1] == event.provider:
            span = recording[0]
            span.attributes["omniroute.breaker.after"] = event.to.value
            span.event("breaker", {
                "omniroute.from": event.from_.value, "omniroute.to": event.to.value,
                "omniroute.reason": event.reason.value})

    def _response(self, event: ResponseEvent) -> None:
        self._settle()
        trace = self._traces.get(event.request)
        if trace is not None and trace.span is not None:
            attributes = trace.span.attributes
            attributes["omniroute.attempts"] = event.attempts
            if event.waited_ms:
                attributes["omniroute.waited_ms"] = event.waited_ms
            if event.served_by is not None:
                attributes["omniroute.served_by"] = event.served_by
