"""Expectations as JUnit XML test cases, the shape GitLab, GitHub Actions and Jenkins read:
one `testsuite` per scenario, one `testcase` per expectation and policy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

from omniroute_tui.config.hidden import visible

from .scenario import AlertExpect, Expect, Scenario

if TYPE_CHECKING:
    from .alerts import AlertRun

__all__ = ["ScenarioOutcome", "write_junit"]


@dataclass(frozen=True)
class ScenarioOutcome:
    """One scenario's run: its policies' (and strategies') metrics and its checks, in
    `expect` order."""

    scenario: Scenario
    results: dict[str, dict[str, Any]]
    checks: list[dict[str, Any]]
    alerts: AlertRun | None = None  # with --alerts: what the rules did over the run

    @property
    def failed(self) -> int:
        return sum(1 for c in self.checks if c["ok"] is False)

    @property
    def passed(self) -> int:
        return sum(1 for c in self.checks if c["ok"] is True)


def _case(outcome: ScenarioOutcome, expect: Expect | AlertExpect, check: dict[str, Any]
          ) -> TestCase:
    scenario = outcome.scenario
    case = TestCase(visible(expect.label), classname=visible(f"{scenario.name}.{expect.column}"),
                    time=0.0)
    where = visible(f"{scenario.source}:{expect.line}" if expect.line else scenario.source)
    if check["ok"] is None:
        skipped = Skipped()  # the reason as text: the JUnit schema gives <skipped> no message
        skipped.text = check.get("skipped") or (
            f"the {expect.strategy} strategy was not run" if expect.strategy
            else f"the {expect.policy} policy was not run")
        case.result = [skipped]
    else:
        observed = check.get("observed") or (
            f"observed {check['value']:g}" if check["value"] is not None
            else "nothing observed")
        if check["ok"] is False:
            case.result = [Failure(f"{observed}, expected {expect.bound}", "expectation")]
        case.system_out = f"{observed} (bound {expect.bound}) · {where}"
    return case


def write_junit(path: Path, outcomes: list[ScenarioOutcome]) -> None:
    """Write every scenario's expectations to `path` (written beside, then renamed).

    Names and file names are written with their hidden characters escaped: XML 1.0 cannot
    hold most control characters at all, and a CI page would not show the others.
    """
    xml = JUnitXml("omniroute-sim")
    for outcome in outcomes:
        scenario = outcome.scenario
        suite = TestSuite(visible(scenario.name))
        suite.add_property("scenario", visible(scenario.source))
        suite.add_property("config", visible(scenario.config.source))
        suite.add_property("seed", str(scenario.seed))
        for expect, check in zip(scenario.expect, outcome.checks, strict=True):
            suite.add_testcase(_case(outcome, expect, check))
        xml.add_testsuite(suite)
    xml.update_statistics()  # type: ignore[no-untyped-call]
    # a suite's time is its scenario's runs (a check itself takes none)
    for suite, outcome in zip(xml, outcomes, strict=True):
        suite.time = round(sum(r.get("wall_s") or 0.0 for r in outcome.results.values()), 3)
    xml.time = round(sum(suite.time for suite in xml), 3)
    partial = path.with_name(path.name + ".partial")
    xml.write(str(partial), pretty=True)
    partial.replace(path)
