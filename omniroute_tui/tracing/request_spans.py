"""The spans of the gateway's requests, built from the engine's events (docs/tracing.md).

Each proxied request is a server span, continued from the client's trace context (the
propagators of `OTEL_PROPAGATORS`: W3C `traceparent` and `tracestate` by default), and each
attempt a client span under it whose context goes upstream in the attempt's own headers.

While a request runs, its trace only records: the engine's events of the request, each
with the time it came, an attempt's span id (made at once: its context goes upstream)
and the provider's breaker state as the attempt began. When the request ends its spans
are written from that record straight to their OTLP bytes (`RequestTrace.spans`), which wait
for the exporter's thread to send them: bytes, which the garbage collector need not walk,
not the record's objects (docs/tracing.md, "What tracing costs").

An attempt's span starts at its `AttemptEvent` and is given its result at its
`ResultEvent`; skips and waits are events of the request's span. The engine records a
result right after its event, synchronously: the dedup and the breaker's move it causes
come before any other event of a request, so they are the attempt's. A failed attempt's
span ends with its result; the span of the attempt whose result came last carries the
answer's tokens, and, when it succeeded, ends with the request.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

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
    Event,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from ..engine.kinds import BreakerState
from .otlp_wire import (
    clean_attributes,
    count_attribute,
    encode_attribute,
    encode_attributes,
    encode_shared,
    encode_span,
    encode_span_pair,
    unique_text_attribute,
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
_name = itemgetter(0)  # a raw header's
#: W3C trace context's `traceparent`, as OpenTelemetry's own propagator reads it
_TRACEPARENT = re.compile(
    r"\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_EMPTY_STATE = TraceState()
#: the attributes a request's span may carry of ours: a sampler's of the same name go
_SERVER_KEYS = frozenset((
    "http.request.method", "url.path", "omniroute.attempts", "omniroute.served_by",
    "omniroute.route", "http.response.status_code", "error.type", "omniroute.request_id",
    "omniroute.abandoned", "omniroute.waited_ms", "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens"))
_request_id = unique_text_attribute("omniroute.request_id")
_input_tokens = count_attribute("gen_ai.usage.input_tokens")
_output_tokens = count_attribute("gen_ai.usage.output_tokens")


def _traceparent(header: str) -> tuple[bytes, bytes, int] | None:
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
    if trace_hex == _ZERO_TRACE or parent_hex == _ZERO_SPAN:
        return None
    return bytes.fromhex(trace_hex), bytes.fromhex(parent_hex), int(flags, 16)


def _context_of(parent: tuple[bytes, bytes, int] | None, state: TraceState) -> Context:
    """The context a sampler is asked in: the client's span as the parent, if any."""
    if parent is None:
        return Context()
    return set_span_in_context(NonRecordingSpan(SpanContext(
        int.from_bytes(parent[0]), int.from_bytes(parent[1]), True, TraceFlags(parent[2]),
        state)))


def _nonzero(bits: int) -> int:
    """Random bits, not all zero (an id of zeros is no id): `_random_bits(n) or
    _nonzero(n)` is a new id's value, this call almost never made."""
    value = _random_bits(bits)
    while not value:
        value = _random_bits(bits)
    return value


