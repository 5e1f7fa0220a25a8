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
from omniroute_tui.engine.engine import MERGED_CLASSES
from omniroute_tui.engine.events import BreakerEvent, Event
from omniroute_tui.engine.kinds import BreakerState
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
        self._merging = False
        self._leases: dict[str, tuple[int, int]] = {}  # provider -> (replica, until)
        if shared:
            for index, router in enumerate(self.replicas):
                engine = router.engine
                engine.bus.subscribe(partial(self._tell, index), *MERGED_CLASSES)
                for provider in engine.providers():
                    layers = engine.layers(provider)
                    layers.breaker.probe_gate = partial(self._lease, index, provider,
                                                        layers.timeout_ms)

    def start(self, request_id: str, model: str) -> RequestRouting:
        router = self.replicas[self._turn]
        self._turn = (self._turn + 1) % len(self.replicas)
        return router.start(request_id, model)

    def _tell(self, source: int, event: Event) -> None:
        """A state change on replica `source`: the others learn of it after the
        propagation delay (a merge's own announcements are not news)."""
        if (isinstance(event, BreakerEvent) and event.from_ is BreakerState.HALF_OPEN
                and self._leases.get(event.provider, (None, 0))[0] == source):
            # its probe has answered (or its HALF_OPEN ended otherwise): the lease lasts
            # until the others know, so none of them probes the same window again
            self._leases[event.provider] = (source, event.t + self.propagation_ms)
        if self._merging:
            return
        self._schedule(event.t + self.propagation_ms, partial(self._deliver, source, event))

    def _deliver(self, source: int, event: Event) -> None:
        self._merging = True
        try:
            for index, router in enumerate(self.replicas):
                if index != source:
                    router.engine.merge(event)
        finally:
            self._merging = False

    def _lease(self, replica: int, provider: str, lease_ms: int, now: int) -> bool:
        """The fleet's probe lease on `provider` (`SET NX PX` in a real store): granted
        when free, expired or already this replica's."""
        holder = self._leases.get(provider)
        if holder is not None and holder[0] != replica and holder[1] > now:
            return False
        self._leases[provider] = (replica, now + lease_ms)
        return True
