"""What the reports cost: `omniroute-sim run 429-storm` (every policy) as a user runs it,
plain (the baseline), with `--junit`, and with `--html`; and the charts' timeline
collector on the hour-long replay. CPU seconds, best of a few, alternating in one process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path

from simulator.cli import main as sim
from simulator.scenario import SCENARIOS_DIR, load_scenario
from simulator.timeline import Timeline
from simulator.virtual import run_virtual


def cpu(call: object) -> float:
    started = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        call()  # type: ignore[operator]
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"plain": [], "--junit": [], "--html": []}
    hour = load_scenario(SCENARIOS_DIR / "hour-long-mixed.yaml")
    replay: dict[str, list[float]] = {"no timeline": [], "timeline": []}
    with tempfile.TemporaryDirectory() as folder:
        page, junit = Path(folder) / "storm.html", Path(folder) / "storm.xml"
        commands = {"plain": ["run", "429-storm"],
                    "--junit": ["run", "429-storm", "--junit", str(junit)],
                    "--html": ["run", "429-storm", "--html", str(page)]}
        for _ in range(args.repeat):
            for name, command in commands.items():
                runs[name].append(cpu(lambda command=command: sim(command)))
            replay["no timeline"].append(cpu(lambda: run_virtual(hour, "resilient")))
            replay["timeline"].append(cpu(
                lambda: run_virtual(hour, "resilient", timeline=Timeline(hour))))
        size = page.stat().st_size
    base = min(runs["plain"])
    print(f"omniroute-sim run 429-storm, 4 policies, best of {args.repeat} (CPU s):")
    for name, values in runs.items():
        print(f"  {name:8} {min(values):6.2f} s   x{min(values) / base:.2f} of plain")
    print(f"  the HTML page: {size:,} bytes")
    plain_replay = min(replay["no timeline"])
    print(f"hour-long-mixed, resilient: {plain_replay:.2f} s without the timeline, "
          f"{min(replay['timeline']):.2f} s with it "
          f"(x{min(replay['timeline']) / plain_replay:.2f})")


if __name__ == "__main__":
    main()
