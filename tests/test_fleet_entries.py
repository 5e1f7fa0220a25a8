"""What a fleet replica reads from Redis, checked without Redis: every entry is refused
with its reason or accepted as exactly the event it describes, deadlines clamped."""

from __future__ import annotations

import json
import random
from dataclasses import fields, replace
from typing import Any

import pytest

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import ProviderSpec, ResilienceEngine, default_settings
from omniroute_tui.engine.engine import MERGED_CLASSES
from omniroute_tui.engine.events import (
    BreakerEvent,
    CooldownEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
    OperatorEvent,
    ResultEvent,
)
from omniroute_tui.engine.kinds import BreakerReason, BreakerState, FailureKind
from omniroute_tui.fleet.commands import (
    COMMAND_CLASSES,
    ClearCooldown,
    ClearLockouts,
    Disable,
    Enable,
    FleetCommand,
    ForceOpen,
    Reset,
)
from omniroute_tui.fleet.entries import (
    MAX_ENTRY_BYTES,
    SKEW_MS,
    STATE_VERSION,
    Accepted,
    Known,
    Rejected,
    Throttle,
    deadline_horizon_ms,
    read_entry,
    read_state_field,
)

NOW = 1_800_000_000_000
DAY = 86_400_000
HORIZON = 30 * DAY + SKEW_MS  # the defaults: the 30-day cap of hints and force-opens
KNOWN = Known.of(ResilienceEngine([ProviderSpec("p", ("a", "b"), default_settings())],
                                  ManualClock(0)), {"p": frozenset({"m"})})

#: one valid event of every type the link shares
VALID: dict[type[Event], Event] = {
    BreakerEvent: BreakerEvent(NOW - 10, "p", BreakerState.CLOSED, BreakerState.OPEN,
                               BreakerReason.OPERATOR_FORCE_OPEN, 0, 600_000),
    CooldownEvent: CooldownEvent(NOW - 10, "p", "a", FailureKind.RATE_LIMITED, 2,
                                 NOW + 60_000, 60_000),
    LockoutEvent: LockoutEvent(NOW - 10, "p", "b", "m", FailureKind.QUOTA_EXHAUSTED, 1,
                               NOW + 120_000),
    DisabledEvent: DisabledEvent(NOW - 10, "p", "a", "operator ops"),
    EnabledEvent: EnabledEvent(NOW - 10, "p", "a", "operator ops"),
    ResultEvent: ResultEvent(NOW - 10, "req-1", 1, "p", "a", "m", 503,
                             FailureKind.SERVER_ERROR, 12),
    OperatorEvent: OperatorEvent(NOW - 10, "clear_cooldown", "p/a", "ops", "ok"),
}


def entry(data: Any, replica: bytes = b"other") -> dict[bytes, bytes]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return {b"replica": replica, b"event": raw}


def read(data: Any, replica: bytes = b"other") -> Accepted | Rejected | None:
    return read_entry(entry(data, replica), KNOWN, NOW, own="me")


def rejected(data: Any, replica: bytes = b"other") -> str:
    answer = read(data, replica)
    assert isinstance(answer, Rejected), answer
    return answer.reason


def with_(event: Event, **changes: Any) -> dict[str, Any]:
    return {**event.to_dict(), **changes}


def test_every_shared_type_is_covered() -> None:
    assert set(VALID) == set(MERGED_CLASSES)


@pytest.mark.parametrize("event", VALID.values(), ids=lambda e: e.TYPE)
def test_a_valid_entry_is_exactly_its_event(event: Event) -> None:
    assert read(json.loads(event.to_json())) == Accepted("other", event, None)
    assert read_state_field(b"x", b"17|" + event.to_json().encode(), KNOWN, NOW) == \
        Accepted("", event, None)


def test_this_replicas_own_entry_is_not_read() -> None:
    assert read(VALID[BreakerEvent].to_dict(), replica=b"me") is None


# -- the attacker review's payloads ---------------------------------------------------------

