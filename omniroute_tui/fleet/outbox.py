"""A fleet replica's outgoing changes while Redis is slow or away: bounded in entries and
bytes, and when full it makes room in an order that loses the least (docs/design.md §10).

First the oldest state changes that a later queued change of the same entity supersedes
(the state hash would keep the later one anyway: a breaker's latest transition, the
latest deadline, an operator's clear); then plain events (a failure seen), oldest first;
then state changes; operator actions last. What it dropped is counted by kind, with when,
for the link to log and `/health` to show. Pure (sans-IO): time comes from the caller.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Change", "ChangeKind", "Outbox"]


class ChangeKind(StrEnum):
    """What a change is, for what to drop first: events, then state, then operator."""

    EVENT = "event"  # a failure seen: counted on the others, no entity of the state hash
    STATE = "state"  # a breaker, cooldown, lockout or enabled state
    OPERATOR = "operator"  # an operator's action (or the breaker event it caused)


_DROP_ORDER = (ChangeKind.EVENT, ChangeKind.STATE, ChangeKind.OPERATOR)


@dataclass(frozen=True, slots=True)
class Change:
    """One change to send: its JSON, and where it goes in the state hash (`field` None:
    only on the stream); `order` and `mode` say how the state script keeps it."""

    data: str
    kind: ChangeKind
    field: str | None = None
    order: int = 0
    mode: str = ""  # "max": a later deadline; "latest": a later time; "set": always

    @property
    def size(self) -> int:
        return len(self.data) + len(self.field or "") + 64


def supersedes(later: Change, earlier: Change) -> bool:
    """Whether the state hash (and a follower's merge) ends the same without `earlier`."""
    if later.mode == "set" or later.mode == "latest":
        return True
    return later.mode == "max" and earlier.mode == "max" and later.order >= earlier.order


class Outbox:
    """At most `max_entries` changes and `max_bytes` of them queued (plus the batch being
    written, which `take` hands out and `give_back` returns in front on failure)."""

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 8 << 20, *,
                 batch_entries: int = 500, batch_bytes: int = 1 << 20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._batch_entries = batch_entries
        self._batch_bytes = batch_bytes
        self._queued: OrderedDict[int, Change] = OrderedDict()
        self._bytes = 0
        self._next = 0
        self._front = 0  # below every seq used: where `give_back` puts a batch
        self._latest: dict[str, int] = {}  # state field -> the latest queued change of it
        self._superseded: list[int] = []  # heap of seqs a later queued change supersedes
        self._by_kind: dict[ChangeKind, deque[int]] = {k: deque() for k in ChangeKind}
        self._flying = 0  # changes handed out by `take`, not yet done or given back
        self.coalesced = 0
        self.dropped = dict.fromkeys(ChangeKind, 0)
        self.dropped_since: int | None = None  # when the first change was dropped (ms)
        self.last_dropped_at: int | None = None
        #: dropped since everything queued last reached Redis (what an answer says)
        self.dropping = 0

    def __len__(self) -> int:
        return len(self._queued) + self._flying

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, change: Change, now: int) -> None:
        """Queue `change`, making room first if the queue is full."""
        seq = self._next
        self._next += 1
        self._queued[seq] = change
        self._bytes += change.size
        self._by_kind[change.kind].append(seq)
        if change.field is not None:
            last = self._latest.get(change.field)
            if last is not None and supersedes(change, self._queued[last]):
                heapq.heappush(self._superseded, last)
            self._latest[change.field] = seq
        while len(self) > self.max_entries or self._bytes > self.max_bytes:
            if not self._make_room(now):
                break
        if len(self._superseded) > 2 * len(self._queued) + 64:  # those written since
            self._superseded = [s for s in self._superseded if s in self._queued]
            heapq.heapify(self._superseded)

    def take(self) -> list[Change]:
        """The oldest changes, out of the queue, to write in one batch."""
        batch: list[Change] = []
        size = 0
        while self._queued and len(batch) < self._batch_entries:
            seq, change = next(iter(self._queued.items()))
            if batch and size + change.size > self._batch_bytes:
                break
            self._remove(seq)
            batch.append(change)
            size += change.size
        self._flying = len(batch)
        for kind in ChangeKind:
            self._trim(kind)
        return batch

    def done(self) -> None:
        """The batch from `take` reached Redis."""
        self._flying = 0
        if not self._queued:
            self.dropping = 0

    def give_back(self, batch: list[Change]) -> None:
        """The batch from `take` failed: it goes back in front, to be written first."""
        self._flying = 0
        for change in reversed(batch):
            self._front -= 1
            seq = self._front
            self._queued[seq] = change
            self._queued.move_to_end(seq, last=False)
            self._bytes += change.size
            self._by_kind[change.kind].appendleft(seq)
            if change.field is not None:
                last = self._latest.get(change.field)
                if last is None:
                    self._latest[change.field] = seq
                elif supersedes(self._queued[last], change):
                    heapq.heappush(self._superseded, seq)

    def health(self) -> dict[str, Any]:
        """What was dropped, for `/health`: counts by kind and since when."""
        return {"dropped": sum(self.dropped.values()),
                "dropped_kinds": {k.value: n for k, n in self.dropped.items()},
                "dropped_since": self.dropped_since, "last_dropped_at": self.last_dropped_at,
                "coalesced": self.coalesced, "pending_bytes": self._bytes}

    def _make_room(self, now: int) -> bool:
        while self._superseded:
            seq = heapq.heappop(self._superseded)
            if seq in self._queued:
                self._remove(seq)
                self.coalesced += 1
                return True
        for kind in _DROP_ORDER:
            self._trim(kind)
            if self._by_kind[kind]:
                self._remove(self._by_kind[kind].popleft())
                self.dropped[kind] += 1
                self.dropping += 1
                if self.dropped_since is None:
                    self.dropped_since = now
                self.last_dropped_at = now
                return True
        return False

    def _remove(self, seq: int) -> None:
        change = self._queued.pop(seq)
        self._bytes -= change.size
        if change.field is not None and self._latest.get(change.field) == seq:
            del self._latest[change.field]

    def _trim(self, kind: ChangeKind) -> None:
        """Forget the seqs of this kind's oldest changes that are no longer queued."""
        seqs = self._by_kind[kind]
        while seqs and seqs[0] not in self._queued:
            seqs.popleft()
