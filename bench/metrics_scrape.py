"""CPU of one `GET /metrics` scrape of 3 providers x 1,000 connections (target: < 50 ms).

The router of a config file at the limit of connections per provider, with 30 % of every
pool cooling, a few models locked and traffic counted on every connection, so each
per-connection series carries a value; a scrape is what the gateway's handler does:
`exposition(registry)` (the collector reads the engine, then the text is written). It is
measured in this process, as CPU time, the median of `--scrapes`; the same text written by
prometheus_client's own `generate_latest` is timed beside it, and the machine's speed is
printed (the figures scale with it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import (
    BreakerAdmission,
    Classification,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.engine.events import ResultEvent
from omniroute_tui.metrics import build_registry, exposition
from omniroute_tui.router import Route, Router, Target

sys.path.insert(0, str(Path(__file__).parent))
from sim_throughput import loop_step_ns

PROVIDERS = ("p0", "p1", "p2")
T0 = 1_700_000_000_000


def build(connections: int) -> tuple[Router, ManualClock]:
    clock = ManualClock(T0)
    names = tuple(f"key-{i:04d}" for i in range(connections))
    engine = ResilienceEngine([ProviderSpec(p, names, default_settings()) for p in PROVIDERS],
                              clock)
    router = Router(engine, {"chat": Route("chat", tuple(Target(p, "m") for p in PROVIDERS)),
                             "alt": Route("alt", tuple(Target(p, "n") for p in PROVIDERS))},
                    models={p: frozenset({"m", "n"}) for p in PROVIDERS})
    return router, clock


def load(router: Router, clock: ManualClock) -> None:
    """Cooling keys, locked models and one counted attempt on every key."""
    engine = router.engine
    admission = BreakerAdmission(True, 0)
    for provider in PROVIDERS:
        names = engine.spec(provider).connections
        cooling = len(names) * 3 // 10
        for name in names[:cooling]:
            engine.record(provider, name, "m", admission,
                          Classification(FailureKind.QUOTA_EXHAUSTED, 3_600_000))
        for name in names[cooling:cooling + 20]:
            engine.record(provider, name, "n", admission, Classification(FailureKind.FORBIDDEN))
        for name in names:
            engine.bus.emit(ResultEvent(clock.now_ms(), "r", 1, provider, name, "m", 200, None,
                                        800))


def cpu_ms(work: object, scrapes: int) -> list[float]:
    times = []
    for _ in range(scrapes):
        started = time.process_time_ns()
        work()  # type: ignore[operator]
        times.append((time.process_time_ns() - started) / 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1_000,
                        help="connections per provider (3 providers)")
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    speed = loop_step_ns()
    router, clock = build(args.connections)
    registry = build_registry(router, clock=clock)
    load(router, clock)
    text = exposition(registry)
    assert text == generate_latest(registry)
    clock.advance(1_000)
    ours = cpu_ms(lambda: exposition(registry), args.scrapes)
    theirs = cpu_ms(lambda: generate_latest(registry), max(3, args.scrapes // 5))
    collect = cpu_ms(lambda: list(registry.collect()), args.scrapes)
    samples = text.count(b"\n") - 2 * text.count(b"# TYPE")
    print(f"one scrape of {len(PROVIDERS)} providers x {args.connections:,} connections: "
          f"{samples:,} samples, {len(text) / 1e6:.1f} MB of text")
    print(f"  CPU per scrape:    median {statistics.median(ours):6.1f} ms   "
          f"worst {max(ours):6.1f} ms   (target < 50 ms)")
    print(f"  of which reading:  median {statistics.median(collect):6.1f} ms "
          "(the collector: engine snapshots, families)")
    print(f"  generate_latest:   median {statistics.median(theirs):6.1f} ms "
          "(prometheus_client's writer, the same bytes)")
    print(f"  machine: {speed:.1f} ns a Python loop step (now {loop_step_ns():.1f}); the "
          "figures scale with it")


if __name__ == "__main__":
    main()
