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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .spans import Attributes, SpanRecord

__all__ = ["clean_attributes", "count_attribute", "encode_attribute", "encode_attributes",
           "encode_export", "encode_shared", "encode_span", "encode_span_pair",
           "encode_span_parts", "unique_text_attribute"]

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
#: Span.flags: the context says whether it is remote (0x100), and it is (0x200)
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
#: encoded attributes kept from one span to the next; cleared when full
_CACHE_MAX = 4_096
_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack
_pack_fixed32 = struct.Struct("<I").pack


#: each byte below 0x80 as bytes of its own
_SMALL = [bytes((n,)) for n in range(0x80)]


def _varint(value: int) -> bytes:
    """A varint: one, two or three bytes (most) in one step each, more in a loop."""
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return _SMALL[value]
    if value < 0x4000:  # most lengths and counts: their two bytes in one call
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


#: a length's varint (`_varint`: one byte below 128, two below 16,384, most of a batch's)
_size = _varint


_LEN_TAGS = [_tag(field, _LEN) for field in range(16)]


def _len(field: int, payload: bytes) -> bytes:
    tag = _LEN_TAGS[field] if field < 16 else _tag(field, _LEN)
    return tag + _size(len(payload)) + payload


def _string(field: int, text: str) -> bytes:
    return _len(field, text.encode("utf-8", "replace"))  # a lone surrogate: `?`


#: the ints an AnyValue holds (`in` a range of ints is one comparison each way)
_INT64 = range(-(1 << 63), 1 << 63)


def _any_value(value: str | int | float | bool) -> bytes:
    """AnyValue: string 1, bool 2, int 3, double 4; an int past 64 bits as its text."""
    if isinstance(value, str):
        return _string(1, value)
    if value is True or value is False:
        return _tag(2, _VARINT) + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if value not in _INT64:
            return _string(1, str(value))
        return _tag(3, _VARINT) + _varint(value)
    return _tag(4, _FIXED64) + _pack_double(value)


def clean_attributes(attributes: Mapping[Any, object]) -> Attributes:
    """Attributes from code not ours (a sampler's, the resource's) as a span holds them:
    each a text, a bool, an int or a float; anything else (a sequence, an object) as its
    text; no more than the SDK's default count of 128."""
    cleaned: Attributes = {}
    for key, value in attributes.items():
        if len(cleaned) == _MAX_ATTRIBUTES:
            break
        if isinstance(value, bool):
            cleaned[_text(key)] = bool(value)
        elif isinstance(value, int | float):
            cleaned[_text(key)] = (int if isinstance(value, int) else float)(value)
        else:
            cleaned[_text(key)] = _text(value)
    return cleaned


def _text(value: object) -> str:
    """`value`'s text as a plain `str`: none of a subclass's own methods kept, whatever
    its `__str__` gives."""
    text = value if isinstance(value, str) else str(value)
    return text if type(text) is str else str.__str__(text)


_MAX_ATTRIBUTES = 128


#: encoded `KeyValue`s by message field, key, value and the value's type (True is 1)
_cache: dict[tuple[int, str, object, type], bytes] = {}
#: attributes whose every value is new: not kept (`unique_text_attribute`'s)
_UNIQUE: set[str] = set()


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
    if key not in _UNIQUE and type(value) is not float:  # -0.0 == 0.0, and NaN != NaN
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


def _unique_name(key: str) -> bytes:
    """`KeyValue.key` of an attribute whose every value is new (tag and length, the
    value's tag after): its values are not kept."""
    _UNIQUE.add(key)
    return _len(1, key.encode("utf-8", "replace")) + b"\x12"


def unique_text_attribute(key: str) -> Callable[[str], bytes]:
    """A writer of the span attribute `key`, whose every value is a new text (a
    request's id): as `encode_attribute` writes it, in a few steps, and not kept."""
    name = _unique_name(key)
    whole = len(name) + 3
    #: what comes before a text of each length whose every length fits a byte
    heads = [b"".join((_LEN_TAGS[9], _SMALL[whole + n], name, _SMALL[n + 2], b"\x0a",
                       _SMALL[n])) for n in range(0x80 - whole)]
    short = len(heads)

    def write(value: str) -> bytes:
        text = value.encode("utf-8", "replace")
        n = len(text)
        if n < short:
            return heads[n] + text
        return _key_value(9, key, value)

    return write


def count_attribute(key: str) -> Callable[[int], bytes]:
    """A writer of the span attribute `key`, whose values are counts (a token count: a new
    value at most requests), as `encode_attribute` writes them, in a few steps and none
    kept."""
    name = _unique_name(key)
    #: what comes before a count whose varint takes n bytes (its AnyValue's tag last)
    heads = [b""] + [_LEN_TAGS[9] + _size(len(name) + 2 + n) + name + _SMALL[1 + n] + b"\x18"
                     for n in range(1, 11)]

    def write(value: int) -> bytes:
        if type(value) is int:
            if 0 <= value < 0x80:  # most counts without a call (`_varint`'s first steps)
                return heads[1] + _SMALL[value]
            if 0x80 <= value < 0x4000:
                return heads[2] + bytes((value & 0x7F | 0x80, value >> 7))
            if value in _INT64:
                varint = _varint(value)
                return heads[len(varint)] + varint
        return _key_value(9, key, value)  # a bool, a float, past 64 bits: as any attribute

    return write


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


