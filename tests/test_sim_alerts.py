"""Alert rules over a scenario in virtual time (`omniroute-sim run --alerts`): the series
written for promtool, what promtool says back, the alert expectations and their errors,
and the shipped scenarios' alert timings, pinned."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from junitparser import JUnitXml
from prometheus_client import CollectorRegistry, Gauge

from omniroute_tui.config import ConfigError
from simulator.alerts import (
    SeriesRecorder,
    _values_text,
    alert_names,
    evaluate_rules,
    find_promtool,
)
from simulator.cli import main
from simulator.scenario import SCENARIOS_DIR, AlertExpect, load_scenario
from tests.test_trace_pins import PINNED as TRACE_PINS

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "examples" / "prometheus" / "alerts.yml"
PROMTOOL = find_promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus; "
                             "`make test` installs it where it can)")

SCENARIO = """\
name: tiny
duration: 2m
providers:
  alpha: {models: [m], connections: [a1]}
routes:
  chat: {targets: [alpha/m]}
faults:
  - {name: storm, target: alpha, error: 429, at: 30s, for: 30s}
expect:
"""


def scenario_with(*lines: str) -> str:
    return SCENARIO + "".join(f"  - {line}\n" for line in lines)


def test_series_values_are_run_length_coded_with_gaps_and_staleness() -> None:
    assert _values_text([None, 1.0, 1.0, 1.0, None, None, 2.5]) == "_ 1x2 stale _ 2.5"
    assert _values_text([0.0] * 5) == "0x4"
    assert _values_text([None, None]) == "_x2"
    assert _values_text([float("nan"), float("inf"), 3e20]) == "NaN +Inf 3e+20"


def test_the_recorder_writes_each_series_as_scraped() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("omniroute_x", "x", ["provider"], registry=registry)
    recorder = SeriesRecorder({(("instance", "replica-0"),): registry})
    recorder.sample()
    gauge.labels('al"pha').set(1)
    recorder.sample()
    recorder.sample()
    gauge.remove('al"pha')
    gauge.labels("beta").set(0)
    recorder.sample()
    assert recorder.input_series() == [
        {"series": 'omniroute_x{instance="replica-0",provider="al\\"pha"}',
         "values": "_ 1x1 stale"},
        {"series": 'omniroute_x{instance="replica-0",provider="beta"}', "values": "_x3 0"},
    ]


@needs_promtool
def test_promtool_says_when_an_alert_fired_and_resolved(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n- name: g\n  rules:\n"
                     "  - {alert: Up, expr: omniroute_x == 1, for: 30s}\n"
                     "  - {alert: Never, expr: omniroute_x > 5}\n")
    registry = CollectorRegistry()
    gauge = Gauge("omniroute_x", "x", ["provider"], registry=registry)
    recorder = SeriesRecorder({(): registry})
    for value in (0, 1, 1, 1, 1, 0, 0, 1, 1, 1):  # one sample every 15 s
        gauge.labels("alpha").set(value)
        gauge.labels('bé"ta\\').set(1)
        recorder.sample()
    run = evaluate_rules(rules, recorder, 15_000, PROMTOOL)
    assert run.alerts == ["Up", "Never"]
    assert run.eval_times == [i * 15_000 for i in range(10)]
    # pending at 15 s, firing at 45 s, quiet at 75 s; again pending at 105 s, firing at 135 s
    assert [(f.alert, f.labels, f.fired_ms, f.resolved_ms) for f in run.firings] == [
        ("Up", {"provider": 'bé"ta\\'}, 30_000, None),  # names come back as they were
        ("Up", {"provider": "alpha"}, 45_000, 75_000),
        ("Up", {"provider": "alpha"}, 135_000, None),
    ]


@needs_promtool
def test_a_broken_rule_file_is_an_error_not_a_silent_pass(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n- name: g\n  rules:\n  - {alert: Bad, expr: 'sum(('}\n")
    recorder = SeriesRecorder({(): CollectorRegistry()})
    recorder.sample()
    with pytest.raises(ValueError, match="promtool could not evaluate"):
        evaluate_rules(rules, recorder, 15_000, PROMTOOL)


@pytest.mark.parametrize(("text", "message"), [
    ("not: [yaml", "not YAML"),
    ("[1, 2]", "no `groups:` list"),
    ("groups: [{name: g, rules: [{record: x, expr: up}]}]", "defines no alert"),
])
def test_a_rules_file_that_is_not_one_is_refused(tmp_path: Path, text: str, message: str
                                                 ) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        alert_names(path)


def test_alert_expectations_are_read_with_the_others() -> None:
    scenario = load_scenario("tiny.yaml", text=scenario_with(
        "{alert: OmniRouteBreakerOpen, fires_within: 2m, during: storm}",
        "{metric: success_rate, check: '>= 0.5'}",
        "{alert: OmniRouteRouteNoTarget, never: true}",
        "{alert: OmniRouteBreakerOpen, resolves_within: 90s, during: storm}",
    ))
    first, _, never, resolves = scenario.expect
    assert first == AlertExpect("OmniRouteBreakerOpen", "storm", fires_within_ms=120_000,
                                line=10)
    assert str(first) == "OmniRouteBreakerOpen fires within 2m of storm (resilient)"
    assert never.label == "OmniRouteRouteNoTarget never fires"  # type: ignore[union-attr]
    assert resolves.label == "OmniRouteBreakerOpen resolves within 1m30s of storm ending"  # type: ignore[union-attr]


@pytest.mark.parametrize(("line", "field", "message"), [
    ("{alert: X, never: false}", "expect[0].never", "expected true, got False"),
    ("{alert: X, never: 1}", "expect[0].never", "expected true, got 1"),
    ("{alert: X, never: true, fires_within: 1m}", "expect[0]", "exactly one of"),
    ("{alert: X}", "expect[0]", "exactly one of"),
    ("{alert: X, resolves_within: 1m}", "expect[0].during", "needs the fault"),
    ("{alert: X, fires_within: 1m, during: nope}", "expect[0].during", "no fault named"),
    ("{alert: 'not a name', never: true}", "expect[0].alert", "not an alert rule's name"),
    ("{alert: X, never: true, policy: naive}", "expect[0].policy", "resilient run only"),
    ("{alert: X, fires_within: soon}", "expect[0].fires_within", "soon"),
    ("{alert: X, fires_within: 1m, check: '< 1'}", "expect[0].check", "unknown field"),
    ("{alert: [1], never: true}", "expect[0].alert", "expected a non-empty string"),
])
def test_a_bad_alert_expectation_names_its_line_and_field(line: str, field: str,
                                                          message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_scenario("tiny.yaml", text=scenario_with(line))
    problems = caught.value.problems
    assert any(p.field == field and message in p.reason and p.line == 10 for p in problems), \
        problems


def test_without_promtool_alerts_say_so_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["run", "429-storm", "--alerts", str(RULES), "--policy", "resilient"]) == 2
    assert "promtool, which is not installed" in capsys.readouterr().err


def test_without_alerts_the_alert_expectations_are_skipped_and_say_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(scenario_with("{alert: OmniRouteBreakerOpen, never: true}"))
    junit = tmp_path / "chaos.xml"
    assert main(["run", str(path), "--policy", "resilient", "--check",
                 "--junit", str(junit)]) == 0
    assert "SKIP OmniRouteBreakerOpen never fires (resilient): alerts were not evaluated" \
        in capsys.readouterr().out
    case = next(iter(next(iter(JUnitXml.fromfile(str(junit))))))
    assert case.result[0].text == "alerts were not evaluated (--alerts)"


@needs_promtool
@pytest.mark.parametrize(("args", "message"), [
    (["--scrape-interval", "500ms"], "between 1s and 10m"),
    (["--scrape-interval", "soon"], "soon"),
])
def test_bad_alert_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  args: list[str], message: str) -> None:
    assert main(["run", "429-storm", "--alerts", str(RULES), *args]) == 2
    assert message in capsys.readouterr().err


@needs_promtool
def test_an_expectation_of_an_alert_the_rules_lack_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(scenario_with("{alert: OmniRouteNoSuchThing, never: true}"))
    assert main(["run", str(path), "--alerts", str(RULES)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:10: expect: no rule in" in err and "'OmniRouteNoSuchThing'" in err


#: (alert, labels, fired ms, resolved ms, against the faults) of each shipped scenario with
#: alert expectations, at the default 15 s scrape interval
PINNED = {
    "429-storm": [  # storm: 30s to 4m30s
        ("OmniRouteBreakerOpen", {"provider": "alpha", "severity": "page"}, 105_000, 285_000,
         "storm +1m15s", "storm end +15s"),
        ("OmniRouteUpstreamFailureRatio", {"provider": "alpha", "severity": "warning"},
         150_000, 285_000, "storm +2m", "storm end +15s"),
    ],
    "vpn-blip": [],  # blip: 1m to 1m20s; pages nobody
    "provider-outage": [  # outage: 1m to 4m
        # the breaker's last window (30 s) ends 20 s after the outage: the page clears at
        # the next evaluation but one
        ("OmniRouteBreakerOpen", {"provider": "alpha", "severity": "page"}, 135_000, 270_000,
         "outage +1m15s", "outage end +30s"),
        ("OmniRouteUpstreamFailureRatio", {"provider": "alpha", "severity": "warning"},
         180_000, 270_000, "outage +2m", "outage end +30s"),
    ],
}
#: the expectations' observed values (seconds after the fault's edge; evaluations firing)
OBSERVED = {
    "429-storm": [75.0, 15.0, 0.0],
    "vpn-blip": [0.0, 0.0, 0.0],
    "provider-outage": [75.0, 120.0, 30.0, 0.0],
}


@needs_promtool
@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_shipped_scenarios_alert_timings_are_pinned(name: str, tmp_path: Path) -> None:
    report, junit, trace = (tmp_path / f"{name}.{ext}" for ext in ("json", "xml", "jsonl"))
    code = main(["run", name, "--policy", "resilient", "--alerts", str(RULES), "--check",
                 "--report", str(report), "--junit", str(junit), "--trace", str(trace)])
    assert code == 0
    data = json.loads(report.read_text())
    alerts = data["alerts"]
    assert alerts["interval_ms"] == 15_000 and alerts["alerts"] == alert_names(RULES)
    assert alerts["evaluations"] == load_scenario(SCENARIOS_DIR / f"{name}.yaml"
                                                  ).duration_ms // 15_000 + 1
    assert [(f["alert"], f["labels"], f["fired_ms"], f["resolved_ms"], f["fired"],
             f["resolved"]) for f in alerts["firings"]] == PINNED[name]
    checks = [c for c in data["checks"] if c["expect"].startswith("OmniRoute")]
    assert [c["value"] for c in checks] == OBSERVED[name]
    assert all(c["ok"] for c in checks)
    # the same expectations in JUnit, passed, with what was observed
    (suite,) = JUnitXml.fromfile(str(junit))
    cases = [case for case in suite if case.name.startswith("OmniRoute")]
    assert len(cases) == len(checks) and not any(case.result for case in cases)
    assert all(case.classname == f"{name}.resilient" for case in cases)
    # sampling the metrics does not change the run: the trace is the pinned one
    assert hashlib.sha256(trace.read_bytes()).hexdigest() == TRACE_PINS[name]


@needs_promtool
def test_an_alert_that_fires_too_late_fails_the_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (SCENARIOS_DIR / "429-storm.yaml").read_text().replace(
        "fires_within: 2m, during: storm", "fires_within: 1m, during: storm")
    path = tmp_path / "late.yaml"
    path.write_text(text)
    junit = tmp_path / "late.xml"
    assert main(["run", str(path), "--policy", "resilient", "--alerts", str(RULES), "--check",
                 "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    assert "FAIL OmniRouteBreakerOpen fires within 1m of storm (resilient): fired after 75 s" \
        in out
    (suite,) = JUnitXml.fromfile(str(junit))
    (failed,) = [case for case in suite if case.result and case.name.startswith("OmniRoute")]
    assert failed.result[0].message == "fired after 75 s, expected fires within 1m"


@needs_promtool
def test_a_finer_scrape_interval_sees_the_end_sooner(tmp_path: Path) -> None:
    """Every 5 s: the breaker opened 15 s into the storm either way, but the alert clears
    5 s after the storm, not 15 s."""
    report = tmp_path / "storm.json"
    assert main(["run", "429-storm", "--policy", "resilient", "--alerts", str(RULES),
                 "--scrape-interval", "5s", "--report", str(report)]) == 0
    alerts = json.loads(report.read_text())["alerts"]
    assert alerts["interval_ms"] == 5000 and alerts["evaluations"] == 61
    breaker = next(f for f in alerts["firings"] if f["alert"] == "OmniRouteBreakerOpen")
    assert (breaker["fired"], breaker["resolved"]) == ("storm +1m15s", "storm end +5s")


@needs_promtool
def test_more_samples_than_the_limit_are_refused_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(SCENARIO.replace("duration: 2m", "duration: 3h").replace("expect:\n", ""))
    assert main(["run", str(path), "--alerts", str(RULES), "--scrape-interval", "1s"]) == 2
    assert "10,801 samples at --scrape-interval 1s, over the limit of 10,000" \
        in capsys.readouterr().err


@needs_promtool
def test_a_fleet_is_sampled_replica_by_replica(tmp_path: Path) -> None:
    report = tmp_path / "fleet.json"
    assert main(["run", "fleet-429-storm", "--policy", "resilient", "--alerts", str(RULES),
                 "--report", str(report)]) == 0
    firings = json.loads(report.read_text())["alerts"]["firings"]
    breaker = [f for f in firings if f["alert"] == "OmniRouteBreakerOpen"]
    assert [f["labels"]["instance"] for f in breaker] == ["replica-0", "replica-1",
                                                          "replica-2"]
    assert {(f["fired"], f["resolved"]) for f in breaker} == {("storm +1m15s",
                                                               "storm end +15s")}
    # the fleet's failure ratio pages once, with no replica's name, within one evaluation
    # (15 s) of the single gateway's pinned page and clearance
    (ratio,) = [f for f in firings if f["alert"] == "OmniRouteUpstreamFailureRatio"]
    assert ratio["labels"] == {"provider": "alpha", "severity": "warning"}
    (single,) = [p for p in PINNED["429-storm"] if p[0] == "OmniRouteUpstreamFailureRatio"]
    assert abs(ratio["fired_ms"] - single[2]) <= 15_000
    assert abs(ratio["resolved_ms"] - single[3]) <= 15_000
    assert (ratio["fired"], ratio["resolved"]) == ("storm +2m", "storm end +15s")


def test_the_readme_says_when_the_storm_pages_as_the_pin_does() -> None:
    """The README's tour quotes the 429 storm's breaker page: the pinned timings."""
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    (breaker, *_) = PINNED["429-storm"]
    fired = breaker[4].removeprefix("storm +")
    cleared = breaker[5].removeprefix("storm end +").replace("s", " s")
    assert (f"the breaker page fires {fired} into the storm and clears {cleared} after it"
            in readme)
    assert PINNED["vpn-blip"] == [] and "`vpn-blip` scenario pages nobody" in readme
