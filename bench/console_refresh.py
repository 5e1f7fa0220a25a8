"""The console under a storm: 500 connections, about 2,000 events a second.

What the user pays for, as the console runs it in one process: the replay's events go
straight to the console's model (event intake and model update), and the app paints from
the model onto a terminal driver that encodes each screen update as a terminal's driver
does and writes it to /dev/null. Each layout (the connections pane at 100x30, the dashboard
at 160x48, the events pane at 100x30, the herd chart at 100x30) runs in a process of its
own for `--seconds` of real time and prints:

- CPU: the process's CPU seconds per wall second (intake, model and paints, all threads);
- paints a second, and a paint's time: the main thread's CPU from the refresh of the
  panes to the end of the screen update that shows it (median and max);
- the paint gap: the wall time between the ends of two consecutive paints while the
  events arrive, a paint's end being the end of the first screen update written after a
  refresh of the panes (what a user sees change); its p99 and max; and the longest pause
  of Python's garbage collector, which stops a paint as it stops everything else.

Targets: <= 0.25 CPU per wall second and no gap over 250 ms, in every layout.

In the same run: the machine's speed (ns per bare loop step, at the start and the end),
and the baseline, the same replay into the same model with no screen (the intake alone):
its ratio says what painting costs on top. `--baseline TREE` measures another checkout
(say `git worktree add /tmp/base main`) in the same rounds, layout by layout, so a change
is judged against it on the same machine at the same time.

`--paints N` replaces real time by N paints at fixed steps of virtual time (200 ms, what
a paint shows at x1), the same work whatever the machine's load: CPU milliseconds a paint,
intake included. (No callgrind count: the app's own timers and idle waits run by the wall
clock, so a run under valgrind does a different amount of that work each time.)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from textual.drivers.headless_driver import HeadlessDriver

PROVIDERS, CONNECTIONS = 5, 100
#: what is on screen: the terminal's size and the key that shows it
LAYOUTS = {"connections": ((100, 30), "2"), "dashboard": ((160, 48), "0"),
           "events": ((100, 30), "4"), "herd chart": ((100, 30), "5")}
WARM_S = 2.0  # before measuring: the tables fill, the first paints add every row
STEP_MS = 200  # --paints: virtual time a paint shows
TARGET_CPU, TARGET_GAP_MS = 0.25, 250


def storm_scenario(rate: int, seconds: int) -> str:
    providers = "\n".join(
        f"  p{i}: {{models: [m], latency: 200ms, connections: "
        f"[{', '.join(f'k{j}' for j in range(CONNECTIONS))}]}}"
        for i in range(PROVIDERS)
    )
    targets = ", ".join(f"p{i}/m" for i in range(PROVIDERS))
    return f"""\
name: console-storm
duration: {seconds}s
resilience: {{breaker: {{failure_threshold: 1000000, degraded_threshold: 1000000}}}}
providers:
{providers}
routes:
  r: {{strategy: round_robin, targets: [{targets}]}}
traffic:
  - {{route: r, rate: {rate}/s}}
faults:
  - {{name: storm, target: "*", error: 429, retry_after: 2s, rate: 0.6, at: 0s}}
"""


def loop_step_ns(steps: int = 2_000_000) -> float:
    """CPU nanoseconds per step of a bare Python loop: the machine's speed at the moment."""
    started = time.process_time_ns()
    total = 0
    for i in range(steps):
        total += i
    return (time.process_time_ns() - started) / steps


class ScreenDriver(HeadlessDriver):
    """A terminal driver as far as the app can tell (it renders every screen update to
    escape sequences for it), writing them to /dev/null and counting the bytes."""

    written = 0
    _out = os.open(os.devnull, os.O_WRONLY)

    @property
    def is_headless(self) -> bool:
        return False

    def write(self, data: str) -> None:
        ScreenDriver.written += os.write(self._out, data.encode())

    def flush(self) -> None:
        """Written already."""


