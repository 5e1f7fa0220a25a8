"""A receiver of OpenTelemetry traces over OTLP/HTTP (protobuf), for tests, benchmarks and
trying tracing without a collector: what the gateway exports, decoded with the
`opentelemetry-proto` messages, as plain records.

    python -m simulator.otlp_receiver --port 4318 [--out spans.jsonl]

serves `POST /v1/traces` on 127.0.0.1 and prints a line per span (or writes it, as JSON,
to `--out`); `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318` sends a gateway's there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import sys
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .http_fakes import start_server

__all__ = ["ReceivedSpan", "main", "otlp_app", "receiving"]

#: the largest export taken (the SDK's batches are far smaller); more is a 413
MAX_BODY_BYTES = 16 * 1024 * 1024
_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
          5: "consumer"}
_STATUSES = {0: "unset", 1: "ok", 2: "error"}
_PROTOBUF = "application/x-protobuf"


@dataclass
class ReceivedSpan:
    """One span as it arrived: ids in hex, attributes as plain values."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    status: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    trace_state: str = ""


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None if which is None else getattr(value, which)


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = _value(pair.value)
    return found


def spans_of(message: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Every span of an export, with its resource's attributes."""
    found = []
    for resource_spans in message.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(ReceivedSpan(
                    span.name, _KINDS.get(span.kind, str(span.kind)), span.trace_id.hex(),
                    span.span_id.hex(), span.parent_span_id.hex(),
                    span.start_time_unix_nano, span.end_time_unix_nano,
                    _STATUSES.get(span.status.code, str(span.status.code)),
                    _attributes(span.attributes),
                    [(event.name, _attributes(event.attributes)) for event in span.events],
                    resource, span.trace_state))
    return found


def otlp_app(on_spans: Callable[[list[ReceivedSpan]], None]) -> Starlette:
    """`POST /v1/traces`: an export decoded and handed to `on_spans`; a body that is not
    one is a 400, as a collector answers it."""

    async def traces(request: Request) -> Response:
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:  # refused before it is read
            return Response("too large, or no length a number\n", 413)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:  # a chunked body, read whole
            return Response("too large\n", 413)
        try:
            encoding = request.headers.get("content-encoding", "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            message = ExportTraceServiceRequest.FromString(body)
        except (OSError, zlib.error, EOFError, DecodeError) as exc:
            return Response(f"not an OTLP trace export: {exc}\n", 400)
        on_spans(spans_of(message))
        return Response(ExportTraceServiceResponse().SerializeToString(),
                        media_type=_PROTOBUF)

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


@dataclass
class Receiving:
    """A receiver serving on `port`: `spans` grows as exports arrive."""

    port: int
    spans: list[ReceivedSpan] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        """The value of `OTEL_EXPORTER_OTLP_ENDPOINT` that sends spans here."""
        return f"http://127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def receiving(port: int = 0, *, startup_timeout_s: float = 10.0
                    ) -> AsyncIterator[Receiving]:
    """A receiver on 127.0.0.1 (`port` 0: any free one) for the block's length."""
    holder = Receiving(0)
    server, task, holder.port = await start_server(
        otlp_app(holder.spans.extend), "the OTLP receiver", port=port,
        startup_timeout_s=startup_timeout_s)
    try:
        yield holder
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, timeout=5)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318, help="on 127.0.0.1 (0: any)")
    parser.add_argument("--out", help="append each span as a JSON line to this file")
    args = parser.parse_args(argv)
    out = open(args.out, "a", buffering=1) if args.out else None  # noqa: SIM115 - held

    def show(spans: list[ReceivedSpan]) -> None:
        for span in spans:
            if out is not None:
                out.write(json.dumps(asdict(span)) + "\n")
            else:
                print(f"{span.trace_id[:8]} {span.kind:6} {span.name} {span.status}",
                      flush=True)

    config = uvicorn.Config(otlp_app(show), host="127.0.0.1", port=args.port,
                            log_level="warning", lifespan="off", access_log=False)
    try:
        uvicorn.Server(config).run()
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
