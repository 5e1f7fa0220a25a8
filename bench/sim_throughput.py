"""Virtual replay speed: simulated requests per wall-clock second on `hour-long-mixed`.

Runs the resilient policy without a trace (the baseline) and with the trace written to a
temporary file, alternating, in the same process, and prints the best of each and their
ratio (shared machines are noisy: the best run is the least disturbed one). Target:
>= 20,000 simulated requests per second with the trace on.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "hour-long-mixed.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--policy", default="resilient")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    plain_walls, traced_walls = [], []
    requests = 0
    size_mb = 0.0
    with tempfile.TemporaryDirectory() as folder:
        trace_path = Path(folder) / "trace.jsonl"
        for _ in range(args.repeat):
            started = time.perf_counter()
            requests = run_virtual(scenario, args.policy)["requests"]
            plain_walls.append(time.perf_counter() - started)
            with trace_path.open("w") as trace:
                started = time.perf_counter()
                run_virtual(scenario, args.policy, trace=trace)
                traced_walls.append(time.perf_counter() - started)
            size_mb = trace_path.stat().st_size / 1e6
    plain, traced = min(plain_walls), min(traced_walls)
    print(f"{scenario.name}: {requests:,} requests over {scenario.duration_ms / 3.6e6:g} h "
          f"({args.policy}), best of {args.repeat}")
    print(f"  no trace:   {requests / plain:10,.0f} simulated req/s  (best {plain:.2f} s, "
          f"median {statistics.median(plain_walls):.2f} s)")
    print(f"  with trace: {requests / traced:10,.0f} simulated req/s  (best {traced:.2f} s, "
          f"median {statistics.median(traced_walls):.2f} s, {size_mb:.0f} MB trace)")
    print(f"  ratio with/without trace: {plain / traced:.2f}")


if __name__ == "__main__":
    main()
