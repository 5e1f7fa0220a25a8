"""A provider's caps on attempts in flight, and its queue of requests waiting for a slot
(`max_in_flight`, `max_queued`: docs/design.md §6).

Sans-IO like the rest of the core: a slot freed on a key that can take a request now
hands itself to the oldest waiter (it is reserved for it, so a request arriving meanwhile
cannot take it) and calls the waiter's `wake`, which its driver set (an asyncio event, a
virtual-time step). A slot on a key that has just started cooling wakes nobody: the
waiter would find nothing to use and be answered 429.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["Capacity", "Ticket"]


class Ticket:
    """A request waiting for a slot: in the queue of every full provider it could use,
    until a slot is reserved for it (`reserved`, then `wake` is called) or its wait ends."""

    __slots__ = ("queues", "reserved", "wake")

    def __init__(self) -> None:
        self.queues: list[Capacity] = []
        #: the slot a freed attempt handed to this request: its capacity and connection
        self.reserved: tuple[Capacity, str] | None = None
        #: the driver's way to be told (None: it will look when its wait ends)
        self.wake: Callable[[], None] | None = None

    def leave(self) -> None:
        """Out of every queue it waits in (its wait ended, or a slot came)."""
        for capacity in self.queues:
            capacity.waiters.pop(self, None)
        self.queues = []


class Capacity:
    """Attempts in flight on one provider, by connection, against the provider's cap
    (`limit`, 0: none) and each connection's (`limits`; absent: none), and the requests
    waiting for a slot, oldest first (at most `max_queued`). A reserved slot counts as in
    flight until its request takes it or gives it back."""

    __slots__ = ("busy", "connections", "in_flight", "limit", "limits", "max_queued",
                 "usable", "waiters")

    def __init__(self, connections: tuple[str, ...], limit: int, limits: Mapping[str, int],
                 max_queued: int, usable: Callable[[str, int], bool]) -> None:
        self.connections = connections
        #: whether a key can take a request at a time (enabled, not cooling): the pool's
        self.usable = usable
        self.limit = limit
        self.limits = dict(limits)
        self.max_queued = max_queued
        self.in_flight = 0
        self.busy: dict[str, int] = {}
        self.waiters: dict[Ticket, None] = {}  # insertion order: the queue's

    @property
    def capped(self) -> bool:
        return bool(self.limit or self.limits)

    def reconfigure(self, connections: tuple[str, ...], limit: int,
                    limits: Mapping[str, int], max_queued: int) -> None:
        """New caps from a reload: what is in flight stays counted, and waiters get any
        slot the new caps open."""
        self.connections = connections
        self.limit, self.limits, self.max_queued = limit, dict(limits), max_queued

    def full(self) -> bool:
        """The provider's own cap is reached."""
        return 0 < self.limit <= self.in_flight

    def connection_full(self, connection: str) -> bool:
        cap = self.limits.get(connection)
        return cap is not None and self.busy.get(connection, 0) >= cap

    def has_room(self, connection: str) -> bool:
        return not self.full() and not self.connection_full(connection)

    def take(self, connection: str) -> None:
        self.in_flight += 1
        busy = self.busy
        busy[connection] = busy.get(connection, 0) + 1

    def release(self, connection: str, now: int) -> None:
        """An attempt on `connection` ended (its result told to the pool first): its slot
        goes to the oldest waiter, on that key if it can take a request, else on another
        that can (a provider's own cap)."""
        self.give_back(connection)
        if self.waiters:
            if self.usable(connection, now):
                self._hand(connection)
            else:
                self.fill(now)

    def give_back(self, connection: str) -> None:
        """A slot is free again, and nobody is told (its holder walks on at once; `fill`
        after it)."""
        self.in_flight -= 1
        left = self.busy.get(connection, 0) - 1
        if left > 0:
            self.busy[connection] = left
        else:
            self.busy.pop(connection, None)

    def queue(self, ticket: Ticket) -> bool:
        """Put `ticket` at the back of the queue; False when the queue is full."""
        if len(self.waiters) >= self.max_queued:
            return False
        self.waiters[ticket] = None
        ticket.queues.append(self)
        return True

    def fill(self, now: int) -> None:
        """Hand every free slot on a usable key to a waiter (after a reload, or a slot
        given back)."""
        for connection in self.connections:
            while self.waiters and self.has_room(connection) and self.usable(connection, now):
                self._hand(connection)

    def _hand(self, connection: str) -> None:
        if not self.has_room(connection):
            return
        ticket = next(iter(self.waiters))
        ticket.leave()
        self.take(connection)
        ticket.reserved = (self, connection)
        if ticket.wake is not None:
            ticket.wake()
