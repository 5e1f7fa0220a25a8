"""A histogram's counts, kept as plain integers: one `observe` is a bisect and two adds."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

__all__ = ["ATTEMPT_BUCKETS", "DURATION_BUCKETS_MS", "FIRST_TOKEN_BUCKETS_MS", "LAG_BUCKETS_MS",
           "Buckets"]

#: request durations: an LLM call takes from tens of milliseconds to minutes
DURATION_BUCKETS_MS = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 20_000, 30_000,
                       60_000, 120_000)
#: a stream's first bytes: from a few tens of milliseconds to a long prompt's prefill
FIRST_TOKEN_BUCKETS_MS = (25, 50, 100, 250, 500, 1_000, 2_000, 5_000, 10_000, 30_000)
#: attempts per request (`request.max_attempts` is at most 16)
ATTEMPT_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16)
#: how long another replica's event took to be applied here
LAG_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000)


class Buckets:
    """Counts per bucket (a value lands in the first bound it does not exceed), with the
    sum and count; the bounds are in the unit observed, `scale` turns them into the
    exposed unit (ms to seconds: 0.001)."""

    __slots__ = ("bounds", "count", "counts", "scale", "sum")

    def __init__(self, bounds: Sequence[int], scale: float = 1.0) -> None:
        self.bounds = tuple(bounds)
        self.scale = scale
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.count = 0
        self.sum = 0

    def observe(self, value: int) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> Iterator[tuple[str, float]]:
        """(`le`, cumulative count) per bound, then `+Inf`, as an exposition lists them."""
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            yield _number(bound * self.scale), total
        yield "+Inf", total + self.counts[-1]


def _number(value: float) -> str:
    """A bound as Prometheus writes it: `0.05`, `1.0`, `120.0`."""
    return repr(float(round(value, 6)))
