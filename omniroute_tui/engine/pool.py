"""A provider's connections, indexed so that picking one costs the same for 10 or 1,000.

Available connections live in a sorted list of config positions; cooling ones sit in a
heap keyed by their deadline and come back lazily, when the pool is next read.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from .changes import Changes
from .consequences import CONSEQUENCES
from .cooldown import ConnectionCooldown, ConnectionSnapshot
from .events import Event
from .jitter import Jitter
from .kinds import CooldownReason, FailureKind, SkipReason
from .lockout import ModelLockouts
from .settings import CooldownSettings

__all__ = ["ConnectionPool", "Unavailable"]


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why no connection of a provider can serve a model, and when one could."""

    reason: SkipReason
    retry_after_ms: int | None


class ConnectionPool:
    def __init__(
        self,
        provider: str,
        connections: tuple[str, ...],
        settings: CooldownSettings,
        *,
        emit: Callable[[Event], None],
        jitter: Jitter,
        changes: Changes | None = None,
    ) -> None:
        self.provider = provider
        #: counts each change of the ready keys or of the cooling ones
        self._changes = changes or Changes()
        self.order = connections
        self.position = {name: i for i, name in enumerate(connections)}
        self.cooldowns = [
            ConnectionCooldown(provider, name, settings, emit=emit, jitter=jitter)
            for name in connections
        ]
        self._ready: list[int] = list(range(len(connections)))
        self._is_ready = [True] * len(connections)
        self._cooling: list[tuple[int, int]] = []  # (until, position), lazily validated

    def __len__(self) -> int:
        return len(self.order)

    def get(self, connection: str) -> ConnectionCooldown:
        return self.cooldowns[self.position[connection]]

    # -- changes: each keeps the index true -----------------------------------------------

    def record_failure(self, pos: int, now: int, kind: FailureKind, hint_ms: int | None
                       ) -> None:
        """A cooldown-causing failure of the connection at `pos` (docs/design.md §4)."""
        self.cooldowns[pos].record_failure(now, kind, hint_ms)
        self._reindex(pos, now)

    def disable_for_auth(self, pos: int, now: int) -> None:
        """A 401: the connection is disabled until an operator enables it."""
        cooldown = self.cooldowns[pos]
        cooldown.last_error, cooldown.last_error_at = FailureKind.AUTH_FAILED, now
        cooldown.disable(now, "auth_failed")
        self._reindex(pos, now)

    def clear(self, pos: int, now: int) -> bool:
        """Operator clear of the cooldown and its level; False when there was nothing."""
        changed = self.cooldowns[pos].clear(now)
        self._reindex(pos, now)
        return changed

    def set_enabled(self, pos: int, now: int, enabled: bool, reason: str) -> bool:
        cooldown = self.cooldowns[pos]
        changed = cooldown.enable(now, reason) if enabled else cooldown.disable(now, reason)
        self._reindex(pos, now)
        return changed

    def merge(self, pos: int, now: int, kind: FailureKind, level: int, until: int,
              hint_ms: int | None = None) -> bool:
        """Another replica's cooldown of the connection at `pos`: extend, never shorten
        (the later deadline and the higher level win). Returns whether anything changed."""
        changed = self.cooldowns[pos].merge(now, kind, level, until, hint_ms)
        if changed:
            self._reindex(pos, now)
        return changed

    def adopt(self, cooldown: ConnectionCooldown, now: int) -> None:
        """Take over a connection's whole state from the pool a reloaded config replaces
        (same name; its position here may differ)."""
        pos = self.position[cooldown.connection]
        self.cooldowns[pos] = cooldown
        self._reindex(pos, now)

    def free_backoff(self, now: int, reason: CooldownReason = CooldownReason.PROBE_FREED
                     ) -> int:
        """The breaker's probe (or a request carried on a cooling key, §4) succeeded: end
        every backoff cooldown of the provider and reset its level (quota and hinted
        cooldowns, lockouts and disabled flags stay; docs/design.md §3). Returns how many
        connections were freed."""
        freed = 0
        for pos, cooldown in enumerate(self.cooldowns):
            if cooldown.free(now, reason):
                self._reindex(pos, now)
                freed += 1
        return freed

    def restore(self, snapshot: ConnectionSnapshot, now: int) -> None:
        """Load one persisted connection (an expired cooldown comes back cleared)."""
        pos = self.position[snapshot.connection]
        self.cooldowns[pos].restore(snapshot, now)
        self._reindex(pos, now)

    # -- keeping the index true ----------------------------------------------------------

    def _reindex(self, pos: int, now: int) -> None:
        self._changes.count += 1
        cooldown = self.cooldowns[pos]
        if cooldown.available(now):
            if not self._is_ready[pos]:
                insort(self._ready, pos)
                self._is_ready[pos] = True
            return
        if self._is_ready[pos]:
            del self._ready[bisect_left(self._ready, pos)]
            self._is_ready[pos] = False
        if not cooldown.disabled:
            heapq.heappush(self._cooling, (cooldown.cooling_until, pos))

    def _refresh(self, now: int) -> None:
        cooling = self._cooling
        while cooling and cooling[0][0] <= now:
            _, pos = heapq.heappop(cooling)
            if not self._is_ready[pos] and self.cooldowns[pos].available(now):
                insort(self._ready, pos)
                self._is_ready[pos] = True

    # -- selection ---------------------------------------------------------------------

    def candidates(
        self, now: int, model: str, lockouts: ModelLockouts, start: int = 0
    ) -> Iterator[str]:
        """Available connections for `model`, in config order from `start` (wrapping).

        Lazy: each step re-reads the index, so a connection that fails meanwhile is not
        offered again, and only the connections actually tried are looked at.
        """
        cooling = self._cooling
        if cooling and cooling[0][0] <= now:
            self._refresh(now)
        count = len(self.order)
        if count == 0:
            return
        locks = lockouts.entries
        is_ready = self._is_ready
        visited = 0
        cursor = start % count
        while visited < count:
            # the usual step, to a ready key, needs no search (at 1,000 keys a search
            # reads ten positions scattered in memory)
            if is_ready[cursor]:
                nxt = cursor
            else:
                ready = self._ready
                i = bisect_left(ready, cursor)
                if i == len(ready):
                    if not ready:
                        return
                    nxt = ready[0] + count  # wrap to the front
                else:
                    nxt = ready[i]
            visited += nxt - cursor + 1
            if visited > count:
                return
            pos = nxt % count
            cursor = pos + 1
            name = self.order[pos]
            lock = locks.get((name, model)) if locks else None
            if lock is None or lock.until <= now:
                yield name
            if cursor >= count:
                cursor -= count

    def ready(self, now: int) -> list[int]:
        """The positions of the connections not cooling nor disabled, in config order
        (some may be locked for a model). The pool's own list: read it, never change it."""
        cooling = self._cooling
        if cooling and cooling[0][0] <= now:
            self._refresh(now)
        return self._ready

    def has_candidate(self, now: int, model: str, lockouts: ModelLockouts) -> bool:
        """Whether `candidates()` would offer anything: a ready connection not locked."""
        cooling = self._cooling
        if cooling and cooling[0][0] <= now:
            self._refresh(now)
        ready = self._ready
        locks = lockouts.entries
        if len(ready) > len(locks):  # more ready keys than locks of any model: one is free
            return True
        if not ready:
            return False
        order = self.order
        for pos in ready:
            lock = locks.get((order[pos], model))
            if lock is None or lock.until <= now:
                return True
        return False

    def probe_key(self, now: int, model: str, lockouts: ModelLockouts
                  ) -> tuple[str, int] | None:
        """When no connection is available, the one the breaker's probe may use and until
        when it cools: cooling for backoff only (not a quota, not a server's hint), enabled,
        not locked for `model`, the first to end (config order breaks ties); None when
        there is none (docs/design.md §3). A probe tests the provider, not the key."""
        best: tuple[int, int] | None = None
        for pos, cooldown in enumerate(self.cooldowns):
            until = cooldown.cooling_until
            if (cooldown.disabled or not cooldown.backoff or until <= now
                    or lockouts.locked_until(cooldown.connection, model, now) is not None):
                continue
            if best is None or until < best[0]:
                best = (until, pos)
        if best is None:
            return None
        return self.order[best[1]], best[0]

    def carrier_key(self, now: int, model: str, lockouts: ModelLockouts,
                    tried: Collection[str]) -> tuple[str, int] | None:
        """The key that carries a request when every key it could still use (not in
        `tried`, enabled, not locked for `model`) is cooling for backoff: the one whose
        cooldown ends first, and until when; None when one of them is ready or cools for a
        quota or a server's hint, or none is left (docs/design.md §4)."""
        best: tuple[int, int] | None = None
        for pos, cooldown in enumerate(self.cooldowns):
            if (cooldown.disabled or cooldown.connection in tried
                    or lockouts.locked_until(cooldown.connection, model, now) is not None):
                continue
            until = cooldown.cooling_until
            if until <= now or not cooldown.backoff:
                return None
            if best is None or until < best[0]:
                best = (until, pos)
        if best is None:
            return None
        return self.order[best[1]], best[0]

    def unavailable(self, now: int, model: str, lockouts: ModelLockouts) -> Unavailable:
        """Explain an empty candidate list: the skip reason and the earliest way back."""
        earliest: int | None = None
        any_cooling = False
        any_enabled = False
        for cooldown in self.cooldowns:
            if cooldown.disabled:
                continue
            any_enabled = True
            back = cooldown.cooling_until
            if back > now:
                any_cooling = True
            until = lockouts.locked_until(cooldown.connection, model, now)
            if until is not None:
                kind = lockouts.kind_of(cooldown.connection, model)
                if kind is not None and not CONSEQUENCES[kind].awaited:
                    continue  # no point waiting for a model that is not there
                back = max(back, until)
            if back > now and (earliest is None or back < earliest):
                earliest = back
        if not any_enabled:
            return Unavailable(SkipReason.ALL_DISABLED, None)
        reason = SkipReason.ALL_COOLING if any_cooling else SkipReason.ALL_LOCKED
        return Unavailable(reason, None if earliest is None else earliest - now)
