"""The order a request tries its route's targets and connections in (docs/design.md §7).

A strategy only orders: the breaker, cooldowns, lockouts, dedup, the retry budget and
admission waits refuse and wait exactly as under `priority`, on whatever order it gives.
Every counter here is this process's own (a fleet's replicas each keep theirs).

Each route of an ordering strategy gets a chooser when it is first asked for, made for
its plan: `order()` gives a request's targets their order (asking every target once
whether it could take the request, unless nothing changed since all could: `Chooser`),
`start()` the connection position the walk starts at on a provider.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Callable, Container, Mapping, Sequence
from math import floor

from ..engine.bus import EventBus
from ..engine.changes import Changes
from ..engine.engine import ProviderLayers, ask_of, quiet_until, refused_targets
from ..engine.events import AttemptEvent
from ..engine.lockout import ModelLockouts
from .rate_limits import RateLimitInfo
from .routes import Target

__all__ = ["UNSET_WINDOW_MS", "WINDOW", "Busy", "Chooser", "Headroom", "HeadroomChooser",
           "KeyLimits", "LeastBusy", "LeastBusyChooser", "Plan", "WeightedChooser"]

#: a route's targets, each with its provider's layers and its `provider/model` label
Plan = tuple[tuple[Target, ProviderLayers, str], ...]
#: where round_robin starts on a provider's connections (and counts the request)
RotationStart = Callable[[ProviderLayers], int]
#: a request's plan in the strategy's order, with the reason (None when nobody reads it)
Ordered = tuple[Plan, str | None]

#: how long a remaining count without a reset time is trusted (a typical window)
UNSET_WINDOW_MS = 60_000
#: the EWMA's weight of a new latency
LATENCY_ALPHA = 0.2
#: how many ready keys `headroom` compares per decision, from the rotation's position
#: (docs/design.md §7: 3 already spare every 429 that 8 do in the loads tried, 2 do not;
#: each key more costs about 1,000 instructions a decision), and how many `least_busy`
#: draws its two keys from (a window that moves one key along each request, so that a
#: decision reads keys next to the last one's: at 1,000 keys a draw over all of them
#: read state scattered in memory, 1.2x the CPU time of 10 keys; the window, 1.06x)
WINDOW = 4
_FULL = float("inf")  # the score of a key that never said its limits
_NEVER = -1 << 62  # before any clock time


class Chooser:
    """A route's ordering strategy for its plan: its name, the order of a request's
    targets and where the walk starts on each provider's connections, each with why when
    someone reads the attempt events (the reason is written on the next attempt).

    Asking every target whether it could serve is most of what ordering costs, and the
    answer is nearly always that all could. A chooser that found them all quiet
    (`quiet_until`) remembers it, with the engine's count of changes then: while the
    count stands and the clock is before the first key's cooling ends, they are quiet
    still, and `quiet()` says so without asking."""

    __slots__ = ("asks", "bus", "changes", "firsts", "name", "plan", "quiet_at",
                 "quiet_until")

    def __init__(self, name: str, plan: Plan, bus: EventBus, changes: Changes) -> None:
        self.name = name
        self.plan = plan
        self.bus = bus
        self.changes = changes
        #: the engine's count of changes when every target was last found quiet (-1:
        #: never), and until when they stay so while it stands
        self.quiet_at = -1
        self.quiet_until = 0
        #: what `refused_targets` asks of each target
        self.asks = tuple(ask_of(i, layers, target.model)
                          for i, (target, layers, _) in enumerate(plan))
        #: per target: the plan with it first, the others after it in the route's order
        self.firsts = tuple(plan if i == 0 else (plan[i], *plan[:i], *plan[i + 1:])
                            for i in range(len(plan)))

    def quiet(self, now: int) -> bool:
        """Whether every target is known to be quiet, without asking them."""
        return self.quiet_at == self.changes.count and now < self.quiet_until

    def ask(self, now: int) -> list[int] | None:
        """Ask every target (`refused_targets`); when all could serve, remember whether
        they are quiet."""
        refused = refused_targets(self.asks, now)
        if refused is None:
            self.found_quiet(now)
        return refused

    def found_quiet(self, now: int) -> None:
        """Every target could serve: remember whether they are all quiet, and until when
        (read after the asking, which may have refreshed a pool)."""
        until = quiet_until(self.asks, now)
        if until is not None:
            self.quiet_at, self.quiet_until = self.changes.count, until

    def order(self, now: int) -> Ordered:
        raise NotImplementedError

    def start(self, layers: ProviderLayers, model: str, now: int) -> tuple[int, str | None]:
        raise NotImplementedError


# -- weighted -------------------------------------------------------------------------


class WeightedChooser(Chooser):
    """Smooth weighted round robin (nginx's) over the usable targets: each gains its
    weight, the highest (first on a tie) is chosen and loses the usable total. A target
    left out gains nothing, so its share goes to the others in proportion. Connections
    rotate as under round_robin."""

    __slots__ = ("current", "rotation_start", "total", "weights")

    def __init__(self, plan: Plan, bus: EventBus, changes: Changes, current: list[int],
                 weights: Sequence[int], rotation_start: RotationStart) -> None:
        super().__init__("weighted", plan, bus, changes)
        self.current = current  # the router's, kept across reloads of an unchanged route
        self.weights = tuple(enumerate(weights))  # with their positions
        self.total = sum(weights)
        self.rotation_start = rotation_start

    def order(self, now: int) -> Ordered:
        current = self.current
        best = -1
        high = 0
        refused = (None if self.quiet_at == self.changes.count and now < self.quiet_until
                   else self.ask(now))  # `quiet()`, inlined
        if refused is None:  # the usual case: every target gains its weight
            total = self.total
            for i, weight in self.weights:
                gained = current[i] = current[i] + weight
                if best < 0 or gained > high:
                    best, high = i, gained
        else:
            total = 0
            for i, weight in self.weights:
                if i not in refused:
                    total += weight
                    gained = current[i] = current[i] + weight
                    if best < 0 or gained > high:
                        best, high = i, gained
        if best < 0:  # nothing to choose: the walk skips each for its reason
            return self.plan, None
        current[best] -= total
        why = None
        if self.bus.wants(AttemptEvent):
            plan = self.plan
            why = (f"weighted: {plan[best][2]} (weight {self.weights[best][1]} of {total}"
                   + (f"; {', '.join(plan[i][2] for i in refused)} unavailable, its share "
                      "to the others)" if refused else ")"))
        return self.firsts[best], why

    def start(self, layers: ProviderLayers, model: str, now: int) -> tuple[int, str | None]:
        return self.rotation_start(layers), None


# -- least_busy -----------------------------------------------------------------------


class Busy:
    """One provider's attempts in flight, in all and per connection, and an EWMA of its
    latency. An attempt counts from its start until its routing records or cancels it
    (`RequestRouting` holds the Busy it counted on, and gives it back exactly once)."""

    __slots__ = ("by_connection", "latency", "total", "window")

    def __init__(self) -> None:
        self.total = 0
        #: where least_busy's window over the ready keys starts next
        self.window = 0
        self.by_connection: dict[str, int] = {}
        self.latency: float | None = None

    def finished(self, connection: str, latency_ms: int) -> None:
        self.total -= 1
        counts = self.by_connection
        left = counts[connection] - 1
        if left:
            counts[connection] = left
        else:  # only the keys with something in flight: the dict stays small
            del counts[connection]
        old = self.latency
        self.latency = float(latency_ms) if old is None else (
            old + LATENCY_ALPHA * (latency_ms - old))


class LeastBusy:
    """Every provider's `Busy`, and the seeded generator of the power of two choices."""

    __slots__ = ("providers", "rng")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed ^ 0x1EA57)
        self.providers: dict[str, Busy] = {}

    def keep(self, providers: Container[str]) -> None:
        """Drop the counts of the providers not in `providers` (a reload removed them)
        once nothing is in flight on them: an attempt still running holds its Busy, and a
        later reload drops it."""
        for name in [name for name, busy in self.providers.items()
                     if name not in providers and not busy.total]:
            del self.providers[name]

    def of(self, provider: str) -> Busy:
        busy = self.providers.get(provider)
        if busy is None:
            busy = self.providers[provider] = Busy()
        return busy

    def started(self, provider: str, connection: str) -> Busy:
        """Count an attempt in flight on the provider's connection; returns its `Busy`,
        which the attempt gives back when it ends (`Busy.finished`). One call, not a
        lookup and a count: it runs on every attempt of every route."""
        busy = self.providers.get(provider)
        if busy is None:
            busy = self.providers[provider] = Busy()
        busy.total += 1
        counts = busy.by_connection
        counts[connection] = counts.get(connection, 0) + 1
        return busy


