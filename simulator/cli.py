"""`omniroute-sim`: run, validate, list, serve and record chaos scenarios."""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from omniroute_tui.config import ConfigError, parse_duration_ms
from omniroute_tui.config.durations import format_ms
from omniroute_tui.config.hidden import visible
from omniroute_tui.config.problems import Problem
from omniroute_tui.config.router_config import RouterConfig
from omniroute_tui.config.words import plural
from omniroute_tui.router import DEFAULT_STRATEGY

from .alerts import (
    MAX_SAMPLES,
    AlertRun,
    alert_names,
    find_promtool,
    relative,
    report_entries,
    run_with_alerts,
)
from .fault_traffic import silent_faults
from .junit import ScenarioOutcome, write_junit
from .report import build_report, evaluate, format_value, print_whole, render
from .scenario import (
    POLICIES,
    SCENARIOS_DIR,
    AlertExpect,
    Policy,
    Scenario,
    load_scenario,
    resolve_scenario,
    strategy_names,
    with_strategy,
)
from .terminal_chart import herd_chart
from .timeline import Timeline
from .virtual import run_virtual

__all__ = ["main"]

#: the report options that take a file or a folder (`--junit` is one file for every scenario)
REPORT_OPTIONS = {"report": ".json", "trace": ".jsonl", "html": ".html"}


def _folder_help(option: str) -> str:
    return (f" (a folder, given with a trailing / or one that exists, or any path when several "
            f"scenarios run, gets one file per scenario: NAME{REPORT_OPTIONS[option]})")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omniroute-sim",
        description="Replay chaos scenarios against fake providers and compare policies.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run", help="replay scenarios in virtual time and report",
        description="Replay scenarios in virtual time and report. Exit codes: 0 done, "
                    "1 an expectation failed (with --check), 2 bad input.")
    run.add_argument("scenario", nargs="+",
                     help="scenario files, directories of them, globs, or shipped names")
    run.add_argument("--config", type=Path, metavar="FILE",
                     help="a router config: its providers, routes and resilience settings "
                          "replace the scenario's (keys are not read; fakes stand in)")
    run.add_argument("--seed", type=int, help="override the scenarios' seed")
    run.add_argument("--policy", default="all", choices=[*POLICIES, "all"],
                     help="the policy to run (default: all, side by side)")
    run.add_argument("--strategy", action="append", metavar="NAME",
                     choices=strategy_names(),
                     help="also run the resilient policy with every route on this strategy "
                          f"({', '.join(strategy_names())}), one column each; repeat it "
                          "for several (default: the scenario's `strategies:`)")
    # kept as written: a trailing `/` says "a folder", and Path() would drop it
    run.add_argument("--report", metavar="PATH",
                     help="write the JSON report here" + _folder_help("report"))
    run.add_argument("--trace", metavar="PATH",
                     help="write the event trace (JSON Lines) of the resilient run, or of "
                          "the one policy run, here" + _folder_help("trace"))
    run.add_argument("--html", metavar="PATH",
                     help="write a self-contained HTML report with charts here"
                          + _folder_help("html"))
    run.add_argument("--junit", type=Path, metavar="FILE",
                     help="write the expectations as JUnit XML test cases here")
    run.add_argument("--check", action="store_true",
                     help="exit 1 if an expectation of a scenario fails")
    run.add_argument("--alerts", type=Path, metavar="RULES",
                     help="evaluate these Prometheus alert rules (with promtool) over the "
                          "resilient run's metrics and report when each fired and resolved")
    run.add_argument("--scrape-interval", default="15s", metavar="DURATION",
                     help="with --alerts: how often the metrics are sampled and the rules "
                          "evaluated, in virtual time (default 15s)")
    validate = sub.add_parser("validate", help="check scenario files and exit")
    validate.add_argument("scenario", nargs="+")
    validate.add_argument("--config", type=Path, metavar="FILE",
                          help="check the scenarios against this router config")
    sub.add_parser("list", help="list the shipped scenarios")
    sub.add_parser("lessons", help="list the guided lessons (omniroute-tui --lesson NAME)")
    lesson = sub.add_parser(
        "lesson", help="replay a lesson's scenario and check every number its steps state",
        description="Replay a lesson's scenario under the policies it speaks of and check "
                    "each claim of its steps against the run. Exit codes: 0 every claim "
                    "holds, 1 one does not, 2 bad input.")
    lesson.add_argument("lesson", help="a shipped lesson's name or a lesson file")
    lesson.add_argument("--html", type=Path, metavar="FILE",
                        help="also write the lesson as a self-contained HTML page")
    serve = sub.add_parser("serve", help="serve the scenario's fake providers over HTTP")
    serve.add_argument("scenario")
    serve.add_argument("--config", type=Path, metavar="FILE",
                       help="fake the providers of this router config")
    serve.add_argument("--for", dest="for_", metavar="DURATION",
                       help="stop after this long (default: the scenario's duration)")
    serve.add_argument("--config-out", type=Path, metavar="FILE", default=Path("router.yaml"),
                       help="where to write the router config for the fakes "
                            "(default: router.yaml)")
    record = sub.add_parser(
        "record", help="turn a gateway's recorded events into a scenario",
        description="Turn a gateway's event log into a scenario: the requests as they "
                    "arrived (per route) and the upstream errors as faults (per provider, "
                    "over time), to replay an incident against a changed router config "
                    "with --config. Keys and message contents never enter the file.")
    origin = record.add_mutually_exclusive_group(required=True)
    origin.add_argument("--db", type=Path, metavar="FILE",
                        help="a gateway's state database (it keeps the last hour of requests "
                             "and a week of state changes)")
    origin.add_argument("--events", type=Path, metavar="FILE",
                        help="a trace (JSON Lines) or a saved management API event stream")
    origin.add_argument("--from", dest="from_", metavar="URL",
                        help="a running gateway: follow its management API's event stream")
    record.add_argument("--for", dest="for_", metavar="DURATION", default="5m",
                        help="with --from: how long to record (default 5m)")
    record.add_argument("--token-file", metavar="FILE",
                        help="with --from: the management API token (or $OMNIROUTE_TOKEN)")
    record.add_argument("--name", default="recorded", help="the scenario's name")
    record.add_argument("--config", type=Path, metavar="FILE",
                        help="check that the scenario fits this router config")
    record.add_argument("-o", "--output", type=Path, metavar="FILE", required=True,
                        help="where to write the scenario")
    return parser


