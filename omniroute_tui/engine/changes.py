"""A count of the changes that can stop a provider from serving (docs/design.md §7).

Before it orders a request's targets, a route strategy asks each whether it could take
the request. The answer is nearly always yes for every one, and it stays yes until a
breaker counts a failure or changes state, a key leaves the ready ones or starts cooling,
or a model is locked out. Each layer counts those changes here (one count per engine), so
a strategy that found every target quiet keeps that answer while the count stands and no
key's cooling ends, instead of asking every target on every request.
"""

from __future__ import annotations

__all__ = ["Changes"]


class Changes:
    """How many such changes an engine's layers have made; only its growth means anything."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0
