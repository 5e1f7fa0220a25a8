"""The shipped alert rules (examples/prometheus/alerts.yml) are valid, unit-tested by
promtool where each fires and where it must not, and say what to do to whoever is paged."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "examples" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "examples" / "prometheus" / "alerts_test.yml"
RUNBOOK = ROOT / "docs" / "alerts.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus; "
                             "`make test` installs it where it can)")

REQUIRED = {"OmniRouteBreakerOpen", "OmniRouteRouteNoTarget", "OmniRouteUpstreamFailureRatio",
            "OmniRouteRetryBudgetExhausted", "OmniRouteStoreFailing", "OmniRouteFleetLinkDown",
            "OmniRouteConfigReloadFailed"}


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_every_required_alert_ships_once() -> None:
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_each_rule_tells_on_call_what_to_do(rule: dict[str, Any]) -> None:
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description"}
    assert rule["labels"]["severity"] in ("page", "warning")
    anchor = rule["alert"].lower()
    assert annotations["description"].endswith(f"Runbook: docs/alerts.md#{anchor}")
    # the runbook has the paragraph the link names (a heading per alert)
    assert re.search(rf"^## {rule['alert']}$", RUNBOOK.read_text(), re.MULTILINE)
    # where the console shows the cause, the annotation gives the command to open it
    if rule["alert"] not in ("OmniRouteStoreFailing", "OmniRouteFleetLinkDown"):
        # the fleet's failure ratio has no instance: any gateway of the job will do
        gateway = ("GATEWAY" if rule["alert"] == "OmniRouteUpstreamFailureRatio"
                   else "{{ $labels.instance }}")
        assert f"omniroute-tui --attach http://{gateway}" in annotations["description"]
        assert re.search(r"pane [0-7] \(", annotations["description"])


def test_every_metric_named_is_one_the_gateway_exposes() -> None:
    from tests.test_grafana_dashboard import documented_metrics

    named = {name for rule in rules()
             for name in re.findall(r"\bomniroute_\w+", rule["expr"])}
    assert len(named) == 8
    assert named <= documented_metrics(), named - documented_metrics()


def test_a_short_blip_never_pages() -> None:
    """No rule fires on its first bad sample: a scrape or two of trouble pages nobody."""
    def seconds(text: str) -> int:
        return sum(int(n) * {"s": 1, "m": 60, "h": 3600}[u]
                   for n, u in re.findall(r"(\d+)([smh])", text))

    assert all(seconds(rule["for"]) >= 60 for rule in rules())


def test_every_rule_has_a_firing_and_a_quiet_case() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    assert cases == {rule["alert"]: {True, False} for rule in rules()}


@needs_promtool
def test_rules_are_valid() -> None:
    result = promtool("check", "rules", str(RULES), cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS.name, cwd=RULES.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
@pytest.mark.parametrize(("old", "new"), [
    ("for: 1m", "for: 0m"),  # every rule pages at once
    ("> 0.25", "> 0.8"),  # the failure ratio misses a 75 % failure
    ("unless on (instance, job, provider) omniroute_breaker_forced_open == 1", ""),
    ('state=~"OPEN|HALF_OPEN"', 'state!="CLOSED"'),  # a DEGRADED breaker would page
    # per replica: the fleet pages twice, late, and flaps
    ("sum by (job, provider)", "sum by (instance, job, provider)"),
    # a client's own errors would count as the provider's failures
    ('outcome!~"ok|cancelled|client_error|context_length"', 'outcome!="ok"'),
])
def test_the_unit_tests_catch_a_changed_rule(tmp_path: Path, old: str, new: str) -> None:
    """The unit tests can fail: each of these edits of the rules breaks one of them."""
    text = RULES.read_text()
    assert old in text
    (tmp_path / "alerts.yml").write_text(text.replace(old, new))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode == 1
    assert "FAILED" in result.stdout + result.stderr


def section_text(alert: str) -> str:
    """The runbook's paragraph on `alert`."""
    text = RUNBOOK.read_text()
    return text.split(f"## {alert}\n", 1)[1].split("\n## ", 1)[0]


def _pane_claims() -> list[tuple[str, int, str]]:
    """(where, key, name) of every `pane N (Name` in the runbook and the rules."""
    claims = []
    for path in (RUNBOOK, RULES, RULE_TESTS):
        for key, name in re.findall(r"pane ([0-9]) \((\w+)", path.read_text()):
            claims.append((path.name, int(key), name))
    return claims


def test_every_pane_named_is_the_pane_of_that_key() -> None:
    from omniroute_tui.console.actions import ACTIONS
    from omniroute_tui.console.model.panes import Pane

    by_key = {action.key: (action.description, action.name) for action in ACTIONS
              if action.name.startswith("pane(")}
    claims = _pane_claims()
    assert len(claims) >= 20
    for where, key, name in claims:
        label, action = by_key[str(key)]
        pane = Pane(action.removeprefix("pane('").removesuffix("')"))
        assert name in (label, pane.value.capitalize()), (where, key, name)


