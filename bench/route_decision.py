"""Cost of one whole routing decision on pools of 10 and 1,000 connections per provider,
under each route strategy.

Three providers; 30% of each pool cooling (the first 30%, the worst case for a scan),
and a few models locked on the available connections. A decision is what a driver pays
for a request that succeeds at once, the same operation under every strategy: `start()`
(the plan, in the strategy's order), `next_step()` to the attempt, `record()` of its
success with what the answer's rate-limit headers said (the key's remaining requests and
reset, as a provider's answers carry them, whatever the route's strategy) and the final
`next_step()` to the response. Two more rows: `default`, a route that names no strategy
(`DEFAULT_STRATEGY`), and `priority` with answers that carry no headers, which shows what
noting them costs.

It is compared with a hand-written floor doing the same essential work in the same
process (the first target whose breaker admits, the first connection neither cooling nor
locked, success recorded on the breaker and the connection, the headers remembered for
the key, a response built): the ratio is what the engine's generality and its events
cost. Times are CPU time per decision, medians of paired batches (targets: 1000/10 <=
1.2, decision <= 4x the floor, the default's <= 1.05x a priority decision, and weighted,
least_busy and headroom <= 1.3x); the machine's speed is printed with them. `--instructions` counts
instructions per decision under valgrind's callgrind instead, which is steady on a busy
machine (a few minutes); `--misses` simulates the caches and branch predictors under
cachegrind, for what CPU time pays beyond the instructions.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path

from sim_throughput import loop_step_ns

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import (
    BreakerAdmission,
    Classification,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.router import (
    Attempt,
    RequestRouting,
    Response,
    Route,
    Router,
    Strategy,
    Target,
)
from omniroute_tui.router.rate_limits import RateLimitInfo

OK = Classification(None)
PROVIDERS = ("p0", "p1", "p2")
STRATEGIES = tuple(Strategy)
#: the row of a route that names no strategy
DEFAULT = "default"
#: the reference row: priority, its answers without rate-limit headers
BARE = "priority, no headers"
#: what every answer says under headroom: plenty left, the window resets in 30 s
HEADERS = RateLimitInfo(requests_remaining=5000, requests_limit=10_000,
                        requests_reset_ms=30_000)


def build(pool: int, strategy: Strategy | None) -> Router:
    """Three providers of `pool` keys, and a route over them on `strategy` (None: a route
    that names none)."""
    clock = ManualClock(1_000_000)
    conns = tuple(f"k{i}" for i in range(pool))
    engine = ResilienceEngine(
        [ProviderSpec(p, conns, default_settings()) for p in PROVIDERS], clock
    )
    admission = BreakerAdmission(True, 0)
    cooling = int(pool * 0.3)
    for p in PROVIDERS:
        for conn in conns[:cooling]:  # quota: cools without touching the breaker
            engine.record(p, conn, "m", admission,
                          Classification(FailureKind.QUOTA_EXHAUSTED, 3_600_000))
        for conn in conns[cooling:cooling + 3]:  # some models locked
            engine.record(p, conn, "m", admission, Classification(FailureKind.FORBIDDEN))
            engine.record(p, conn, "n", admission, Classification(FailureKind.FORBIDDEN))
    weights = (3, 2, 1) if strategy is Strategy.WEIGHTED else None
    targets = tuple(Target(p, "m") for p in PROVIDERS)
    route = Route("r", targets) if strategy is None else Route("r", targets, strategy, weights)
    return Router(engine, {"r": route})


def decide(router: Router, n: int, counter: list[int], headers: RateLimitInfo | None = HEADERS
           ) -> None:
    """`n` whole decisions, each answered by its first attempt."""
    for _ in range(n):
        counter[0] += 1
        routing = router.start(str(counter[0]), "r")
        step = routing.next_step()
        assert isinstance(step, Attempt)
        routing.record(200, OK, headers)
        assert isinstance(routing.next_step(), Response)


class Loaded:
    """The same decisions with `depth` other requests in flight, as a busy router has
    them: each decision starts a request and takes it to its attempt, then answers the
    oldest attempt in flight. The work is the same as `decide`'s; what changes is the
    state a strategy reads (`least_busy`'s counts in flight)."""

    def __init__(self, router: Router, depth: int) -> None:
        self.router = router
        self.open: deque[RequestRouting] = deque()
        counter = [-depth]
        for _ in range(depth):
            self.open.append(self._attempt(counter))

    def _attempt(self, counter: list[int]) -> RequestRouting:
        counter[0] += 1
        routing = self.router.start(str(counter[0]), "r")
        assert isinstance(routing.next_step(), Attempt)
        return routing

    def decide(self, n: int, counter: list[int]) -> None:
        open_, attempt = self.open, self._attempt
        for _ in range(n):
            open_.append(attempt(counter))
            routing = open_.popleft()
            routing.record(200, OK, HEADERS)
            assert isinstance(routing.next_step(), Response)


class Floor:
    """The essential work of the same decision, hand-written on plain dicts and lists."""

    def __init__(self, pool: int) -> None:
        conns = [f"k{i}" for i in range(pool)]
        cooling = int(pool * 0.3)
        self.now = 1_000_000
        self.open_until = dict.fromkeys(PROVIDERS, 0)
        self.failures = dict.fromkeys(PROVIDERS, 0)
        self.conns = {p: conns for p in PROVIDERS}
        self.cooling_until = {(p, c): (self.now + 3_600_000 if i < cooling else 0)
                              for p in PROVIDERS for i, c in enumerate(conns)}
        self.level = dict.fromkeys(self.cooling_until, 0)
        self.locked = {(p, c, m): self.now + 120_000 for p in PROVIDERS
                       for c in conns[cooling:cooling + 3] for m in ("m", "n")}
        self.limits: dict[tuple[str, str], tuple[int, int]] = {}  # key -> (left, reset at)

    def decide(self, n: int, counter: list[int]) -> None:
        now = self.now
        for _ in range(n):
            counter[0] += 1
            answer = None
            for provider in PROVIDERS:
                if self.open_until[provider] > now:
                    continue
                for conn in self.conns[provider]:
                    key = (provider, conn)
                    if self.cooling_until[key] > now or (provider, conn, "m") in self.locked:
                        continue
                    self.failures[provider] = max(0, self.failures[provider] - 1)
                    self.level[key] = 0
                    self.limits[key] = (HEADERS.requests_remaining or 0,
                                        now + (HEADERS.requests_reset_ms or 0))
                    answer = (200, f"{provider}/{conn}/m", str(counter[0]))
                    break
                if answer is not None:
                    break
            assert answer is not None


def cpu_ns_per(run: Callable[[int, list[int]], None], n: int, counter: list[int]) -> float:
    start = time.process_time_ns()
    run(n, counter)
    return (time.process_time_ns() - start) / n


def _runner(what: str, pool: int, depth: int = 0) -> Callable[[int, list[int]], None]:
    """`n` decisions of `what` (a strategy, BARE or "floor") on `pool` keys a provider,
    with `depth` other requests in flight (not for the floor)."""
    if what == "floor":
        return Floor(pool).decide
    if what == BARE:
        return partial(decide, build(pool, Strategy.PRIORITY), headers=None)
    strategy = None if what == DEFAULT else Strategy(what)
    if depth:
        return Loaded(build(pool, strategy), depth).decide
    return partial(decide, build(pool, strategy))


#: the rows of every mode: the strategies, the default after priority
STRATEGY_ROWS = ("priority", DEFAULT, *(s.value for s in STRATEGIES if s is not
                                        Strategy.PRIORITY))
ROWS = (*STRATEGY_ROWS, BARE)


def measure(args: argparse.Namespace) -> None:
    speed = loop_step_ns()
    shown = ROWS if not args.in_flight else STRATEGY_ROWS
    if args.rows:  # priority stays: every ratio is to it
        shown = ("priority", *(what for what in shown if what in args.rows
                                and what != "priority"))
    runs = {(what, pool): _runner(what, pool, args.in_flight) for what in shown
            for pool in (10, 1000)}
    runs[("floor", 10)] = _runner("floor", 10)
    counter = [0]
    rows: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
    for _ in range(args.batches):  # interleaved, so machine noise hits all alike
        for key, run in runs.items():
            rows[key].append(cpu_ns_per(run, args.per_batch, counter))
    priority, floor = rows[("priority", 10)], rows[("floor", 10)]
    print(f"machine: {speed:.1f} ns a Python loop step (now {loop_step_ns():.1f})")
    print(f"floor (the essential work): {statistics.median(floor) / 1000:5.2f} µs")
    if args.in_flight:
        print(f"with {args.in_flight} other requests in flight")
    for what in shown:
        small, large = rows[(what, 10)], rows[(what, 1000)]
        size_ratio = statistics.median(b / a for a, b in zip(small, large, strict=True))
        vs_priority = statistics.median(a / p for a, p in zip(small, priority, strict=True))
        vs_floor = statistics.median(a / f for a, f in zip(small, floor, strict=True))
        print(f"{what:20s} decision, 10/provider: {statistics.median(small) / 1000:6.2f}"
              f" µs   1000/provider: {statistics.median(large) / 1000:6.2f} µs "
              f"(ratio {size_ratio:.2f})   vs priority {vs_priority:.2f}x   "
              f"vs floor {vs_floor:.1f}x")


def _valgrind_totals(argv: list[str], tool: str = "callgrind") -> dict[str, int]:
    """What `python argv` cost under a valgrind tool, by event (`Ir`, instructions, and
    under cachegrind the simulated cache misses and mispredicted branches too)."""
    simulate = ["--cache-sim=yes", "--branch-sim=yes"] if tool == "cachegrind" else []
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"{tool}.out"
        subprocess.run(["valgrind", f"--tool={tool}", f"--{tool}-out-file={out}", *simulate,
                        sys.executable, __file__, *argv], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})  # the same dicts each run
        text = out.read_text()
        events = re.search(r"^events: (.+)$", text, re.MULTILINE)
        totals = re.search(r"^(?:summary|totals): (.+)$", text, re.MULTILINE)
        assert events is not None and totals is not None, f"no totals in the {tool} output"
        return dict(zip(events.group(1).split(), map(int, totals.group(1).split()),
                        strict=False))