@dataclass(slots=True, eq=False)
class RequestTrace:
    """What one request's tracing records while it runs; its spans are written from it
    once it has ended (`spans`). The gateway sets `route` and `usage` on the trace
    `RequestTracing.trace` gives it (one lookup for both, not a call each)."""

    request_id: str
    trace_id: bytes  # 16 bytes, as OTLP writes it (and `.hex()` the header)
    span_id: bytes  # 8
    parent_id: bytes  # the client's span (b"": none)
    method: str
    path: str
    start_ns: int
    endpoint: Endpoint  # its operation's name is looked up when its spans are written
    state_header: str  # its trace state, as the `tracestate` header writes it
    sampled: bool
    extra: Attributes | None  # the sampler's attributes, cleaned
    #: the request's events, each (when, event, its span id and the breaker's state
    #: before it for an attempt: else b"" and None)
    steps: list[tuple[int, Event, bytes, BreakerState | None]]
    current: bytes = b""  # the span id of the attempt sent last: its context goes upstream
    attempts: int = 0  # attempts recorded: a span each
    route: str | None = None
    response: ResponseEvent | None = None  # what the router answered, when it did
    usage: Usage | None = None
    status: int | None = None  # the client's (None: abandoned)
    end_ns: int = 0

    def spans(self) -> list[bytes]:
        """The request's span and its attempts', encoded: most requests are one attempt
        and its answer, written here directly, as `records` would make them; any other
        as `records` makes them."""
        steps, response = self.steps, self.response
        if len(steps) != 2 or response is None:
            return [encode_span(span) for span in self.records()]
        (start_ns, attempt, span_id, before), (result_ns, result, _, _) = steps
        if (type(attempt) is not AttemptEvent or type(result) is not ResultEvent
                or result.n != attempt.n):
            return [encode_span(span) for span in self.records()]
        status = self.status
        key: tuple[Any, ...] = (
            self.endpoint, attempt.model, attempt.provider, attempt.connection, attempt.n,
            attempt.probe, before, result.status, result.kind, result.reason, self.method,
            self.path, self.route, status, response.attempts, response.served_by,
            bool(self.parent_id))
        # both spans' shared parts in one lookup (a hit, most, here: `_kept` for a miss)
        server, encoded = _PAIRS.get(key) or _kept(_PAIRS, key, _pair_shared)
        server += _request_id(self.request_id)
        if attempt.why:
            encoded += encode_attribute("omniroute.why", attempt.why)
        if self.extra or status is None or response.waited_ms:
            varying: Attributes = dict(self.extra) if self.extra else {}
            if status is None:
                varying["omniroute.abandoned"] = True
            if response.waited_ms:
                varying["omniroute.waited_ms"] = response.waited_ms
            server += encode_attributes(varying)
        if self.usage is not None:
            tokens = _tokens_encoded(self.usage)
            server += tokens
            encoded += tokens
        return encode_span_pair(
            self.trace_id, self.span_id, self.parent_id, self.state_header,
            self.start_ns, self.end_ns, server, span_id, start_ns,
            self.end_ns if result.kind is None else result_ns, encoded)

    def records(self) -> list[SpanRecord]:
        """The request's span and its attempts'."""
        trace_id, own = self.trace_id, self.span_id
        varying: Attributes = dict(self.extra) if self.extra else {}  # the request's own
        server = SpanRecord(
            trace_id, own, self.parent_id, bool(self.parent_id), self.state_header,
            f"{self.method} {self.path}", SERVER, self.start_ns, varying, self.end_ns)
        spans = [server]
        opened: dict[int, tuple[int, AttemptEvent, bytes, BreakerState]] = {}
        #: attempts begun again under their number before their result (two requests
        #: begun under one id: the gateway never does it, a caller may): each still a
        #: span, cancelled
        dropped: list[tuple[int, AttemptEvent, bytes, BreakerState]] = []
        last: SpanRecord | None = None  # the attempt whose result came last
        moved: SpanRecord | None = None  # it, while a dedup or a breaker's move is its
        served: SpanRecord | None = None  # the one that gets the answer's tokens
        shared: Attributes = {}  # its attributes in its `encoded`
        why: str | None = None  # and its strategy's why
        ok = False
        operation = _OPERATIONS.get(self.endpoint, "chat")
        for at_ns, event, span_id, before in self.steps:
            if isinstance(event, AttemptEvent):
                if event.n in opened:
                    dropped.append(opened[event.n])
                opened[event.n] = (at_ns, event, span_id, before)  # type: ignore[assignment]
                served = None  # a later attempt answers, if any does
            elif isinstance(event, ResultEvent):
                begun = opened.pop(event.n, None)
                if begun is None:  # not an attempt of this trace: nor what it moved
                    moved = None
                    continue
                start_ns, attempt, span_id, before = begun
                key = (self.endpoint, attempt.model, attempt.provider, attempt.connection,
                       attempt.n, attempt.probe, before, event.status, event.kind,
                       event.reason)
                name, encoded, shared, outcome = _kept(_ATTEMPTS, key, _attempt_shared)
                ok = event.kind is None
                why = attempt.why
                last = SpanRecord(
                    trace_id, span_id, own, False, self.state_header,
                    name, CLIENT, start_ns, {}, at_ns, None, 0 if ok else ERROR,
                    "" if ok else outcome,
                    encoded + encode_attribute("omniroute.why", why) if why else encoded)
                spans.append(last)
                moved = served = last
            elif isinstance(event, BreakerEvent | DedupEvent):
                if moved is None:
                    continue
                if moved.encoded:  # this attempt's attributes are its own from here on
                    moved.attributes = dict(shared)
                    if why:
                        moved.attributes["omniroute.why"] = why
                    moved.encoded = b""
                if isinstance(event, BreakerEvent):
                    moved.attributes["omniroute.breaker.after"] = event.to.value
                    moved.event("breaker", {
                        "omniroute.from": event.from_.value, "omniroute.to": event.to.value,
                        "omniroute.reason": event.reason.value}, at_ns)
                else:
                    moved.event("dedup", {
                        "omniroute.connection": event.connection,
                        "omniroute.kind": event.kind.value,
                        "omniroute.window": str(event.window)}, at_ns)
                moved.end_ns = at_ns
            elif isinstance(event, SkipEvent):
                skip: Attributes = {"omniroute.provider": event.provider,
                                    "gen_ai.request.model": event.model,
                                    "omniroute.reason": event.reason.value}
                if event.retry_after_ms is not None:
                    skip["omniroute.retry_after_ms"] = event.retry_after_ms
                server.event("skip", skip, at_ns)
            elif isinstance(event, WaitEvent):
                server.event(f"wait {event.phase}", {
                    "omniroute.delay_ms": event.delay_ms, "omniroute.target": event.target,
                    "omniroute.reason": event.reason.value}, at_ns)
        # attempts with no result: a stream cut short, its client gone
        for start_ns, attempt, span_id, before in [*dropped, *opened.values()]:
            attributes = _attempt_attributes(attempt.model, attempt.provider,
                                             attempt.connection, attempt.n, attempt.probe,
                                             before)
            attributes["omniroute.outcome"] = "cancelled"
            if attempt.why:
                attributes["omniroute.why"] = attempt.why
            spans.append(SpanRecord(
                trace_id, span_id, own, False, self.state_header,
                f"{operation} {attempt.model}", CLIENT, start_ns, attributes,
                self.end_ns))
        if last is not None and ok:
            last.end_ns = self.end_ns
        status = self.status
        if status is None:
            varying["omniroute.abandoned"] = True
        elif status >= 500:
            server.status = ERROR
        response = self.response
        if response is not None and response.waited_ms:
            varying["omniroute.waited_ms"] = response.waited_ms
        shared_key = (self.method, self.path, self.route, status,
                      None if response is None else response.attempts,
                      None if response is None else response.served_by, bool(self.parent_id))
        server.encoded = _kept(_REQUESTS, shared_key, _request_shared) + _request_id(
            self.request_id)
        if varying:  # its own, encoded too
            server.encoded += encode_attributes(varying)
            server.attributes = {}
        if self.usage is not None:
            tokens = _tokens_of(self.usage)
            for span in (server, served):
                if span is None:
                    continue
                if span.encoded:
                    span.encoded += tokens[1]
                else:
                    span.attributes.update(tokens[0])
        return spans


