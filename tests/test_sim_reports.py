"""The CI gate and the reports: JUnit XML, several scenarios at once, the HTML page, and
the terminal summary at 80 columns."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import xmlschema
from junitparser import Failure, JUnitXml, Skipped
from rich.console import Console

from simulator.cli import main
from simulator.junit import ScenarioOutcome, write_junit
from simulator.report import evaluate, render
from simulator.scenario import SCENARIOS_DIR, load_scenario
from simulator.terminal_chart import herd_chart
from simulator.timeline import Timeline
from simulator.virtual import run_virtual

from .shipped_runs import shipped_run

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "data" / "junit.xsd")


def strict_auth_revoked(where: Path) -> Path:
    """auth-revoked with one expectation that cannot hold."""
    text = (SCENARIOS_DIR / "auth-revoked.yaml").read_text().replace(
        'check: "== 0", policy: resilient}', 'check: "== 7", policy: resilient}').replace(
        "name: auth-revoked", "name: strict")
    path = where / "strict.yaml"
    path.write_text(text)
    return path


def test_junit_has_a_case_per_expectation_and_policy_with_observed_and_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "out" / "chaos.xml"
    junit.parent.mkdir()
    strict = strict_auth_revoked(tmp_path)
    assert main(["run", str(strict), "vpn-blip", "--check", "--junit", str(junit)]) == 1
    SCHEMA.validate(str(junit))  # the shape Jenkins, GitLab and GitHub reporters read
    xml = JUnitXml.fromfile(str(junit))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"strict", "vpn-blip"}
    expected = {s: len(load_scenario(p).expect) for s, p in
                (("strict", strict), ("vpn-blip", SCENARIOS_DIR / "vpn-blip.yaml"))}
    assert {name: suite.tests for name, suite in suites.items()} == expected
    assert xml.tests == sum(expected.values()) and xml.failures == 1
    cases = {(case.classname, case.name): case for case in suites["strict"]}
    failed = cases[("strict.resilient", "breaker_opens on alpha == 7")]
    (failure,) = failed.result
    assert isinstance(failure, Failure)
    assert failure.message == "observed 0, expected == 7"
    assert all(not case.result for key, case in cases.items() if key != (
        "strict.resilient", "breaker_opens on alpha == 7"))
    assert "(bound" in (failed.system_out or "") and "strict.yaml:" in failed.system_out
    assert {c.classname.split(".")[1] for c in suites["vpn-blip"]} >= {"resilient",
                                                                        "no-dedup"}
    out = capsys.readouterr().out
    assert "expectation failed: strict: breaker_opens on alpha == 7 (resilient) (observed 0)" \
        in out
    summary = out[out.index("summary"):]
    assert re.search(r"strict\s+\d+\s+1\s+0\s+FAIL", summary)
    # its alert expectations are not run: no --alerts
    assert re.search(r"vpn-blip\s+\d+\s+0\s+3\s+ok", summary)


def test_the_gate_runs_every_policy_an_expectation_needs_and_skips_none(
        tmp_path: Path) -> None:
    junit = tmp_path / "chaos.xml"
    assert main(["run", "429-storm", "--policy", "resilient", "--junit", str(junit)]) == 0
    (suite,) = JUnitXml.fromfile(str(junit))
    assert {case.classname for case in suite} == {"429-storm.resilient", "429-storm.naive"}
    assert suite.failures == 0 and suite.time > 0
    # only the alert expectations are skipped: their rules are given with --alerts
    skipped = [case for case in suite if case.result and isinstance(case.result[0], Skipped)]
    assert [case.name.split()[0] for case in skipped] == [
        "OmniRouteBreakerOpen", "OmniRouteBreakerOpen", "OmniRouteRouteNoTarget"]
    assert {case.result[0].text for case in skipped} == {"alerts were not evaluated (--alerts)"}


def test_an_expectation_whose_policy_did_not_run_is_a_skipped_case(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS_DIR / "429-storm.yaml")
    results = {"resilient": run_virtual(scenario, "resilient")}  # as a live run would
    junit = tmp_path / "chaos.xml"
    write_junit(junit, [ScenarioOutcome(scenario, results, evaluate(scenario, results))])
    SCHEMA.validate(str(junit))
    (suite,) = JUnitXml.fromfile(str(junit))
    skipped = [case for case in suite if case.result and isinstance(case.result[0], Skipped)]
    assert [case.classname for case in skipped] == ["429-storm.naive"] + [
        "429-storm.resilient"] * 3  # the alert expectations: no --alerts
    assert skipped[0].result[0].text == "the naive policy was not run"
    assert suite.skipped == 4 and suite.failures == 0


def test_bad_input_exits_2_before_anything_runs(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text("name: x\nduration: soon\n")
    junit = tmp_path / "chaos.xml"
    assert main(["run", "429-storm", str(tmp_path / "bad.yaml"), "--check",
                 "--junit", str(junit)]) == 2
    captured = capsys.readouterr()
    assert "bad.yaml:2: duration" in captured.err and captured.out == ""
    assert not junit.exists()
    assert main(["run", str(tmp_path / "*.nothing")]) == 2
    assert "no file matches" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "empty")]) == 2  # neither a file nor a scenario name


def test_a_directory_or_glob_runs_every_scenario_with_reports_per_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chaos = tmp_path / "chaos"
    chaos.mkdir()
    for name in ("vpn-blip", "auth-revoked"):
        (chaos / f"{name}.yaml").write_text((SCENARIOS_DIR / f"{name}.yaml").read_text())
    reports = tmp_path / "reports"
    assert main(["run", str(chaos), "--policy", "resilient", "--report", str(reports)]) == 0
    assert sorted(p.name for p in reports.iterdir()) == ["auth-revoked.json", "vpn-blip.json"]
    assert main(["run", str(chaos / "v*.yaml"), "--policy", "resilient"]) == 0
    out = capsys.readouterr().out
    assert out.count("summary") == 1 and "vpn-blip" in out


TINY = """\
name: {name}
duration: 5s
providers:
  a: {{models: [m], connections: [k]}}
