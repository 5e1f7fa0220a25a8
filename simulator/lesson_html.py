"""A lesson as one self-contained page for self-study (`omniroute-tui --lesson NAME
--html FILE`, `omniroute-sim lesson NAME --html FILE`): the steps, each with its claims
and what the run shows, beside the HTML report's charts of the policies the lesson
compares. Nothing on the page is fetched."""

from __future__ import annotations

import html
from pathlib import Path

from omniroute_tui.config.hidden import DESCRIPTION_KEEPS, visible
from omniroute_tui.console.model.row_keys import key_text

from .html_report import STYLE, chart_svg
from .lesson import Lesson
from .lesson_claims import ClaimResult, LessonRun, check_lesson, run_lesson

__all__ = ["render_lesson_html", "write_lesson_html"]

_LESSON_STYLE = """
.lesson-page { display: grid; grid-template-columns: minmax(320px, 1fr) minmax(430px, 1.4fr);
               gap: 1.2rem; align-items: start; }
.steps { list-style: none; padding: 0; margin: 0; }
.steps > li { border-left: 4px solid #1f77b4; background: #f6f8fa; margin: 0 0 .8rem;
            padding: .5rem .8rem; }
.steps > li.paused { border-left-color: #d4a017; }
.when { color: #666; font-size: .85rem; } .text { white-space: pre-wrap; margin: .3rem 0; }
.claims { font-size: .85rem; margin: .3rem 0 0; padding-left: 1.1rem; }
.charts-side { position: sticky; top: 1rem; }
.charts-side figure { margin: 0 0 1rem; border: 1px solid #ddd; border-radius: 6px;
                      padding: .4rem; }
.charts-side svg { width: 100%; height: auto; }
@media (max-width: 900px) { .lesson-page { grid-template-columns: 1fr; } }
"""


def _text(value: str) -> str:
    return html.escape(visible(value, DESCRIPTION_KEEPS))


def _claims(results: list[ClaimResult]) -> str:
    if not results:
        return ""
    items = []
    for result in results:
        observed = "nothing" if result.observed is None else f"{result.observed:g}"
        state, word = ("pass", "holds") if result.ok else ("fail", "DOES NOT HOLD")
        items.append(f"<li>{_text(str(result.claim))}: the run shows {observed} "
                     f'<span class="{state}">{word}</span></li>')
    return f'<ul class="claims">{"".join(items)}</ul>'


def render_lesson_html(lesson: Lesson, run: LessonRun, results: list[ClaimResult]) -> str:
    steps = []
    for index, step in enumerate(lesson.steps):
        shows = f" · shows the {step.pane} pane" if step.pane else ""
        row = "" if step.row is None else f" ({_text(key_text(step.row))})"
        compare = f" · herd chart vs {step.compare}" if step.compare else ""
        question = ""
        if step.question is not None and step.answer is not None:
            question = (f"<p><b>Question:</b> {_text(step.question)}</p><details><summary>"
                        f"the answer</summary><p>{_text(step.answer)}</p></details>")
        mine = [r for r in results if r.step == index]
        steps.append(
            f'<li class="{"paused" if step.pause else ""}"><div class="when">step '
            f"{index + 1} · {_text(step.trigger)}{shows}{row}{compare}"
            f'{" · pauses" if step.pause else ""}</div><p class="text">{_text(step.text)}</p>'
            f"{question}{_claims(mine)}</li>")
    tops = [max(t.per_second(c), default=0) for t in run.timelines.values()
            for c in t.attempts.values()]
    top = max([1, *tops]) * 1.1
    charts = "".join(
        f'<figure aria-label="{_text(policy)}">'
        f"{chart_svg(lesson.scenario, policy, timeline, top, f'l{index}')}</figure>"
        for index, (policy, timeline) in enumerate(run.timelines.items()))
    failed = sum(1 for r in results if not r.ok)
    verdict = (f'<span class="fail">{failed} claim(s) do not hold</span>' if failed
               else f'<span class="pass">all {len(results)} claims hold on this run</span>')
    scenario = lesson.scenario
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_text(lesson.title)}: an omniroute lesson</title>
<style>{STYLE}{_LESSON_STYLE}</style></head>
<body>
<h1>{_text(lesson.title)}</h1>
<p class="meta">lesson {_text(lesson.name)} · scenario {_text(scenario.name)} (seed
{scenario.seed}, {scenario.duration_ms / 1000:g} s of virtual time) · {verdict}</p>
<p>{_text(lesson.summary)}</p>
<p>In the console: <code>omniroute-tui --lesson {_text(lesson.name)}</code> (space continues
a paused step, enter reveals an answer).</p>
<div class="lesson-page">
<ol class="steps">{"".join(steps)}</ol>
<div class="charts-side"><p>Attempts per second on each provider (hatched: its breaker was
OPEN; orange: a fault was on), answers per second and latency, policy by policy, on one
scale.</p>{charts}</div>
</div>
</body></html>
"""


def write_lesson_html(path: Path, lesson: Lesson) -> int:
    """Run the lesson, write its page (beside, then renamed); return its size in bytes."""
    run = run_lesson(lesson, charts=True)
    page = render_lesson_html(lesson, run, check_lesson(lesson, run))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return len(page.encode("utf-8"))