def test_the_overview_shows_what_the_no_target_runbook_says() -> None:
    """Pane 0 names the open breakers and counts the cooling and disabled connections and
    the locked keys with their models, as the OmniRouteRouteNoTarget runbook says."""
    from omniroute_tui.clock import ManualClock
    from omniroute_tui.config import load_router_config
    from omniroute_tui.console.model.console_model import ConsoleModel
    from omniroute_tui.engine import Classification, FailureKind
    from omniroute_tui.state_document import state_document

    config = load_router_config("router.yaml", text=(
        "providers:\n"
        "  alpha: {base_url: 'http://127.0.0.1:9/v1', models: [m], connections: [a1]}\n"
        "  beta: {base_url: 'http://127.0.0.1:9/v1', models: [m], connections: [b1, b2]}\n"
        "  gamma: {base_url: 'http://127.0.0.1:9/v1', models: [m], connections: [g1]}\n"
        "routes:\n  chat: {targets: [alpha/m, beta/m, gamma/m]}\n"))
    router = config.build(ManualClock(0))
    engine = router.engine
    engine.force_open("alpha", 60_000, actor="ops")
    admission = engine.admit("beta")
    engine.record("beta", "b1", "m", admission, Classification(FailureKind.RATE_LIMITED, 30_000))
    engine.set_enabled("beta", "b2", False, actor="ops")
    engine.record("gamma", "g1", "m", engine.admit("gamma"),
                  Classification(FailureKind.FORBIDDEN, None))
    said = " ".join(section_text("OmniRouteRouteNoTarget").split())
    assert ("pane 0 (Overview) names the providers whose breaker is open and counts the "
            "cooling and disabled connections and the locked keys with their models") in said
    model = ConsoleModel(config.providers, lambda: 0)
    model.load_state_document(state_document(engine, config.providers, router.routes))
    breakers, cooldowns, lockouts = model.overview_lines(0)[:3]
    assert "(alpha)" in breakers
    assert cooldowns.startswith("cooldowns  1 of 4 connections cooling") and cooldowns.endswith(
        "; 1 disabled")
    assert lockouts == "lockouts   1 key locked on 1 model (gamma/m)"


def _runbook_yaml() -> list[dict[str, Any]]:
    text = RUNBOOK.read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]


def test_the_runbook_evaluates_the_rules_as_the_unit_tests_do() -> None:
    """Prometheus' default `evaluation_interval` is 1m: the runbook sets the 15 s the
    unit tests, the simulator's pinned times and the `for:` durations assume."""
    (config,) = [block for block in _runbook_yaml() if "rule_files" in block]
    assert config["rule_files"] == [RULES.name]
    assert config["global"]["evaluation_interval"] == "15s"
    assert config["global"]["scrape_interval"] == "15s"
    assert yaml.safe_load(RULE_TESTS.read_text())["evaluation_interval"] == "15s"


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")


def _alertmanager_config(tmp_path: Path) -> Path:
    (config,) = [block for block in _runbook_yaml() if "route" in block]
    assert {"alertname", "job", "provider"} <= set(config["route"]["group_by"])
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.skipif(AMTOOL is None, reason="amtool is not installed (Debian package "
                                           "prometheus-alertmanager)")
def test_the_runbooks_alertmanager_config_is_valid(tmp_path: Path) -> None:
    assert AMTOOL is not None
    result = subprocess.run([AMTOOL, "check-config", str(_alertmanager_config(tmp_path))],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(ALERTMANAGER is None, reason="Alertmanager is not installed (Debian "
                                                 "package prometheus-alertmanager)")
async def test_a_storm_on_three_replicas_is_one_notification(tmp_path: Path) -> None:
    """A real Alertmanager with the runbook's routing: the breaker page of three replicas
    for one provider is one group (one notification), another provider's its own."""
    import httpx

    from tests.gateway_helpers import free_port
    from tests.waiting import eventually

    assert ALERTMANAGER is not None
    port = free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    process = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={_alertmanager_config(tmp_path)}",
         f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address=", "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async def up() -> bool:
                try:
                    return (await http.get("/-/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(up, timeout_s=20, what="Alertmanager")
            alerts = [{"labels": {"alertname": "OmniRouteBreakerOpen", "severity": "page",
                                  "job": "omniroute", "instance": f"gw:{4000 + i}",
                                  "provider": provider}}
                      for provider, replicas in (("alpha", 3), ("beta", 1))
                      for i in range(replicas)]
            assert (await http.post("/api/v2/alerts", json=alerts)).status_code == 200

            groups: list[dict[str, Any]] = []

            async def grouped() -> bool:
                groups[:] = (await http.get("/api/v2/alerts/groups")).json()
                return sum(len(g["alerts"]) for g in groups) == 4

            await eventually(grouped, timeout_s=10, what="the alerts grouped")
        by_provider = {g["labels"]["provider"]: len(g["alerts"]) for g in groups}
        assert by_provider == {"alpha": 3, "beta": 1}
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
