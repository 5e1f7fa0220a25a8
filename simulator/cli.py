"""`omniroute-sim`: run, validate, list and serve chaos scenarios."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from omniroute_tui.config import ConfigError, parse_duration_ms

from .report import build_report, evaluate, render
from .scenario import POLICIES, SCENARIOS_DIR, Scenario, load_scenario, resolve_scenario
from .virtual import run_virtual

__all__ = ["main"]

#: the shipped scenarios: `scenarios/` in the source tree, package data once installed

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omniroute-sim",
        description="Replay chaos scenarios against fake providers and compare policies.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="replay a scenario in virtual time and report")
    run.add_argument("scenario", help="a scenario file, or the name of a shipped scenario")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--policy", default="all", choices=[*POLICIES, "all"],
                     help="the policy to run (default: all, side by side)")
    run.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report here")
    run.add_argument("--trace", type=Path, metavar="FILE",
                     help="write the event trace (JSON Lines) of the resilient run, or of "
                          "the one policy run, here")
    run.add_argument("--check", action="store_true",
                     help="exit 1 if an expectation of the scenario fails")
    validate = sub.add_parser("validate", help="check a scenario file and exit")
    validate.add_argument("scenario")
    sub.add_parser("list", help="list the shipped scenarios")
    serve = sub.add_parser("serve", help="serve the scenario's fake providers over HTTP")
    serve.add_argument("scenario")
    serve.add_argument("--for", dest="for_", metavar="DURATION",
                       help="stop after this long (default: the scenario's duration)")
    serve.add_argument("--config-out", type=Path, metavar="FILE", default=Path("router.yaml"),
                       help="where to write the router config for the fakes "
                            "(default: router.yaml)")
    return parser


def _progress(console: Console, scenario: Scenario, label: str) -> tuple[
        Callable[[int], None], Callable[[], None]]:
    """A progress callback that shows a bar only once a run has taken over a second."""
    started = time.perf_counter()
    state: dict[str, object] = {}

    def update(virtual_ms: int) -> None:
        bar = state.get("bar")
        if bar is None:
            if time.perf_counter() - started < 1.0:
                return
            bar = Progress(TextColumn("{task.description}"), BarColumn(),
                           TextColumn("{task.percentage:>3.0f}%"), TimeRemainingColumn(),
                           console=console, transient=True)
            bar.start()
            state["bar"] = bar
            state["task"] = bar.add_task(label, total=scenario.duration_ms)
        assert isinstance(bar, Progress)
        bar.update(state["task"], completed=min(virtual_ms, scenario.duration_ms))  # type: ignore[arg-type]

    def done() -> None:
        bar = state.get("bar")
        if isinstance(bar, Progress):
            bar.stop()

    return update, done


def _run(args: argparse.Namespace, console: Console) -> int:
    scenario = load_scenario(resolve_scenario(args.scenario))
    if args.seed is not None:
        scenario = replace(scenario, seed=args.seed)
    policies = list(scenario.policies) if args.policy == "all" else [args.policy]
    if args.check:
        policies += [e.policy for e in scenario.expect if e.policy not in policies]
    if scenario.live:
        from .live import LIVE_POLICIES

        policies = [p for p in policies if p in LIVE_POLICIES]
        if not policies:
            raise ValueError(f"{scenario.name} runs live; live mode runs only "
                             f"{' and '.join(LIVE_POLICIES)}")
    traced = "resilient" if "resilient" in policies else policies[0]
    results = {}
    for policy in policies:
        update, done = _progress(console, scenario, f"{scenario.name} [{policy}]")
        trace = args.trace.open("w") if args.trace and policy == traced else None
        try:
            if scenario.live:
                import asyncio

                from .live import run_live

                results[policy] = asyncio.run(run_live(scenario, policy, trace=trace))
            else:
                results[policy] = run_virtual(scenario, policy, trace=trace, progress=update)
        finally:
            done()
            if trace is not None:
                trace.close()
    checks = evaluate(scenario, results)
    render(console, scenario, results, checks)
    if args.report:
        args.report.write_text(json.dumps(build_report(scenario, results, checks), indent=2)
                               + "\n")
    failed = [c for c in checks if c["ok"] is False]
    if args.check and failed:
        for check in failed:
            console.print(f"[red]expectation failed:[/] {check['expect']} "
                          f"(observed {check['value']})")
        return 1
    return 0


def _list(console: Console) -> int:
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):
        try:
            scenario = load_scenario(path)
            summary = scenario.description.splitlines()[0] if scenario.description else ""
            console.print(f"[bold]{path.stem:18}[/] {summary}")
        except ConfigError as exc:
            console.print(f"[bold]{path.stem:18}[/] [red]invalid:[/] {exc.problems[0]}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    errors = Console(stderr=True, highlight=False)
    try:
        if args.command == "run":
            return _run(args, console)
        if args.command == "validate":
            scenario = load_scenario(resolve_scenario(args.scenario))
            console.print(f"{scenario.source}: ok ({len(scenario.providers)} providers, "
                          f"{len(scenario.traffic)} traffic items, {len(scenario.faults)} "
                          f"faults, {len(scenario.expect)} expectations)")
            return 0
        if args.command == "list":
            return _list(console)
        if args.command == "serve":
            from .serve import serve_command

            scenario = load_scenario(resolve_scenario(args.scenario))
            length = parse_duration_ms(args.for_) if args.for_ else scenario.duration_ms
            return serve_command(scenario, length, args.config_out, console)
    except ConfigError as exc:
        errors.print(f"[red]error:[/] {exc}", markup=True, soft_wrap=True)
        return 2
    except ValueError as exc:
        errors.print(f"[red]error:[/] {exc}")
        return 2
    except OSError as exc:
        errors.print(f"[red]error:[/] {exc.filename or ''}: {exc.strerror}")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
