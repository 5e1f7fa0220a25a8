"""`@value`: immutable-by-contract dataclasses for the routing hot path.

Frozen dataclasses pay for `object.__setattr__` on every field, which makes them about
three times slower to build than plain slotted ones; events and routing steps are built
several times per request. `@value` tells type checkers the class is frozen (mypy rejects
assignments to its fields) while building a plain slotted dataclass at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

__all__ = ["value"]

T = TypeVar("T", bound=type)


@dataclass_transform(frozen_default=True)
def value(cls: T) -> T:
    return dataclass(slots=True)(cls)  # type: ignore[return-value]
