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

__all__ = ["encode_attribute", "encode_attributes", "encode_export", "encode_shared"]

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


def _size(n: int) -> bytes:
    """A length's varint: one byte below 128, two below 16,384 (most of a batch's)."""
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    return _varint(n)


_SMALL = [bytes((n,)) for n in range(0x80)]
_LEN_TAGS = [_tag(field, _LEN) for field in range(16)]


def _len(field: int, payload: bytes) -> bytes:
    tag = _LEN_TAGS[field] if field < 16 else _tag(field, _LEN)
    return tag + _size(len(payload)) + payload


def _string(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8", "replace"))  # a lone surrogate: `?`


def _any_value(value: str | int | float | bool) -> bytes:
    """AnyValue: string 1, bool 2, int 3, double 4."""
    if isinstance(value, str):
        return _string(1, value)
    if value is True or value is False:
        return _tag(2, _VARINT) + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _tag(3, _VARINT) + _varint(value)
    return _tag(4, _FIXED64) + _pack_double(value)


#: encoded `KeyValue`s by message field, key, value and the value's type (True is 1)
_cache: dict[tuple[int, str, object, type], bytes] = {}
#: attributes whose every value is new: not kept
_UNIQUE = frozenset({"omniroute.request_id"})


def _key_value(field: int, key: str, value: str | int | float | bool) -> bytes:
    """A `KeyValue` as field `field` of its message (9 in a span, 3 in an event, 1 in a
    resource), tag and length included. Kept: most repeat from one span to the next (a
    provider, a connection, a model, an outcome, a status), all but a request's id."""
    name = _names_of.get(key)
    if name is None:
        name = _len(1, key.encode("utf-8", "replace")) + b"\x12"
        if len(_names_of) < _CACHE_MAX:
            _names_of[key] = name
    if type(value) is str:  # most: a short text, written here
        text = value.encode("utf-8", "replace")  # JSON lets a client send a lone surrogate
        n = len(text)
        if n < 0x7E:  # its AnyValue's length and its own fit a byte each
            pair = name + _SMALL[n + 2] + b"\x0a" + _SMALL[n] + text
        else:
            pair = name + _size(n + 1 + len(_size(n))) + b"\x0a" + _size(n) + text
    else:
        any_value = _any_value(value)
        pair = name + _size(len(any_value)) + any_value
    encoded = _LEN_TAGS[field] + _size(len(pair)) + pair
    if key not in _UNIQUE:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[field, key, value, type(value)] = encoded
    return encoded


#: attribute names encoded (`KeyValue.key`, tag and length) with the tag of the value
_names_of: dict[str, bytes] = {}


def _attributes(field: int, attributes: Attributes) -> bytes:
    get = _cache.get
    return b"".join([get((field, k, v, type(v))) or _key_value(field, k, v)
                     for k, v in attributes.items()])


_TRACE_ID, _SPAN_ID, _PARENT_ID = _tag(1, _LEN) + b"\x10", _tag(2, _LEN) + b"\x08", (
    _tag(4, _LEN) + b"\x08")
_START, _END = _tag(7, _FIXED64), _tag(8, _FIXED64)
_KINDS = {kind: _tag(6, _VARINT) + _varint(kind) for kind in range(6)}
_EVENT_TIME = _tag(1, _FIXED64)
_STATUS_CODE = _tag(3, _VARINT)
_NO_STATUS = _len(15, b"")
_FLAGS = {remote: _tag(16, _FIXED32) + _pack_fixed32(
    _HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)) for remote in (False, True)}
_SPAN_FIELD = _tag(2, _LEN)
#: the bytes of a span's trace id, span id and times, tags included (a parent adds 10)
_IDS_AND_TIMES = 2 + 16 + 2 + 8 + 9 + 9
#: encoded span names (`POST /v1/chat/completions`, `chat gpt-4o`): few, and repeated
_names: dict[str, bytes] = {}


def encode_attributes(attributes: Attributes) -> bytes:
    """A span's attributes as its fields: what `encode_shared` wrote, they may follow."""
    return _attributes(9, attributes)