def encode_span_parts(trace_id: bytes, span_id: bytes, parent_span_id: bytes,
                      trace_state: str, start_ns: int, end_ns: int, encoded: bytes) -> bytes:
    """A span whose all but ids, times and trace state is `encoded` already (most of a
    gateway's: `encode_shared` and what follows it), as field 2 of its `ScopeSpans`."""
    if not trace_state:  # most: its head in one call, when its length takes two bytes
        if parent_span_id:
            n = _IDS_AND_TIMES + 10 + len(encoded)
            if 0x80 <= n < 0x4000:
                return _pack_child(_SPAN_TAG, n & 0x7F | 0x80 | (n >> 7) << 8, _TRACE_ID_TAG,
                                   trace_id, _SPAN_ID_TAG, span_id, _PARENT_ID_TAG,
                                   parent_span_id, _START_TAG, start_ns, _END_TAG,
                                   end_ns) + encoded
        else:
            n = _IDS_AND_TIMES + len(encoded)
            if 0x80 <= n < 0x4000:
                return _pack_root(_SPAN_TAG, n & 0x7F | 0x80 | (n >> 7) << 8, _TRACE_ID_TAG,
                                  trace_id, _SPAN_ID_TAG, span_id, _START_TAG, start_ns,
                                  _END_TAG, end_ns) + encoded
    state = _string(3, trace_state) if trace_state else b""
    parent = _PARENT_ID + parent_span_id if parent_span_id else b""
    body = b"".join((_TRACE_ID, trace_id, _SPAN_ID, span_id, state, parent, _START,
                     _pack_fixed64(start_ns), _END, _pack_fixed64(end_ns), encoded))
    return _SPAN_FIELD + _size(len(body)) + body


def encode_span_pair(trace_id: bytes, span_id: bytes, parent_span_id: bytes,
                     trace_state: str, start_ns: int, end_ns: int, encoded: bytes,
                     child_id: bytes, child_start_ns: int, child_end_ns: int,
                     child_encoded: bytes) -> list[bytes]:
    """A span and one child's (a request's and its one attempt's: most of a gateway's), as
    two `encode_span_parts` would write them, in one call: a tenth of `RequestTrace.spans`'
    instructions (2,400 a request) less than two calls."""
    if not trace_state:
        n = (_IDS_AND_TIMES + 10 if parent_span_id else _IDS_AND_TIMES) + len(encoded)
        m = _IDS_AND_TIMES + 10 + len(child_encoded)
        if 0x80 <= n < 0x4000 and 0x80 <= m < 0x4000:
            return [(_pack_child(_SPAN_TAG, n & 0x7F | 0x80 | (n >> 7) << 8, _TRACE_ID_TAG,
                                 trace_id, _SPAN_ID_TAG, span_id, _PARENT_ID_TAG,
                                 parent_span_id, _START_TAG, start_ns, _END_TAG, end_ns)
                     if parent_span_id else
                     _pack_root(_SPAN_TAG, n & 0x7F | 0x80 | (n >> 7) << 8, _TRACE_ID_TAG,
                                trace_id, _SPAN_ID_TAG, span_id, _START_TAG, start_ns,
                                _END_TAG, end_ns)) + encoded,
                    _pack_child(_SPAN_TAG, m & 0x7F | 0x80 | (m >> 7) << 8, _TRACE_ID_TAG,
                                trace_id, _SPAN_ID_TAG, child_id, _PARENT_ID_TAG, span_id,
                                _START_TAG, child_start_ns, _END_TAG, child_end_ns)
                    + child_encoded]
    return [encode_span_parts(trace_id, span_id, parent_span_id, trace_state, start_ns, end_ns,
                              encoded),
            encode_span_parts(trace_id, child_id, span_id, trace_state, child_start_ns,
                              child_end_ns, child_encoded)]


#: a span's head in one `struct` call: its tag, its length's two bytes, then its ids and
#: times, tags included (each tag's bytes as the integer they are little-endian)
_pack_child = struct.Struct("<BHH16sH8sH8sBQBQ").pack
_pack_root = struct.Struct("<BHH16sH8sBQBQ").pack
_SPAN_TAG, _START_TAG, _END_TAG = _SPAN_FIELD[0], _START[0], _END[0]
_TRACE_ID_TAG, _SPAN_ID_TAG, _PARENT_ID_TAG = (
    int.from_bytes(tag, "little") for tag in (_TRACE_ID, _SPAN_ID, _PARENT_ID))


def encode_span(span: SpanRecord) -> bytes:
    """A span as field 2 of its `ScopeSpans`, tag and length included: what
    `encode_export` is given."""
    if span.encoded and not span.attributes and span.events is None:
        return encode_span_parts(span.trace_id, span.span_id, span.parent_span_id,
                                 span.trace_state, span.start_ns, span.end_ns, span.encoded)
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
    body = b"".join(parts)
    return _SPAN_FIELD + _size(len(body)) + body


def encode_export(spans: Iterable[bytes], resource: Attributes, scope: tuple[str, str],
                  schema_url: str = "") -> bytes:
    """An `ExportTraceServiceRequest` of `spans` (each as `encode_span` wrote it), all of
    one resource and one instrumentation scope (name, version): joined once, its spans
    copied once (a batch is hundreds of kilobytes)."""
    scope_spans = [_len(1, _string(1, scope[0]) + _string(2, scope[1]))]
    scope_spans += spans
    scope_size = sum(map(len, scope_spans))
    head = _len(1, _attributes(1, resource)) + _LEN_TAGS[2] + _size(scope_size)
    schema = _string(3, schema_url) if schema_url else b""
    size = len(head) + scope_size + len(schema)
    return b"".join([_LEN_TAGS[1] + _size(size) + head, *scope_spans, schema])
