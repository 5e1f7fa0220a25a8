"""What a fleet replica reads from Redis, checked before any of it touches an engine.

Redis is shared: any client of it can write the stream and the state hash, so an entry is
untrusted input (docs/design.md §10). `read_entry` and `read_state_field` turn the raw
bytes into a typed event, or into the reason it was refused: UTF-8, JSON without NaN or
Infinity, exactly the fields of its type with the types they declare (bounded integers,
bounded visible text, the engine's words), names this replica knows (an operator's
action comes as its command: `omniroute_tui/fleet/commands.py`), and deadlines no
later than this replica's own settings could set from now (later ones are clamped, and
say so). Pure functions of their arguments (sans-IO): the link logs and counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from ..config.hidden import find_hidden
from ..engine.engine import ResilienceEngine
from ..engine.events import (
    BreakerEvent,
    CooldownEvent,
    Event,
    LockoutEvent,
    OperatorEvent,
    event_from_dict,
)
from ..engine.kinds import BreakerReason, BreakerState, CooldownReason, FailureKind, StreamCut
from ..engine.retry_hints import MAX_HINT_MS
from ..engine.settings import ResilienceSettings
from .commands import (
    COMMAND_CLASSES,
    FleetCommand,
    ForceOpen,
    command_fields,
    command_from_dict,
)
from .peer import SHARED_EVENTS, Shared

__all__ = [
    "CONFIG_VERSION", "MAX_ENTRY_BYTES", "SKEW_MS", "STATE_VERSION", "Accepted",
    "ConfigVersion", "Known", "Rejected", "Throttle", "config_field", "deadline_horizon_ms",
    "read_config_field", "read_entry", "read_state_field", "rebased",
]

#: how far another replica's clock may run ahead of this one's
SKEW_MS = 5_000
#: an event's JSON is a few hundred bytes; anything much larger is not one
MAX_ENTRY_BYTES = 16_384
#: names, reasons and actors: a config's names are far shorter
MAX_TEXT = 256
#: the encoding of a state field: {"v": 1, "order": n, "event": {...}}
STATE_VERSION = 1
#: integers as JSON carries them exactly (and far beyond any deadline in ms)
MAX_INT = 2**53 - 1
#: what an operator event may say was done (the engine's `_audit` actions)
ACTIONS = frozenset({"reset_breaker", "force_open", "clear_cooldown", "enable", "disable",
                     "clear_lockouts", "reload"})
#: the encoding of a field of the config versions hash: {"v": 1, "version", "loaded_at_ms", "t"}
CONFIG_VERSION = 1
_HEX12 = frozenset("0123456789abcdef")
_SHARED = {cls.TYPE: cls for cls in SHARED_EVENTS}
_WORDS: dict[str, frozenset[str]] = {
    "BreakerState": frozenset(BreakerState), "BreakerReason": frozenset(BreakerReason),
    "FailureKind": frozenset(FailureKind), "CooldownReason": frozenset(CooldownReason),
    "StreamCut": frozenset(StreamCut)}


@dataclass(frozen=True)
class Known:
    """What this replica's config knows: each provider's connections, its models (None:
    any name, as the router takes), and the latest deadline it adopts from now."""

    connections: Mapping[str, frozenset[str]]
    models: Mapping[str, frozenset[str] | None]
    horizon_ms: Mapping[str, int]
    max_level: Mapping[str, int]

    @classmethod
    def of(cls, engine: ResilienceEngine,
           models: Mapping[str, frozenset[str]] | None = None) -> Known:
        specs = [engine.layers(name).spec for name in engine.providers()]
        return cls(
            connections={s.name: frozenset(s.connections) for s in specs},
            models={s.name: (models or {}).get(s.name) for s in specs},
            horizon_ms={s.name: deadline_horizon_ms(s.settings) for s in specs},
            max_level={s.name: s.settings.cooldown.max_level for s in specs})


def deadline_horizon_ms(settings: ResilienceSettings) -> int:
    """The longest window these settings can set (the longest lockout, cooldown or
    escalated OPEN, or a retry hint / force-open at its cap), plus the clock skew."""
    breaker = settings.breaker
    resets = [breaker.reset_timeout_ms, *(o.reset_timeout_ms for o in breaker.kinds.values()
                                          if o.reset_timeout_ms is not None)]
    return max(settings.lockout.max_ms, settings.cooldown.max_ms, settings.cooldown.quota_ms,
               max(resets) * breaker.max_multiplier, MAX_HINT_MS) + SKEW_MS


@dataclass(frozen=True)
class Accepted:
    """An entry fit to merge: who said it, the event, and what was clamped (None: nothing)."""

    replica: str
    event: Shared  # an event, or an operator's action as its command
    clamped: str | None = None


@dataclass(frozen=True)
class Rejected:
    """Why an entry was refused: `reason` is one of few sentences (logs are throttled per
    reason), `detail` the offending part, escaped and short."""

    reason: str
    detail: str = ""


class _Refusal(Exception):
    def __init__(self, reason: str, detail: object = "") -> None:
        super().__init__(reason)
        self.rejected = Rejected(reason, _shown(detail))


def _shown(value: object) -> str:
    text = ascii(value)[1:-1] if isinstance(value, str) else ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_entry(fields_: Mapping[bytes, bytes], known: Known, now: int, *,
               own: str) -> Accepted | Rejected | None:
    """One stream entry (`replica`, `event`): None when it is this replica's (`own`)."""
    raw_replica = fields_.get(b"replica")
    try:
        if not isinstance(raw_replica, bytes):
            raise _Refusal("the entry names no replica")
        replica = _text(_utf8(raw_replica, "the replica"), "the replica")
        if replica == own:
            return None
        raw = fields_.get(b"event")
        if not isinstance(raw, bytes):
            raise _Refusal("the entry carries no event")
        event, clamped = _read_event(raw, known, now)
    except _Refusal as refusal:
        return refusal.rejected
    return Accepted(replica, event, clamped)