class LeastBusyChooser(Chooser):
    """The power of two choices: of two usable targets drawn at random, the one with
    fewer attempts in flight (the lower EWMA latency on a tie, then the first drawn);
    on its provider, of two ready connections drawn at random from a window of `WINDOW`
    ready ones, which moves one key along each request, the less busy (one locked out of
    the target's model loses to the other, so its share goes to the keys drawn with it,
    not all to the key after it, where the walk would go on).

    A pair is drawn with one `random()` call (`_pair`). The two targets are drawn from
    all of the route's and asked whether they could serve (unless all are known quiet);
    only when one could not are all asked, and the pair drawn again from those that
    could, so the pair is uniform over the usable targets either way and the usual
    decision asks two targets at most, not every one."""

    __slots__ = ("busies", "count", "draw", "everyone", "load")

    def __init__(self, plan: Plan, bus: EventBus, changes: Changes, load: LeastBusy) -> None:
        super().__init__("least_busy", plan, bus, changes)
        self.load = load
        self.draw = load.rng.random
        self.busies = tuple(load.of(layers.name) for _, layers, _ in plan)
        self.everyone = tuple(range(len(plan)))
        self.count = len(plan)

    def order(self, now: int) -> Ordered:
        n = self.count
        if n < 2:
            a = b = 0
        else:
            u = self.draw() * n  # `_pair()`, inlined (two calls are 1,800 instructions)
            a = floor(u)
            b = floor((u - a) * (n - 1))
            if b >= a:
                b += 1
            if self.quiet_at != self.changes.count or now >= self.quiet_until:  # `quiet()`
                asks = self.asks
                if refused_targets((asks[a], asks[b]), now) is not None:
                    a = b = -1
                else:
                    self.found_quiet(now)
        if a == b:  # one target in all, or one drawn could not serve: ask every one
            refused = None if self.quiet(now) else self.ask(now)
            usable = (self.everyone if refused is None else
                      [i for i in self.everyone if i not in refused])
            n = len(usable)
            if n < 2:
                if not n:  # nothing to choose: the walk skips each for its reason
                    return self.plan, None
                best = usable[0]
                return self.firsts[best], (
                    f"least_busy: {self.plan[best][2]} is the only target available"
                    if self.bus.wants(AttemptEvent) else None)
            x, y = _pair(self.draw(), n)
            a, b = usable[x], usable[y]
        busies = self.busies
        busy_a, busy_b = busies[a], busies[b]
        if busy_a.total != busy_b.total:
            if busy_b.total < busy_a.total:
                a, b = b, a
        elif (busy_b.latency or 0.0) < (busy_a.latency or 0.0):
            a, b = b, a
        # a won
        return self.firsts[a], (self._explain(a, b) if self.bus.wants(AttemptEvent)
                                else None)

    def _explain(self, win: int, lose: int) -> str:
        plan = self.plan
        won, lost = self.busies[win], self.busies[lose]
        if won.total != lost.total:
            return (f"least_busy: {plan[win][2]} {won.total} in flight vs {lost.total} on "
                    f"{plan[lose][2]}")
        return (f"least_busy: {plan[win][2]} and {plan[lose][2]} {won.total} in flight each, "
                f"latency {won.latency or 0.0:.0f} ms vs {lost.latency or 0.0:.0f} ms")

    def start(self, layers: ProviderLayers, model: str, now: int) -> tuple[int, str | None]:
        pool = layers.pool
        cooling = pool._cooling  # `pool.ready(now)`, inlined
        if cooling and cooling[0][0] <= now:
            pool._refresh(now)
        ready = pool._ready
        n = len(ready)
        if n < 2:
            return 0, None
        busy = self.load.providers.get(layers.name)
        if busy is None:  # a provider a reload left out while this request ran
            busy = self.load.of(layers.name)
        at = busy.window % n  # the ready keys may be fewer than when it last moved
        busy.window = at + 1
        counts = busy.by_connection
        size = WINDOW if n > WINDOW else n
        u = self.draw() * size  # `_pair()`, inlined
        x = floor(u)
        a = ready[at + x if at + x < n else at + x - n]
        order = pool.order
        lockouts = layers.lockouts
        locks = lockouts.entries
        idle = not counts and not self.bus.wants(AttemptEvent)
        if idle:
            # nothing in flight on the provider: both keys drawn are at 0 and the first
            # wins, so the second need not be drawn (the same draw, the same key), unless
            # the first is locked out of the model (`ModelLockouts.locked_until`, inlined)
            lock = locks.get((order[a], model)) if locks else None
            if lock is None or lock.until <= now:
                return a, None
        y = floor((u - x) * (size - 1))
        if y >= x:
            y += 1
        b = ready[at + y if at + y < n else at + y - n]
        if idle:  # the first is locked: the second, unless it is locked too
            return (a if lockouts.locked_until(order[b], model, now) else b), None
        busy_a, busy_b = counts.get(order[a], 0), counts.get(order[b], 0)
        if busy_b < busy_a:
            a, b, busy_a, busy_b = b, a, busy_b, busy_a
        lock = locks.get((order[a], model)) if locks else None
        if lock is not None and lock.until > now:  # the winner cannot serve the model
            if lockouts.locked_until(order[b], model, now):  # nor the other: the walk goes on
                # from the winner to the next key that serves
                return a, (f"keys {order[a]} and {order[b]} are locked out of {model}"
                           if self.bus.wants(AttemptEvent) else None)
            return b, (f"key {order[b]} (key {order[a]} is locked out of {model})"
                       if self.bus.wants(AttemptEvent) else None)
        return a, (f"key {order[a]} {busy_a} in flight vs {busy_b} on {order[b]}"
                   if self.bus.wants(AttemptEvent) else None)


