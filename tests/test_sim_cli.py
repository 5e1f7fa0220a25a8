"""`omniroute-sim`: shipped scenarios pass their own checks; bad files are refused clearly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omniroute_tui.config import ConfigError
from simulator.cli import main
from simulator.scenario import SCENARIOS_DIR, load_scenario
from simulator.virtual import run_virtual

SHIPPED = sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
ALERT_RULES = Path(__file__).resolve().parent.parent / "examples" / "prometheus" / "alerts.yml"


def test_every_spec_scenario_is_shipped() -> None:
    assert set(SHIPPED) >= {"demo", "429-storm", "vpn-blip", "quota-exhaustion",
                            "provider-outage", "slow-provider", "auth-revoked",
                            "hour-long-mixed"}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_passes_its_own_check(name: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    # the alert expectations too, where promtool is there to evaluate the shipped rules
    alerts = ["--alerts", str(ALERT_RULES)] if shutil.which("promtool") else []
    code = main(["run", name, "--policy", "all", "--check", "--report", str(report), *alerts])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads(report.read_text())
    fleet = {"isolated"} if load_scenario(SCENARIOS_DIR / f"{name}.yaml").replicas > 1 else set()
    assert data["scenario"] == name and set(data["policies"]) == {
        "resilient", "naive", "backoff", "no-dedup", *fleet}
    assert data["checks"] and all(c["ok"] or (not alerts and c.get("skipped"))
                                  for c in data["checks"])
    assert load_scenario(SCENARIOS_DIR / f"{name}.yaml").description


def test_check_exits_1_and_names_the_failed_expectation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (SCENARIOS_DIR / "auth-revoked.yaml").read_text().replace(
        'check: "== 0", policy: resilient}', 'check: "== 7", policy: resilient}')
    path = tmp_path / "strict.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--policy", "resilient", "--check"]) == 1
    out = capsys.readouterr().out
    assert "expectation failed: breaker_opens on alpha == 7 (resilient)" in out


def test_report_layout_and_trace(tmp_path: Path) -> None:
    report, trace = tmp_path / "r.json", tmp_path / "t.jsonl"
    assert main(["run", "auth-revoked", "--policy", "naive", "--report", str(report),
                 "--trace", str(trace)]) == 0
    data = json.loads(report.read_text())
    naive = data["policies"]["naive"]
    assert set(naive) >= {"requests", "successes", "success_rate", "attempts",
                          "amplification", "p50_ms", "p95_ms", "p99_ms", "providers",
                          "faults", "dedup_suppressed", "wall_s", "sim_rps"}
    assert set(naive["providers"]["alpha"]) >= {"attempts", "successes", "failures",
                                               "breaker_opens", "open_ms"}
    assert set(naive["faults"]["revoked"]) == {"attempts", "attempts_per_s", "ttr_ms",
                                              "burst_after"}
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "request"
    assert "sk-live" not in trace.read_text()


def test_validate_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "vpn-blip"]) == 0
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "429-storm" in out and "hour-long-mixed" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "traffic:\n  - {route: nope, rate: 1/s}\n",
         "bad.yaml:6: traffic[0].route: unknown route 'nope'"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "traffic:\n  - {route: a/m, rate: 0/s}\n",
         "bad.yaml:6: traffic[0].rate: a rate must be positive"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "faults:\n  - {name: f, target: a, error: teapot, at: 1s}\n",
         "bad.yaml:6: faults[0].error: expected an HTTP status or one of reset"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "faults:\n  - {name: f, target: b/k, error: 500}\n",
         "bad.yaml:6: faults[0].target: unknown provider 'b'"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "faults:\n  - {name: f, target: a, error: 500}\n  - {name: f, target: a, error: 503}\n",
         "bad.yaml:7: faults[1].name: another fault is named 'f'"),
        ("name: x\nduration: soon\nproviders:\n  a: {models: [m], connections: [k]}\n",
         "bad.yaml:2: duration: 'soon' is not a duration"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "expect:\n  - {metric: speed, check: '< 1'}\n",
         "bad.yaml:6: expect[0].metric: 'speed' is not a metric of a run"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "expect:\n  - {metric: ttr_ms, during: ghost, check: '< 1'}\n",
         "bad.yaml:6: expect[0].during: no fault named 'ghost'"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
         "expect:\n  - {metric: attempts, check: 'about 3'}\n",
         "bad.yaml:6: expect[0].check: expected an operator and a number"),
        ("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k], "
         "latency: fast}\n", "bad.yaml:4: providers.a.latency: 'fast' is not a duration"),
        ("name: [unclosed\n", "bad.yaml:2: (syntax): YAML syntax"),
        ("just a string\n", "bad.yaml:1: (top level): expected a mapping"),
    ],
)
def test_bad_scenarios_name_file_line_and_field(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err.replace(str(tmp_path) + "/", "")
    assert "Traceback" not in err


def test_a_bad_fault_is_one_error_and_a_name_given_twice_is_named_where_it_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nduration: 1m\nproviders:\n  a: {models: [m], connections: [k]}\n"
                    "faults:\n  - {name: f, target: a, error: teapot}\n"
                    "  - {name: g, target: a, error: 500}\n  - {name: g, target: a, error: 503}\n"
                    "expect:\n  - {metric: attempts, during: f, check: '< 1'}\n"
                    "  - {metric: attempts, during: ghost, check: '< 1'}\n")
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == (
        "error: 3 problems:\n"
        f"  {path}:6: faults[0].error: expected an HTTP status or one of reset, refused, "
        "timeout, slow, quota; got 'teapot'\n"
        f"  {path}:8: faults[2].name: another fault is named 'g'\n"
        f"  {path}:11: expect[1].during: no fault named 'ghost'\n")


def test_binary_garbage_and_missing_files(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "garbage.yaml"
    path.write_bytes(bytes(range(256)))
    assert main(["validate", str(path)]) == 2
    assert main(["run", str(tmp_path / "absent.yaml")]) == 2
    err = capsys.readouterr().err
    assert "binary data" in err and "no such file" in err
    assert main(["run", "nope"]) == 2  # a name: the shipped ones are listed
    assert f"(shipped: {', '.join(SHIPPED)})" in capsys.readouterr().err


# -- generated scenarios --------------------------------------------------------------

durations = st.sampled_from(["0s", "1ms", "500ms", "1s", "3s", "10s", "30s", "nope", "-1s", 5])
errors = st.sampled_from([429, 500, 503, 401, 403, 404, 400, "reset", "refused", "timeout",
                          "slow", "quota", 200, "boom"])


@st.composite
def scenario_texts(draw: st.DrawFn) -> str:
    conns = draw(st.lists(st.sampled_from(["k1", "k2", "k3"]), min_size=0, max_size=3))
    lines = [
        "name: gen", f"seed: {draw(st.integers(0, 5))}",
        f"duration: {draw(st.sampled_from(['10s', '30s', '1m', '0s', 'x']))}",
        f"resilience: {{jitter: {draw(st.sampled_from([0, 0.2, 2]))}}}",
        "providers:",
        f"  a: {{models: [m], latency: {draw(durations)}, per_model_quota: "
        f"{draw(st.booleans())}, connections: [{', '.join(conns)}]}}",
        "  b: {models: [m], latency: 50ms, connections: [x]}",
        "routes:",
        f"  r: {{strategy: {draw(st.sampled_from(['priority', 'round_robin', 'random']))}, "
        "targets: [a/m, b/m]}",
        "traffic:",
    ]
    for _ in range(draw(st.integers(0, 3))):
        form = draw(st.sampled_from(["rate: 5/s", "every: 700ms", "at: [0s, 1s, 1s]",
                                     "rate: -2/s", "every: 0s"]))
        lines.append(f"  - {{route: {draw(st.sampled_from(['r', 'a/m', 'zz']))}, {form}}}")
    lines.append("faults:")
    for i in range(draw(st.integers(0, 3))):
        target = draw(st.sampled_from(["'*'", "a", "a/k1", "a/*/m", "b/x/m", "c"]))
        lines.append(f"  - {{name: f{i}, target: {target}, error: {draw(errors)}, "
                     f"at: {draw(durations)}, for: {draw(durations)}, "
                     f"retry_after: {draw(durations)}, latency: 2s, "
                     f"rate: {draw(st.sampled_from([1, 0.5, 0, 3]))}}}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=scenario_texts())
def test_generated_scenarios_load_and_run_or_are_refused(text: str) -> None:
    try:
        scenario = load_scenario("gen.yaml", text=text)
    except ConfigError as exc:
        assert exc.problems and all(p.file == "gen.yaml" for p in exc.problems)
        return
    import io

    first, second = io.StringIO(), io.StringIO()
    for policy in ("resilient", "naive", "backoff", "no-dedup"):
        run_virtual(scenario, policy)
    run_virtual(scenario, "resilient", trace=first)
    run_virtual(scenario, "resilient", trace=second)
    assert first.getvalue() == second.getvalue()


def test_traces_are_byte_identical_across_processes(tmp_path: Path) -> None:
    """No hash ordering leaks in: two interpreters with different hash seeds agree."""
    import hashlib
    import os
    import subprocess
    import sys

    digests = []
    for seed in ("1", "2"):
        trace = tmp_path / f"trace{seed}.jsonl"
        subprocess.run(
            [sys.executable, "-m", "simulator.cli", "run", "vpn-blip", "--policy", "resilient",
             "--trace", str(trace)],
            check=True, capture_output=True, timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        digests.append(hashlib.sha256(trace.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_list_gives_each_scenario_its_first_sentence_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("demo A mixed three-minute tour: a 429 storm on the main provider from 15 s, a "
            "network blip on the second at 75 s, the large model's quota running out on the "
            "third at 100 s, and a key revoked at 130 s. fleet-429-storm") in out
    assert "The lesson:" not in out  # the first sentence only


def test_validate_counts_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "429-storm"]) == 0
    assert capsys.readouterr().out.endswith(
        ": ok (2 providers, 1 traffic item, 1 fault, 9 expectations)\n")


def test_an_unknown_strategy_is_refused_with_the_names_to_use(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "vpn-blip", "--strategy", "bogus"])
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "invalid choice: 'bogus' (choose from 'priority', 'round_robin', 'weighted', "
        "'least_busy', 'headroom')")


def test_run_without_a_terminal_prints_whole_numbers_and_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A pipe or a CI log gets the tables as wide as they need: nothing cut with `…`
    (the no-dedup column's name and a 5-digit rate were, at 80 columns)."""
    assert main(["run", "demo"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert "no-dedup" in out.splitlines()[2]
