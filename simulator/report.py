"""Reports: checking `expect`s, the JSON layout, and the side-by-side terminal tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table

from .scenario import Expect, Scenario

__all__ = ["build_report", "evaluate", "metric_value", "render"]

_ROWS = ("requests", "successes", "success_rate", "attempts", "amplification", "p50_ms",
         "p95_ms", "p99_ms", "dedup_suppressed", "breaker_opens", "open_ms",
         "max_attempts_per_open", "wall_s", "sim_rps")


def metric_value(metrics: dict[str, Any], expect: Expect) -> float | None:
    """The observed value an expectation speaks of, or None if there is none."""
    scope = metrics
    if expect.during is not None:
        scope = metrics["faults"][expect.during]
    elif expect.provider is not None:
        scope = metrics["providers"][expect.provider]
    name, _, kind = expect.metric.partition(".")
    value = scope.get(name)
    if name == "failures" and isinstance(value, dict):
        value = value.get(kind, 0) if kind else sum(value.values())
    return None if value is None else float(value)


def evaluate(scenario: Scenario, results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for expect in scenario.expect:
        metrics = results.get(expect.policy)
        if metrics is None:  # that policy was not run: neither pass nor fail
            checks.append({"expect": str(expect), "policy": expect.policy, "value": None,
                           "ok": None})
            continue
        value = metric_value(metrics, expect)
        checks.append({"expect": str(expect), "policy": expect.policy, "value": value,
                       "ok": expect.holds(value)})
    return checks


def build_report(
    scenario: Scenario, results: dict[str, dict[str, Any]], checks: list[dict[str, Any]]
) -> dict[str, Any]:
    return {"scenario": scenario.name, "seed": scenario.seed, "policies": results,
            "checks": checks}


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _policy_table(title: str, first: str, policies: list[str]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(first)
    for policy in policies:
        table.add_column(policy, justify="right")
    return table


def render(console: Console, scenario: Scenario, results: dict[str, dict[str, Any]],
           checks: list[dict[str, Any]]) -> None:
    """Print the policies side by side, then per provider and per fault, then the checks."""
    policies = list(results)
    summary = _policy_table(f"{scenario.name} (seed {scenario.seed})", "metric", policies)
    for row in _ROWS:
        summary.add_row(row, *(_fmt(results[p].get(row)) for p in policies))
    parts: list[Any] = [summary]
    providers = _policy_table("per provider: attempts / failures / breaker opens / ms open",
                              "provider", policies)
    for name in scenario.providers:
        cells = []
        for policy in policies:
            p = results[policy]["providers"][name]
            failures = sum(p["failures"].values())
            cells.append(f"{p['attempts']:,} / {failures:,} / {p['breaker_opens']} / "
                         f"{p['open_ms']:,}")
        providers.add_row(name, *cells)
    parts.append(providers)
    if scenario.faults:
        faults = _policy_table("per fault: attempts on target (/s) / ttr ms / burst after",
                               "fault", policies)
        for fault in scenario.faults:
            cells = []
            for policy in policies:
                f = results[policy]["faults"][fault.name]
                cells.append(f"{f['attempts']:,} ({_fmt(f['attempts_per_s'])}) / "
                             f"{_fmt(f['ttr_ms'])} / {f['burst_after']}")
            faults.add_row(fault.name, *cells)
        parts.append(faults)
    console.print(Group(*parts))
    for check in checks:
        if check["ok"] is None:
            console.print(f"[dim]SKIP {check['expect']}: {check['policy']} was not run[/]")
            continue
        mark = "[green]PASS[/]" if check["ok"] else "[red]FAIL[/]"
        console.print(f"{mark} {check['expect']}: observed {_fmt(check['value'])}")
