"""`omniroute-sim lessons` and `omniroute-sim lesson NAME [--html FILE]`."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from omniroute_tui.config import ConfigError
from omniroute_tui.config.hidden import visible

from .lesson import LESSONS_DIR, load_lesson, resolve_lesson
from .lesson_claims import check_lesson, run_lesson

__all__ = ["check_command", "list_lessons"]


def list_lessons(console: Console) -> int:
    """Each shipped lesson: its name, scenario, number of steps and one-line summary."""
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("lesson", "scenario", "steps", "summary"):
        table.add_column(column, justify="right" if column == "steps" else "left",
                         overflow="fold")
    for path in sorted(LESSONS_DIR.glob("*.yaml")):
        try:
            lesson = load_lesson(path)
        except ConfigError as exc:
            table.add_row(Text(path.stem), "", "", Text(f"invalid: {exc.problems[0]}",
                                                         style="red"))
            continue
        table.add_row(Text(visible(lesson.name)), Text(visible(lesson.scenario.name)),
                      str(len(lesson.steps)), Text(visible(lesson.summary)))
    console.print(table)
    console.print("run one: omniroute-tui --lesson NAME")
    return 0


def check_command(name: str, html: Path | None, console: Console) -> int:
    """Replay the lesson, print each step and whether its claims hold; 1 if one does not."""
    lesson = load_lesson(resolve_lesson(name))
    run = run_lesson(lesson, charts=html is not None)
    results = check_lesson(lesson, run)
    for index, step in enumerate(lesson.steps):
        console.print(f"[bold]step {index + 1}[/] {escape(visible(step.trigger))}: "
                      f"{escape(visible(' '.join(step.text.split())))}", soft_wrap=True)
        for result in (r for r in results if r.step == index):
            observed = "nothing" if result.observed is None else f"{result.observed:g}"
            mark = "[green]ok[/]" if result.ok else "[red]FAILS[/]"
            where = f"{lesson.source}:{result.claim.line}: " if not result.ok else ""
            console.print(f"    {mark} {escape(visible(where + str(result.claim)))} (the run "
                          f"shows {observed})", soft_wrap=True)
    failed = sum(1 for r in results if not r.ok)
    console.print(f"{len(results) - failed} of {len(results)} claims hold")
    if html is not None:
        from .lesson_html import render_lesson_html

        page = render_lesson_html(lesson, run, results)
        html.parent.mkdir(parents=True, exist_ok=True)
        html.write_text(page, encoding="utf-8")
        console.print(f"lesson page: {escape(str(html))} ({len(page.encode()):,} bytes)",
                      soft_wrap=True)
    return 1 if failed else 0