def _record(args: argparse.Namespace, console: Console) -> int:
    from omniroute_tui.config.token import load_token

    from .event_sources import events_from_db, events_from_file, events_from_gateway, write_scenario

    if args.db is not None:
        events: Any = events_from_db(args.db)
        source = str(args.db)
    elif args.events is not None:
        events, source = events_from_file(args.events), str(args.events)
    else:
        token = load_token(args.token_file)
        if token is None:
            raise ValueError("--from needs the management API token: --token-file FILE or "
                             "$OMNIROUTE_TOKEN")
        length = parse_duration_ms(args.for_)
        console.print(f"recording {escape(args.from_)} for {escape(args.for_)} "
                      "(Ctrl-C ends it early; what came is kept)", soft_wrap=True)
        with Progress(TextColumn("recording {task.fields[url]}"), BarColumn(),
                      TextColumn("{task.fields[count]:,} events"), TimeRemainingColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("", total=length / 1000, url=args.from_, count=0)
            started = time.monotonic()

            def seen(count: int) -> None:
                bar.update(task, completed=time.monotonic() - started, count=count)

            events, source = events_from_gateway(args.from_, token, length, seen), args.from_
    recording = write_scenario(args.output, events, name=args.name, source=source)
    console.print(f"{escape(str(args.output))}: {recording.requests:,} requests on "
                  f"{len(recording.arrivals)} route(s), {recording.results:,} attempts"
                  + (f", {recording.skipped:,} lines skipped" if recording.skipped else ""),
                  soft_wrap=True)
    if recording.out_of_range:
        Console(stderr=True, highlight=False).print(
            f"warning: {recording.out_of_range:,} event(s) left out: a time, latency or "
            "Retry-After hint over 30 days from the rest, not finite or negative, a status "
            "that is no HTTP error, or requests over the limit of a run", soft_wrap=True)
    if args.config is not None:
        scenario = load_scenario(args.output, config=args.config)
        console.print(f"fits {escape(str(args.config))}: {len(scenario.faults)} fault(s): "
                      + ", ".join(f"{escape(f.name)} {f.at_ms / 1000:g}s-{f.until_ms / 1000:g}s"
                                  for f in scenario.faults), soft_wrap=True)
    else:
        console.print("replay it with: omniroute-sim run "
                      f"{escape(str(args.output))} --config <your router config>", soft_wrap=True)
    return 0


class RunProgress:
    """A run's progress bar, shown only once the run has taken over a second, with how
    many simulated minutes pass each wall second."""

    def __init__(self, console: Console, total_ms: int, label: str,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.console, self.total_ms, self.label, self.clock = console, total_ms, label, clock
        self.started = clock()
        self.bar: Progress | None = None
        self._task: TaskID | None = None
        self.rate = "–"

    def update(self, virtual_ms: int) -> None:
        elapsed = self.clock() - self.started
        if self.bar is None:
            if elapsed < 1.0:
                return
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.percentage:>3.0f}%"),
                                TextColumn("{task.fields[rate]} sim min/s"),
                                TimeRemainingColumn(), console=self.console, transient=True)
            self.bar.start()
            self._task = self.bar.add_task(self.label, total=self.total_ms, rate=self.rate)
        assert self._task is not None
        done_ms = min(virtual_ms, self.total_ms)
        self.rate = f"{done_ms / 60_000 / elapsed:,.1f}"
        self.bar.update(self._task, completed=done_ms, rate=self.rate)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def scenario_paths(names: Sequence[str]) -> list[Path]:
    """Files, directories (their *.yaml), globs and shipped names, in that order."""
    paths: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
            if not found:
                raise ValueError(f"{name}: a directory with no scenario files (*.yaml) in it")
            paths += found
        elif not path.exists() and any(ch in name for ch in "*?["):
            matched = sorted(Path(p) for p in glob.glob(name))
            if not matched:
                raise ValueError(f"{name}: no file matches")
            paths += matched
        else:
            paths.append(resolve_scenario(name))
    return paths


