"""Python's full garbage collections, run between paints.

A full collection walks every object the process tracks: 50-80 ms of CPU in a console
under a storm (Textual keeps tens of thousands of strips and caches), every few seconds.
Left to Python, it runs inside whichever paint allocates at that moment, and that paint
reaches the screen that much later: the gap between two screen updates went from 200 to
over 300 ms. While a console runs, Python's own full collections are off (the young
generations are collected as before) and the console runs them itself, as often as
Python would have, right after a paint's screen update when the next paint is far enough
away. What the console holds once it is up (modules, widgets, styles) is frozen out of
them (`gc.freeze`): a full collection walks what came after, 20-50 ms.
"""

from __future__ import annotations

import gc

__all__ = ["ROOM_S", "PacedCollections"]

#: a threshold for the oldest generation that is never reached (one full collection
#: every few days at a storm's pace)
_NEVER = 1 << 30
#: the time to the next paint a full collection needs, on a busy machine
ROOM_S = 0.1
#: a collection put off this many times as long as Python would wait runs anyway
_OVERDUE = 3


class PacedCollections:
    """Full collections at a console's pace: `start` when it is up, `due` after each
    paint, `collect` after its screen update, `stop` when it ends. Consoles in one
    process (tests, a room's viewers) share the collector: the first start turns Python's
    full collections off, the last stop turns them on again as they were."""

    _running = 0
    _saved: tuple[int, int, int] = (0, 0, 0)

    def __init__(self) -> None:
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if PacedCollections._running == 0:
            PacedCollections._saved = gc.get_threshold()
            young, middle, _ = PacedCollections._saved
            gc.set_threshold(young, middle, _NEVER)
            gc.freeze()
        PacedCollections._running += 1

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        PacedCollections._running -= 1
        if PacedCollections._running == 0:
            gc.unfreeze()
            gc.set_threshold(*PacedCollections._saved)

    def _waited(self) -> int:
        """Collections of the middle generation since the last full one."""
        return gc.get_count()[2] if self._started and gc.isenabled() else 0

    @property
    def due(self) -> bool:
        """Whether Python would have run a full collection by now (as many collections
        of the middle generation since the last one as its threshold says)."""
        return self._waited() > PacedCollections._saved[2]

    def collect(self, room_s: float) -> bool:
        """Run the full collection that is due if `room_s` (seconds to the next paint)
        leaves it ROOM_S, or if it has waited too long already; whether it ran."""
        waited = self._waited()
        if waited <= PacedCollections._saved[2] or (
                room_s < ROOM_S and waited <= _OVERDUE * PacedCollections._saved[2]):
            return False
        gc.collect()
        return True
