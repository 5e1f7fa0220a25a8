"""The shipped scenarios' runs, each made once a session for the tests that only read them
(an hour-long run costs seconds of CPU, and several tests check the same one)."""

from __future__ import annotations

import copy
import functools
import io
from dataclasses import dataclass
from typing import Any

from simulator.scenario import SCENARIOS_DIR, Scenario, load_scenario
from simulator.timeline import Timeline
from simulator.virtual import run_virtual


@dataclass(frozen=True)
class ShippedRun:
    """One policy's replay of a shipped scenario: its metrics, trace and timeline."""

    scenario: Scenario
    metrics: dict[str, Any]
    trace: str
    timeline: Timeline


@functools.cache
def _run(name: str, policy: str) -> ShippedRun:
    scenario = load_scenario(SCENARIOS_DIR / f"{name}.yaml")
    out, timeline = io.StringIO(), Timeline(scenario)
    metrics = run_virtual(scenario, policy, trace=out, timeline=timeline)
    return ShippedRun(scenario, metrics, out.getvalue(), timeline)


def shipped_run(name: str, policy: str = "resilient") -> ShippedRun:
    """`name`'s run under `policy`, made at its first use; its metrics and timeline are
    copies, so that a test that changes them leaves the next one the run as it was (the
    scenario is read-only)."""
    run = _run(name, policy)
    keep = {id(run.scenario): run.scenario}  # the timeline's own scenario, not a copy
    return ShippedRun(run.scenario, copy.deepcopy(run.metrics), run.trace,
                      copy.deepcopy(run.timeline, keep))