def _pair(u: float, n: int) -> tuple[int, int]:
    """Two distinct positions of `n` (n >= 2) from one uniform `u` in [0, 1): the first
    from `u * n`, the second of the `n - 1` others from what is left of it (the fraction
    keeps 53 bits less log2(n), plenty for any pool). `floor` is `int` for these
    non-negative values, at a third of its cost."""
    u *= n
    x = floor(u)
    y = floor((u - x) * (n - 1))
    return x, (y + 1 if y >= x else y)


# -- headroom -------------------------------------------------------------------------


class KeyLimits:
    """What the last answers on one connection said of its limits, with the resets as
    clock times; a count spent since is taken off at once (each attempt costs one)."""

    __slots__ = ("overdrawn", "requests_left", "requests_limit", "requests_reset_at",
                 "simple_until", "tokens_left", "tokens_limit", "tokens_reset_at")

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Back to knowing nothing (a key that never said: full), in place (`KnownKeys`
        holds it)."""
        self.requests_left: int | None = None
        self.requests_limit: int | None = None
        self.requests_reset_at = 0
        self.tokens_left: int | None = None
        self.tokens_limit: int | None = None
        self.tokens_reset_at = 0
        #: a second before the requests' reset while only requests are known, else
        #: _NEVER: until then `pace()` is `requests_left * 1000 / (requests_reset_at -
        #: now)`, which headroom reads inline
        self.simple_until = _NEVER
        #: an attempt went to it while it said it had none left (a fallback)
        self.overdrawn = False

    def _simplify(self) -> None:
        self.simple_until = (self.requests_reset_at - 1000 if self.requests_left is not None
                             and self.tokens_left is None else _NEVER)

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
        self.simple_until = (self.requests_reset_at - 1000 if self.requests_left is not None
                             and self.tokens_left is None else _NEVER)  # _simplify()
        self.overdrawn = False

    def spend(self, now: int) -> None:
        requests = self.requests_left
        if (requests is not None and now < self.requests_reset_at
                and (self.tokens_left is None or now < self.tokens_reset_at)):
            if requests > 0:  # the usual case: nothing to reset first
                self.requests_left = requests - 1
            if requests == 0 or self.tokens_left == 0:
                self.overdrawn = True
            return
        left, tokens = self.left(now)
        if left is not None and left > 0:
            self.requests_left = left - 1
        if left == 0 or tokens == 0:
            self.overdrawn = True

    def left(self, now: int) -> tuple[int | None, int | None]:
        """(requests, tokens) left now: past its reset a count is back to its limit, or
        unknown when no limit was said."""
        reset = False
        if self.requests_left is not None and now >= self.requests_reset_at:
            self.requests_left = self.requests_limit
            self.requests_reset_at = now + UNSET_WINDOW_MS
            reset = True
        if self.tokens_left is not None and now >= self.tokens_reset_at:
            self.tokens_left = self.tokens_limit
            self.tokens_reset_at = now + UNSET_WINDOW_MS
            reset = True
        if reset:
            self._simplify()
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


class KnownKeys(dict[str, KeyLimits]):
    """A provider's `KeyLimits` by connection name, and along its connection order (None
    for a key not heard of), placed again only when the order changes (a reload)."""

    __slots__ = ("order", "placed", "positions")

    def __init__(self) -> None:
        super().__init__()
        self.order: tuple[str, ...] | None = None
        self.placed: list[KeyLimits | None] = []
        self.positions: dict[str, int] = {}

    def place(self, order: tuple[str, ...]) -> list[KeyLimits | None]:
        self.order = order
        self.positions = {name: i for i, name in enumerate(order)}
        self.placed = [self.get(name) for name in order]
        return self.placed

    def heard(self, connection: str) -> KeyLimits:
        """A key heard of for the first time: its limits, in place along the order."""
        limits = self[connection] = KeyLimits()
        pos = self.positions.get(connection)
        if pos is not None:
            self.placed[pos] = limits
        return limits


class Headroom:
    """Each connection's `KeyLimits`, by provider."""

    __slots__ = ("keys", "out")

    def __init__(self) -> None:
        self.keys: dict[str, KnownKeys] = {}
        #: per provider, the keys last seen at 0 requests or tokens (some may have reset
        #: since); a provider with none is not in it, so an empty `out` says at once that
        #: no target needs a look
        self.out: dict[str, set[str]] = {}

    def keep(self, connections: Mapping[str, Container[str]]) -> None:
        """Keep only what the connections of the config (provider -> its connections)
        said: a reload drops the rest, so the dicts hold the keys of the config (and
        those an attempt in flight across the reload answered for, until the next)."""
        for provider in list(self.keys):
            kept = connections.get(provider)
            known = self.keys[provider]
            gone = [name for name in known if kept is None or name not in kept]
            if not gone:
                continue
            for name in gone:
                del known[name]
            known.order = None  # placed again along the order on its next request
            out = self.out.get(provider)
            if out is not None:
                out.difference_update(gone)
                if not out:
                    del self.out[provider]
            if not known:
                del self.keys[provider]

    def note(self, provider: str, connection: str, now: int, info: RateLimitInfo) -> None:
        known = self.keys.get(provider)
        if known is None:
            known = self.keys[provider] = KnownKeys()
        limits = known.get(connection)
        if limits is None:
            limits = known.heard(connection)
        limits.note(now, info)
        if limits.requests_left == 0 or limits.tokens_left == 0 or provider in self.out:
            self._watch(provider, connection, limits)

    def spend(self, provider: str, connection: str, now: int) -> None:
        known = self.keys.get(provider)
        if known is not None and (limits := known.get(connection)) is not None:
            limits.spend(now)
            if limits.requests_left == 0:
                self._watch(provider, connection, limits)

    def served(self, provider: str, connection: str) -> None:
        """A success that said nothing of the limits: a key tried while it said it had
        none left was not out after all, and forgets what it said (else it stayed held
        back until a reset it named, up to 7 days away: nothing else would try it and
        hear otherwise). A key spent to 0 by our own count keeps it until it says."""
        out = self.out.get(provider)
        if out is not None and connection in out:
            limits = self.keys[provider][connection]
            if limits.overdrawn:
                limits.forget()
                self._watch(provider, connection, limits)

    def _watch(self, provider: str, connection: str, limits: KeyLimits) -> None:
        out = self.out.get(provider)
        if limits.requests_left == 0 or limits.tokens_left == 0:
            if out is None:
                self.out[provider] = {connection}
            else:
                out.add(connection)
        elif out is not None:
            out.discard(connection)
            if not out:
                del self.out[provider]

    def exhausted(self, layers: ProviderLayers, model: str, now: int) -> bool:
        """Whether the provider's ready connections not locked out of `model` are some,
        and every one said it is out until its reset (then the target is tried after the
        others; one with none is the walk's to skip, for its reason)."""
        known = self.keys.get(layers.name)
        if not known or layers.name not in self.out:
            return False
        order = layers.pool.order
        lockouts = layers.lockouts
        serving = False  # a key that can serve the model was seen (else: not for headroom)
        for pos in layers.pool.ready(now):
            name = order[pos]
            if lockouts.entries and lockouts.locked_until(name, model, now):
                continue  # it cannot serve the model, said or not
            limits = known.get(name)
            if limits is None or limits.pace(now) != 0.0:
                return False
            serving = True
        return serving


