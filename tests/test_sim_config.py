"""Scenarios run against a router config (`--config`): the config brings the providers,
routes and resilience settings, the scenario the traffic, faults and expectations."""

from __future__ import annotations

import argparse
import hashlib
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from omniroute_tui.config import ConfigError, load_router_config
from simulator.cli import main
from simulator.scenario import ROUTER_FIELDS, SCENARIOS_DIR, load_scenario
from simulator.serve import router_config_for
from simulator.virtual import run_virtual

from .test_trace_pins import PINNED


def split(name: str, where: Path) -> tuple[Path, Path]:
    """A shipped scenario as a router config plus a scenario that has no providers."""
    data = yaml.safe_load((SCENARIOS_DIR / f"{name}.yaml").read_text())
    config = {key: data.pop(key) for key in ROUTER_FIELDS if key in data}
    latency, limits = {}, {}
    for provider, body in config["providers"].items():
        if "latency" in body:
            latency[provider] = body.pop("latency")
        if "limits" in body:
            limits[provider] = body.pop("limits")
    if latency:
        data["latency"] = latency
    if limits:
        data["limits"] = limits
    config_path, scenario_path = where / f"{name}.router.yaml", where / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    scenario_path.write_text(yaml.safe_dump(data, sort_keys=False))
    return config_path, scenario_path


@pytest.mark.parametrize("name", sorted(PINNED))
def test_shipped_scenarios_against_a_config_written_for_them_give_todays_trace(
    name: str, tmp_path: Path
) -> None:
    config, scenario = split(name, tmp_path)
    out = io.StringIO()
    run_virtual(load_scenario(scenario, config=config), "resilient", trace=out)
    assert hashlib.sha256(out.getvalue().encode()).hexdigest() == PINNED[name]


CONFIG = """\
providers:
  openai:
    models: [gpt-4o, gpt-4o-mini]
    connections:
      - {id: prod-1, api_key: "${NEVER_SET_IN_TESTS}"}
      - {id: prod-2, api_key: sk-live-do-not-leak-1234567890}
  anthropic:
    models: [claude]
    connections: [a1]
routes:
  chat: {targets: [openai/gpt-4o, anthropic/claude]}
resilience:
  breaker: {failure_threshold: 3}
"""

SCENARIO = """\
name: my-storm
duration: 2m
latency:
  openai: {p50: 300ms, p99: 900ms}
traffic:
  - {route: chat, rate: 5/s}
faults:
  - {name: storm, target: openai, error: 429, at: 20s, for: 1m}
expect:
  - {metric: success_rate, check: ">= 0.99"}
  - {metric: attempts, provider: openai, check: "> 0"}
"""


def write(tmp_path: Path, config: str = CONFIG, scenario: str = SCENARIO) -> tuple[Path, Path]:
    (tmp_path / "router.yaml").write_text(config)
    (tmp_path / "scenario.yaml").write_text(scenario)
    return tmp_path / "router.yaml", tmp_path / "scenario.yaml"


NOTICE = ("note: {routes} no strategy: the default is now round_robin, each provider's "
          "requests spread over its keys (it was priority, the first key first: write "
          "strategy: priority to keep that)")


