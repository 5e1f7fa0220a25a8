"""One replica of a fleet, sans-IO (docs/design.md §10): what it shares, how it applies
what it hears, and whether it may probe.

A `FleetPeer` wraps one engine. It hands every state change the others need to `send`
(the breaker, cooldown, lockout, enable/disable and failure events, the operator's audit
records, and the operator's actions as typed commands, ahead of the changes they cause),
applies what the transport hears with the engine's merge rules (and does not send on what
a merge changed: that is not news), and answers the breaker's probe gate from the fleet's
probe lease: this replica may probe while it holds the lease; otherwise it asks the
transport's `LeaseStore`, which answers now (the simulated fleet) or later (Redis, whose
`SET NX PX` must not hold up a routing decision). No I/O and no clock of its own: time is
the engine's, or the events'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..engine.engine import MERGED_CLASSES, ResilienceEngine
from ..engine.events import BreakerEvent, Event, ResultEvent
from ..engine.kinds import BreakerState
from .commands import FleetCommand, Reset

__all__ = ["SHARED_EVENTS", "FleetPeer", "LeaseStore", "Shared"]

#: what a replica tells the others, and hears from them
Shared = Event | FleetCommand
#: the event types a replica shares (its commands besides)
SHARED_EVENTS = MERGED_CLASSES


class LeaseStore(Protocol):
    """Where the fleet's probe lease lives (one holder per provider at a time)."""

    def ask(self, provider: str, lease_ms: int, now: int) -> None:
        """Ask for the lease on `provider` for `lease_ms`; the answer comes through
        `FleetPeer.lease_answer`, during this call or later."""

    def hand_over(self, provider: str, keep_ms: int, now: int) -> None:
        """This replica's probe has answered: if it still holds the lease, keep it only
        `keep_ms` more (for the others to hear how the probe went)."""


class FleetPeer:
    """One engine's side of the fleet protocol; `send` carries what it shares to the
    others, `lease` the probe lease, `handover_ms` how long a lease is kept after its probe
    answered (the time the others need to hear of it)."""

    def __init__(self, engine: ResilienceEngine, *, send: Callable[[Shared], None],
                 lease: LeaseStore, handover_ms: int) -> None:
        self.engine = engine
        self._send = send
        self._lease = lease
        self._handover_ms = handover_ms
        self._merging = False
        self._held: dict[str, int] = {}  # provider -> the lease held until (0: handed over)
        self._asking: set[str] = set()
        engine.bus.subscribe(self._share, *(t for t in SHARED_EVENTS if t is not ResultEvent))
        engine.bus.subscribe(self._share_result, ResultEvent)
        engine.subscribe_commands(self._share)
        engine.set_probe_gate(self.may_probe)

    # -- out -------------------------------------------------------------------------------

    def _share(self, item: Shared) -> None:
        if (isinstance(item, BreakerEvent) and item.from_ is BreakerState.HALF_OPEN
                and self._held.get(item.provider, 0) > 0):
            # however its HALF_OPEN ended (a merge too): the others are told, so the lease
            # lasts only until they have heard
            self._held[item.provider] = 0
            self._lease.hand_over(item.provider, self._handover_ms, item.t)
        if not self._merging:  # a merge's own announcement is not news for the others
            self._send(item)

    def _share_result(self, event: Event) -> None:
        """Results come with every attempt: a success (most of them) changes nothing
        elsewhere, and is dropped first."""
        if event.kind is not None and not self._merging:  # type: ignore[attr-defined]
            self._send(event)

    # -- in --------------------------------------------------------------------------------

    def hear(self, item: Shared) -> bool:
        """Another replica's event or command, applied here by the merge rules (what it
        changes is not sent on); returns whether anything changed."""
        self._merging = True
        try:
            if isinstance(item, FleetCommand):
                return self.engine.merge_command(item)
            return self.engine.merge(item)
        finally:
            self._merging = False

    def hear_state(self, item: Shared) -> bool:
        """An entity's latest state, read from the fleet's whole state (on start or
        reconnect): as heard, except a reset, which there only says that the force-open
        it replaced is over (done again now, it would close what opened since)."""
        if isinstance(item, Reset):
            return False
        return self.hear(item)

    # -- the probe lease --------------------------------------------------------------------

    def may_probe(self, provider: str, now: int) -> bool:
        """The breaker's probe gate: yes while this replica holds the fleet's lease; else
        it asks for it (once at a time) and says whether the answer came at once."""
        if self._held.get(provider, 0) > now:
            return True
        if provider not in self._asking:
            self._asking.add(provider)
            self._lease.ask(provider, self.engine.layers(provider).timeout_ms, now)
        return self._held.get(provider, 0) > now

    def lease_answer(self, provider: str, until: int | None) -> None:
        """The store's answer to `ask`: the lease is this replica's until `until` (epoch
        ms), or None: another replica holds it (or the store did not answer)."""
        self._asking.discard(provider)
        if until is not None:
            self._held[provider] = until

