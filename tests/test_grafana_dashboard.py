"""The shipped Grafana dashboard (examples/grafana/omniroute.json): every PromQL expression
in it is valid for promtool (each becomes a recording rule of a generated rule file), names
only metrics the gateway exposes, and the panels the issue asks for are there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "examples" / "grafana" / "omniroute.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus; "
                             "`make test` installs it where it can)")
#: what Grafana puts in place of its variables before it sends a query
VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
             "$job": ".*", "$instance": ".*"}
_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def expressions(node: Any) -> Iterator[str]:
    """Every PromQL expression: targets' and annotations' `expr`, and the selector of each
    `label_values(selector, label)` variable query."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and "query" in value:
                match = _LABEL_VALUES.match(value["query"])
                assert match, f"a variable query that is not label_values(): {value['query']}"
                yield match.group(1)
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def substituted(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    assert "$" not in expr, f"a variable the dashboard does not define: {expr}"
    return expr


def check_rules(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    rules = [{"record": f"omniroute_dashboard:expr_{i}", "expr": substituted(e)}
             for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)


@needs_promtool
def test_every_expression_is_valid_promql(tmp_path: Path) -> None:
    exprs = list(expressions(dashboard()))
    assert len(exprs) >= 20
    result = check_rules(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


@needs_promtool
def test_a_broken_expression_is_caught(tmp_path: Path) -> None:
    exprs = list(expressions(dashboard()))
    exprs[3] = exprs[3].replace(")", "", 1)
    result = check_rules(exprs, tmp_path)
    assert result.returncode == 1
    assert "omniroute_dashboard:expr_3" in result.stdout + result.stderr


def documented_metrics() -> set[str]:
    """The metric names of docs/metrics.md's table (a histogram's series: its name plus
    `_bucket`, `_sum`, `_count`)."""
    table = (ROOT / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^\| `(omniroute_\w+)` \|", table, re.MULTILINE))
    histograms = set(re.findall(r"^\| `(omniroute_\w+)` \| histogram", table, re.MULTILINE))
    return names | {h + suffix for h in histograms for suffix in ("_bucket", "_sum", "_count")}


def test_every_metric_named_is_one_the_gateway_exposes() -> None:
    named = {name for expr in expressions(dashboard())
             for name in re.findall(r"\bomniroute_\w+", expr)}
    assert len(named) >= 15
    assert named <= documented_metrics(), named - documented_metrics()


def test_the_asked_for_panels_are_there() -> None:
    panels = {p["title"]: p for p in dashboard()["panels"]}
    wanted = {
        "Breaker state per provider": "omniroute_breaker_state",
        "Attempts per second by outcome": "omniroute_upstream_attempts_total",
        "Cooling connections": "omniroute_connection_cooling",
        "Model lockouts": "omniroute_lockouts_active",
        "Request latency quantiles": "omniroute_request_duration_seconds_bucket",
        "Fleet propagation lag": "omniroute_fleet_propagation_lag_seconds_bucket",
        "Upstream latency p95 per provider and model":
            "omniroute_upstream_latency_seconds_bucket",
        "Time to first token p95 per provider and model":
            "omniroute_upstream_time_to_first_token_seconds_bucket",
        "Tokens per minute per provider": "omniroute_upstream_tokens_total",
    }
    for title, metric in wanted.items():
        assert any(metric in t["expr"] for t in panels[title]["targets"]), title
    timeline = panels["Breaker state per provider"]
    assert timeline["type"] == "state-timeline"
    mapping = timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {v["text"] for v in mapping.values()} == {"CLOSED", "DEGRADED", "HALF_OPEN",
                                                     "OPEN"}


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24
        mine = {(x, y) for x in range(box["x"], box["x"] + box["w"])
                for y in range(box["y"], box["y"] + box["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine


def test_the_import_asks_for_the_prometheus_data_source() -> None:
    """Dashboards → Import asks for a data source (`__inputs`): the one chosen is the
    default of the `datasource` selector every panel, variable and annotation uses."""
    board = dashboard()
    (source,) = board["__inputs"]
    assert (source["type"], source["pluginId"]) == ("datasource", "prometheus")
    placeholder = "${" + source["name"] + "}"
    text = DASHBOARD.read_text()
    assert set(re.findall(r"\$\{DS_\w+\}", text)) == {placeholder}
    (selector,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert selector["query"] == "prometheus" and selector["current"]["value"] == placeholder
    uids = [node["uid"] for node in _datasources(board)]
    assert uids and set(uids) == {"${" + selector["name"] + "}"}
    required = {(r["type"], r["id"]) for r in board["__requires"]}
    assert {("panel", p["type"]) for p in board["panels"]} | {("datasource", "prometheus")} \
        <= required


def _datasources(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource" and isinstance(value, dict):
                yield value
            else:
                yield from _datasources(value)
    elif isinstance(node, list):
        for item in node:
            yield from _datasources(item)


@needs_promtool
@pytest.mark.parametrize("scrape_s", [15, 30, 60])
def test_a_reload_shows_as_an_annotation(tmp_path: Path, scrape_s: int) -> None:
    """The reload annotation's query, evaluated at its step as Grafana sends it, over a
    gateway scraped every `scrape_s` whose config is reloaded between any two scrapes:
    every reload shows (a window of one scrape interval never saw one at 15 s), and a
    gateway that reloads nothing shows nothing."""
    (annotation,) = dashboard()["annotations"]["list"]
    step = annotation["step"]
    rules = tmp_path / "annotation_rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "annotation", "rules": [
        {"record": "omniroute_dashboard:reloads", "expr": substituted(annotation["expr"])}]}]}))
    per_minute = 60 // scrape_s
    samples = 10 * per_minute  # ten minutes
    tests = []
    for phase in range(per_minute * 2):  # the reload after any scrape of two minutes
        at = 4 * per_minute + phase
        tests.append({
            "interval": f"{scrape_s}s",
            "input_series": [
                {"series": 'omniroute_config_loaded_timestamp_seconds{job="omniroute",'
                           'instance="gw:4000"}',
                 "values": f"1000x{at - 1} 2000x{samples - at}"},
                {"series": 'omniroute_config_loaded_timestamp_seconds{job="omniroute",'
                           'instance="gw:4001"}',
                 "values": f"1000x{samples}"}],
            "promql_expr_test": [{
                "expr": "clamp_max(count_over_time(omniroute_dashboard:reloads[10m]), 1)",
                "eval_time": "10m",
                "exp_samples": [{"labels": '{instance="gw:4000",job="omniroute"}',
                                 "value": 1}]}]})
    test_file = tmp_path / "annotation_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [rules.name],
                                         "evaluation_interval": step, "tests": tests}))
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "test", "rules", test_file.name], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