@pytest.mark.parametrize(("routes", "said"), [
    ("  chat: {targets: [openai/gpt-4o, anthropic/claude]}\n", "route chat names"),
    ("".join(f"  r{i}: {{targets: [openai/gpt-4o]}}\n" for i in range(5))
     + "  named: {strategy: priority, targets: [anthropic/claude]}\n",
     "routes r0, r1, r2 and 2 more name"),
    ("  chat: {strategy: round_robin, targets: [openai/gpt-4o]}\n", None),
])
def test_a_config_whose_routes_name_no_strategy_is_told_the_new_default_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], routes: str, said: str | None
) -> None:
    head, tail = CONFIG.split("routes:\n")
    config, scenario = write(tmp_path, head + "routes:\n" + routes
                             + tail[tail.index("resilience"):],
                             SCENARIO.replace("route: chat", "route: openai/gpt-4o"))
    other = tmp_path / "other.yaml"
    other.write_text(SCENARIO.replace("my-storm", "other").replace("route: chat",
                                                                   "route: openai/gpt-4o"))
    assert main(["run", str(scenario), str(other), "--config", str(config),
                 "--policy", "resilient"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == ([] if said is None else [NOTICE.format(routes=said)])  # once, not twice


def test_the_config_brings_providers_routes_and_settings_and_no_key_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, scenario = write(tmp_path)
    loaded = load_scenario(scenario, config=config)
    assert list(loaded.providers) == ["openai", "anthropic"]
    assert loaded.providers["openai"].settings.breaker.failure_threshold == 3
    assert all(c.api_key is None for p in loaded.providers.values() for c in p.connections)
    assert loaded.latencies["openai"].p99_ms == 900
    assert loaded.latencies["anthropic"].p50_ms == 100  # the default
    report, trace = tmp_path / "r.json", tmp_path / "t.jsonl"
    assert main(["run", str(scenario), "--config", str(config), "--check", "--report",
                 str(report), "--trace", str(trace)]) == 0
    assert main(["validate", str(scenario), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"ok against {config}" in out
    for path in (report, trace):
        assert "sk-live" not in path.read_text()


def test_serve_aims_the_configs_providers_at_the_fakes_with_fake_keys(tmp_path: Path) -> None:
    config, scenario = write(tmp_path)
    loaded = load_scenario(scenario, config=config)
    servers: list[Any] = [SimpleNamespace(provider=name, base_url=f"http://127.0.0.1:{9000 + i}")
                          for i, name in enumerate(loaded.providers)]
    written = router_config_for(loaded, servers)
    assert written["providers"]["openai"]["base_url"] == "http://127.0.0.1:9000"
    assert written["resilience"] == {"breaker": {"failure_threshold": 3}}
    assert written["routes"] == {"chat": {"targets": ["openai/gpt-4o", "anthropic/claude"]}}
    assert "sk-live" not in yaml.safe_dump(written)


def test_serve_keeps_every_section_of_the_config(tmp_path: Path) -> None:
    """`--config-out` writes the config back whole: a gateway started on it keeps its
    store, its fleet and its gateway settings."""
    sections = ("store: {redis: 'redis://127.0.0.1:6379/0', prefix: team, lease_max: 20s}\n"
                "gateway: {listen: '127.0.0.1:4100', metrics: public, "
                "limits: {max_connections: 300}}\n")
    config, scenario = write(tmp_path, CONFIG + sections)
    loaded = load_scenario(scenario, config=config)
    servers: list[Any] = [SimpleNamespace(provider=name, base_url=f"http://127.0.0.1:{9000 + i}")
                          for i, name in enumerate(loaded.providers)]
    written = router_config_for(loaded, servers)
    assert list(written) == ["providers", "routes", "resilience", "store", "gateway"]
    assert written["store"] == {"redis": "redis://127.0.0.1:6379/0", "prefix": "team",
                                "lease_max": "20s"}
    assert written["gateway"]["limits"] == {"max_connections": 300}
    out = tmp_path / "out.yaml"
    out.write_text(yaml.safe_dump(written, sort_keys=False))
    reread = load_router_config(out)
    assert (reread.store_redis, reread.store_prefix, reread.store_lease_max_ms) == (
        "redis://127.0.0.1:6379/0", "team", 20_000)
    assert reread.gateway_listen == "127.0.0.1:4100"
    assert reread.gateway_limits.max_connections == 300


@pytest.mark.parametrize(
    ("line", "scenario_text", "message"),
    [
        (8, SCENARIO.replace("target: openai,", "target: mistral,"),
         "faults[0].target: unknown provider 'mistral' in {config} "
         "(providers: openai, anthropic)"),
        (8, SCENARIO.replace("target: openai,", "target: openai/prod-9,"),
         "faults[0].target: provider 'openai' in {config} has no connection 'prod-9' "
         "(connections: prod-1, prod-2)"),
        (8, SCENARIO.replace("target: openai,", "target: openai/*/o1,"),
         "faults[0].target: provider 'openai' in {config} has no model 'o1' "
         "(models: gpt-4o, gpt-4o-mini)"),
        (6, SCENARIO.replace("route: chat", "route: batch"),
         "traffic[0].route: unknown route 'batch' in {config} (routes: chat)"),
        (11, SCENARIO.replace("provider: openai", "provider: groq"),
         "expect[1].provider: unknown provider 'groq' in {config} "
         "(providers: openai, anthropic)"),
        (4, SCENARIO.replace("  openai: {p50", "  gemini: {p50"),
         "latency.gemini: unknown provider 'gemini' in {config} (providers: openai, "
         "anthropic)"),
        (3, SCENARIO.replace("latency:\n  openai: {p50: 300ms, p99: 900ms}\n",
                             "latency: fast\n"),
         "latency: expected a mapping, got"),
        (3, SCENARIO.replace("latency:\n", "providers: {x: {models: [m], connections: [k]}}\n"
                             "latency:\n"),
         "providers: the providers come from {config} (--config)"),
    ],
)
def test_every_mismatch_names_the_scenarios_line_and_what_the_config_has(
    line: int, scenario_text: str, message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, scenario = write(tmp_path, scenario=scenario_text)
    assert main(["validate", str(scenario), "--config", str(config)]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert f"{scenario}:{line}: " + message.format(config=config) in " ".join(err.split())
    assert "Traceback" not in err


def test_a_bad_fault_target_is_the_one_error_the_expectations_during_it_are_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, scenario = write(tmp_path, scenario=SCENARIO.replace(
        "target: openai,", "target: openai/*/gpt-5,") + "  - {metric: attempts, during: storm, "
        "check: \"<= 20\"}\n")
    assert main(["validate", str(scenario), "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "error: 1 problem:\n"
        f"  {scenario}:8: faults[0].target: provider 'openai' in {config} has no model "
        "'gpt-5' (models: gpt-4o, gpt-4o-mini)\n")


def test_a_broken_config_is_named_with_its_own_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config, scenario = write(tmp_path, config=CONFIG.replace("[a1]", "[]"))
    assert main(["run", str(scenario), "--config", str(config)]) == 2
    assert f"{config}:9: providers.anthropic.connections" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="missing field: providers"):
        load_scenario(scenario)  # without a config the scenario has no providers


def test_the_console_replays_the_scenario_against_the_config(tmp_path: Path) -> None:
    from omniroute_tui.console.cli import build_app

    config, scenario = write(tmp_path)
    args = argparse.Namespace(scenario=str(scenario), config=config, attach=None, live=False,
                              db=None, db_recover="ask", listen=None, speed=2.0,
                              read_only=False, operator="tester")
    app: Any = build_app(args)
    assert list(app.model.providers) == ["openai", "anthropic"]
    assert app.backend.scenario.name == "my-storm"
    with pytest.raises(ValueError, match="no --config"):
        build_app(argparse.Namespace(**{**vars(args), "attach": "http://127.0.0.1:1"}))