def read_state_field(name: bytes, value: bytes, known: Known, now: int) -> Accepted | Rejected:
    """One field of the state hash, as the link's Lua script keeps it: a JSON object
    `{"v": 1, "order": n, "event": {...}}` (docs/design.md §10). The earlier release's
    `order|event` is read too, for one release, so a fleet upgraded one replica at a
    time reads what the others wrote; the next release reads the JSON form only."""
    try:
        if value[:1] != b"{":
            order, bar, raw = value.partition(b"|")
            if not bar or not order.isdigit():
                raise _Refusal("a state field is neither {v, order, event} JSON nor "
                               "order|event", value[:60])
            event, clamped = _read_event(raw, known, now)
            return Accepted("", event, clamped)
        if len(value) > MAX_ENTRY_BYTES + 64:
            raise _Refusal(f"the event is over {MAX_ENTRY_BYTES} bytes", f"{len(value)} bytes")
        field = _json(value, "the state field")
        if not isinstance(field, dict) or field.keys() != {"v", "order", "event"}:
            raise _Refusal("a state field is not {v, order, event}",
                           sorted(field) if isinstance(field, dict) else type(field).__name__)
        if type(field["v"]) is not int or field["v"] != STATE_VERSION:
            raise _Refusal("a state field of another version", field["v"])
        order = field["order"]
        if type(order) is not int or not 0 <= order <= MAX_INT:
            raise _Refusal("a state field's order is not an integer from 0 to 2^53", order)
        event, clamped = _event_of(field["event"], known, now)
    except _Refusal as refusal:
        return refusal.rejected
    return Accepted("", event, clamped)


@dataclass(frozen=True)
class ConfigVersion:
    """Which config a replica says it runs (`version`, loaded at `loaded_at_ms`), as of
    `t` (its clock, epoch ms): it says so again every few seconds while it runs."""

    replica: str
    version: str
    loaded_at_ms: int
    t: int


def config_field(version: str, loaded_at_ms: int, now: int) -> bytes:
    """This replica's field of the config versions hash."""
    return json.dumps({"v": CONFIG_VERSION, "version": version, "loaded_at_ms": loaded_at_ms,
                       "t": now}, separators=(",", ":")).encode()


