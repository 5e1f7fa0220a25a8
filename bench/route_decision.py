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


def batch_ns(router: Router, per_batch: int, counter: list[int]) -> float:
    """Mean cost of one decision over a batch; successes are recorded outside the timing."""
    pending = []
    start = time.perf_counter_ns()
    for _ in range(per_batch):
        counter[0] += 1
        routing = router.start(str(counter[0]), "r")
        routing.next_step()
        pending.append(routing)
    elapsed = (time.perf_counter_ns() - start) / per_batch
    for routing in pending:
        step = routing.next_step()
        assert isinstance(step, Attempt)
        routing.record(200, OK)
        routing.next_step()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--per-batch", type=int, default=200)
    args = parser.parse_args()
    for strategy in (Strategy.PRIORITY, Strategy.ROUND_ROBIN):
        small, large = build(10, strategy), build(1000, strategy)
        counter = [0]
        small_ns, large_ns, ratios = [], [], []
        for _ in range(args.batches):  # alternate so machine noise hits both alike
            s = batch_ns(small, args.per_batch, counter)
            lg = batch_ns(large, args.per_batch, counter)
            small_ns.append(s)
            large_ns.append(lg)
            ratios.append(lg / s)
        print(f"{strategy.value:12s} 10/provider: {statistics.median(small_ns) / 1000:6.2f} µs"
              f"   1000/provider: {statistics.median(large_ns) / 1000:6.2f} µs"
              f"   ratio 1000/10 (median of paired batches): {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