@dataclass
class Paints:
    """When each paint ended and what it cost: a paint starts at a refresh of the panes
    and ends with the first screen update written after it."""

    ends: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    _started: float | None = None
    _written = 0

    def refreshed(self) -> None:
        if self._started is None:
            self._started = time.thread_time()

    def displayed(self) -> None:
        if ScreenDriver.written == self._written:
            return  # nothing changed on screen: not a paint
        self._written = ScreenDriver.written
        if self._started is not None:
            self.ends.append(time.monotonic())
            self.cpu.append(time.thread_time() - self._started)
            self._started = None


class GcPauses:
    """The garbage collector's pauses, by their length."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)


def build(text: str, *, autoplay: bool = True) -> tuple[Any, Any, list[int]]:
    """The app as `omniroute-tui --scenario` builds it (one counter of events more)."""
    from omniroute_tui.console.app import ConsoleApp
    from omniroute_tui.console.model.backends import SimulationBackend
    from omniroute_tui.console.model.console_model import ConsoleModel
    from simulator.scenario import load_scenario

    scenario = load_scenario("console-storm.yaml", text=text)
    events = [0]

    def count(event: object) -> None:
        events[0] += 1

    model = ConsoleModel(scenario.providers, lambda: 0, routes=scenario.config.routes)
    backend = SimulationBackend(scenario, speed=1.0, subscribers=(model.on_event, count))
    model.now = backend.now_ms
    app = ConsoleApp(backend, model, operator="bench", autoplay=autoplay)
    app.driver_class = ScreenDriver
    return app, backend, events


def instrument(app: Any, paints: Paints) -> None:
    refresh, displayed = app.refresh_view, app.post_display_hook

    def refresh_view() -> None:
        paints.refreshed()
        refresh()

    def post_display_hook() -> None:
        displayed()
        paints.displayed()

    app.refresh_view = refresh_view
    app.post_display_hook = post_display_hook


async def real_time(layout: str, text: str, seconds: float) -> dict[str, Any]:
    app, _, events = build(text)
    paints, pauses = Paints(), GcPauses()
    instrument(app, paints)
    size, key = LAYOUTS[layout]
    async with app.run_test(headless=False, size=size) as pilot:
        await pilot.press(key)
        await asyncio.sleep(WARM_S)
        first, events0 = len(paints.ends), events[0]
        gc.callbacks.append(pauses)
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        gc.callbacks.remove(pauses)
        events_n = events[0] - events0
    ends, costs = paints.ends[first:], paints.cpu[first:]
    gaps = sorted(b - a for a, b in pairwise(ends))
    return {"cpu": cpu / wall, "events": events_n / wall, "paints": len(ends) / wall,
            "paint_ms": 1000 * statistics.median(costs), "paint_max_ms": 1000 * max(costs),
            "gap_p99_ms": 1000 * gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))],
            "gap_max_ms": 1000 * gaps[-1], "gc_max_ms": 1000 * max(pauses.pauses, default=0)}


async def fixed_paints(layout: str, text: str, count: int) -> dict[str, Any]:
    """`count` paints, each after STEP_MS of virtual time: CPU a paint, intake included."""
    app, backend, _ = build(text, autoplay=False)
    size, key = LAYOUTS[layout]
    async with app.run_test(headless=False, size=size) as pilot:
        await pilot.press(key)

        async def paint() -> None:
            backend.advance(STEP_MS)
            app.refresh_view()
            await pilot.pause()

        for _ in range(10):
            await paint()
        cpu0 = time.process_time()
        for _ in range(count):
            await paint()
        cpu = time.process_time() - cpu0
    return {"paint_ms": 1000 * cpu / max(1, count)}


def intake(text: str, seconds: float) -> dict[str, Any]:
    """CPU per second of the replay alone, and of the replay into the model (no screen)."""
    from omniroute_tui.console.model.backends import SimulationBackend
    from omniroute_tui.console.model.console_model import ConsoleModel
    from simulator.scenario import load_scenario

    scenario = load_scenario("console-storm.yaml", text=text)
    backend = SimulationBackend(scenario, speed=1.0)
    cpu0 = time.process_time()
    backend.step(int(seconds * 1000))
    replay = (time.process_time() - cpu0) / seconds
    model = ConsoleModel(scenario.providers, lambda: 0, routes=scenario.config.routes)
    backend = SimulationBackend(scenario, speed=1.0, subscribers=(model.on_event,))
    model.now = backend.now_ms
    cpu0 = time.process_time()
    backend.step(int(seconds * 1000))
    return {"replay": replay, "intake": (time.process_time() - cpu0) / seconds}


def measure_one(what: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in this process (a child of `main`)."""
    import omniroute_tui

    text = storm_scenario(args.rate, int(args.seconds + WARM_S + 10))
    if what == "intake":
        result = intake(text, args.seconds)
    elif args.paints:
        result = asyncio.run(fixed_paints(what, text, args.paints))
    else:
        result = asyncio.run(real_time(what, text, args.seconds))
    return {**result, "tree": str(Path(omniroute_tui.__file__).parent.parent)}


