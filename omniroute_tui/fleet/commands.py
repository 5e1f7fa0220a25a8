"""The operator actions a fleet replica shares, as typed values (docs/design.md §10).

An action shortens deadlines (a reset, a clear) or states one no merge of state would
(a force-open and who forced it), so the action itself travels, not its audit text: each
command names its target in fields of its own, so a model named `meta-llama/Llama-3.1-8B`
is a model, not two path parts. Encoded as a JSON object with exactly its fields and a
`"command"` word; `command_from_dict` builds one back (the fleet's reader checks the
fields' types first: `omniroute_tui/fleet/entries.py`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

__all__ = [
    "COMMAND_CLASSES", "ClearCooldown", "ClearLockouts", "Disable", "Enable", "FleetCommand",
    "ForceOpen", "Reset", "command_fields", "command_from_dict",
]


@dataclass(frozen=True)
class FleetCommand:
    """An operator's action, done where the operator acted (at `t`) and on every other
    replica when heard; `actor` is who did it."""

    WORD: ClassVar[str] = "command"
    t: int
    actor: str

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.WORD, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @property
    def provider_named(self) -> str | None:
        """The provider the command acts on (None: every provider)."""
        return getattr(self, "provider", None)


@dataclass(frozen=True)
class Reset(FleetCommand):
    """Close the provider's breaker with its counters zeroed (ends a force-open)."""

    WORD: ClassVar[str] = "reset"
    provider: str


@dataclass(frozen=True)
class ForceOpen(FleetCommand):
    """Keep the provider's breaker OPEN until `until` (epoch ms), whatever probes say."""

    WORD: ClassVar[str] = "force_open"
    provider: str
    until: int


@dataclass(frozen=True)
class ClearCooldown(FleetCommand):
    """End one connection's cooldown and reset its escalation."""

    WORD: ClassVar[str] = "clear_cooldown"
    provider: str
    connection: str


@dataclass(frozen=True)
class ClearLockouts(FleetCommand):
    """Clear model lockouts: each of provider, connection, model narrows (None: any); a
    connection is named within a provider."""

    WORD: ClassVar[str] = "clear_lockouts"
    provider: str | None
    connection: str | None
    model: str | None


@dataclass(frozen=True)
class Enable(FleetCommand):
    """Put an operator-disabled (or auth-disabled) connection back in rotation."""

    WORD: ClassVar[str] = "enable"
    provider: str
    connection: str


@dataclass(frozen=True)
class Disable(FleetCommand):
    """Take a connection out of rotation until an operator enables it."""

    WORD: ClassVar[str] = "disable"
    provider: str
    connection: str


#: every command class, by its word
COMMAND_CLASSES: dict[str, type[FleetCommand]] = {
    cls.WORD: cls for cls in (Reset, ForceOpen, ClearCooldown, ClearLockouts, Enable, Disable)}


def command_fields(cls: type[FleetCommand]) -> dict[str, str]:
    """Each field of `cls` and its declared type (`"int"`, `"str"`, `"str | None"`)."""
    return {f.name: str(f.type) for f in fields(cls)}


def command_from_dict(data: dict[str, Any]) -> FleetCommand:
    """The command `data` encodes; ValueError naming what is wrong (no type checks: the
    reader has done them)."""
    cls = COMMAND_CLASSES.get(str(data.get("command", "")))
    if cls is None:
        raise ValueError(f"not a fleet command: {data.get('command')!r}")
    values = {k: v for k, v in data.items() if k != "command"}
    try:
        return cls(**values)
    except TypeError as exc:
        raise ValueError(f"a {cls.WORD} command with the wrong fields: {exc}") from None