#: the attributes many spans share, encoded once, by what decides them (an attempt's
#: target, number, breaker and result; a request's endpoint, route, status and server):
#: few in a gateway's traffic; cleared when full
_SHARED_MAX = 4_096
_ATTEMPTS: dict[tuple[Any, ...], tuple[str, bytes, Attributes, str]] = {}
_REQUESTS: dict[tuple[Any, ...], bytes] = {}
#: a one-attempt request's two spans' (`RequestTrace.spans`), by both their keys
_PAIRS: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
_T = TypeVar("_T")


def _kept(cache: dict[tuple[Any, ...], _T], key: tuple[Any, ...],
          make: Callable[[tuple[Any, ...]], _T]) -> _T:
    """What `make` makes of `key`, kept in `cache` (cleared when full)."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= _SHARED_MAX:
            cache.clear()
        value = cache[key] = make(key)
    return value


def _tokens_of(usage: Usage) -> tuple[Attributes, bytes]:
    """An answer's tokens as attributes, and encoded."""
    return ({"gen_ai.usage.input_tokens": usage.prompt_tokens,
             "gen_ai.usage.output_tokens": usage.completion_tokens}, _tokens_encoded(usage))


def _tokens_encoded(usage: Usage) -> bytes:
    return _input_tokens(usage.prompt_tokens) + _output_tokens(usage.completion_tokens)


