"""Typed events (docs/design.md §9): what the engine and the router announce.

Every state change in the engine and every routing step is announced as one of these
frozen dataclasses. The console, the store, the simulator's trace and the gateway's
event stream all consume the same objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from enum import StrEnum
from json.encoder import encode_basestring
from typing import Any, ClassVar

from .kinds import (
    BreakerReason,
    BreakerState,
    CooldownReason,
    DedupWindow,
    FailureKind,
    SkipReason,
    StreamCut,
)
from .values import value

__all__ = [
    "EVENT_CLASSES",
    "STATE_CHANGE_CLASSES",
    "AttemptEvent",
    "BreakerEvent",
    "BudgetEvent",
    "CooldownEvent",
    "DedupEvent",
    "DisabledEvent",
    "EnabledEvent",
    "Event",
    "FaultEvent",
    "LockoutEvent",
    "OperatorEvent",
    "ReloadEvent",
    "RequestEvent",
    "ResponseEvent",
    "ResultEvent",
    "SkipEvent",
    "WaitEvent",
    "event_from_dict",
]


#: the engine's vocabulary, as event fields carry it (each a StrEnum: a trace line holds
#: its value, and reading the line back gives the member again)
_ENUMS: dict[str, type[StrEnum]] = {
    cls.__name__: cls for cls in (BreakerReason, BreakerState, CooldownReason, DedupWindow,
                                 FailureKind, SkipReason, StreamCut)}


def _json_any(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    if isinstance(value, str):  # a StrEnum member is its value
        return encode_basestring(value)
    return _json_dumps(value)


def _json_optional(key: str, value: Any) -> str:
    """`,"key":value` for an optional field that is set; nothing while it is None."""
    return "" if value is None else f',"{key}":{_json_any(value)}'


_json_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _compile_to_json(cls: type[Event]) -> Callable[[Event], str]:
    """Build a `to_json` for one event class: one f-string specialised by field type.

    It produces exactly what `json.dumps(to_dict(), separators=(",", ":"),
    ensure_ascii=False)` would, several times faster (the trace writes millions).
    An optional field (`_optional_names`) is written only when it is set.
    """
    hints = {f.name: str(f.type) for f in fields(cls)}
    optional = cls._optional_names()
    pieces = ['{{"t":{e.t},"type":"' + cls.TYPE + '"']
    for name in cls._field_names():
        key = "from" if name == "from_" else name
        if name in optional:
            pieces.append(f'{{_o("{key}", e.{name})}}')
            continue
        kind = hints[name]
        if kind == "int":
            value = f"{{e.{name}}}"
        elif kind == "str" or kind in _ENUMS:
            value = f"{{_s(e.{name})}}"
        elif kind == "bool":
            value = f"{{_b[e.{name}]}}"
        else:
            value = f"{{_v(e.{name})}}"
        pieces.append(f',"{key}":{value}')
    pieces.append("}}")
    source = "def to_json(e):\n    return f" + repr("".join(pieces)) + "\n"
    namespace: dict[str, Any] = {"_s": encode_basestring, "_v": _json_any,
                                 "_b": ("false", "true"), "_o": _json_optional}
    exec(source, namespace)
    function: Callable[[Event], str] = namespace["to_json"]
    return function


@value
class Event:
    """Base of all events: `t` is the clock's time in ms when it happened."""

    TYPE: ClassVar[str] = "event"
    t: int

    def to_dict(self) -> dict[str, Any]:
        """The event as one trace line's object: `t`, `type`, then the fields in order."""
        data: dict[str, Any] = {"t": self.t, "type": self.TYPE}
        optional = self._optional_names()
        for name in self._field_names():
            field_value = getattr(self, name)
            if field_value is None and name in optional:
                continue
            data["from" if name == "from_" else name] = field_value
        return data

    def to_json(self) -> str:
        """The event as one compact JSON line (no newline)."""
        return json_encoder(type(self))(self)

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        cached: tuple[str, ...] | None = cls.__dict__.get("_FIELD_NAMES")
        if cached is None:
            cached = tuple(f.name for f in fields(cls) if f.name != "t")
            setattr(cls, "_FIELD_NAMES", cached)  # noqa: B010 - per-class cache
        return cached

    @classmethod
    def _optional_names(cls) -> frozenset[str]:
        """Fields that default to None: left out of a trace line while unset, so that a
        field added for a rare case leaves every other line as it was."""
        cached: frozenset[str] | None = cls.__dict__.get("_OPTIONAL_NAMES")
        if cached is None:
            cached = frozenset(f.name for f in fields(cls) if f.default is None)
            setattr(cls, "_OPTIONAL_NAMES", cached)  # noqa: B010 - per-class cache
        return cached


