"""Routes: names clients ask for, mapped to ordered provider/model targets."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Route", "Strategy", "Target"]


class Strategy(StrEnum):
    PRIORITY = "priority"
    ROUND_ROBIN = "round_robin"


@dataclass(frozen=True, slots=True)
class Target:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    targets: tuple[Target, ...]
    strategy: Strategy = Strategy.PRIORITY
