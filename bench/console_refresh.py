"""The console under a storm: 500 connections, about 2,000 events a second, for 30 s.

Drives the app headless with the scenario advancing in real time, on the connections pane
(the largest table) at 100x30, on the dashboard (every table and the events at once) at
160x48 and on the scenario pane's herd chart at 100x30, and prints the CPU seconds spent
per wall second and the largest gap between two paints (targets: <= 0.5 CPU, no gap over
500 ms). The baseline is the same replay (with the naive policy alongside, as the console
runs it) without the console, in the same process: the difference is the console's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from itertools import pairwise

from omniroute_tui.console.app import ConsoleApp
from omniroute_tui.console.model.backends import SimulationBackend
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.engine.events import Event
from simulator.scenario import load_scenario

PROVIDERS, CONNECTIONS = 5, 100
#: what is on screen: the terminal's size and the key that shows it
LAYOUTS = {"connections": ((100, 30), "2"), "dashboard": ((160, 48), "0"),
           "herd chart": ((100, 30), "5")}


def storm_scenario(rate: int, seconds: int) -> str:
    providers = "\n".join(
        f"  p{i}: {{models: [m], latency: 200ms, connections: "
        f"[{', '.join(f'k{j}' for j in range(CONNECTIONS))}]}}"
        for i in range(PROVIDERS)
    )
    targets = ", ".join(f"p{i}/m" for i in range(PROVIDERS))
    return f"""\
name: console-storm
duration: {seconds + 10}s
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


class Counter:
    def __init__(self) -> None:
        self.events = 0

    def __call__(self, event: Event) -> None:
        self.events += 1


async def with_console(text: str, seconds: float, layout: str
                       ) -> tuple[float, float, int, int]:
    scenario = load_scenario("console-storm.yaml", text=text)
    counter = Counter()
    model = ConsoleModel(scenario.providers, lambda: 0)
    backend = SimulationBackend(scenario, speed=1.0, subscribers=(model.on_event, counter))
    model.now = backend.now_ms
    app = ConsoleApp(backend, model, operator="bench")
    paints: list[float] = []
    original = app.refresh_view

    def timed_refresh() -> None:
        original()
        paints.append(time.monotonic())

    app.refresh_view = timed_refresh  # type: ignore[method-assign]
    size, key = LAYOUTS[layout]
    async with app.run_test(headless=True, size=size) as pilot:
        await pilot.press(key)
        cpu0, wall0, paints_before = time.process_time(), time.monotonic(), len(paints)
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    window = paints[paints_before:]
    gaps = [b - a for a, b in pairwise(window)]
    return cpu / wall, max(gaps, default=0.0), counter.events, len(window)


def replay_only(text: str, seconds: float) -> float:
    """CPU per wall second of the same replay without the console (the baseline)."""
    scenario = load_scenario("console-storm.yaml", text=text)
    backend = SimulationBackend(scenario, speed=1.0)
    cpu0 = time.process_time()
    backend.step(int(seconds * 1000))
    return (time.process_time() - cpu0) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=200, help="requests per virtual second")
    args = parser.parse_args()
    text = storm_scenario(args.rate, int(args.seconds))
    base = replay_only(text, args.seconds)
    for layout, (size, _) in LAYOUTS.items():
        cpu, gap, events, paints = asyncio.run(with_console(text, args.seconds, layout))
        print(f"console on the {layout} at {size[0]}x{size[1]}, "
              f"{PROVIDERS * CONNECTIONS} connections, {events / args.seconds:,.0f} "
              f"events/s for {args.seconds:g} s:")
        print(f"  CPU per wall second: {cpu:.2f} (the replay alone: {base:.2f}; "
              f"console share {max(0.0, cpu - base):.2f})")
        print(f"  paints: {paints} ({paints / args.seconds:.1f}/s), largest gap "
              f"{gap * 1000:.0f} ms")


if __name__ == "__main__":
    main()
