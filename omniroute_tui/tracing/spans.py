"""A span as the gateway makes it: plain data, made from what a request recorded
(`request_spans`) when no faster way writes it, and encoded (`otlp_wire`). The SDK's span
objects cost the gateway more than a request's routing (docs/tracing.md, "What tracing
costs"); this holds what the OTLP message needs and nothing more."""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["CLIENT", "ERROR", "SERVER", "Attributes", "SpanRecord"]

#: OTLP's span kinds and status codes (`opentelemetry.proto.trace.v1`)
SERVER, CLIENT = 2, 3
ERROR = 2

Attributes = dict[str, str | int | float | bool]


@dataclass(slots=True)
class SpanRecord:
    """One span: ids as bytes (16 and 8), times in Unix nanoseconds."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes  # b"": a root
    parent_remote: bool  # its parent came from the client's `traceparent`
    trace_state: str
    name: str
    kind: int
    start_ns: int
    attributes: Attributes
    end_ns: int = 0
    events: list[tuple[int, str, Attributes]] | None = None  # made by the first
    status: int = 0  # unset
    status_message: str = ""
    #: the span's name, kind, status, flags and attributes already encoded: what it shares
    #: with many others, encoded once for them all (`otlp_wire.encode_shared`), and what
    #: it has alone (`encode_attributes`); its `attributes` are then any more it has
    encoded: bytes = b""

    def event(self, name: str, attributes: Attributes, at_ns: int | None = None) -> None:
        """An event of the span, at `at_ns` (None: now)."""
        if self.events is None:
            self.events = []
        self.events.append((time.time_ns() if at_ns is None else at_ns, name, attributes))
