"""Scenario files that would eat the machine are refused before any work starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from omniroute_tui.config import ConfigError, load_router_config
from simulator.cli import main as sim_main
from simulator.scenario import MAX_SIMULATED_REQUESTS, load_scenario
from simulator.virtual import run_virtual

BASE = """\
name: t
duration: {duration}
providers:
  p: {{models: [m], latency: 0ms, connections: [a]}}
routes:
  r: {{targets: [p/m]}}
traffic:
  - {{route: r, {traffic}}}
"""


@pytest.mark.parametrize(("duration", "traffic", "line", "words"), [
    ("1h", "rate: 1000000000000/s", 8, "over 100,000/s, the highest rate accepted"),
    ("100000000h", "every: 1s", 2, "longer than 30 days"),
    ("30d", "rate: 1000/s", 8, "about 2,592,000,000 requests, over the limit of 2,000,000"),
    ("30d", "every: 1ms", 8, "over the limit of 2,000,000 a run"),
])
def test_huge_scenarios_are_refused_at_once_naming_the_line(
        duration: str, traffic: str, line: int, words: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(BASE.format(duration=duration, traffic=traffic))
    started = time.process_time()
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert time.process_time() - started < 1
    problem = info.value.problems[0]
    assert problem.line == line and words in problem.reason, problem
    assert sim_main(["validate", str(path)]) != 0
    assert sim_main(["run", str(path)]) != 0
    assert words in capsys.readouterr().err


def test_the_limit_leaves_room_for_the_shipped_hour() -> None:
    assert MAX_SIMULATED_REQUESTS >= 10 * 180_000
    load_scenario("t.yaml", text=BASE.format(duration="1h", traffic="rate: 50/s"))


def test_duplicate_keys_are_an_error_naming_both_lines() -> None:
    text = ("providers:\n"
            "  p: {models: [m], connections: [a]}\n"
            "routes:\n"
            "  r: {targets: [p/m]}\n"
            "  r: {targets: [p/m], strategy: round_robin}\n")
    with pytest.raises(ConfigError) as info:
        load_router_config("dup.yaml", text=text)
    problem = info.value.problems[0]
    assert problem.line == 5 and problem.field == "routes.r"
    assert "'r' is given twice, on lines 4 and 5" in problem.reason
    with pytest.raises(ConfigError, match="'seed' is given twice, on lines 1 and 3"):
        load_scenario("s.yaml", text="seed: 1\n" + BASE.format(
            duration="1m", traffic="every: 1s").replace("name: t\n", "name: t\nseed: 2\n"))


def test_open_ms_counts_only_to_the_end_of_the_run() -> None:
    """The breaker opens at 55 s on the first 503 (threshold 1); the scenario ends at
    60 s, so it was open 5 s of the run, not its whole 30 s window."""
    text = BASE.format(duration="60s", traffic="every: 1s") + (
        "resilience: {breaker: {failure_threshold: 1, degraded_threshold: 1, "
        "reset_timeout: 30s}}\n"
        "faults:\n  - {name: down, target: p, error: 503, at: 55s, for: 10s}\n")
    report = run_virtual(load_scenario("t.yaml", text=text))
    provider = report["providers"]["p"]
    assert provider["breaker_opens"] == 1
    assert provider["open_ms"] == 5_000