def read_config_field(name: bytes, value: bytes, now: int) -> ConfigVersion | Rejected:
    """One field of the config versions hash (replica -> its config's version), checked
    like every other entry: a bounded visible replica name, a small JSON object of
    exactly its fields, a version of 12 hex digits, times no later than the clock skew
    allows."""
    try:
        replica = _text(_utf8(name, "the replica"), "the replica")
        if len(value) > 256:
            raise _Refusal("a config version field is over 256 bytes", f"{len(value)} bytes")
        data = _json(value, "the config version")
        if not isinstance(data, dict) or data.keys() != {"v", "version", "loaded_at_ms", "t"}:
            raise _Refusal("a config version field is not {v, version, loaded_at_ms, t}",
                           sorted(data) if isinstance(data, dict) else type(data).__name__)
        if type(data["v"]) is not int or data["v"] != CONFIG_VERSION:
            raise _Refusal("a config version field of another version", data["v"])
        version = data["version"]
        if (not isinstance(version, str) or len(version) != 12
                or not set(version) <= _HEX12):
            raise _Refusal("a config version is not 12 hex digits", version)
        for key in ("loaded_at_ms", "t"):
            if type(data[key]) is not int or not 0 <= data[key] <= now + SKEW_MS:
                raise _Refusal(f"a config version's {key} is not a time up to now", data[key])
    except _Refusal as refusal:
        return refusal.rejected
    return ConfigVersion(replica, version, data["loaded_at_ms"], data["t"])


def _read_event(raw: bytes, known: Known, now: int) -> tuple[Shared, str | None]:
    if len(raw) > MAX_ENTRY_BYTES:
        raise _Refusal(f"the event is over {MAX_ENTRY_BYTES} bytes", f"{len(raw)} bytes")
    return _event_of(_json(raw, "the event"), known, now)


def _json(raw: bytes, what: str) -> Any:
    try:
        return _DECODER.decode(_utf8(raw, what))
    except (ValueError, RecursionError) as exc:
        raise _Refusal(f"{what} is not JSON", str(exc)) from None


def _event_of(data: Any, known: Known, now: int) -> tuple[Shared, str | None]:
    """A decoded event (or command), checked: its type, fields, names and deadlines."""
    if not isinstance(data, dict):
        raise _Refusal("the event is not a JSON object", type(data).__name__)
    if "command" in data:
        return _read_command(data, known, now)
    kind = data.get("type")
    cls = _SHARED.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _Refusal("the event's type is not one the fleet shares", kind)
    _check_fields(cls, data)
    event = event_from_dict(data)  # the types are checked: this only builds it
    _check_names(event, known)
    return _bounded(event, known, now)


def _read_command(data: dict[str, Any], known: Known, now: int
                  ) -> tuple[FleetCommand, str | None]:
    """An operator's action as its command: exactly its fields, each of its declared
    type, naming what this replica has; a force-open's deadline bounded like any other."""
    word = data["command"]
    cls = COMMAND_CLASSES.get(word) if isinstance(word, str) else None
    if cls is None:
        raise _Refusal("a command the fleet does not know", word)
    declared = _COMMAND_SPECS[cls]
    if data.keys() != declared.keys() | {"command"}:
        odd = sorted(set(data) ^ (declared.keys() | {"command"}))
        raise _Refusal(f"a {cls.WORD} command with other fields than its own", ", ".join(odd))
    for key, kind in declared.items():
        value, where = data[key], f"{cls.WORD}.{key}"
        if value is None and kind.endswith("| None"):
            continue
        if kind == "int":
            if type(value) is not int or not 0 <= value <= MAX_INT:
                raise _Refusal(f"{where} is not an integer from 0 to 2^53", value)
        elif not isinstance(value, str):
            raise _Refusal(f"{where} is not text", value)
        else:
            _text(value, where)
    command = command_from_dict(data)
    provider = command.provider_named
    connection, model = getattr(command, "connection", None), getattr(command, "model", None)
    if provider is None:
        if connection is not None:
            raise _Refusal("a command names a connection of any provider", connection)
    else:
        _known(provider, connection, model, known)
    changed: dict[str, Any] = {}
    if command.t > now + SKEW_MS:
        changed["t"] = now
    if isinstance(command, ForceOpen):
        assert provider is not None
        limit = now + known.horizon_ms[provider]
        if command.until > limit:
            changed["until"] = limit
    return _changed(command, changed, cls.WORD)