def test_the_reviewed_payloads() -> None:
    cooldown, breaker = VALID[CooldownEvent], VALID[BreakerEvent]
    assert rejected(cooldown.to_dict(), replica=b"\xff\xfe") == "the replica is not UTF-8"
    assert rejected(with_(cooldown, t="abc")) == \
        "cooldown.t is not an integer from 0 to 2^53"
    assert rejected(with_(cooldown, provider=["alpha"])) == "cooldown.provider is not text"
    assert rejected(with_(cooldown, level="x")) == \
        "cooldown.level is not an integer from 0 to 2^53"
    assert rejected(with_(VALID[OperatorEvent], target=5)) == "operator.target is not text"
    assert rejected(with_(VALID[LockoutEvent], model={})) == "lockout.model is not text"
    for number in ("NaN", "Infinity", "-Infinity"):
        raw = breaker.to_json().replace('"retry_after_ms":600000',
                                        f'"retry_after_ms":{number}').encode()
        assert rejected(raw) == "the event is not JSON"
    for number in ("1e400", "2.5e14"):
        raw = breaker.to_json().replace("600000", number).encode()
        assert rejected(raw) == "breaker.retry_after_ms is not an integer from 0 to 2^53"
    assert rejected(with_(breaker, retry_after_ms=1.5)) == \
        "breaker.retry_after_ms is not an integer from 0 to 2^53"


def test_state_fields_of_another_form() -> None:
    event = VALID[CooldownEvent].to_json().encode()
    for value in (b"garbage-without-pipe", b"|" + event, b"abc|" + event, b"-5|" + event):
        assert read_state_field(b"connection:p/a", value, KNOWN, NOW) == Rejected(
            "a state field is neither {v, order, event} JSON nor order|event", ascii(value[:60]))
    assert read_state_field(b"connection:p/a", b"5|{", KNOWN, NOW) == Rejected(
        "the event is not JSON",
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)")


def test_the_versioned_state_field_round_trips_and_the_earlier_form_is_still_read() -> None:
    """What the link's script writes (`{"v": 1, "order": n, "event": {...}}`) reads back
    as exactly its event; the earlier release's `order|event` too (a rolling upgrade)."""
    for event in VALID.values():
        value = f'{{"v":{STATE_VERSION},"order":{event.t},"event":{event.to_json()}}}'
        assert json.loads(value)["event"] == event.to_dict()
        assert read_state_field(b"f", value.encode(), KNOWN, NOW) == Accepted("", event)
        legacy = f"{event.t}|{event.to_json()}".encode()
        assert read_state_field(b"f", legacy, KNOWN, NOW) == Accepted("", event)


def test_versioned_state_fields_that_do_not_parse() -> None:
    event = VALID[CooldownEvent].to_dict()

    def reason(field: object) -> str:
        read = read_state_field(b"f", json.dumps(field).encode(), KNOWN, NOW)
        assert isinstance(read, Rejected)
        return read.reason

    assert reason({"v": 2, "order": 1, "event": event}) == "a state field of another version"
    assert reason({"v": True, "order": 1, "event": event}) == \
        "a state field of another version"
    assert reason({"v": 1, "order": "1", "event": event}) == \
        "a state field's order is not an integer from 0 to 2^53"
    assert reason({"v": 1, "order": 2**60, "event": event}) == \
        "a state field's order is not an integer from 0 to 2^53"
    assert reason({"v": 1, "event": event}) == "a state field is not {v, order, event}"
    assert reason({"v": 1, "order": 1, "event": event, "x": 0}) == \
        "a state field is not {v, order, event}"
    assert reason({"v": 1, "order": 1, "event": "{}"}) == "the event is not a JSON object"
    assert reason({"v": 1, "order": 1, "event": {**event, "level": "x"}}) == \
        "cooldown.level is not an integer from 0 to 2^53"
    assert read_state_field(b"f", b"{not json", KNOWN, NOW).reason == (  # type: ignore[union-attr]
        "the state field is not JSON")
    assert read_state_field(b"f", b"{" * 20_000, KNOWN, NOW).reason == (  # type: ignore[union-attr]
        "the event is over 16384 bytes")


def test_entries_without_their_fields() -> None:
    assert read_entry({b"event": b"{}"}, KNOWN, NOW, own="me") == \
        Rejected("the entry names no replica")
    assert read_entry({b"replica": b"other"}, KNOWN, NOW, own="me") == \
        Rejected("the entry carries no event")
    assert rejected(VALID[CooldownEvent].to_dict(), replica=b"") == \
        "the replica is empty or over 256 characters"
    assert rejected(VALID[CooldownEvent].to_dict(), replica=b"r\x1b[2J") == \
        "the replica holds a character that does not show"


