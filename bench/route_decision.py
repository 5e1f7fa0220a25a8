"""Cost of one routing decision on pools of 10 and 1,000 connections per provider.

Three providers; 30% of each pool cooling (the first 30%, the worst case for a scan),
and a few models locked on the available connections. A decision is `start()` plus
`next_step()` up to the attempt; the attempt's success is then recorded outside the
timed section. Prints the medians and the ratio 1000/10 (target: <= 1.5, a few µs).
"""

from __future__ import annotations

import argparse
import statistics
import time

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import (
    BreakerAdmission,
    Classification,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.router import Attempt, Route, Router, Strategy, Target

OK = Classification(None)


def build(pool: int, strategy: Strategy) -> Router:
    clock = ManualClock(1_000_000)
    providers = ("p0", "p1", "p2")
    conns = tuple(f"k{i}" for i in range(pool))
    engine = ResilienceEngine(
        [ProviderSpec(p, conns, default_settings()) for p in providers], clock
    )
    admission = BreakerAdmission(True, 0)
    cooling = int(pool * 0.3)
    for p in providers:
        for conn in conns[:cooling]:  # quota: cools without touching the breaker
            engine.record(p, conn, "m", admission,
                          Classification(FailureKind.QUOTA_EXHAUSTED, 3_600_000))
        for conn in conns[cooling:cooling + 3]:  # some models locked
            engine.record(p, conn, "m", admission, Classification(FailureKind.FORBIDDEN))
            engine.record(p, conn, "n", admission, Classification(FailureKind.FORBIDDEN))
    routes = {"r": Route("r", tuple(Target(p, "m") for p in providers), strategy)}
    return Router(engine, routes)


def median_decision_ns(pool: int, strategy: Strategy, batches: int, per_batch: int) -> float:
    router = build(pool, strategy)
    samples = []
    n = 0
    for _ in range(batches):
        pending = []
        start = time.perf_counter_ns()
        for _ in range(per_batch):
            n += 1
            routing = router.start(str(n), "r")
            step = routing.next_step()
            pending.append(routing)
        samples.append((time.perf_counter_ns() - start) / per_batch)
        assert isinstance(step, Attempt)
        for routing in pending:
            routing.record(200, OK)
            routing.next_step()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--per-batch", type=int, default=500)
    args = parser.parse_args()
    for strategy in (Strategy.PRIORITY, Strategy.ROUND_ROBIN):
        # interleave the two sizes so machine noise hits both alike
        small, large = [], []
        for _ in range(5):
            small.append(median_decision_ns(10, strategy, args.batches, args.per_batch))
            large.append(median_decision_ns(1000, strategy, args.batches, args.per_batch))
        s, lg = min(small), min(large)
        print(f"{strategy.value:12s} 10/provider: {s / 1000:6.2f} µs   "
              f"1000/provider: {lg / 1000:6.2f} µs   ratio 1000/10: {lg / s:.2f}")


if __name__ == "__main__":
    main()
