"""Spans in OTLP's protobuf wire format (`ExportTraceServiceRequest`), written directly.

The OTLP exporter's encoder builds a protobuf message object per span, attribute and
value: 36 µs a span here, more than the rest of a traced request's cost together
(docs/tracing.md, "What tracing costs"). This writes the same message's bytes, field by
field, and keeps the encoding of the attributes that repeat (a provider, a connection, a
model, an outcome) from one span to the next. Tests decode its output with the
`opentelemetry-proto` messages and hold it equal to the exporter's own encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from .spans import Attributes, SpanRecord

__all__ = ["encode_export"]

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
#: Span.flags: the context says whether it is remote (0x100), and it is (0x200)
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
#: encoded attributes kept from one span to the next; cleared when full
_CACHE_MAX = 4_096
_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack
_pack_fixed32 = struct.Struct("<I").pack


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len(field: int, payload: bytes) -> bytes:
    return _tag(field, _LEN) + _varint(len(payload)) + payload


def _string(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8"))


def _any_value(value: str | int | float | bool) -> bytes:
    """AnyValue: string 1, bool 2, int 3, double 4."""
    if isinstance(value, str):
        return _string(1, value)
    if value is True or value is False:
        return _tag(2, _VARINT) + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _tag(3, _VARINT) + _varint(value)
    return _tag(4, _FIXED64) + _pack_double(value)


_cache: dict[tuple[int, str, type, object], bytes] = {}
#: attributes whose every value is new: not kept
_UNIQUE = frozenset({"omniroute.request_id"})


def _key_value(field: int, key: str, value: str | int | float | bool) -> bytes:
    """A `KeyValue` as field `field` of its message (9 in a span, 3 in an event, 1 in a
    resource), tag and length included. Kept: most repeat from one span to the next (a
    provider, a connection, a model, an outcome, a status), all but a request's id."""
    if key in _UNIQUE:
        return _len(field, _len(1, key.encode("utf-8")) + _len(2, _any_value(value)))
    cache_key = (field, key, type(value), value)
    cached = _cache.get(cache_key)
    if cached is None:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        cached = _cache[cache_key] = _len(field, _len(1, key.encode("utf-8"))
                                          + _len(2, _any_value(value)))
    return cached


def _attributes(field: int, attributes: Attributes) -> bytes:
    return b"".join([_key_value(field, k, v) for k, v in attributes.items()])


_TRACE_ID, _SPAN_ID, _PARENT_ID = _tag(1, _LEN) + b"\x10", _tag(2, _LEN) + b"\x08", (
    _tag(4, _LEN) + b"\x08")
_KIND, _START, _END = _tag(6, _VARINT), _tag(7, _FIXED64), _tag(8, _FIXED64)
_EVENT_TIME = _tag(1, _FIXED64)
_STATUS_CODE = _tag(3, _VARINT)
_FLAGS = {remote: _tag(16, _FIXED32) + _pack_fixed32(
    _HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)) for remote in (False, True)}


def _span(span: SpanRecord) -> bytes:
    parts = [_TRACE_ID, span.trace_id, _SPAN_ID, span.span_id]
    if span.trace_state:
        parts.append(_string(3, span.trace_state))
    if span.parent_span_id:
        parts += (_PARENT_ID, span.parent_span_id)
    parts += (_string(5, span.name), _KIND, _varint(span.kind), _START,
              _pack_fixed64(span.start_ns), _END, _pack_fixed64(span.end_ns))
    parts += [_key_value(9, k, v) for k, v in span.attributes.items()]
    for at_ns, name, attributes in span.events or ():
        parts.append(_len(11, _EVENT_TIME + _pack_fixed64(at_ns) + _string(2, name)
                          + _attributes(3, attributes)))
    status = b""
    if span.status_message:
        status += _string(2, span.status_message)
    if span.status:
        status += _STATUS_CODE + _varint(span.status)
    parts.append(_len(15, status))
    parts.append(_FLAGS[span.parent_remote])
    return b"".join(parts)


def encode_export(spans: Iterable[SpanRecord], resource: Attributes,
                  scope: tuple[str, str], schema_url: str = "") -> bytes:
    """An `ExportTraceServiceRequest` of `spans`, all of one resource and one
    instrumentation scope (name, version)."""
    scope_message = _string(1, scope[0]) + _string(2, scope[1])
    scope_spans = _len(1, scope_message) + b"".join([_len(2, _span(s)) for s in spans])
    resource_spans = _len(1, _attributes(1, resource)) + _len(2, scope_spans)
    if schema_url:
        resource_spans += _string(3, schema_url)
    return _len(1, resource_spans)