def load_scenarios(names: Sequence[str], config: Path | None) -> list[Scenario]:
    """Every scenario named, or one ConfigError with every problem of every file."""
    scenarios: list[Scenario] = []
    problems: list[Problem] = []
    for path in scenario_paths(names):
        try:
            scenarios.append(load_scenario(path, config=config))
        except ConfigError as exc:
            problems += exc.problems
            if config is not None and any(p.file == str(config) for p in exc.problems):
                break  # the config's own problems: once is enough
    if problems:
        raise ConfigError(problems)
    names_seen = Counter(s.name for s in scenarios)
    if len(scenarios) > 1 and (twice := [n for n, k in names_seen.items() if k > 1]):
        raise ValueError(f"two scenarios are named {twice[0]!r}: their reports would share "
                         "a file name")
    return scenarios


def _is_folder(given: str, many: bool) -> bool:
    """A report path names a folder when it ends in `/`, is one already, or when several
    scenarios run (each needs its own file); else it is the one scenario's file."""
    return given.endswith(("/", os.sep)) or Path(given).is_dir() or many


def _check_outputs(args: argparse.Namespace, scenarios: Sequence[Scenario]) -> None:
    """Refuse, before anything runs, a report folder that is a file, an empty path (an
    unset variable in a CI step: it would name the working directory), and a scenario name
    that would put its report file outside the folder."""
    many = len(scenarios) > 1
    for option in REPORT_OPTIONS:
        given = getattr(args, option)
        if given == "":
            raise ValueError(f"--{option}: the path is empty")
        if given is None or not _is_folder(given, many):
            continue
        for scenario in scenarios:
            if "/" in scenario.name or os.sep in scenario.name:
                raise ValueError(f"{scenario.source}: the name {scenario.name!r} holds a /, "
                                 f"and --{option} names a report file after it")
        if not Path(given).exists() or Path(given).is_dir():
            continue
        if given.endswith(("/", os.sep)):
            raise ValueError(f"--{option} {given}: names a folder, and {given.rstrip('/')} "
                             "is a file")
        raise ValueError(f"--{option} {given}: a file, and several scenarios need a folder "
                         "(one report each)")


