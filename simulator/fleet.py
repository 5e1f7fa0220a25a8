"""A fleet of routers in virtual time: the traffic spread over the replicas in turn, each
with its own engine.

With shared state, this is an in-process model of what the shared store does: each
replica's state changes reach the others `propagation_ms` later and are applied by the
engine's merge rules (deadlines only extend, an OPEN window another replica opened is
adopted, a close after a successful probe is adopted, a failure seen anywhere opens the
dedup windows everywhere), and a HALF_OPEN probe needs the fleet's lease, so the whole
fleet sends one probe per reset window. Without it, the replicas are isolated: each sends
its own probes and its own failures into a struggling provider.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from omniroute_tui.clock import Clock
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.fleet.peer import FleetPeer, Shared
from omniroute_tui.router.core import RequestRouting, Router

from .scenario import Scenario

__all__ = ["Fleet"]

Schedule = Callable[[int, Callable[[], None]], None]


class Fleet:
    """The replicas' routers behind one `start()`, round robin; every replica's events are
    re-emitted on `bus`, so the run's metrics and trace see the whole fleet."""

    def __init__(self, scenario: Scenario, clock: Clock, bus: EventBus, *, shared: bool,
                 schedule: Schedule) -> None:
        self.replicas: list[Router] = []
        for index in range(scenario.replicas):
            replica_bus = EventBus()
            replica_bus.subscribe(bus.emit)
            self.replicas.append(
                scenario.config.build(clock, bus=replica_bus, seed=scenario.seed + index))
        self.propagation_ms = scenario.propagation_ms
        self._schedule = schedule
        self._turn = 0
        leases: dict[str, tuple[int, int]] = {}  # provider -> (replica, until)
        self.peers: list[FleetPeer] = []
        if shared:
            for index, router in enumerate(self.replicas):
                lease = _ReplicaLease(leases, index)
                peer = FleetPeer(router.engine, send=partial(self._tell, index), lease=lease,
                                 handover_ms=self.propagation_ms)
                lease.peer = peer
                self.peers.append(peer)

    def start(self, request_id: str, model: str) -> RequestRouting:
        router = self.replicas[self._turn]
        self._turn = (self._turn + 1) % len(self.replicas)
        return router.start(request_id, model)

    def _tell(self, source: int, item: Shared) -> None:
        """Replica `source` shares `item`: the others hear it after the propagation delay."""
        self._schedule(item.t + self.propagation_ms, partial(self._deliver, source, item))

    def _deliver(self, source: int, item: Shared) -> None:
        for index, peer in enumerate(self.peers):
            if index != source:
                peer.hear(item)


class _ReplicaLease:
    """One replica's side of the fleet's probe leases (`SET NX PX` in a real store):
    asked, it answers at once."""

    def __init__(self, leases: dict[str, tuple[int, int]], replica: int) -> None:
        self._leases = leases
        self._replica = replica
        self.peer: FleetPeer | None = None

    def ask(self, provider: str, lease_ms: int, now: int) -> None:
        """Granted when free, expired or already this replica's."""
        assert self.peer is not None
        holder = self._leases.get(provider)
        if holder is not None and holder[0] != self._replica and holder[1] > now:
            self.peer.lease_answer(provider, None)
            return
        self._leases[provider] = (self._replica, now + lease_ms)
        self.peer.lease_answer(provider, now + lease_ms)

    def hand_over(self, provider: str, keep_ms: int, now: int) -> None:
        holder = self._leases.get(provider)
        if holder is not None and holder[0] == self._replica:
            self._leases[provider] = (self._replica, now + keep_ms)