class HeadroomChooser(Chooser):
    """Targets in order, but one whose every ready key said it is out until its reset
    goes after the others (held back: tried only when they fail). On a provider, among
    the first `WINDOW` ready connections from the rotation's position, the one with the
    most requests left per second until its reset (one that never said counts as full;
    the earlier in rotation on a tie); in rotation while the provider's answers never
    carried the headers. A key of the window locked out of the target's model is not
    ranked: it cannot serve it, and the walk would go on from it to whatever key came
    next. The window keeps a decision's cost flat for 1,000 keys; as the rotation moves,
    every key comes into it."""

    __slots__ = ("headroom", "rotation_start")

    def __init__(self, plan: Plan, bus: EventBus, changes: Changes, headroom: Headroom,
                 rotation_start: RotationStart) -> None:
        super().__init__("headroom", plan, bus, changes)
        self.headroom = headroom
        self.rotation_start = rotation_start

    def order(self, now: int) -> Ordered:
        plan = self.plan
        headroom = self.headroom
        if not headroom.out:  # no key anywhere said it is out: nothing to hold back
            return plan, None
        out = [entry for entry in plan if headroom.exhausted(entry[1], entry[0].model, now)]
        if not out or len(out) == len(plan):
            return plan, None
        kept = tuple(entry for entry in plan if entry not in out)
        why = (f"headroom: {', '.join(label for _, _, label in out)} out of requests until "
               "the reset, tried last") if self.bus.wants(AttemptEvent) else None
        return (*kept, *out), why

    def start(self, layers: ProviderLayers, model: str, now: int) -> tuple[int, str | None]:
        start = self.rotation_start(layers)
        known = self.headroom.keys.get(layers.name)
        pool = layers.pool
        ready = pool.ready(now) if known else None
        if not ready:
            return start, ("no key has said its rate limits yet: in rotation"
                           if self.bus.wants(AttemptEvent) else None)
        assert known is not None
        n = len(ready)
        at = bisect_left(ready, start)  # the window: from `start` on, wrapping to the front
        count = WINDOW if n > WINDOW else n
        window = ready[at:at + count]
        if len(window) < count:
            window += ready[:count - len(window)]
        order = pool.order
        locks = layers.lockouts.entries
        placed = known.placed if known.order is order else known.place(order)
        if self.bus.wants(AttemptEvent):
            return self._explain(placed, window, order, layers.lockouts, model, start, now)
        best_pos, best_pace = start, -1.0  # the rotation's start if every key is locked
        for pos in window:  # `_pace()`, inlined for the usual case: it runs for every key
            if locks:  # `ModelLockouts.locked_until`, inlined: a locked key is not ranked
                lock = locks.get((order[pos], model))
                if lock is not None and lock.until > now:
                    continue
            limits = placed[pos]
            if limits is None:
                score = _FULL
            elif now < limits.simple_until:  # only requests are known: `pace()` is this
                score = (limits.requests_left * 1000  # type: ignore[operator]
                         / (limits.requests_reset_at - now))
            else:
                score = _pace(limits, now)
            if score > best_pace:
                best_pos, best_pace = pos, score
        return best_pos, None

    @staticmethod
    def _explain(placed: list[KeyLimits | None], window: list[int], order: tuple[str, ...],
                 lockouts: ModelLockouts, model: str, start: int, now: int) -> tuple[int, str]:
        """The same choice as `start()` makes, with why: the key, what it has left, and
        the pace of the next best."""
        window = [pos for pos in window if not lockouts.locked_until(order[pos], model, now)]
        if not window:
            return start, f"every key of the window is locked out of {model}: in rotation"
        best_pos, best_pace, runner = -1, -1.0, -1.0
        for pos in window:
            score = _pace(placed[pos], now)
            if score > best_pace:
                best_pos, runner, best_pace = pos, best_pace, score
            elif score > runner:
                runner = score
        name = order[best_pos]
        limits = placed[best_pos]
        if limits is None:
            return best_pos, f"{name} has not said its limits yet"
        requests, tokens = limits.left(now)
        said = (f"{requests} requests" if requests is not None else f"{tokens} tokens")
        reset_at = limits.requests_reset_at if requests is not None else limits.tokens_reset_at
        versus = "" if runner < 0 else (
            " vs a key that has not said" if runner == _FULL else f" vs {runner:.1f}/s next")
        return best_pos, (f"{name} has {said} left for {max(0, reset_at - now) / 1000:.1f} s "
                          f"({best_pace:.1f}/s){versus}")


def _pace(limits: KeyLimits | None, now: int) -> float:
    """A key's score under headroom: its requests left per second until the reset; a key
    that never said (or says nothing now) counts as full."""
    if limits is None:
        return _FULL
    pace = limits.pace(now)
    return _FULL if pace is None else pace