def child(what: str, tree: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """Run one measurement in a process of its own, from `tree` (None: this one)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    argv = [sys.executable, __file__, "--one", what, "--seconds", str(args.seconds),
            "--rate", str(args.rate), "--paints", str(args.paints)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{what} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report_real_time(layout: str, rows: dict[str, dict[str, Any]], seconds: float) -> None:
    (width, height), _ = LAYOUTS[layout]
    first = next(iter(rows.values()))
    print(f"{layout} at {width}x{height}, {PROVIDERS * CONNECTIONS} connections, "
          f"{first['events']:,.0f} events/s, {seconds:g} s:")
    for name, r in rows.items():
        met = r["cpu"] <= TARGET_CPU and r["gap_max_ms"] <= TARGET_GAP_MS
        print(f"  {name:9s} CPU {r['cpu']:.3f}/s  paints {r['paints']:.1f}/s, "
              f"{r['paint_ms']:.1f} ms each (max {r['paint_max_ms']:.0f})  "
              f"gap p99 {r['gap_p99_ms']:.0f} ms, max {r['gap_max_ms']:.0f} ms  "
              f"(GC pause max {r['gc_max_ms']:.0f} ms)  {'target met' if met else 'TARGET MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=200, help="requests per virtual second")
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help="which layouts, comma-separated")
    parser.add_argument("--baseline", metavar="TREE", type=Path,
                        help="another checkout measured in the same rounds")
    parser.add_argument("--paints", type=int, default=0, metavar="N",
                        help="N paints at fixed virtual steps instead of real time")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args)))
        return
    trees: dict[str, Path | None] = {"this tree": None}
    if args.baseline is not None:
        trees["baseline"] = args.baseline
    speed = [loop_step_ns()]
    intakes = {}
    for name, tree in trees.items():
        got = child("intake", tree, args)
        print(f"{name}: {got['tree']}\n  the baseline, no screen: the replay alone "
              f"{got['replay']:.3f} CPU/s, the replay into the console's model (the "
              f"intake) {got['intake']:.3f} CPU/s")
        intakes[name] = got["intake"]
    for layout in args.layouts.split(","):
        rows = {}
        for name, tree in trees.items():
            rows[name] = child(layout, tree, args)
        if args.paints:
            cells = ", ".join(f"{name} {r['paint_ms']:.2f} ms CPU" for name, r in rows.items())
            print(f"{layout}: a paint of {STEP_MS} ms of the storm, intake included: {cells}")
        else:
            report_real_time(layout, rows, args.seconds)
            print("  CPU against the intake alone: " + ", ".join(
                f"{name} {r['cpu'] / intakes[name]:.1f}x" for name, r in rows.items()))
    speed.append(loop_step_ns())
    print(f"machine: {speed[0]:.0f} ns per bare loop step at the start, {speed[1]:.0f} at "
          "the end (the figures above scale with it)")


if __name__ == "__main__":
    main()