_ENCODERS: dict[type[Event], Callable[[Event], str]] = {}


def json_encoder(cls: type[Event]) -> Callable[[Event], str]:
    """The function behind `cls.to_json`, for writers that know the type in advance."""
    encoder = _ENCODERS.get(cls)
    if encoder is None:
        encoder = _ENCODERS[cls] = _compile_to_json(cls)
    return encoder


@value
class RequestEvent(Event):
    """A request begins, for `route`; `tenant` is its client key's, when the gateway
    asks for client keys (docs/gateway.md, "Client keys")."""

    TYPE: ClassVar[str] = "request"
    id: str
    route: str
    tenant: str | None = None


@value
class AttemptEvent(Event):
    """An attempt begins; `cooling_until` is set when it is the breaker's probe on a key
    still cooling for backoff (every key was cooling), until then (docs/design.md §3).
    `strategy` names the route's ordering strategy (weighted, least_busy, headroom; unset
    under priority and round_robin) and `why` says why it chose this target or key."""

    TYPE: ClassVar[str] = "attempt"
    request: str
    n: int
    provider: str
    connection: str
    model: str
    probe: bool
    cooling_until: int | None = None
    strategy: str | None = None
    why: str | None = None


@value
class ResultEvent(Event):
    """An attempt's result. A streamed answer's comes when its stream ends
    (`latency_ms` then runs to that end) and says what was relayed to the client:
    `relayed_bytes` of the body and `relayed_chunks`, its events with content (about a
    token each); `reason` says what went wrong with a stream (docs/design.md §7)."""

    TYPE: ClassVar[str] = "result"
    request: str
    n: int
    provider: str
    connection: str
    model: str
    status: int
    kind: FailureKind | None
    latency_ms: int
    reason: StreamCut | None = None
    relayed_bytes: int | None = None
    relayed_chunks: int | None = None


@value
class SkipEvent(Event):
    TYPE: ClassVar[str] = "skip"
    request: str
    provider: str
    model: str
    reason: SkipReason
    retry_after_ms: int | None
    strategy: str | None = None  # the route's ordering strategy, as on attempts


@value
class ResponseEvent(Event):
    TYPE: ClassVar[str] = "response"
    request: str
    status: int
    attempts: int
    latency_ms: int
    waited_ms: int
    served_by: str | None


@value
class BreakerEvent(Event):
    TYPE: ClassVar[str] = "breaker"
    provider: str
    from_: BreakerState
    to: BreakerState
    reason: BreakerReason
    failures: int
    retry_after_ms: int | None


@value
class CooldownEvent(Event):
    """A connection's cooldown changed; `kind` is None when it was lifted (success, operator).
    `reason` says why a lift happened when it was not the connection's own doing:
    `probe_freed`, the breaker's probe succeeded and freed the provider's backoff keys;
    `carrier_served`, a request carried on a cooling key did (docs/design.md §4)."""

    TYPE: ClassVar[str] = "cooldown"
    provider: str
    connection: str
    kind: FailureKind | None
    level: int
    until: int
    hint_ms: int | None
    reason: CooldownReason | None = None


@value
class DisabledEvent(Event):
    TYPE: ClassVar[str] = "disabled"
    provider: str
    connection: str
    reason: str


@value
class EnabledEvent(Event):
    TYPE: ClassVar[str] = "enabled"
    provider: str
    connection: str
    reason: str


@value
class LockoutEvent(Event):
    """A model lockout changed; `kind` is None when failures decayed or it was cleared."""

    TYPE: ClassVar[str] = "lockout"
    provider: str
    connection: str
    model: str
    kind: FailureKind | None
    failures: int
    until: int