_Clamped = TypeVar("_Clamped", Event, FleetCommand)


def _changed(value: _Clamped, changed: dict[str, Any], word: str
             ) -> tuple[_Clamped, str | None]:
    """`value` with the `changed` fields replaced, and what was clamped (None: nothing)."""
    if not changed:
        return value, None
    said = ", ".join(f"{key} {getattr(value, key)} -> {new}" for key, new in changed.items())
    return replace(value, **changed), f"{word} {said}"


_COMMAND_SPECS = {cls: {key: text.replace(" ", "").replace("|None", " | None")
                        for key, text in command_fields(cls).items()}
                  for cls in COMMAND_CLASSES.values()}


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a number JSON carries")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise _Refusal(f"{what} is not UTF-8", raw[:40]) from None


def _text(value: str, what: str) -> str:
    if not value or len(value) > MAX_TEXT:
        raise _Refusal(f"{what} is empty or over {MAX_TEXT} characters", value)
    if find_hidden(value) is not None:
        raise _Refusal(f"{what} holds a character that does not show", value)
    return value


@dataclass(frozen=True)
class _Field:
    key: str
    kind: str  # "int", "bool", "str" or one of _WORDS
    nullable: bool
    where: str  # "cooldown.level", for the reason


def _field_specs(cls: type[Event]
                 ) -> tuple[frozenset[str], frozenset[str], tuple[_Field, ...]]:
    """The JSON keys of `cls` (all, and those a line always holds: an optional field is
    left out while unset) and each one's declared type, read once per class."""
    declared = {"t": "int"} | {("from" if f.name == "from_" else f.name): str(f.type)
                               for f in fields(cls) if f.name != "t"}
    optional = {f.name for f in fields(cls) if f.default is None}
    specs = []
    for key, text in declared.items():
        kinds = text.replace(" ", "").split("|")
        specs.append(_Field(key, kinds[0], "None" in kinds, f"{cls.TYPE}.{key}"))
    keys = frozenset(declared) | {"type"}
    return keys, keys - optional, tuple(specs)


_SPECS = {cls: _field_specs(cls) for cls in SHARED_EVENTS}


def _check_fields(cls: type[Event], data: dict[str, Any]) -> None:
    """Exactly the fields of `cls` (an optional one may be left out), each of the type it
    declares."""
    keys, required, specs = _SPECS[cls]
    if not required <= data.keys() <= keys:
        odd = sorted((set(data) ^ keys) - (keys - required - set(data)))
        raise _Refusal(f"a {cls.TYPE} event with other fields than its own", ", ".join(odd))
    for spec in specs:
        value = data.get(spec.key)
        if value is None and spec.nullable:
            continue
        kind = spec.kind
        if kind == "int":
            if type(value) is not int or not 0 <= value <= MAX_INT:
                raise _Refusal(f"{spec.where} is not an integer from 0 to 2^53", value)
        elif kind == "str":
            if not isinstance(value, str):
                raise _Refusal(f"{spec.where} is not text", value)
            _text(value, spec.where)
        elif kind == "bool":
            if type(value) is not bool:
                raise _Refusal(f"{spec.where} is not true or false", value)
        elif not isinstance(value, str) or value not in _WORDS[kind]:
            raise _Refusal(f"{spec.where} is not a {kind}", value)


