"""The order a request tries its route's targets and connections in (docs/design.md §7).

A strategy only orders: the breaker, cooldowns, lockouts, dedup, the retry budget and
admission waits refuse and wait exactly as under `priority`, on whatever order it gives.
Every counter here is this process's own (a fleet's replicas each keep theirs).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from itertools import chain, islice

from ..engine.engine import ProviderLayers
from .rate_limits import RateLimitInfo

__all__ = ["UNSET_WINDOW_MS", "WINDOW", "Headroom", "KeyLimits", "LeastBusy", "weighted_pick"]

#: how long a remaining count without a reset time is trusted (a typical window)
UNSET_WINDOW_MS = 60_000
#: the EWMA's weight of a new latency
LATENCY_ALPHA = 0.2
#: how many ready keys `headroom` compares per decision, from the rotation's position
WINDOW = 8
_FULL = float("inf")  # the score of a key that never said its limits


def weighted_pick(current: list[int], weights: Sequence[int], usable: Sequence[int]) -> int:
    """Smooth weighted round robin (nginx's) over the target positions in `usable`: each
    gains its weight, the highest (first on a tie) is chosen and loses the usable total.
    A target left out gains nothing, so its share goes to the others in proportion."""
    total = 0
    best = -1
    for i in usable:
        weight = weights[i]
        total += weight
        current[i] += weight
        if best < 0 or current[i] > current[best]:
            best = i
    current[best] -= total
    return best


class LeastBusy:
    """Requests in flight per provider and per connection, and an EWMA of each
    provider's latency, for the power of two choices."""

    __slots__ = ("by_connection", "by_provider", "latency", "rng")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed ^ 0x1EA57)
        self.by_provider: dict[str, int] = {}
        self.by_connection: dict[tuple[str, str], int] = {}
        self.latency: dict[str, float] = {}

    def started(self, provider: str, connection: str) -> None:
        self.by_provider[provider] = self.by_provider.get(provider, 0) + 1
        key = (provider, connection)
        self.by_connection[key] = self.by_connection.get(key, 0) + 1

    def finished(self, provider: str, connection: str, latency_ms: int) -> None:
        count = self.by_provider.get(provider, 0) - 1
        if count > 0:
            self.by_provider[provider] = count
        else:
            self.by_provider.pop(provider, None)
        key = (provider, connection)
        count = self.by_connection.get(key, 0) - 1
        if count > 0:
            self.by_connection[key] = count
        else:
            self.by_connection.pop(key, None)
        old = self.latency.get(provider)
        self.latency[provider] = float(latency_ms) if old is None else (
            old + LATENCY_ALPHA * (latency_ms - old))

    def two(self, n: int) -> tuple[int, int]:
        """Two different positions out of `n` >= 2, drawn from the seeded generator
        (`random()` scaled: a fifth of `randrange`'s cost)."""
        draw = self.rng.random
        a = int(draw() * n)
        b = int(draw() * (n - 1))
        return a, b + 1 if b >= a else b

    def pick_target(self, providers: Sequence[str], usable: Sequence[int]
                    ) -> tuple[int, int]:
        """The less busy of two usable targets drawn at random (the lower EWMA latency on
        a tie, then the first drawn), and the other one drawn (-1 when only one is
        usable)."""
        if len(usable) == 1:
            return usable[0], -1
        x, y = self.two(len(usable))
        a, b = usable[x], usable[y]
        by_provider = self.by_provider
        busy_a, busy_b = by_provider.get(providers[a], 0), by_provider.get(providers[b], 0)
        if busy_a != busy_b:
            return (a, b) if busy_a < busy_b else (b, a)
        latency = self.latency
        if latency.get(providers[b], 0.0) < latency.get(providers[a], 0.0):
            return b, a
        return a, b

    def explain_target(self, providers: Sequence[str], labels: Sequence[str], win: int,
                       lose: int) -> str:
        if lose < 0:
            return f"least_busy: {labels[win]} is the only target available"
        busy_w = self.by_provider.get(providers[win], 0)
        busy_l = self.by_provider.get(providers[lose], 0)
        if busy_w != busy_l:
            return f"least_busy: {labels[win]} {busy_w} in flight vs {busy_l} on {labels[lose]}"
        return (f"least_busy: {labels[win]} and {labels[lose]} {busy_w} in flight each, "
                f"latency {self.latency.get(providers[win], 0.0):.0f} ms vs "
                f"{self.latency.get(providers[lose], 0.0):.0f} ms")

    def pick_connection(self, layers: ProviderLayers, now: int, explain: bool
                        ) -> tuple[int, str | None] | None:
        """The less busy of two ready connections drawn at random (the first drawn on a
        tie) as the position to start from, and why (when `explain`); None when fewer
        than two are ready."""
        ready = layers.pool.ready(now)
        if len(ready) < 2:
            return None
        x, y = self.two(len(ready))
        a, b = ready[x], ready[y]
        order = layers.pool.order
        busy_a = self.by_connection.get((layers.name, order[a]), 0)
        busy_b = self.by_connection.get((layers.name, order[b]), 0)
        if busy_b < busy_a:
            a, b, busy_a, busy_b = b, a, busy_b, busy_a
        return a, (f"key {order[a]} {busy_a} in flight vs {busy_b} on {order[b]}"
                   if explain else None)