def _output(given: str | None, scenario: Scenario, suffix: str, many: bool) -> Path | None:
    """Where a scenario's report goes: in a folder, a file named after the scenario; else
    the file given (folders are made as needed)."""
    if given is None:
        return None
    path = Path(given)
    if _is_folder(given, many):
        path.mkdir(parents=True, exist_ok=True)
        return path / f"{scenario.name}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _alerts_setup(args: argparse.Namespace, scenarios: Sequence[Scenario]
                  ) -> tuple[str, int] | None:
    """With --alerts: promtool's path and the scrape interval, once every scenario's alert
    expectations name a rule of the file; nothing runs otherwise."""
    if args.alerts is None:
        return None
    promtool = find_promtool()
    if promtool is None:
        raise ValueError("--alerts evaluates the rules with promtool, which is not installed "
                         "(it comes with Prometheus: `apt-get install prometheus` on Debian "
                         "and Ubuntu)")
    interval = parse_duration_ms(args.scrape_interval)
    if not 1000 <= interval <= 600_000:
        raise ValueError(f"--scrape-interval {args.scrape_interval}: between 1s and 10m")
    names = alert_names(args.alerts)
    for scenario in scenarios:
        if scenario.live:
            raise ValueError(f"{scenario.source}: runs live; alerts are evaluated in virtual "
                             "time only")
        if scenario.duration_ms // interval + 1 > MAX_SAMPLES:
            raise ValueError(f"{scenario.source}: {scenario.duration_ms // interval + 1:,} "
                             f"samples at --scrape-interval {args.scrape_interval}, over the "
                             f"limit of {MAX_SAMPLES:,}: sample less often")
        for expect in scenario.expect:
            if isinstance(expect, AlertExpect) and expect.alert not in names:
                raise ValueError(f"{scenario.source}:{expect.line}: expect: no rule in "
                                 f"{args.alerts} is named {expect.alert!r} (its alerts: "
                                 f"{', '.join(names)})")
    return promtool, interval


def _run_one(scenario: Scenario, args: argparse.Namespace, console: Console, many: bool,
             charts: str | None, alerting: tuple[str, int] | None = None,
             ) -> tuple[ScenarioOutcome, dict[str, Timeline]]:
    """Run the scenario's policies; `charts` says whose timelines to keep: "all" (the HTML
    page), "herd" (resilient and naive, for the terminal chart) or None."""
    if args.seed is not None:
        scenario = replace(scenario, seed=args.seed)
    policies = list(scenario.policies) if args.policy == "all" else [Policy(args.policy)]
    if args.check or args.junit:
        policies += [e.policy for e in scenario.expect if e.policy not in policies]
    if alerting is not None and Policy.RESILIENT not in policies:
        policies.append(Policy.RESILIENT)
    if scenario.live:
        from .live import LIVE_POLICIES

        policies = [p for p in policies if p in LIVE_POLICIES]
        if not policies:
            raise ValueError(f"{scenario.name} runs live; live mode runs only "
                             f"{' and '.join(LIVE_POLICIES)}")
    traced = Policy.RESILIENT if Policy.RESILIENT in policies else policies[0]
    trace_path = _output(args.trace, scenario, REPORT_OPTIONS["trace"], many)
    results: dict[str, dict[str, Any]] = {}
    timelines: dict[str, Timeline | None] = {}
    alerts = None
    for policy in policies:
        progress = RunProgress(console, scenario.duration_ms, f"{scenario.name} [{policy}]")
        trace = trace_path.open("w") if trace_path and policy == traced else None
        charted = charts == "all" or (charts == "herd"
                                      and policy in (Policy.RESILIENT, Policy.NAIVE))
        timeline = timelines[policy] = Timeline(scenario) if charted else None
        try:
            if scenario.live:
                import asyncio

                from .live import run_live

                results[policy] = asyncio.run(run_live(scenario, policy, trace=trace,
                                                       timeline=timeline))
            elif alerting is not None and policy == Policy.RESILIENT:
                results[policy], alerts = run_with_alerts(
                    scenario, args.alerts, alerting[1], alerting[0], trace=trace,
                    progress=progress.update, timeline=timeline)
            else:
                results[policy] = run_virtual(scenario, policy, trace=trace,
                                              progress=progress.update, timeline=timeline)
        finally:
            progress.done()
            if trace is not None:
                trace.close()
    _run_strategies(scenario, tuple(args.strategy or scenario.strategies), results, timelines,
                    charts, console)
    outcome = ScenarioOutcome(scenario, results, evaluate(scenario, results, alerts), alerts)
    return outcome, {p: t for p, t in timelines.items() if t is not None}


