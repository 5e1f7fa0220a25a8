"""The routing decision's bench (docs/benchmarks.md) measures what it says: its loaded mode
holds its requests in flight, and every mode runs to its table. No figure is asserted."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[1] / "bench"


@pytest.fixture(scope="module")
def route_decision() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("route_decision")
    finally:
        sys.path.remove(str(BENCH))


def test_the_loaded_mode_keeps_its_requests_in_flight(route_decision: ModuleType) -> None:
    from omniroute_tui.router import Strategy

    loaded = route_decision.Loaded(route_decision.build(10, Strategy.LEAST_BUSY), 8)
    counter = [0]
    loaded.decide(50, counter)
    assert counter == [50]
    assert len(loaded.open) == 8
    busy = loaded.router.load.providers
    assert sum(b.total for b in busy.values()) == 8  # least_busy sees them in flight
    assert sum(sum(b.by_connection.values()) for b in busy.values()) == 8


@pytest.mark.parametrize("options", [["--in-flight", "3"], ["--rows", "least_busy"],
                                     ["--rows", "default"]])
def test_each_mode_prints_its_table(options: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCH / "route_decision.py"), "--batches", "2",
                           "--per-batch", "5", *options], capture_output=True, text=True,
                          timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: ")
    shown = [line.split()[0] for line in lines[2:] if "decision, 10/provider" in line]
    if "--rows" in options:
        assert shown == ["priority", options[1]]
    else:
        assert lines[2] == "with 3 other requests in flight"
        assert shown == ["priority", "default", "round_robin", "weighted", "least_busy",
                         "headroom"]


@pytest.mark.parametrize(("options", "said"), [
    (["--rows", "least_bsy"], "--rows: no strategy least_bsy (strategies: priority, "
                              "default, round_robin, weighted, least_busy, headroom)"),
    (["--per-batch", "0"], "argument --per-batch: 0 is less than 1"),
    (["--batches", "x"], "argument --batches: not a whole number: 'x'"),
    (["--in-flight", "-3"], "argument --in-flight: -3 is less than 0"),
    (["--instructions", "5", "--rows", "least_busy"],
     "--rows and --in-flight measure CPU time: not with --instructions or --misses"),
])
def test_bad_options_are_named_with_what_to_give(options: list[str], said: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH / "route_decision.py"), *options],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("options", [[], ["--stream"]])
def test_the_translation_bench_runs_both_routes_to_its_ratio(options: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCH / "translation_overhead.py"),
                           "--requests", "5", "--rounds", "1", *options],
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: ")
    assert lines[-1].startswith("translated / same CPU ratio: ")
