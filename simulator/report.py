"""Reports: checking `expect`s, the JSON layout, and the side-by-side terminal tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from omniroute_tui.config.durations import format_ms
from omniroute_tui.config.hidden import visible

from .scenario import POLICIES, AlertExpect, Expect, Scenario

if TYPE_CHECKING:
    from .alerts import AlertRun

__all__ = [
    "build_report",
    "evaluate",
    "format_value",
    "metric_value",
    "print_whole",
    "render",
    "summary_rows",
    "summary_table",
]

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


def evaluate(scenario: Scenario, results: dict[str, dict[str, Any]],
             alerts: AlertRun | None = None) -> list[dict[str, Any]]:
    """Every expectation in file order; one whose run did not happen (a policy not run, an
    alert without `--alerts`) is neither passed nor failed, and says why."""
    from .alerts import alert_value

    checks: list[dict[str, Any]] = []
    for expect in scenario.expect:
        if isinstance(expect, AlertExpect):
            if alerts is None:
                checks.append({"expect": str(expect), "policy": expect.policy, "value": None,
                               "ok": None, "skipped": "alerts were not evaluated (--alerts)"})
                continue
            value = alert_value(expect, alerts, scenario.faults)
            checks.append({"expect": str(expect), "policy": expect.policy, "value": value,
                           "ok": expect.holds(value), "observed": expect.observed(value)})
            continue
        metrics = results.get(expect.column)
        check: dict[str, Any] = {"expect": str(expect), "policy": expect.policy}
        if expect.strategy is not None:
            check["strategy"] = expect.strategy
        if metrics is None:  # that run was not made: neither pass nor fail
            checks.append({**check, "value": None, "ok": None})
            continue
        value = metric_value(metrics, expect)
        checks.append({**check, "value": value, "ok": expect.holds(value)})
    return checks


def build_report(
    scenario: Scenario, results: dict[str, dict[str, Any]], checks: list[dict[str, Any]],
    alerts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    policies = {k: v for k, v in results.items() if k in POLICIES}
    report: dict[str, Any] = {"scenario": scenario.name, "seed": scenario.seed,
                              "policies": policies}
    if strategies := {k: v for k, v in results.items() if k not in POLICIES}:
        report["strategies"] = strategies  # the resilient policy, every route on each
    report["checks"] = checks
    if alerts is not None:
        report["alerts"] = alerts
    return report


def format_value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _ms(value: Any) -> str:
    """A span the way the console writes it (`format_ms`: 250ms, 3m52s), with tenths
    under a minute (a 2.7 s recovery is not a 2 s one)."""
    if value is None:
        return "–"
    if 1000 <= value < 60_000:
        return f"{value / 1000:.1f}".rstrip("0").rstrip(".") + "s"
    return format_ms(int(value))


#: (label, key, format) of the run's rows
_RUN_ROWS: tuple[tuple[str, str, Any], ...] = (
    ("requests", "requests", format_value), ("successes", "successes", format_value),
    ("success rate", "success_rate", format_value), ("attempts", "attempts", format_value),
    ("amplification", "amplification", format_value), ("latency p50", "p50_ms", _ms),
    ("latency p95", "p95_ms", _ms), ("latency p99", "p99_ms", _ms),
    ("dedup suppressed", "dedup_suppressed", format_value),
    ("breaker opens", "breaker_opens", format_value),
    ("time OPEN", "open_ms", _ms), ("max attempts/OPEN", "max_attempts_per_open", format_value),
    ("wall time", "wall_s", lambda v: "–" if v is None else f"{v:.2f}s"),
    ("sim req/s", "sim_rps", format_value),
)
_PROVIDER_ROWS: tuple[tuple[str, Any], ...] = (
    ("attempts", lambda p: format_value(p["attempts"])),
    ("probes", lambda p: format_value(p["probes"])),
    ("failures", lambda p: format_value(sum(p["failures"].values()))),
    ("breaker opens", lambda p: format_value(p["breaker_opens"])),
    ("time OPEN", lambda p: _ms(p["open_ms"])),
)
_FAULT_ROWS: tuple[tuple[str, Any], ...] = (
    ("attempts", lambda f: format_value(f["attempts"])),
    ("attempts/s", lambda f: format_value(f["attempts_per_s"])),
    ("back after", lambda f: _ms(f["ttr_ms"])),
    ("burst after", lambda f: format_value(f["burst_after"])),
)


def summary_rows(scenario: Scenario, results: dict[str, dict[str, Any]]
                 ) -> Iterator[tuple[str, list[str] | None]]:
    """(label, a cell per policy) for the run, then each provider and fault under a
    heading row (cells None); names in labels have their hidden characters escaped."""
    policies = list(results)
    for label, key, fmt in _RUN_ROWS:
        yield label, [fmt(results[p].get(key)) for p in policies]
    for name in scenario.providers:
        yield visible(f"provider {name}"), None
        for label, cell in _PROVIDER_ROWS:
            yield f"  {label}", [cell(results[p]["providers"][name]) for p in policies]
    for fault in scenario.faults:
        yield visible(f"fault {fault.name} on {fault.target}"), None
        for label, cell in _FAULT_ROWS:
            yield f"  {label}", [cell(results[p]["faults"][fault.name]) for p in policies]


def summary_table(scenario: Scenario, results: dict[str, dict[str, Any]],
                  title: str | None = None) -> Table:
    """Policies (or strategies) as columns, one short row per figure: fits 80 columns
    with five of them."""
    policies = list(results)
    heading = Text(visible(title or f"{scenario.name} (seed {scenario.seed})"))
    table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1))
    table.add_column("", no_wrap=True, overflow="ellipsis")
    for policy in policies:
        table.add_column(policy, justify="right", no_wrap=True)
    for label, cells in summary_rows(scenario, results):
        if cells is None:
            table.add_section()
            table.add_row(Text(label, style="bold"), *([""] * len(policies)))
        else:
            table.add_row(label, *cells)
    return table


def print_whole(console: Console, table: Table | Text) -> None:
    """A table in a terminal fits its width; anywhere else (a pipe, a file, CI's log) it
    is printed as wide as it needs, never a number or a name cut (`36.7…`)."""
    if console.is_terminal:
        console.print(table)
    else:
        wanted = console.measure(table, options=console.options.update_width(10_000))
        width = console.width  # print(width=) is held to the console's: widen it
        console.width = max(width, wanted.maximum)
        try:
            console.print(table)
        finally:
            console.width = width


def render(console: Console, scenario: Scenario, results: dict[str, dict[str, Any]],
           checks: list[dict[str, Any]]) -> None:
    """The policies side by side (runs, providers, faults), the strategies side by side
    (a table of their own: the resilient policy with every route on each), then the
    checks."""
    policies = {k: v for k, v in results.items() if k in POLICIES}
    strategies = {k: v for k, v in results.items() if k not in POLICIES}
    if policies:
        print_whole(console, summary_table(scenario, policies))
    if strategies:
        print_whole(console, summary_table(scenario, strategies, f"{scenario.name} (seed "
                                           f"{scenario.seed}), resilient, every route on"))
    for check in checks:
        expect = escape(visible(check["expect"]))
        if check["ok"] is None:
            why = check.get("skipped") or \
                f"{check.get('strategy') or check['policy']} was not run"
            console.print(f"[dim]SKIP {expect}: {escape(why)}[/]")
            continue
        mark = "[green]PASS[/]" if check["ok"] else "[red]FAIL[/]"
        observed = check.get("observed") or f"observed {format_value(check['value'])}"
        console.print(f"{mark} {expect}: {escape(observed)}")