def _run_strategies(scenario: Scenario, strategies: tuple[str, ...],
                    results: dict[str, dict[str, Any]], timelines: dict[str, Timeline | None],
                    charts: str | None, console: Console) -> None:
    """The resilient policy once more per strategy, every route set to it: a column each,
    named after the strategy. A strategy every route has already is the resilient run."""
    if strategies and scenario.live:
        raise ValueError(f"{scenario.name} runs live; strategies side by side run in "
                         "virtual time only")
    for strategy in strategies:
        if Policy.RESILIENT in results and all(
                route.strategy == strategy for route in scenario.config.routes.values()):
            results[strategy] = results[Policy.RESILIENT]
            timelines[strategy] = timelines.get(Policy.RESILIENT)
            continue
        progress = RunProgress(console, scenario.duration_ms, f"{scenario.name} [{strategy}]")
        timeline = timelines[strategy] = Timeline(scenario) if charts == "all" else None
        try:
            results[strategy] = run_virtual(with_strategy(scenario, strategy),
                                            Policy.RESILIENT, progress=progress.update,
                                            timeline=timeline)
        finally:
            progress.done()


def _run(args: argparse.Namespace, console: Console) -> int:
    scenarios = load_scenarios(args.scenario, args.config)
    if args.config is not None and (notice := default_strategy_notice(scenarios[0].config)):
        Console(stderr=True, highlight=False).print(f"[cyan]note:[/] {escape(visible(notice))}",
                                                    soft_wrap=True)
    many = len(scenarios) > 1
    _check_outputs(args, scenarios)
    alerting = _alerts_setup(args, scenarios)
    outcomes = []
    charts = "all" if args.html is not None else "herd" if console.is_terminal else None
    for scenario in scenarios:
        outcome, timelines = _run_one(scenario, args, console, many, charts, alerting)
        outcomes.append(outcome)
        if Policy.RESILIENT in outcome.results:
            _warn(silent_faults(outcome.scenario, outcome.results[Policy.RESILIENT]))
        render(console, outcome.scenario, outcome.results, outcome.checks)
        if outcome.alerts is not None:
            print_whole(console, alerts_table(outcome.alerts, outcome.scenario))
        if console.is_terminal and (chart := herd_chart(
                outcome.scenario, timelines, width=min(console.width, 100))) is not None:
            console.print(chart)
        if report := _output(args.report, scenario, REPORT_OPTIONS["report"], many):
            alert_report = None if outcome.alerts is None else report_entries(
                outcome.alerts, outcome.scenario)
            report.write_text(json.dumps(build_report(outcome.scenario, outcome.results,
                                                      outcome.checks, alert_report),
                                         indent=2) + "\n")
        if html := _output(args.html, scenario, REPORT_OPTIONS["html"], many):
            from .html_report import write_html  # matplotlib: 1 of the 1.7 s an import took

            write_html(html, outcome, timelines)
            console.print(f"HTML report: {escape(str(html))} ({html.stat().st_size:,} bytes)",
                          soft_wrap=True)
    if args.junit:
        args.junit.parent.mkdir(parents=True, exist_ok=True)
        write_junit(args.junit, outcomes)
    if many:
        console.print(_summary(outcomes))
    failed = [(o, c) for o in outcomes for c in o.checks if c["ok"] is False]
    if args.check and failed:
        for outcome, check in failed:
            prefix = f"{outcome.scenario.name}: " if many else ""
            console.print(f"[red]expectation failed:[/] "
                          f"{escape(visible(prefix + check['expect']))} "
                          f"(observed {format_value(check['value'])})", soft_wrap=True)
        return 1
    return 0


def default_strategy_notice(config: RouterConfig, shown: int = 3) -> str | None:
    """One line for a config whose routes name no strategy: the default changed under
    them (priority, the first key first, before 0.2.0). Said for the 0.2.0 release only."""
    routes = (config.raw or {}).get("routes")
    unnamed = [str(name) for name, body in routes.items()
               if isinstance(body, dict) and "strategy" not in body] if isinstance(
                   routes, dict) else []
    if not unnamed:
        return None
    names = ", ".join(unnamed[:shown]) + (f" and {len(unnamed) - shown} more"
                                          if len(unnamed) > shown else "")
    one = len(unnamed) == 1
    return (f"{'route' if one else 'routes'} {names} {'names' if one else 'name'} no "
            f"strategy: the default is now {DEFAULT_STRATEGY.value}, each provider's "
            "requests spread over its keys (it was priority, the first key first: write "
            "strategy: priority to keep that)")


