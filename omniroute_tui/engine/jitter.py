"""Seeded jitter: stretches durations by a uniform factor in [1, 1 + fraction]."""

from __future__ import annotations

import random

__all__ = ["Jitter"]


class Jitter:
    """Deterministic for a seeded `rng` and call sequence; a fraction of 0 is the identity.

    Jitters of several providers may share one `rng` so one seed fixes them all.
    """

    def __init__(self, fraction: float = 0.0, rng: random.Random | None = None) -> None:
        if fraction < 0:
            raise ValueError("jitter cannot be negative")
        self.fraction = fraction
        self._rng = rng or random.Random(0)

    def stretch(self, duration_ms: int) -> int:
        if self.fraction <= 0 or duration_ms <= 0:
            return duration_ms
        return int(duration_ms * (1.0 + self._rng.random() * self.fraction))