def _attempt_attributes(model: str, provider: str, connection: str, n: int, probe: bool,
                        before: BreakerState) -> Attributes:
    attributes: Attributes = {
        "gen_ai.request.model": model, "omniroute.provider": provider,
        "omniroute.connection": connection, "omniroute.attempt": n,
        "omniroute.breaker.before": before.value, "omniroute.breaker.after": before.value}
    if probe:
        attributes["omniroute.probe"] = True
    return attributes


def _attempt_shared(key: tuple[Any, ...]) -> tuple[str, bytes, Attributes, str]:
    """An attempt's name, its shared attributes encoded and as they are, its outcome."""
    endpoint, model, provider, connection, n, probe, before, status, failure, cut = key
    operation = _OPERATIONS.get(endpoint, "chat")
    attributes = _attempt_attributes(model, provider, connection, n, probe, before)
    outcome = "ok" if failure is None else failure.value
    attributes["http.response.status_code"] = status
    attributes["omniroute.outcome"] = outcome
    if failure is not None:
        attributes["error.type"] = outcome
    if cut is not None:
        attributes["omniroute.stream_cut"] = str(cut)
    name = f"{operation} {model}"
    return name, encode_shared(name, CLIENT, attributes, 0 if failure is None else ERROR,
                               "" if failure is None else outcome), attributes, outcome


def _pair_shared(key: tuple[Any, ...]) -> tuple[bytes, bytes]:
    """A one-attempt request's shared parts: its own span's, its attempt's (`key`: the
    attempt's key, then the request's)."""
    return _request_shared(key[10:]), _attempt_shared(key[:10])[1]


def _request_shared(key: tuple[Any, ...]) -> bytes:
    """A request's shared attributes, encoded, by its method, path, route, status,
    attempts, server and whether its parent is remote."""
    method, path, route, status, attempts, served_by, remote = key
    attributes: Attributes = {"http.request.method": method, "url.path": path}
    if attempts is not None:
        attributes["omniroute.attempts"] = attempts
    if served_by is not None:
        attributes["omniroute.served_by"] = served_by
    if route is not None:
        attributes["omniroute.route"] = route
    if status is not None:
        attributes["http.response.status_code"] = status
        if status >= 500:
            attributes["error.type"] = str(status)
    return encode_shared(f"{method} {path}", SERVER, attributes,
                         ERROR if status is not None and status >= 500 else 0,
                         parent_remote=remote)