def _warn(warnings: list[str]) -> None:
    errors = Console(stderr=True, highlight=False)
    for warning in warnings:
        errors.print(f"[yellow]warning:[/] {escape(visible(warning))}", soft_wrap=True)


def alerts_table(run: AlertRun, scenario: Scenario) -> Table | Text:
    """When each alert fired and resolved over the resilient run, against the faults."""
    every = format_ms(run.interval_ms)
    if not run.firings:
        return Text(visible(f"alerts over {scenario.name} (resilient, evaluated every "
                            f"{every}): none of the {len(run.alerts)} fired"))
    table = Table(title=Text(visible(f"alerts over {scenario.name} (resilient, evaluated "
                                     f"every {every})")),
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("alert", no_wrap=True, overflow="ellipsis", max_width=30)
    table.add_column("on", min_width=8)
    table.add_column("fired", no_wrap=True)
    table.add_column("resolved", no_wrap=True)

    def when(t_ms: int | None) -> str:
        return "–" if t_ms is None else relative(t_ms, scenario)

    for firing in run.firings:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(firing.labels.items())
                           if k != "severity")
        table.add_row(firing.alert, Text(visible(labels)), Text(visible(when(firing.fired_ms))),
                      Text(visible(when(firing.resolved_ms))))
    quiet = [name for name in run.alerts if not any(f.alert == name for f in run.firings)]
    if quiet:
        table.caption = Text("never fired: " + ", ".join(quiet))
        table.caption_justify = "left"
    return table


def _summary(outcomes: list[ScenarioOutcome]) -> Table:
    table = Table(title="summary", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("scenario", "passed", "failed", "not run"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    table.add_column("verdict")
    for outcome in outcomes:
        skipped = len(outcome.checks) - outcome.passed - outcome.failed
        verdict = "[red]FAIL[/]" if outcome.failed else "[green]ok[/]"
        table.add_row(Text(visible(outcome.scenario.name)), str(outcome.passed),
                      str(outcome.failed), str(skipped), verdict)
    return table


def _list(console: Console) -> int:
    """Each shipped scenario with the first sentence of its description (its first line
    stopped mid-sentence), wrapped in its column."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("scenario", no_wrap=True)
    table.add_column("what happens", overflow="fold")
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):
        try:
            table.add_row(Text(path.stem), Text(first_sentence(load_scenario(path).description)))
        except ConfigError as exc:
            table.add_row(Text(path.stem), Text(f"invalid: {exc.problems[0]}", style="red"))
    console.print(table)
    return 0


def first_sentence(text: str) -> str:
    """`text` on one line, up to the end of its first sentence."""
    line = " ".join(text.split())
    end = line.find(". ")
    return line if end < 0 else line[:end + 1]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    errors = Console(stderr=True, highlight=False)
    try:
        if args.command == "run":
            return _run(args, console)
        if args.command == "validate":
            for scenario in load_scenarios(args.scenario, args.config):
                against = f" against {scenario.config.source}" if args.config else ""
                console.print(escape(visible(
                              f"{scenario.source}: ok{against} "
                              f"({plural(len(scenario.providers), 'provider')}, "
                              f"{plural(len(scenario.traffic), 'traffic item')}, "
                              f"{plural(len(scenario.faults), 'fault')}, "
                              f"{plural(len(scenario.expect), 'expectation')})")),
                              soft_wrap=True)
                if scenario.faults and scenario.traffic:  # in virtual time, whatever its clock
                    _warn(silent_faults(scenario, run_virtual(scenario, Policy.RESILIENT)))
            return 0
        if args.command == "list":
            return _list(console)
        if args.command in ("lessons", "lesson"):
            from .lesson_cli import check_command, list_lessons

            if args.command == "lessons":
                return list_lessons(console)
            return check_command(args.lesson, args.html, console)
        if args.command == "record":
            return _record(args, console)
        if args.command == "serve":
            from .serve import serve_command

            scenario = load_scenario(resolve_scenario(args.scenario), config=args.config)
            length = parse_duration_ms(args.for_) if args.for_ else scenario.duration_ms
            return serve_command(scenario, length, args.config_out, console)
    except (ConfigError, ValueError) as exc:
        errors.print("[red]error:[/]", escape(str(exc)), soft_wrap=True)
        return 2
    except OSError as exc:
        errors.print("[red]error:[/]", escape(f"{exc.filename or ''}: {exc.strerror}"),
                     soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
