"""Virtual replay speed: simulated requests per second on `hour-long-mixed`.

Runs the resilient policy without a trace (the baseline) and with the trace written to a
temporary file, alternating, in the same process, and prints the best of each and their
ratio, per CPU second (steadier on a shared machine) and per wall-clock second. Targets:
>= 20,000 simulated requests per wall second with the trace on; 40,000 per CPU second.
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


def loop_step_ns(steps: int = 2_000_000) -> float:
    """CPU nanoseconds per step of a bare Python loop: the machine's speed at the moment,
    printed beside the figures so runs on a busier or slower machine can be compared."""
    started = time.process_time_ns()
    total = 0
    for i in range(steps):
        total += i
    return (time.process_time_ns() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--policy", default="resilient")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    references = [loop_step_ns()]
    plain_walls, traced_walls = [], []
    plain_cpus, traced_cpus = [], []
    requests = 0
    size_mb = 0.0
    with tempfile.TemporaryDirectory() as folder:
        trace_path = Path(folder) / "trace.jsonl"
        for _ in range(args.repeat):
            started, cpu = time.perf_counter(), time.process_time()
            requests = run_virtual(scenario, args.policy)["requests"]
            plain_walls.append(time.perf_counter() - started)
            plain_cpus.append(time.process_time() - cpu)
            with trace_path.open("w") as trace:
                started, cpu = time.perf_counter(), time.process_time()
                run_virtual(scenario, args.policy, trace=trace)
                traced_walls.append(time.perf_counter() - started)
                traced_cpus.append(time.process_time() - cpu)
            size_mb = trace_path.stat().st_size / 1e6
            references.append(loop_step_ns())
    plain, traced = min(plain_walls), min(traced_walls)
    print(f"{scenario.name}: {requests:,} requests over {scenario.duration_ms / 3.6e6:g} h "
          f"({args.policy}), best of {args.repeat}")
    plain_cpu, traced_cpu = min(plain_cpus), min(traced_cpus)
    print(f"  no trace:   {requests / plain_cpu:10,.0f} req per CPU s   "
          f"{requests / plain:10,.0f} req per wall s  (best {plain:.2f} s, "
          f"median {statistics.median(plain_walls):.2f} s)")
    print(f"  with trace: {requests / traced_cpu:10,.0f} req per CPU s   "
          f"{requests / traced:10,.0f} req per wall s  (best {traced:.2f} s, "
          f"median {statistics.median(traced_walls):.2f} s, {size_mb:.0f} MB trace)")
    print(f"  ratio with/without trace (CPU): {plain_cpu / traced_cpu:.2f}")
    print(f"  machine: {statistics.median(references):.0f} ns per bare loop step "
          "(the figures above scale inversely with it)")


if __name__ == "__main__":
    main()