routes:
  r: {{targets: [a/m]}}
traffic:
  - {{route: r, every: 1s}}
"""
SUFFIXES = {"--report": ".json", "--trace": ".jsonl", "--html": ".html"}


def tiny_scenarios(where: Path, *names: str) -> list[str]:
    where.mkdir(exist_ok=True)
    for name in names:
        (where / f"{name}.yaml").write_text(TINY.format(name=name))
    return [str(where / f"{name}.yaml") for name in names]


def written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("option", sorted(SUFFIXES))
@pytest.mark.parametrize(
    ("names", "given", "existing_folder", "expected"),
    [
        (["one"], "out/", False, ["out/one{suffix}"]),  # a trailing / says folder
        (["one"], "out", True, ["out/one{suffix}"]),  # so does a folder that exists
        (["one"], "out/", True, ["out/one{suffix}"]),
        (["one"], "out", False, ["out"]),  # else one scenario's report is the file given
        (["one"], "deep/out.txt", False, ["deep/out.txt"]),
        (["one", "two"], "out", False, ["out/one{suffix}", "out/two{suffix}"]),
        (["one", "two"], "out/", False, ["out/one{suffix}", "out/two{suffix}"]),
        (["one", "two"], "out", True, ["out/one{suffix}", "out/two{suffix}"]),
    ],
)
def test_a_report_path_names_a_folder_by_its_slash_or_what_is_there(
    option: str, names: list[str], given: str, existing_folder: bool, expected: list[str],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenarios = tiny_scenarios(tmp_path / "chaos", *names)
    work = tmp_path / "work"
    (work / "out" if existing_folder else work).mkdir(parents=True)
    monkeypatch.chdir(work)
    assert main(["run", *scenarios, "--policy", "resilient", option, given]) == 0
    assert written(work) == [path.format(suffix=SUFFIXES[option]) for path in expected]
    starts = {"--report": '{\n  "scenario": "one"', "--trace": '{"', "--html": "<!doctype html>"}
    text = (work / expected[0].format(suffix=SUFFIXES[option])).read_text()
    assert text.lower().startswith(starts[option].lower())


def test_a_scenario_name_cannot_put_its_report_outside_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "escape.yaml"
    path.write_text(TINY.format(name="../escaped"))
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--policy", "resilient", "--html", "out/"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"error: {path}: the name '../escaped' holds a /, and --html names "
                            "a report file after it\n") and captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["escape.yaml"]
    assert main(["run", str(path), "--policy", "resilient", "--html", "page.html"]) == 0
    assert (tmp_path / "page.html").is_file()  # a file given is the file written


@pytest.mark.parametrize("option", sorted(SUFFIXES))
@pytest.mark.parametrize(
    ("names", "given", "message"),
    [
        (["one"], "out/", "{option} out/: names a folder, and out is a file"),
        (["one", "two"], "out", "{option} out: a file, and several scenarios need a folder "
                                "(one report each)"),
        (["one"], "", "{option}: the path is empty"),
    ],
    ids=["slash-on-a-file", "several-on-a-file", "empty"],
)
def test_a_report_folder_that_is_a_file_is_refused_before_anything_runs(
    option: str, names: list[str], given: str, message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = tiny_scenarios(tmp_path / "chaos", *names)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").write_text("kept")
    assert main(["run", *scenarios, "--policy", "resilient", "--junit", "chaos.xml",
                 option, given]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message.format(option=option)}\n" and captured.out == ""
    assert (tmp_path / "out").read_text() == "kept" and not (tmp_path / "chaos.xml").exists()


FETCH = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//"""
                   r"""|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I)


def test_the_html_report_is_self_contained_with_one_chart_per_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page_path = tmp_path / "storm.html"
    assert main(["run", "429-storm", "--html", str(page_path)]) == 0
    page = page_path.read_text()
    assert FETCH.search(page) is None  # no script, font, style or image from anywhere
    assert "<script" not in page and "<link" not in page
    # the only addresses are the SVG namespace names, which are never fetched
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= {
        "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    policies = ["resilient", "naive", "backoff", "no-dedup"]
    assert re.findall(r'<figure aria-label="([^"]+)">\s*<svg', page) == policies
    assert page.count("<svg") == len(policies)
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # each chart keeps its own ids
    assert "opens the breaker and sends traffic to the" in page  # the lesson
    assert "amplification &lt;= 1.3" in page and "PASS" in page
    assert "breaker OPEN" in page and "fault windows" in page and "p99" in page
    assert f"({page_path.stat().st_size:,} bytes)" in capsys.readouterr().out


def outcome_of(name: str, policies: tuple[str, ...] | None = None
               ) -> tuple[ScenarioOutcome, dict[str, Timeline]]:
    scenario = load_scenario(SCENARIOS_DIR / f"{name}.yaml")
    runs = {p: shipped_run(name, p) for p in policies or scenario.policies}
    results = {p: run.metrics for p, run in runs.items()}
    outcome = ScenarioOutcome(scenario, results, evaluate(scenario, results))
    return outcome, {p: run.timeline for p, run in runs.items()}


@pytest.mark.parametrize("name", ["fleet-429-storm", "quota-exhaustion", "hour-long-mixed"])
def test_the_terminal_summary_fits_80_columns_without_cutting_a_cell(name: str) -> None:
    outcome, _ = outcome_of(name, None if name != "hour-long-mixed" else ("resilient",
                                                                          "naive"))
    console = Console(width=80, file=io.StringIO(), record=True)
    render(console, outcome.scenario, outcome.results, outcome.checks)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    for provider in outcome.scenario.providers:
        assert sum(1 for line in lines if line.strip() == f"provider {provider}") == 1
    header = next(line for line in lines if "resilient" in line)
    assert header.split() == list(outcome.results)


def test_the_terminal_chart_draws_resilient_against_naive_on_the_faulted_provider() -> None:
    outcome, timelines = outcome_of("429-storm", ("resilient", "naive"))
    chart = herd_chart(outcome.scenario, timelines, width=80)
    assert chart is not None
    lines = chart.plain.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "attempts per second on alpha" in lines[0]
    assert "resilient" in chart.plain and "naive" in chart.plain
    # naive's storm (about 80 attempts a second) sets the scale
    assert max(timelines["naive"].per_second(timelines["naive"].attempts["alpha"])) > 60


def test_the_progress_bar_shows_after_a_second_with_simulated_minutes_per_second() -> None:
    from simulator.cli import RunProgress

    now = [0.0]
    progress = RunProgress(Console(file=io.StringIO(), force_terminal=True), 3_600_000,
                           "hour [resilient]", clock=lambda: now[0])
    now[0] = 0.5
    progress.update(60_000)
    assert progress.bar is None  # a run that ends within a second shows no bar
    now[0] = 2.0
    progress.update(600_000)  # ten simulated minutes in two seconds
    assert progress.bar is not None and progress.rate == "5.0"
    (task,) = progress.bar.tasks
    assert task.completed == 600_000 and task.fields["rate"] == "5.0"
    progress.done()


def test_hostile_names_and_descriptions_stay_text_on_the_page(tmp_path: Path) -> None:
    text = (SCENARIOS_DIR / "vpn-blip.yaml").read_text()
    text = text.replace("description: |", "description: |\n  <script>alert(1)</script>")
    text = text.replace("name: blip", "name: '<img src=x onerror=alert(1)>'").replace(
        "during: blip", "during: '<img src=x onerror=alert(1)>'")
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    page = tmp_path / "deep" / "er" / "page.html"  # folders are made as needed
    junit = tmp_path / "ci" / "chaos.xml"
    assert main(["run", str(path), "--policy", "resilient", "--html", str(page),
                 "--junit", str(junit)]) == 0
    html = page.read_text()
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    SCHEMA.validate(str(junit))


def test_two_scenarios_of_one_name_are_refused_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "blip.yaml").write_text(
            (SCENARIOS_DIR / "vpn-blip.yaml").read_text())
    assert main(["run", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    captured = capsys.readouterr()
    assert "two scenarios are named 'vpn-blip'" in captured.err and captured.out == ""


def test_names_that_look_like_markup_are_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (SCENARIOS_DIR / "vpn-blip.yaml").read_text().replace(
        "name: vpn-blip", 'name: "[/x] blip"').replace("name: blip", 'name: "[/y]"').replace(
        "during: blip", 'during: "[/y]"')
    path = tmp_path / "[red]markup.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 0
    assert main(["run", str(path), str(SCENARIOS_DIR / "auth-revoked.yaml"), "--check",
                 "--policy", "resilient"]) == 0
    out = capsys.readouterr().out
    assert "[red]markup.yaml: ok" in out and "PASS ttr_ms during [/y] <= 5000" in out
    assert "fault [/y] on alpha" in out and "[/x] blip" in out