def encode_attribute(key: str, value: str | int | float | bool) -> bytes:
    """One attribute of a span as its field (as `encode_attributes`)."""
    return _cache.get((9, key, value, type(value))) or _key_value(9, key, value)


def encode_shared(name: str, kind: int, attributes: Attributes, status: int = 0,
                  status_message: str = "", parent_remote: bool = False) -> bytes:
    """What many spans share (their name, kind, status, flags and these attributes),
    encoded once for them all: a `SpanRecord.encoded`."""
    parts = [_attributes(9, attributes)]
    _describe(name, kind, status, status_message, parent_remote, parts)
    return b"".join(parts)


def _describe(name: str, kind: int, status: int, message: str, remote: bool,
              parts: list[bytes]) -> None:
    """A span's name, kind, flags and status, added to `parts`."""
    encoded = _names.get(name)
    if encoded is None:
        encoded = _string(5, name)
        if len(_names) < _CACHE_MAX:
            _names[name] = encoded
    parts += (encoded, _KINDS.get(kind) or _tag(6, _VARINT) + _varint(kind), _FLAGS[remote])
    if status or message:
        field = _string(2, message) if message else b""
        if status:
            field += _STATUS_CODE + _varint(status)
        parts.append(_len(15, field))
    else:
        parts.append(_NO_STATUS)


def _span(span: SpanRecord, out: list[bytes]) -> None:
    """A span as field 2 of its `ScopeSpans`, tag and length included, added to `out` in
    pieces (a batch is joined once)."""
    encoded = span.encoded
    if encoded and not span.attributes and span.events is None and not span.trace_state:
        # most of a gateway's spans: all but their ids and times encoded already
        if span.parent_span_id:
            out += (_SPAN_FIELD, _size(_IDS_AND_TIMES + 10 + len(encoded)), _TRACE_ID,
                    span.trace_id, _SPAN_ID, span.span_id, _PARENT_ID, span.parent_span_id,
                    _START, _pack_fixed64(span.start_ns), _END, _pack_fixed64(span.end_ns),
                    encoded)
        else:
            out += (_SPAN_FIELD, _size(_IDS_AND_TIMES + len(encoded)), _TRACE_ID,
                    span.trace_id, _SPAN_ID, span.span_id, _START,
                    _pack_fixed64(span.start_ns), _END, _pack_fixed64(span.end_ns), encoded)
        return
    parts = [_TRACE_ID, span.trace_id, _SPAN_ID, span.span_id]
    if span.trace_state:
        parts.append(_string(3, span.trace_state))
    if span.parent_span_id:
        parts += (_PARENT_ID, span.parent_span_id)
    parts += (_START, _pack_fixed64(span.start_ns), _END, _pack_fixed64(span.end_ns))
    if span.encoded:  # its name, kind, status and flags are in it
        parts.append(span.encoded)
    else:
        _describe(span.name, span.kind, span.status, span.status_message, span.parent_remote,
                  parts)
    get = _cache.get
    for k, v in span.attributes.items():
        parts.append(get((9, k, v, type(v))) or _key_value(9, k, v))
    for at_ns, event_name, attributes in span.events or ():
        parts.append(_len(11, _EVENT_TIME + _pack_fixed64(at_ns) + _string(2, event_name)
                          + _attributes(3, attributes)))
    out += (_SPAN_FIELD, _size(sum(map(len, parts))))
    out += parts


def encode_export(spans: Iterable[SpanRecord], resource: Attributes,
                  scope: tuple[str, str], schema_url: str = "") -> bytes:
    """An `ExportTraceServiceRequest` of `spans`, all of one resource and one
    instrumentation scope (name, version)."""
    scope_message = _string(1, scope[0]) + _string(2, scope[1])
    out: list[bytes] = []
    for span in spans:
        _span(span, out)
    scope_spans = _len(1, scope_message) + b"".join(out)
    resource_spans = _len(1, _attributes(1, resource)) + _len(2, scope_spans)
    if schema_url:
        resource_spans += _string(3, schema_url)
    return _len(1, resource_spans)
