"""Routes: names clients ask for, mapped to ordered provider/model targets."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["DEFAULT_STRATEGY", "ORDERING_STRATEGIES", "RESUME_WHY", "Route", "Strategy",
           "Target"]

#: how the `why` of an attempt that continues a cut stream begins (`stream_resume`)
RESUME_WHY = "resume: "


class Strategy(StrEnum):
    """How a route orders its targets and their connections (docs/design.md §7)."""

    PRIORITY = "priority"  # targets in order, each provider's connections in config order
    ROUND_ROBIN = "round_robin"  # targets in order, each provider's connections rotate
    WEIGHTED = "weighted"  # targets by smooth weighted round robin, connections rotate
    LEAST_BUSY = "least_busy"  # power of two choices by requests in flight
    HEADROOM = "headroom"  # the connection with the most rate limit left first


#: a route's strategy when it names none (and a `provider/model` asked for directly): its
#: targets in order, each provider's requests spread over its ready keys, so that a
#: burst uses every key's rate limit, not the first key's alone (docs/design.md §7, §8)
DEFAULT_STRATEGY = Strategy.ROUND_ROBIN

#: the strategies that reorder per request and say why in the events
ORDERING_STRATEGIES = frozenset({Strategy.WEIGHTED, Strategy.LEAST_BUSY, Strategy.HEADROOM})


@dataclass(frozen=True, slots=True)
class Target:
    provider: str
    model: str
    #: the route's `first_token` for this target (0: off); None: the provider's
    #: `request.first_token` (docs/design.md §7)
    first_token_ms: int | None = None

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    targets: tuple[Target, ...]
    strategy: Strategy = DEFAULT_STRATEGY
    #: one weight per target (read by `weighted` only); None: every target weighs 1
    weights: tuple[int, ...] | None = None
    #: the longest a request waits to try a target once more before it falls back to
    #: another model (a short Retry-After, or one quick retry after a 5xx); 0: never
    #: (docs/design.md §7)
    fallback_wait_ms: int = 0
    #: `stream_resume: continue`: a stream cut after its first content is continued by
    #: the route's next target and spliced into the client's stream (docs/design.md §7)
    stream_resume: bool = False