class RequestTracing:
    """Spans of the requests `begin` is told of, from `engine`'s events, sampled by
    `sampler` (`OTEL_TRACES_SAMPLER`; None: the default, parent-based and always on) and
    handed to `exporter` as they end. `w3c`: the propagators are the default ones
    (`tracecontext`, with or without `baggage`), whose headers are read and written here
    directly (a fifth of a traced request's cost through the propagation API); otherwise
    the configured propagators do it. Told from the event loop's thread only."""

    def __init__(self, engine: ResilienceEngine, exporter: SpanExporter,
                 sampler: Sampler | None = None, *, w3c: bool = True) -> None:
        self._engine = engine
        self.exporter = exporter
        self._sampler = sampler
        self._w3c = w3c
        self._traces: dict[str, RequestTrace] = {}
        self.sampler_failures = 0
        #: the request whose attempt's result the engine is recording now, and the
        #: attempt's provider: its dedup and its breaker's move are that attempt's
        self._recording: tuple[RequestTrace, str] | None = None
        bus = engine.bus
        self._unsubscribe = [
            bus.on(AttemptEvent, self._attempt),
            bus.on(ResultEvent, self._result),
            bus.subscribe(self._step, SkipEvent, WaitEvent),
            bus.on(ResponseEvent, self._response),
            bus.subscribe(self._recorded, DedupEvent, BreakerEvent),
        ]

    # -- what the gateway tells -------------------------------------------------------------

    def begin(self, request_id: str, method: str, path: str,
              headers: Sequence[tuple[bytes, bytes]], endpoint: Endpoint) -> None:
        """A request has come (its raw ASGI headers: names in lower case): its trace,
        continued from the client's trace context."""
        context: Context | None = None
        state = _EMPTY_STATE
        parent = None
        if self._w3c:
            # most requests carry no trace context: that is seen in C without hashing
            # each header's name into a dict
            if b"traceparent" in map(_name, headers):
                named = dict(headers)  # a name given twice: its last, as a loop would
                parent = _traceparent(named[b"traceparent"].decode("latin-1"))
                raw_state = named.get(b"tracestate")
                if parent is not None and raw_state:
                    state = TraceState.from_header([raw_state.decode("latin-1")])
        else:
            context = propagate.extract({key.decode("latin-1"): value.decode("latin-1")
                                         for key, value in headers})
            found = get_current_span(context).get_span_context()
            if found.is_valid:
                parent = (found.trace_id.to_bytes(16), found.span_id.to_bytes(8),
                          found.trace_flags)
                state = found.trace_state
        trace_id = (parent[0] if parent is not None
                    else (_random_bits(128) or _nonzero(128)).to_bytes(16))
        extra: Attributes | None = None
        header = "" if state is _EMPTY_STATE or not state else state.to_header()
        if self._sampler is None:  # parent-based, always on
            sampled = parent is None or bool(parent[2] & TraceFlags.SAMPLED)
        else:
            if context is None:
                context = _context_of(parent, state)
            client_state, client_header = state, header
            try:
                decision = self._sampler.should_sample(
                    context, int.from_bytes(trace_id), f"{method} {path}", SpanKind.SERVER)
                sampled = bool(decision.decision.is_sampled())  # type: ignore[no-untyped-call]
                chosen = decision.trace_state
                if chosen is not None and chosen is not state:  # the trace state it gives
                    if not isinstance(chosen, TraceState):
                        raise TypeError(f"a trace state that is not one: {chosen!r:.80}")
                    header = chosen.to_header() if chosen else ""
                    state = chosen
                if decision.attributes:  # ours win: a span's keys are unique
                    extra = {key: value for key, value in clean_attributes(
                        decision.attributes).items() if key not in _SERVER_KEYS}
            except Exception:  # a sampler's bug: the request is served, not traced, and
                sampled, extra = False, None  # the client's trace state goes on
                state, header = client_state, client_header
                self._sampler_failed()
        traces = self._traces
        traces[request_id] = RequestTrace(
            request_id, trace_id, (_random_bits(64) or _nonzero(64)).to_bytes(8),
            parent[1] if parent is not None else b"", method, path, time.time_ns(), endpoint,
            header, sampled, extra, [])
        if len(traces) > MAX_OPEN_TRACES:
            oldest = next(iter(traces))
            self._end(traces.pop(oldest), None)

    def _sampler_failed(self) -> None:
        """The sampler raised: its first traceback logged, then a line at the 10th,
        100th, ... failure (one a request would bury the log)."""
        self.sampler_failures += 1
        count = self.sampler_failures
        if count == 1:
            log.exception("the sampler (OTEL_TRACES_SAMPLER) failed: the request is not "
                          "traced")
        elif str(count).rstrip("0") == "1":
            log.warning("the sampler (OTEL_TRACES_SAMPLER) has failed %d times: those "
                        "requests were not traced", count)

    def outbound(self, request_id: str) -> dict[str, str]:
        """The trace headers of the request's attempt being sent (none if untraced)."""
        trace = self._traces.get(request_id)
        if trace is None:
            return {}
        span_id = trace.current or trace.span_id
        if self._w3c:
            headers = {"traceparent": f"00-{trace.trace_id.hex()}-{span_id.hex()}-"
                                      f"{'01' if trace.sampled else '00'}"}  # the flags
            if trace.state_header:
                headers["tracestate"] = trace.state_header
            return headers
        state = (TraceState.from_header([trace.state_header]) if trace.state_header
                 else _EMPTY_STATE)
        context = SpanContext(int.from_bytes(trace.trace_id), int.from_bytes(span_id), False,
                              _SAMPLED if trace.sampled else _NOT_SAMPLED, state)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, set_span_in_context(NonRecordingSpan(context)))
        return carrier

    def trace(self, request_id: str) -> RequestTrace | None:
        """The request's trace, if it is traced: the gateway sets on it the route the
        request asked for (`route`) and the tokens its answer said it took (`usage`: on the
        request's span and the span of the attempt that served it); `sampled` says
        whether its spans are written (else the tokens need not be read for them)."""
        return self._traces.get(request_id)

    def end(self, request_id: str, status: int, usage: Usage | None = None) -> None:
        """The request is answered (a stream: its last byte sent or its client gone;
        `usage`: the tokens its last chunk said it took)."""
        self._recording = None
        trace = self._traces.pop(request_id, None)
        if trace is not None:
            if usage is not None:
                trace.usage = usage
            self._end(trace, status)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """End what is open, send what is queued and stop; blocks for up to `timeout_s`.
        From the event loop (the gateway's exit), `aclose`."""
        self._end_open()
        self.exporter.shutdown(timeout_s)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """`shutdown` from the event loop: what is open is ended on the loop's thread,
        where requests end theirs (a request still going cannot end its trace at once),
        and the export waited for off it."""
        self._end_open()
        await asyncio.to_thread(self.exporter.shutdown, timeout_s)

    def _end_open(self) -> None:
        self._recording = None
        for request_id in list(self._traces):
            self._end(self._traces.pop(request_id), None)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []

    def _end(self, trace: RequestTrace, status: int | None) -> None:
        """The trace's spans are written and queued (`status` None: it was never
        answered)."""
        if self._recording is not None and self._recording[0] is trace:
            self._recording = None  # nothing more is this trace's once it is queued
        if not trace.sampled:
            return
        if status is None:
            log.warning("the trace of request %s was ended unanswered", trace.request_id)
        trace.status = status
        trace.end_ns = time.time_ns()
        self.exporter.add(trace.spans, 1 + trace.attempts)

    # -- what the engine tells --------------------------------------------------------------

    def _attempt(self, event: AttemptEvent) -> None:
        self._recording = None
        trace = self._traces.get(event.request)
        if trace is None:
            return
        trace.current = span_id = (_random_bits(64) or _nonzero(64)).to_bytes(8)
        if trace.sampled:
            trace.attempts += 1
            trace.steps.append((time.time_ns(), event, span_id,
                                self._engine.breaker_state(event.provider)))

    def _result(self, event: ResultEvent) -> None:
        trace = self._traces.get(event.request)
        if trace is None or not trace.sampled:
            self._recording = None
            return
        trace.steps.append((time.time_ns(), event, b"", None))
        self._recording = (trace, event.provider)

    def _step(self, event: Event) -> None:
        """A skip or a wait: an event of the request's span."""
        self._recording = None
        trace = self._traces.get(event.request)  # type: ignore[attr-defined]
        if trace is not None and trace.sampled:
            trace.steps.append((time.time_ns(), event, b"", None))

    def _response(self, event: ResponseEvent) -> None:
        """What the router answered: the request span's attempts, wait and server."""
        self._recording = None
        trace = self._traces.get(event.request)
        if trace is not None:
            trace.response = event

    def _recorded(self, event: Event) -> None:
        """A dedup or a breaker's move: the attempt's whose result is being recorded."""
        recording = self._recording
        if recording is not None and recording[1] == event.provider:  # type: ignore[attr-defined]
            recording[0].steps.append((time.time_ns(), event, b"", None))