def test_json_that_is_no_event() -> None:
    assert rejected(b"[1, 2]") == "the event is not a JSON object"
    assert rejected(b'"text"') == "the event is not a JSON object"
    assert rejected({"t": 1, "type": "request", "id": "x", "route": "r"}) == \
        "the event's type is not one the fleet shares"
    assert rejected({"t": 1}) == "the event's type is not one the fleet shares"
    assert rejected({"t": 1, "type": ["breaker"]}) == \
        "the event's type is not one the fleet shares"
    assert rejected(b"[" * 5000 + b"]" * 5000) == "the event is not JSON"  # deep nesting
    assert rejected(b'{"t": ' + b"9" * 5000 + b"}") == "the event is not JSON"
    assert rejected(with_(VALID[CooldownEvent], extra=1)) == \
        "a cooldown event with other fields than its own"
    missing = VALID[CooldownEvent].to_dict()
    del missing["until"]
    assert read(missing) == Rejected("a cooldown event with other fields than its own",
                                     "until")


def test_a_megabyte_field_is_refused_unread() -> None:
    huge = json.dumps(with_(VALID[DisabledEvent], reason="x" * 1_000_000)).encode()
    assert read(huge) == Rejected(f"the event is over {MAX_ENTRY_BYTES} bytes",
                                  f"{len(huge)} bytes")
    assert rejected(VALID[DisabledEvent].to_dict(), replica=b"r" * 1_000_000) == \
        "the replica is empty or over 256 characters"


def test_random_bytes_are_refused() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        raw = rng.randbytes(rng.randrange(0, 200))
        answer = read_entry({b"replica": rng.randbytes(8), b"event": raw}, KNOWN, NOW,
                            own="me")
        assert isinstance(answer, Rejected)
        answer = read_state_field(rng.randbytes(8), raw, KNOWN, NOW)
        assert isinstance(answer, Rejected)


# -- type confusion, field by field, for every shared type ----------------------------------

WRONG: dict[str, tuple[object, ...]] = {
    "int": ("abc", 1.5, True, -1, 2**53, [1], {}, None),
    "str": (5, 1.5, True, ["x"], {}, "", "x" * 257, "a\u202eb", None),
    "bool": (1, "true", None),
    "enum": ("x", 5, ["OPEN"]),
}


def confusions() -> list[tuple[str, dict[str, Any], str]]:
    cases = []
    for cls, event in VALID.items():
        for f in fields(cls):
            key = "from" if f.name == "from_" else f.name
            declared = str(f.type).replace(" ", "").split("|")
            kind = "enum" if declared[0] in ("BreakerState", "BreakerReason", "FailureKind",
                                             "CooldownReason", "StreamCut") else declared[0]
            for value in WRONG[kind]:
                if value is None and "None" in declared:
                    continue
                where = f"{cls.TYPE}.{key}"
                reason = {
                    "int": f"{where} is not an integer from 0 to 2^53",
                    "bool": f"{where} is not true or false",
                    "enum": f"{where} is not a {declared[0]}",
                    "str": f"{where} is not text",
                }[kind]
                if isinstance(value, str) and kind == "str":
                    reason = (f"{where} holds a character that does not show" if value == "a\u202eb"
                              else f"{where} is empty or over 256 characters")
                cases.append((f"{where}={value!r:.20}", with_(event, **{key: value}), reason))
    return cases


@pytest.mark.parametrize(("data", "reason"), [c[1:] for c in confusions()],
                         ids=[c[0] for c in confusions()])
def test_a_type_confused_field_is_refused(data: dict[str, Any], reason: str) -> None:
    assert rejected(data) == reason


# -- names ----------------------------------------------------------------------------------

def test_names_this_replica_does_not_know() -> None:
    assert read(with_(VALID[CooldownEvent], provider="q")) == \
        Rejected("unknown provider", "q")
    assert read(with_(VALID[CooldownEvent], connection="z")) == \
        Rejected("unknown connection", "p/z")
    assert read(with_(VALID[LockoutEvent], model="other")) == \
        Rejected("unknown model", "p/other")
    assert read(with_(VALID[ResultEvent], model="other")) == \
        Rejected("unknown model", "p/other")
    operator = VALID[OperatorEvent]
    assert read(with_(operator, target="p/z")) == Rejected("unknown connection", "p/z")
    assert read(with_(operator, target="q")) == \
        Rejected("a clear_cooldown target of another form", "q")
    assert read(with_(operator, action="format_disk")) == \
        Rejected("an operator event with an unknown action", "format_disk")
    assert read(with_(operator, action="reset_breaker", target="q")) == \
        Rejected("unknown provider", "q")
    assert read(with_(operator, action="clear_lockouts", target="p/a")) == \
        Rejected("an operator target is not provider/connection/model", "p/a")
    assert read(with_(operator, action="clear_lockouts", target="*/a/*")) == \
        Rejected("an operator target names a connection of any provider", "*/a/*")
    for target in ("*/*/*", "p/*/*", "p/a/m", "p/*/m"):
        assert isinstance(read(with_(operator, action="clear_lockouts", target=target)),
                          Accepted)