class KeyLimits:
    """What the last answers on one connection said of its limits, with the resets as
    clock times; a count spent since is taken off at once (each attempt costs one)."""

    __slots__ = ("requests_left", "requests_limit", "requests_reset_at", "tokens_left",
                 "tokens_limit", "tokens_reset_at")

    def __init__(self) -> None:
        self.requests_left: int | None = None
        self.requests_limit: int | None = None
        self.requests_reset_at = 0
        self.tokens_left: int | None = None
        self.tokens_limit: int | None = None
        self.tokens_reset_at = 0

    def note(self, now: int, info: RateLimitInfo) -> None:
        if info.requests_remaining is not None:
            self.requests_left = info.requests_remaining
            self.requests_limit = info.requests_limit or self.requests_limit
            reset = info.requests_reset_ms
            self.requests_reset_at = now + (UNSET_WINDOW_MS if reset is None else reset)
        if info.tokens_remaining is not None:
            self.tokens_left = info.tokens_remaining
            self.tokens_limit = info.tokens_limit or self.tokens_limit
            reset = info.tokens_reset_ms
            self.tokens_reset_at = now + (UNSET_WINDOW_MS if reset is None else reset)

    def spend(self, now: int) -> None:
        left = self.left(now)[0]
        if left is not None and left > 0:
            self.requests_left = left - 1

    def left(self, now: int) -> tuple[int | None, int | None]:
        """(requests, tokens) left now: past its reset a count is back to its limit, or
        unknown when no limit was said."""
        if self.requests_left is not None and now >= self.requests_reset_at:
            self.requests_left = self.requests_limit
            self.requests_reset_at = now + UNSET_WINDOW_MS
        if self.tokens_left is not None and now >= self.tokens_reset_at:
            self.tokens_left = self.tokens_limit
            self.tokens_reset_at = now + UNSET_WINDOW_MS
        return self.requests_left, self.tokens_left

    def pace(self, now: int) -> float | None:
        """Requests (else tokens) left per second until the reset; 0 when one is out;
        None when nothing is known (a key that never said counts as full)."""
        requests, tokens = self.left(now)
        if requests == 0 or tokens == 0:
            return 0.0
        if requests is not None:
            return requests * 1000 / max(1000, self.requests_reset_at - now)
        if tokens is not None:
            return tokens * 1000 / max(1000, self.tokens_reset_at - now)
        return None


class Headroom:
    """Each connection's `KeyLimits`, by provider, and the choice they make."""

    __slots__ = ("keys", "out")

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, KeyLimits]] = {}
        #: per provider, the keys last seen at 0 requests or tokens (some may have reset
        #: since): a provider with none has no exhausted key, without looking
        self.out: dict[str, set[str]] = {}

    def note(self, provider: str, connection: str, now: int, info: RateLimitInfo) -> None:
        known = self.keys.setdefault(provider, {})
        limits = known.get(connection)
        if limits is None:
            limits = known[connection] = KeyLimits()
        limits.note(now, info)
        self._watch(provider, connection, limits)

    def spend(self, provider: str, connection: str, now: int) -> None:
        known = self.keys.get(provider)
        if known is not None and (limits := known.get(connection)) is not None:
            limits.spend(now)
            if limits.requests_left == 0:
                self._watch(provider, connection, limits)

    def _watch(self, provider: str, connection: str, limits: KeyLimits) -> None:
        if limits.requests_left == 0 or limits.tokens_left == 0:
            self.out.setdefault(provider, set()).add(connection)
        elif (out := self.out.get(provider)) is not None:
            out.discard(connection)

    def exhausted(self, layers: ProviderLayers, now: int) -> bool:
        """Whether every ready connection of the provider said it is out until its reset
        (then the target is tried after the others)."""
        known = self.keys.get(layers.name)
        if not known or not self.out.get(layers.name):
            return False
        order = layers.pool.order
        for pos in layers.pool.ready(now):
            limits = known.get(order[pos])
            if limits is None or limits.pace(now) != 0.0:
                return False
        return True

    def pick_connection(self, layers: ProviderLayers, now: int, start: int, explain: bool
                        ) -> tuple[int, str | None] | None:
        """Among the first `WINDOW` ready connections from `start` in rotation order, the
        one with the most requests left per second until its reset (one that never said
        counts as full; the earlier in rotation on a tie), and why; None when the
        provider's answers never carried the headers. The window keeps a decision's cost
        flat for 1,000 keys; as the rotation moves, every key comes into it."""
        known = self.keys.get(layers.name)
        if not known:
            return None
        ready = layers.pool.ready(now)
        if not ready:
            return None
        order = layers.pool.order
        at = bisect_left(ready, start)
        best_pos, best_pace, runner = -1, -1.0, -1.0
        for pos in islice(chain(ready[at:at + WINDOW], ready[:WINDOW]), min(WINDOW, len(ready))):
            limits = known.get(order[pos])
            if limits is None:
                score = _FULL
            elif ((left := limits.requests_left) is not None and limits.tokens_left is None
                  and now < (reset_at := limits.requests_reset_at)):
                # `pace()` for the usual case, inlined: this runs for every key compared
                score = left * 1000 / (reset_at - now if reset_at - now > 1000 else 1000)
            else:
                pace = limits.pace(now)
                score = _FULL if pace is None else pace
            if score > best_pace:
                best_pos, runner, best_pace = pos, best_pace, score
            elif score > runner:
                runner = score
        if not explain:
            return best_pos, None
        name = order[best_pos]
        limits = known.get(name)
        if limits is None:
            return best_pos, f"{name} has not said its limits yet"
        requests, tokens = limits.left(now)
        said = (f"{requests} requests" if requests is not None else f"{tokens} tokens")
        reset_at = limits.requests_reset_at if requests is not None else limits.tokens_reset_at
        versus = "" if runner < 0 else (
            " vs a key that has not said" if runner == _FULL else f" vs {runner:.1f}/s next")
        return best_pos, (f"{name} has {said} left for {max(0, reset_at - now) / 1000:.1f} s "
                          f"({best_pace:.1f}/s){versus}")