def _check_names(event: Event, known: Known) -> None:
    """Providers, connections and models this replica has (an operator's target too)."""
    if isinstance(event, OperatorEvent):
        if event.action not in ACTIONS:
            raise _Refusal("an operator event with an unknown action", event.action)
        if event.action == "reload":  # the other replica's own file: no names of ours
            return
        # a model's name may hold "/": the third part is the rest
        parts = event.target.split("/", 2 if event.action == "clear_lockouts" else -1)
        if event.action == "clear_lockouts":
            if len(parts) != 3:
                raise _Refusal("an operator target is not provider/connection/model",
                               event.target)
            provider, connection, model = (None if p == "*" else p for p in parts)
        elif len(parts) != (1 if event.action in ("reset_breaker", "force_open") else 2):
            raise _Refusal(f"a {event.action} target of another form", event.target)
        else:
            provider, connection, model = parts[0], parts[1] if len(parts) == 2 else None, None
        if provider is None:
            if connection is not None:
                raise _Refusal("an operator target names a connection of any provider",
                               event.target)
            return
        _known(provider, connection, model, known)
        return
    _known(event.provider, getattr(event, "connection", None),  # type: ignore[attr-defined]
           getattr(event, "model", None), known)


def _known(provider: str, connection: str | None, model: str | None, known: Known) -> None:
    connections = known.connections.get(provider)
    if connections is None:
        raise _Refusal("unknown provider", provider)
    if connection is not None and connection not in connections:
        raise _Refusal("unknown connection", f"{provider}/{connection}")
    models = known.models.get(provider)
    if model is not None and models is not None and model not in models:
        raise _Refusal("unknown model", f"{provider}/{model}")


def _bounded(event: Event, known: Known, now: int) -> tuple[Event, str | None]:
    """`event` with its time and deadlines clamped to what this replica could set."""
    changed: dict[str, Any] = {}
    if event.t > now + SKEW_MS:
        changed["t"] = now
    t = changed.get("t", event.t)
    provider = getattr(event, "provider", None) or event.target.split("/")[0]  # type: ignore[attr-defined]
    limit = now + known.horizon_ms.get(provider, MAX_HINT_MS + SKEW_MS)
    if isinstance(event, BreakerEvent) and event.retry_after_ms is not None:
        if t + event.retry_after_ms > limit:
            changed["retry_after_ms"] = limit - t
    elif isinstance(event, CooldownEvent | LockoutEvent):
        if event.until > limit:
            changed["until"] = limit
        if isinstance(event, CooldownEvent):
            if event.level > known.max_level[provider]:
                changed["level"] = known.max_level[provider]
            if event.hint_ms is not None and event.hint_ms > MAX_HINT_MS:
                changed["hint_ms"] = MAX_HINT_MS
    return _changed(event, changed, event.TYPE)


@dataclass
class _Count:
    logged_at: int
    unlogged: int = 0


class Throttle:
    """At most one log line per reason per `every_ms`: `admit` says whether to write one
    now, and how many like it went unwritten since the last (None: stay quiet)."""

    def __init__(self, every_ms: int = 60_000, reasons: int = 1_000) -> None:
        self.every_ms = every_ms
        self._reasons = reasons
        self._seen: dict[str, _Count] = {}

    def admit(self, reason: str, now: int) -> int | None:
        seen = self._seen.get(reason)
        if seen is not None and now - seen.logged_at < self.every_ms:
            seen.unlogged += 1
            return None
        if seen is None and len(self._seen) >= self._reasons:
            self._forget(now)
        unlogged = 0 if seen is None else seen.unlogged
        self._seen[reason] = _Count(now)
        return unlogged

    def _forget(self, now: int) -> None:
        """Reasons quiet for a whole period say nothing new: keep the table bounded."""
        stale = [r for r, c in self._seen.items() if now - c.logged_at >= self.every_ms]
        for reason in stale or list(self._seen)[: self._reasons // 2]:
            del self._seen[reason]


def rebased(item: Shared, delta_ms: int) -> Shared:
    """`item` with its times (`t`, and an absolute deadline `until`) moved by `delta_ms`:
    from this replica's clock to Redis' on the way out, back on the way in. A duration
    (`retry_after_ms`, a hint) stays as it is."""
    if not delta_ms:
        return item
    moved: dict[str, int] = {"t": item.t + delta_ms}
    until = getattr(item, "until", None)
    if type(until) is int:
        moved["until"] = until + delta_ms
    return replace(item, **moved)  # type: ignore[arg-type]