def _per_decision(what: str, pool: int, count: int, tool: str) -> dict[str, float]:
    """A run of `count` decisions less a run of none, per decision."""
    base = _valgrind_totals(["--run", what, "0", str(pool)], tool)
    full = _valgrind_totals(["--run", what, str(count), str(pool)], tool)
    return {event: (full[event] - base[event]) / count for event in full}


def instructions(count: int) -> None:
    """Instructions per decision, for every row at both pool sizes."""
    per = {(what, pool): _per_decision(what, pool, count, "callgrind")["Ir"]
           for what in (*ROWS, "floor") for pool in ((10, 1000) if what != "floor" else (10,))}
    priority = per[("priority", 10)]
    print(f"machine: {loop_step_ns():.1f} ns a Python loop step (CPU, outside valgrind)")
    for what in (*ROWS, "floor"):
        small = per[(what, 10)]
        line = f"{what:20s} {small:10,.0f} instructions a decision (10/provider)"
        if what != "floor":
            large = per[(what, 1000)]
            line += (f", {large:10,.0f} (1000/provider, ratio {large / small:.2f}), "
                     f"vs priority {small / priority:.2f}x")
        print(line)


#: cachegrind's events, as the columns say them
MISSES = {"I1mr": "L1i misses", "D1mr": "L1d read misses", "D1mw": "L1d write misses",
          "Bcm": "cond. mispredicts", "Bim": "indirect mispredicts"}


