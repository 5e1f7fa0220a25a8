"""`GET /metrics` kept off the request path (docs/metrics.md, "Scrapes and the request
loop"). One rendering is written at a time, a family at a time with the event loop let run
between families. A scrape is served the last rendering when that was read after the scrape
arrived, or is younger than `REUSE_MS` with no state change since; else it renders. Fifty
scrapers at once cost one rendering, not fifty, and no rendering holds the loop for longer
than its largest family."""

from __future__ import annotations

import asyncio

from prometheus_client.registry import Collector

from ..clock import Clock
from ..engine.bus import EventBus
from ..engine.events import STATE_CHANGE_CLASSES, Event
from ..metrics.text_format import render_steps

__all__ = ["REUSE_MS", "Scrapes"]

#: a rendering is served again within this long of its reading unless a breaker, cooldown,
#: lockout, operator action, fault or reload has happened since: counters and in-flight
#: gauges may be this far behind, far less than any scrape interval; state never is
REUSE_MS = 1_000


class Scrapes:
    """The metrics text of `registry`, rendered as rarely as the rules above allow."""

    def __init__(self, registry: Collector, clock: Clock, bus: EventBus) -> None:
        self._registry = registry
        self._clock = clock
        self._lock = asyncio.Lock()
        self._body = b""
        self._read_at_ms: int | None = None
        self._begun = 0  # renderings begun
        self._done = 0  # the number of the last one finished (its text is `_body`)
        self._changes = 0  # state changes seen
        self._read_changes = 0  # of them, those `_body` shows
        bus.subscribe(self._state_changed, *STATE_CHANGE_CLASSES)
        #: renderings written (every other scrape was served one of them)
        self.renderings = 0

    def _state_changed(self, event: Event) -> None:
        self._changes += 1

    async def body(self) -> bytes:
        """The text format's bytes (see the module's rules)."""
        arrived_after = self._begun
        async with self._lock:
            now = self._clock.now_ms()
            if self._done > arrived_after or (
                    self._read_at_ms is not None and self._read_changes == self._changes
                    and 0 <= now - self._read_at_ms < REUSE_MS):
                return self._body
            self._begun += 1
            number, changes = self._begun, self._changes
            out: list[str] = []
            for _ in render_steps(self._registry, out):
                await asyncio.sleep(0)
            self._body = "".join(out).encode("utf-8")
            self._read_at_ms, self._read_changes, self._done = now, changes, number
            self.renderings += 1
            return self._body
