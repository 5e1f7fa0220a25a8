"""Strategies side by side in the simulator (`strategies:`, `--strategy`), the shipped
`rate-limit-headroom` and `herd` scenarios, and the warning for a fault that sees no traffic."""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from omniroute_tui.config import ConfigError
from omniroute_tui.router import DEFAULT_STRATEGY, strategies
from simulator.cli import main
from simulator.fault_traffic import silent_faults
from simulator.scenario import SCENARIOS_DIR, load_scenario, shipped_scenarios, with_strategy
from simulator.virtual import run_virtual

from .shipped_runs import shipped_run

HEADROOM = SCENARIOS_DIR / "rate-limit-headroom.yaml"


def test_under_priority_the_first_key_meets_429s_every_minute_and_under_headroom_none() -> None:
    scenario = load_scenario(HEADROOM)
    limited: dict[str, Counter[tuple[int, str]]] = {}
    for strategy in ("priority", "headroom"):
        out = io.StringIO()
        metrics = run_virtual(with_strategy(scenario, strategy), "resilient", trace=out)
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        limited[strategy] = Counter((e["t"] // 60_000, e["connection"]) for e in lines
                                    if e["type"] == "result" and e["status"] == 429)
        assert metrics["success_rate"] == 1.0
    assert sum(limited["priority"].values()) == 49
    assert {minute for minute, key in limited["priority"]} == set(range(10))  # every minute
    assert {key for minute, key in limited["priority"]} == {"k1"}
    assert limited["headroom"] == Counter()


def test_the_scenario_runs_its_strategies_side_by_side_in_every_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, junit, html = tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "h.html"
    assert main(["run", str(HEADROOM), "--policy", "resilient", "--check", "--report",
                 str(report), "--junit", str(junit), "--html", str(html)]) == 0
    data = json.loads(report.read_text())
    assert list(data["policies"]) == ["resilient"]
    assert list(data["strategies"]) == ["priority", "headroom"]
    limited = {s: m["providers"]["openai"]["failures"].get("rate_limited", 0)
               for s, m in data["strategies"].items()}
    assert limited == {"priority": 49, "headroom": 0}
    assert [(c["strategy"], c["ok"]) for c in data["checks"]] == [
        ("priority", True), ("headroom", True), ("priority", True), ("headroom", True),
        ("headroom", True)]
    xml = junit.read_text()
    assert 'classname="rate-limit-headroom.priority"' in xml
    assert 'classname="rate-limit-headroom.headroom"' in xml
    page = html.read_text()
    assert "<th>priority</th><th>headroom</th>" in page
    assert 'aria-label="priority"' in page and 'aria-label="headroom"' in page
    out = capsys.readouterr().out
    assert "every route on" in out and "priority" in out and "headroom" in out
    assert "PASS failures.rate_limited on openai == 0 (headroom): observed 0" in out


def test_strategy_on_the_command_line_replaces_the_scenarios(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    assert main(["run", "429-storm", "--policy", "resilient", "--strategy", "round_robin",
                 "--strategy", "weighted", "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert list(data["strategies"]) == ["round_robin", "weighted"]
    # 429-storm's route is priority: round_robin is a run of its own, with other figures
    assert data["strategies"]["round_robin"]["attempts"] != data["policies"]["resilient"][
        "attempts"]
    with pytest.raises(SystemExit) as caught:
        main(["run", "429-storm", "--strategy", "fastest"])
    assert caught.value.code == 2


@pytest.mark.parametrize(("edit", "line", "field", "reason"), [
    (("strategies: [priority, headroom]", "strategies: [priority, fastest]"), 20,
     "strategies[1]", "expected one of priority, round_robin"),
    (("strategies: [priority, headroom]", "strategies: [priority, priority]"), 20,
     "strategies[1]", "listed twice"),
    (("strategies: [priority, headroom]", "strategies: headroom"), 20, "strategies",
     "non-empty list"),
    (("strategy: priority, check", "strategy: weighted, check"), 24, "expect[0].strategy",
     "not one of the scenario's strategies"),
    (("strategy: priority, check: \">= 0.99\"", "strategy: priority, policy: naive, "
      "check: \">= 0.99\""), 26, "expect[2].policy", "under the resilient policy"),
])
def test_bad_strategies_are_errors_with_file_line_and_field(
    tmp_path: Path, edit: tuple[str, str], line: int, field: str, reason: str
) -> None:
    text = HEADROOM.read_text()
    assert edit[0] in text
    path = tmp_path / "s.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    problem = caught.value.problems[0]
    assert (problem.line, problem.field) == (line, field)
    assert reason in problem.reason
    # one mistake, one problem: the expectations naming a strategy are not blamed for a
    # `strategies:` that could not be read
    assert len(caught.value.problems) == 1


#: sixteen keys allowed 200 to 1,200 requests a minute, under 90 % of what they carry
#: together: round robin gives each the same share, more than the small keys allow
UNEQUAL_KEYS = """\
name: unequal-keys
seed: 600
duration: 3m
providers:
  openai:
    models: [m]
    latency: {p50: 300ms, p99: 1200ms}
    connections:
""" + "".join(f"      - {{id: k{i}, limits: {{rpm: {rpm}}}}}\n" for i, rpm in enumerate(
    (200, 400, 600, 800, 1000, 1200, 300, 500) * 2)) + """\
routes:
  chat: {strategy: headroom, targets: [openai/m]}
strategies: [round_robin, headroom]
traffic:
  - {route: chat, rate: 150/s}
"""


@pytest.mark.parametrize(("window", "limited"), [(2, 104), (4, 0)])
def test_headroom_s_window_of_4_keys_spreads_unequal_keys_without_a_429(
    monkeypatch: pytest.MonkeyPatch, window: int, limited: int
) -> None:
    """Why `headroom` compares 4 ready keys a decision: 4 (and 3, and 8) give none of
    these 429s, 2 does not; each key more costs about 1,000 instructions a decision."""
    monkeypatch.setattr(strategies, "WINDOW", window)
    scenario = load_scenario("unequal-keys.yaml", text=UNEQUAL_KEYS)
    rates = {}
    for strategy in ("round_robin", "headroom"):
        metrics = run_virtual(with_strategy(scenario, strategy), "resilient")
        rates[strategy] = metrics["providers"]["openai"]["failures"].get("rate_limited", 0)
        assert metrics["requests"] == 26_937
    assert rates == {"round_robin": 263, "headroom": limited}


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenarios_faults_see_traffic(name: str) -> None:
    run = shipped_run(name)
    assert silent_faults(run.scenario, run.metrics) == []


FALLBACK_ONLY = """\
name: fallback-only
duration: 2m
providers:
  alpha: {models: [m], latency: 100ms, connections: [a]}
  beta: {models: [m], latency: 100ms, connections: [b]}
routes:
  fast: {strategy: priority, targets: [alpha/m, beta/m]}
traffic:
  - {route: fast, every: 1s, to: 100s}
  - {route: alpha/m, every: 1s, from: 101s, to: 102s}
faults:
  - {name: alpha-blip, target: alpha, error: reset, at: 10s, for: 2s}
  - {name: beta-outage, target: beta, error: 503, at: 30s, for: 30s}
  - {name: late, target: alpha, error: 500, at: 110s, for: 5s}
  - {name: between, target: alpha, error: 500, at: 101500ms, for: 400ms}
"""


def test_a_fault_on_a_fallback_is_named_with_its_line_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fallback-only.yaml"
    path.write_text(FALLBACK_ONLY)
    scenario = load_scenario(path)
    assert silent_faults(scenario, run_virtual(scenario, "resilient")) == [
        f"{path}:13: fault 'beta-outage' saw no traffic: beta is only a fallback of route fast",
        f"{path}:14: fault 'late' saw no traffic: no traffic runs on a route to alpha while "
        "it does",
        f"{path}:15: fault 'between' saw no traffic: no attempt reached alpha while it was on",
    ]
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "fault 'beta-outage' saw no traffic: beta is only a fallback of route fast" in err
    assert main(["run", str(path), "--policy", "resilient"]) == 0
    assert "fault 'late' saw no traffic" in capsys.readouterr().err
    # under naive the warning is not given: it speaks of the resilient policy only
    assert main(["run", str(path), "--policy", "naive"]) == 0
    assert "saw no traffic" not in capsys.readouterr().err


def test_the_readme_quotes_the_headroom_lesson_as_pinned() -> None:
    """49 and none, pinned above, are the README's figures for rate-limit-headroom."""
    from pathlib import Path

    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    assert "meets 49 429s under `priority` and none under `headroom`" in readme


HERD = SCENARIOS_DIR / "herd.yaml"


def test_the_herd_is_served_under_the_default_and_refused_under_priority() -> None:
    """200 clients at once, four keys of 50 a minute each: the route names no strategy,
    the default spreads the burst 50 a key; under priority the first key takes all 200,
    150 come back 429 and the retry budget lets 10 of them on to the second key."""
    run = shipped_run("herd")  # the default: the route names no strategy
    lines = [json.loads(line) for line in run.trace.splitlines()]
    assert run.scenario.config.routes["chat"].strategy.value == "round_robin"
    assert run.metrics["successes"] == 200 and run.metrics["attempts"] == 200
    assert run.metrics["providers"]["openai"]["failures"] == {}
    assert Counter(e["status"] for e in lines if e["type"] == "response") == {200: 200}
    assert Counter(e["connection"] for e in lines if e["type"] == "attempt") == {
        "k1": 50, "k2": 50, "k3": 50, "k4": 50}
    out = io.StringIO()
    metrics = run_virtual(with_strategy(run.scenario, "priority"), "resilient", trace=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert metrics["successes"] == 60 and metrics["attempts"] == 210
    assert metrics["providers"]["openai"]["failures"] == {"rate_limited": 150}
    assert Counter(e["status"] for e in lines if e["type"] == "response") == {200: 60,
                                                                              429: 140}
    assert Counter(e["connection"] for e in lines if e["type"] == "attempt") == {
        "k1": 200, "k2": 10}
    assert sum(1 for e in lines if e["type"] == "budget" and not e["spent"]) == 140


def test_the_herd_report_sets_the_default_beside_priority(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    assert main(["run", "herd", "--policy", "resilient", "--check", "--report",
                 str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["policies"]["resilient"]["successes"] == 200
    assert data["strategies"]["priority"]["successes"] == 60
    assert all(check["ok"] for check in data["checks"])


@pytest.mark.parametrize(("item", "problem"), [
    ("{route: chat, rate: 5/s, count: 3}", "traffic[0].count: count is the requests at each "
                                           "time of `at` (a burst): give at, or drop count"),
    ("{route: chat, at: [0s], count: 0}", "traffic[0].count: expected a whole number >= 1, "
                                          "got 0"),
    ("{route: chat, at: [0s], count: two}", "traffic[0].count: expected a whole number >= 1"),
])
def test_a_burst_count_goes_with_at_and_is_a_whole_number(item: str, problem: str) -> None:
    text = HERD.read_text().replace("{route: chat, at: [0s], count: 200}", item)
    with pytest.raises(ConfigError) as caught:
        load_scenario("herd.yaml", text=text)
    assert problem in str(caught.value)


def test_a_burst_arrives_at_each_time_of_at() -> None:
    text = HERD.read_text().replace("at: [0s], count: 200", "at: [2s, 1s], count: 3")
    scenario = load_scenario("herd.yaml", text=text)
    (traffic,) = scenario.traffic
    assert traffic.expected_requests(scenario.duration_ms) == 6
    assert list(traffic.arrivals(random.Random(0))) == [1000] * 3 + [2000] * 3


def test_the_default_and_headroom_serve_the_herd_and_meet_no_429_under_headroom_s_load() -> None:
    """design §8's figures for the choice of the default: both strategies that spread
    serve the herd whole with one attempt each and meet no 429 in rate-limit-headroom."""
    text = HEADROOM.read_text().replace("{strategy: headroom, targets:", "{targets:")
    scenario = load_scenario("rate-limit-headroom.yaml", text=text)
    assert scenario.config.routes["chat"].strategy is DEFAULT_STRATEGY
    metrics = run_virtual(scenario, "resilient")
    assert metrics["providers"]["openai"]["failures"] == {}
    assert metrics["success_rate"] == 1.0
    herd = load_scenario(HERD)
    for strategy in ("round_robin", "headroom"):
        metrics = run_virtual(with_strategy(herd, strategy), "resilient")
        assert (metrics["successes"], metrics["attempts"]) == (200, 200), strategy
        assert metrics["providers"]["openai"]["failures"] == {}, strategy