def test_without_the_routers_models_any_model_name_is_read() -> None:
    known = replace(KNOWN, models={"p": None})
    data = entry(with_(VALID[LockoutEvent], model="other"))
    assert isinstance(read_entry(data, known, NOW, own="me"), Accepted)


# -- deadlines ------------------------------------------------------------------------------

def test_the_horizon_is_the_longest_window_the_settings_set() -> None:
    settings = default_settings()
    assert deadline_horizon_ms(settings) == HORIZON
    longer = replace(settings, lockout=replace(settings.lockout, max_ms=60 * DAY))
    assert deadline_horizon_ms(longer) == 60 * DAY + SKEW_MS
    escalated = replace(settings, breaker=replace(settings.breaker, reset_timeout_ms=DAY,
                                                  max_multiplier=40))
    assert deadline_horizon_ms(escalated) == 40 * DAY + SKEW_MS


def test_far_future_deadlines_are_clamped_exactly() -> None:
    breaker = VALID[BreakerEvent]
    answer = read(with_(breaker, retry_after_ms=250_000_000_000_000))
    assert answer == Accepted("other", replace(breaker, retry_after_ms=NOW + HORIZON
                                               - breaker.t),
                              "breaker retry_after_ms 250000000000000 -> 2592005010")
    year_9999 = 253_402_300_799_000
    cooldown = VALID[CooldownEvent]
    answer = read(with_(cooldown, until=year_9999, level=99, hint_ms=2**40))
    assert answer == Accepted("other", replace(cooldown, until=NOW + HORIZON, level=5,
                                               hint_ms=30 * DAY),
                              f"cooldown until {year_9999} -> {NOW + HORIZON}, level 99 -> 5, "
                              f"hint_ms {2**40} -> {30 * DAY}")
    lockout = VALID[LockoutEvent]
    assert read(with_(lockout, until=year_9999)) == Accepted(
        "other", replace(lockout, until=NOW + HORIZON),
        f"lockout until {year_9999} -> {NOW + HORIZON}")
    # at the horizon exactly: adopted as it is
    assert read(with_(lockout, until=NOW + HORIZON)) == Accepted(
        "other", replace(lockout, until=NOW + HORIZON), None)


def test_a_time_from_the_future_is_now() -> None:
    breaker = VALID[BreakerEvent]
    answer = read(with_(breaker, t=NOW + SKEW_MS + 1))
    assert answer == Accepted("other", replace(breaker, t=NOW),
                              f"breaker t {NOW + SKEW_MS + 1} -> {NOW}")
    ahead = replace(breaker, t=NOW + SKEW_MS)  # within the skew: as it is
    assert read(ahead.to_dict()) == Accepted("other", ahead, None)
    year_9999 = 253_402_300_799_000
    far = read(with_(breaker, t=year_9999, retry_after_ms=year_9999))
    assert isinstance(far, Accepted) and far.event == replace(breaker, t=NOW,
                                                              retry_after_ms=HORIZON)


def test_deadlines_from_the_far_past_are_read_as_they_are() -> None:
    """The merge rules ignore a deadline that has passed (nothing to clamp)."""
    for event in (replace(VALID[BreakerEvent], t=0, retry_after_ms=1),
                  replace(VALID[CooldownEvent], t=0, until=0),
                  replace(VALID[LockoutEvent], t=1, until=2)):
        assert read(event.to_dict()) == Accepted("other", event, None)


# -- the log throttle -----------------------------------------------------------------------

def test_one_line_per_reason_per_minute_with_a_count() -> None:
    throttle = Throttle(every_ms=60_000)
    assert throttle.admit("a", 0) == 0
    assert [throttle.admit("a", t) for t in (1, 30_000, 59_999)] == [None, None, None]
    assert throttle.admit("b", 10) == 0  # another reason has its own minute
    assert throttle.admit("a", 60_000) == 3
    assert throttle.admit("a", 120_000) == 0