def misses(count: int) -> None:
    """Simulated cache misses and mispredicted branches per decision (10 keys a
    provider): what CPU time pays beyond the instructions, steady on a busy machine."""
    print(f"machine: {loop_step_ns():.1f} ns a Python loop step (CPU, outside valgrind)")
    print(f"{'':20s} {'instructions':>12s} " + " ".join(f"{name:>20s}"
                                                      for name in MISSES.values()))
    for what in ROWS:
        per = _per_decision(what, 10, count, "cachegrind")
        print(f"{what:20s} {per['Ir']:12,.0f} " + " ".join(f"{per[event]:20,.0f}"
                                                         for event in MISSES))


def run_only(what: str, count: int, pool: int) -> None:
    _runner(what, pool)(count, [0])


def _whole(least: int) -> Callable[[str], int]:
    """An option's whole number, at least `least` (argparse says so for anything else)."""
    def read(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if number < least:
            raise argparse.ArgumentTypeError(f"{number} is less than {least}")
        return number
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--batches", type=_whole(1), default=200)
    parser.add_argument("--per-batch", type=_whole(1), default=200,
                        help="decisions a batch: fewer leave colder caches (the routers "
                             "of the other rows run between two batches)")
    parser.add_argument("--rows", type=lambda text: text.split(","), metavar="A,B",
                        help="measure only these strategies or default (and priority), so "
                             "that only their routers' state competes for the caches")
    parser.add_argument("--instructions", type=_whole(1), nargs="?", const=2000, metavar="N",
                        help="count instructions per decision under callgrind (N decisions)")
    parser.add_argument("--misses", type=_whole(1), nargs="?", const=2000, metavar="N",
                        help="simulate caches and branches under cachegrind instead (N "
                             "decisions): misses and mispredicts per decision")
    parser.add_argument("--in-flight", type=_whole(0), default=0, metavar="N",
                        help="keep N other requests in flight through every decision (CPU "
                             "time; the strategies' rows and the default's)")
    parser.add_argument("--run", nargs=3, metavar=("WHAT", "N", "POOL"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = [row for row in args.rows or () if row not in STRATEGY_ROWS]
    if unknown:
        parser.error(f"--rows: no strategy {', '.join(unknown)} (strategies: "
                     f"{', '.join(STRATEGY_ROWS)})")
    if (args.instructions or args.misses) and (args.rows or args.in_flight):
        parser.error("--rows and --in-flight measure CPU time: not with --instructions "
                     "or --misses")
    if args.run:
        run_only(args.run[0], int(args.run[1]), int(args.run[2]))
    elif args.instructions or args.misses:
        if os.system("valgrind --version > /dev/null 2>&1") != 0:
            sys.exit("--instructions and --misses need valgrind")
        if args.instructions:
            instructions(args.instructions)
        else:
            misses(args.misses)
    else:
        measure(args)


if __name__ == "__main__":
    main()
