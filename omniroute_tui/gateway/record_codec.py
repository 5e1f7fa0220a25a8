"""A request's decision record as stored bytes, and back (docs/design.md §13).

A record is the request's own events (its request, attempts, results, skips, waits,
budget spends and response) with the replica that served it and the status the client
got. It is stored for an hour, so its size is the bound: the JSON averages about 650
bytes a request in the 429 storm, and raw deflate primed with a dictionary of the
events' own words brings it to about 170 in 8 µs of CPU (`bench/request_records.py`).
The first byte says the format, so a later release can change the dictionary and still
say "not a record of mine" of the old.

Reading is an entry point: the bytes come from a file or from Redis, which a stranger may
have written. The inflated size is capped before it is inflated, and every event must be
one the engine could have emitted (`event_from_dict`) or it is left out and counted.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..engine.events import Event, event_from_dict

__all__ = ["MAX_RECORD_BYTES", "DecodedRecord", "decode_record", "encode_record",
           "record_json"]

_FORMAT = b"\x01"
#: a record of more than this, inflated, is refused (a request of 64 attempts is ~20 KiB)
MAX_RECORD_BYTES = 64 * 1024
_MAX_EVENTS = 500
_WBITS = -12  # raw deflate, a 4 KiB window: records are small, and so is the state
#: the words records repeat, the most frequent last (deflate finds near ones cheaper)
_ZDICT = (
    b'"kind":"rate_limited","reason":"upstream","status":429,"retry_after_ms":'
    b'"type":"skip","reason":"cooling","target":"all_cooling","circuit_open",'
    b'"type":"wait","phase":"start","delay_ms":"end","type":"budget","spent":true,'
    b'"tokens":"relayed_bytes":"relayed_chunks":"cooling_until":null,"why":null,'
    b'"tenant":"replica":"status":200,"events":[{"t":'
    b'"type":"request","id":"route":"chat"},{"t":'
    b'"type":"attempt","request":"n":1,"provider":"connection":"model":"probe":false},'
    b'{"t":"type":"result","request":"n":1,"provider":"connection":"model":'
    b'"status":200,"kind":null,"latency_ms":},{"t":'
    b'"type":"response","request":"status":200,"attempts":1,"latency_ms":'
    b'"waited_ms":0,"served_by":"}]}'
)


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a number JSON carries")


#: NaN and Infinity refused (the answer's JSON could not carry them); nesting past the
#: stack is a RecursionError, caught as any other refusal
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
#: what a field declared `int`, `str`, `bool` or `float` must hold (an enum's field is
#: made one by event_from_dict, or refused there)
_TYPES: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: type(v) is int and -2**63 <= v < 2**63,
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: type(v) is bool,
    "float": lambda v: type(v) in (int, float) and math.isfinite(v),
}


def _typed(event: Event) -> bool:
    """Whether each field of `event` holds the type it declares."""
    for f in fields(event):
        value = getattr(event, f.name)
        kinds = str(f.type).replace(" ", "").split("|")
        if value is None:
            if "None" not in kinds:
                return False
            continue
        check = _TYPES.get(kinds[0])
        if check is not None and not check(value):
            return False
    return True


def record_json(request_id: str, replica: str | None, status: int, events: list[str]) -> str:
    """The record of a request whose events are `events` (each its `to_json()`)."""
    return (f'{{"id":{json.dumps(request_id)},"replica":{json.dumps(replica)},'
            f'"status":{int(status)},"events":[{",".join(events)}]}}')


def encode_record(text: str) -> bytes:
    packer = zlib.compressobj(1, zlib.DEFLATED, _WBITS, 1, zdict=_ZDICT)
    return _FORMAT + packer.compress(text.encode()) + packer.flush()


@dataclass
class DecodedRecord:
    """What a stored record holds that could be read: the events as dicts (the event
    stream's and the traces' shape), and how many were left out as not events."""

    replica: str | None
    status: int | None
    events: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"replica": self.replica, "status": self.status,
                                "events": self.events}
        if self.unreadable:
            body["unreadable_events"] = self.unreadable
        return body


def decode_record(blob: object, request_id: str) -> DecodedRecord | None:
    """The record `blob` holds for `request_id`; None when it is not one (another
    format, too large inflated, not JSON, another request's, or not the shape)."""
    if not isinstance(blob, bytes) or not blob.startswith(_FORMAT):
        return None
    unpacker = zlib.decompressobj(_WBITS, zdict=_ZDICT)
    try:
        text = unpacker.decompress(blob[1:], MAX_RECORD_BYTES)
        if unpacker.unconsumed_tail:
            return None
        data = _DECODER.decode(text.decode("utf-8"))
    except (zlib.error, ValueError, RecursionError):  # a UnicodeDecodeError is a ValueError
        return None
    if not isinstance(data, dict) or data.get("id") != request_id:
        return None
    replica, status, events = data.get("replica"), data.get("status"), data.get("events")
    if not isinstance(events, list) or len(events) > _MAX_EVENTS:
        return None
    record = DecodedRecord(replica if isinstance(replica, str) else None,
                           status if type(status) is int else None)
    for item in events:
        try:
            if not isinstance(item, dict):
                raise ValueError("not an object")
            if item.get("request", item.get("id")) != request_id:
                raise ValueError("another request's event")
            event = event_from_dict(item)
            if not _typed(event):
                raise ValueError("a field of another type")
            record.events.append(event.to_dict())
        except (ValueError, TypeError, KeyError):
            record.unreadable += 1
    return record