def test_the_throttle_keeps_few_reasons() -> None:
    throttle = Throttle(every_ms=60_000, reasons=4)
    for i in range(4):
        assert throttle.admit(f"r{i}", 0) == 0
    assert throttle.admit("r4", 1) == 0  # the table is full: the oldest half goes
    assert throttle.admit("r0", 2) == 0
    assert throttle.admit("r3", 3) is None


# -- operator actions as commands -----------------------------------------------------------

SLASHED = replace(KNOWN, models={"p": frozenset({"m", "org/m-1"})})
COMMANDS: tuple[FleetCommand, ...] = (
    Reset(NOW - 10, "ops", "p"), ForceOpen(NOW - 10, "ops", "p", NOW + 600_000),
    ClearCooldown(NOW - 10, "ops", "p", "a"), Enable(NOW - 10, "ops", "p", "a"),
    Disable(NOW - 10, "ops", "p", "b"), ClearLockouts(NOW - 10, "ops", None, None, None),
    ClearLockouts(NOW - 10, "ops", "p", None, None),
    ClearLockouts(NOW - 10, "ops", "p", "a", "org/m-1"))


def test_every_command_is_covered() -> None:
    assert {type(c) for c in COMMANDS} == set(COMMAND_CLASSES.values())


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.WORD}-{c.t}")
def test_a_valid_command_is_exactly_itself(command: FleetCommand) -> None:
    read_ = read_entry(entry(json.loads(command.to_json())), SLASHED, NOW, own="me")
    assert read_ == Accepted("other", command, None)
    assert read_state_field(b"x", b"3|" + command.to_json().encode(), SLASHED, NOW) == \
        Accepted("", command, None)
    versioned = f'{{"v":{STATE_VERSION},"order":3,"event":{command.to_json()}}}'.encode()
    assert read_state_field(b"forced:p", versioned, SLASHED, NOW) == Accepted("", command, None)


def test_a_malformed_command_is_refused_with_its_reason() -> None:
    force = COMMANDS[1].to_dict()
    clear = COMMANDS[-1].to_dict()

    def why(data: dict[str, Any]) -> Rejected | Accepted | None:
        return read_entry(entry(data), SLASHED, NOW, own="me")

    assert why({**force, "command": "format_disk"}) == \
        Rejected("a command the fleet does not know", "format_disk")
    assert why({**force, "command": 3}) == Rejected("a command the fleet does not know", "3")
    assert why({**force, "extra": 1}) == \
        Rejected("a force_open command with other fields than its own", "extra")
    assert why({k: v for k, v in force.items() if k != "actor"}) == \
        Rejected("a force_open command with other fields than its own", "actor")
    assert why({**force, "until": "soon"}) == \
        Rejected("force_open.until is not an integer from 0 to 2^53", "soon")
    assert why({**force, "until": -1}) == \
        Rejected("force_open.until is not an integer from 0 to 2^53", "-1")
    assert why({**force, "provider": None}) == Rejected("force_open.provider is not text",
                                                        "None")
    assert why({**force, "actor": "\u202eevil"}) == \
        Rejected("force_open.actor holds a character that does not show", "\\u202eevil")
    assert why({**force, "provider": "q"}) == Rejected("unknown provider", "q")
    assert why({**clear, "model": "other"}) == Rejected("unknown model", "p/other")
    assert why({**clear, "connection": "z"}) == Rejected("unknown connection", "p/z")
    assert why({**clear, "provider": None}) == \
        Rejected("a command names a connection of any provider", "a")
    assert why({**clear, "model": 5}) == Rejected("clear_lockouts.model is not text", "5")


def test_a_force_opens_deadline_is_bounded() -> None:
    late = ForceOpen(NOW + SKEW_MS + 1, "ops", "p", NOW + 100 * DAY)
    assert read_entry(entry(late.to_dict()), KNOWN, NOW, own="me") == Accepted(
        "other", ForceOpen(NOW, "ops", "p", NOW + HORIZON),
        f"force_open t {late.t} -> {NOW}, until {late.until} -> {NOW + HORIZON}")


def test_the_audit_of_a_clear_names_a_model_holding_a_slash() -> None:
    audit = OperatorEvent(NOW - 10, "clear_lockouts", "p/*/org/m-1", "ops", "cleared 1")
    assert read_entry(entry(audit.to_dict()), SLASHED, NOW, own="me") == \
        Accepted("other", audit, None)
    assert read_entry(entry(with_(audit, target="p/*/org/zz")), SLASHED, NOW, own="me") == \
        Rejected("unknown model", "p/org/zz")