@value
class DedupEvent(Event):
    TYPE: ClassVar[str] = "dedup"
    provider: str
    connection: str
    kind: FailureKind
    window: DedupWindow


@value
class OperatorEvent(Event):
    TYPE: ClassVar[str] = "operator"
    action: str
    target: str
    actor: str
    result: str


@value
class FaultEvent(Event):
    TYPE: ClassVar[str] = "fault"
    name: str
    phase: str
    target: str


@value
class BudgetEvent(Event):
    """A retry on the same provider asked the retry budget: `spent` a token, or refused
    (the request then skips the provider, `retry_budget`); `tokens` is what is left."""

    TYPE: ClassVar[str] = "budget"
    request: str
    provider: str
    spent: bool
    tokens: float


@value
class WaitEvent(Event):
    """An admission wait (docs/design.md §6): `start` when the request waits `delay_ms` for the
    earliest target to come back (`target`, skipped for `reason`), `end` when it routes
    again (`delay_ms` then is what it waited)."""

    TYPE: ClassVar[str] = "wait"
    request: str
    phase: str
    delay_ms: int
    target: str
    reason: SkipReason


@value
class ReloadEvent(Event):
    """The router took a reloaded config (docs/design.md §13): its `version` (the file's
    sha256, 12 hex digits) and what changed; connections are `provider/connection`, those
    added to or removed from the providers that stay."""

    TYPE: ClassVar[str] = "reload"
    version: str
    providers_added: tuple[str, ...]
    providers_removed: tuple[str, ...]
    providers_changed: tuple[str, ...]
    connections_added: tuple[str, ...]
    connections_removed: tuple[str, ...]


#: every concrete event class, in the order of docs/design.md §9's table
EVENT_CLASSES: tuple[type[Event], ...] = (
    RequestEvent, AttemptEvent, ResultEvent, SkipEvent, ResponseEvent, BreakerEvent,
    CooldownEvent, DisabledEvent, EnabledEvent, LockoutEvent, DedupEvent, OperatorEvent,
    FaultEvent, BudgetEvent, WaitEvent, ReloadEvent,
)
#: the events that change state: a gateway's history, kept for days. The rest follow
#: single requests and come with the traffic; `dedup` is one of those (a failure that was
#: not counted changes nothing, and a blip seen by every request emits one each).
STATE_CHANGE_CLASSES: tuple[type[Event], ...] = (
    BreakerEvent, CooldownEvent, DisabledEvent, EnabledEvent, LockoutEvent, OperatorEvent,
    FaultEvent, ReloadEvent,
)
_EVENT_TYPES: dict[str, type[Event]] = {kind.TYPE: kind for kind in EVENT_CLASSES}


def event_from_dict(data: dict[str, Any]) -> Event:
    """The event a trace line or an event-stream frame describes (its inverse: to_dict).

    Raises ValueError for an unknown type or fields that do not fit it.
    """
    fields_ = dict(data)
    fields_.pop("replica", None)  # which replica of a fleet said it: not part of the event
    cls = _EVENT_TYPES.get(str(fields_.pop("type", "")))
    if cls is None:
        raise ValueError(f"unknown event type {data.get('type')!r}")
    if "from" in fields_:
        fields_["from_"] = fields_.pop("from")
    for name, enum in _ENUM_FIELDS[cls]:
        if fields_.get(name) is not None:
            fields_[name] = enum(fields_[name])  # ValueError for a word it does not know
    if cls is ReloadEvent:  # its lists are tuples in the event
        fields_ = {k: tuple(v) if isinstance(v, list) else v for k, v in fields_.items()}
    try:
        return cls(**fields_)
    except TypeError as exc:
        raise ValueError(f"a {cls.TYPE} event with the wrong fields: {exc}") from None


def _enum_fields(cls: type[Event]) -> tuple[tuple[str, type[StrEnum]], ...]:
    """The fields of `cls` that hold one of the engine's enums, with that enum."""
    found = []
    for f in fields(cls):
        for name in str(f.type).replace(" ", "").split("|"):
            if name in _ENUMS:
                found.append((f.name, _ENUMS[name]))
    return tuple(found)


_ENUM_FIELDS = {cls: _enum_fields(cls) for cls in EVENT_CLASSES}
