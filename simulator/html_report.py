"""`omniroute-sim run --html FILE`: one self-contained page a reviewer opens offline.

Per policy, side by side, one chart (matplotlib, inline SVG) in three panels: attempts per
second on each provider with the fault windows and breaker OPEN spans marked, answers per
second (successes and failures), and latency percentiles over time. Then the
expectations, the figures side by side, and the scenario's description as its lesson.
Nothing on the page is fetched: no scripts, fonts or styles from anywhere.
"""

from __future__ import annotations

import html
import io
import re
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from omniroute_tui.config.hidden import DESCRIPTION_KEEPS, visible

from .junit import ScenarioOutcome
from .report import summary_rows
from .scenario import Scenario
from .timeline import Timeline

__all__ = ["STYLE", "chart_svg", "render_html", "write_html"]

#: at most this many points a line: an hour-long run is drawn in 6-second steps
MAX_POINTS = 600
_PROVIDER_COLORS = ("#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_RC: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays text: smaller, and the page's own font
    "svg.hashsalt": "omniroute",  # the same run gives the same file
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_SVG_ID = re.compile(r'id="([^"]+)"')
_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def _text(value: str, keep: str = "") -> str:
    """Text for the page: its markup escaped, and its hidden characters written as their
    escapes (a name's, and any but the line breaks and tabs of a description)."""
    return html.escape(visible(value, keep))


def _chart(scenario: Scenario, policy: str, timeline: Timeline, attempts_top: float) -> Figure:
    figure = Figure(figsize=(6.4, 6.6), layout="constrained")
    attempts, answers, latency = figure.subplots(3, 1, sharex=True,
                                                 height_ratios=(1.4, 1, 1))
    figure.suptitle(policy, fontsize=12, fontweight="bold")
    for index, name in enumerate(scenario.providers):
        color = _PROVIDER_COLORS[index % len(_PROVIDER_COLORS)]
        xs, ys = timeline.binned(timeline.attempts[name], MAX_POINTS)
        attempts.plot(xs, ys, color=color, linewidth=1.1, label=f"{name} attempts/s")
        for n, (start, end) in enumerate(timeline.spans(name)):
            attempts.axvspan(start, end, color=color, alpha=0.18, hatch="///", linewidth=0,
                             label=f"{name} breaker OPEN" if n == 0 else None)
    for axes in (attempts, answers, latency):
        for n, fault in enumerate(scenario.faults):
            axes.axvspan(fault.at_ms / 1000, fault.until_ms / 1000, color="#f5a623",
                         alpha=0.12, linewidth=0,
                         label="fault windows" if n == 0 and axes is attempts else None)
    attempts.set_ylim(0, attempts_top)
    attempts.set_ylabel("attempts / s")
    attempts.legend(loc="upper right", fontsize=7, ncols=2, frameon=False)
    for counts, color, label in ((timeline.successes, "#2ca02c", "successes/s"),
                                 (timeline.failures, "#d62728", "failures/s")):
        xs, ys = timeline.binned(counts, MAX_POINTS)
        answers.plot(xs, ys, color=color, linewidth=1.1, label=label)
    answers.set_ylabel("answers / s")
    answers.legend(loc="upper right", fontsize=7, frameon=False)
    percentiles = timeline.latency()
    for name, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
        latency.plot(percentiles["t_s"], percentiles[name], linestyle=style, color="#333333",
                     linewidth=1.1, label=name)
    latency.set_ylabel("latency ms")
    latency.set_xlabel("seconds into the scenario")
    latency.set_ylim(bottom=0)
    latency.legend(loc="upper right", fontsize=7, ncols=3, frameon=False)
    attempts.set_xlim(0, timeline.seconds())
    return figure


def chart_svg(scenario: Scenario, policy: str, timeline: Timeline, attempts_top: float,
               prefix: str) -> str:
    """The policy's chart as an `<svg>` element for the page: no XML prologue or
    metadata, and its ids prefixed so several charts on one page keep theirs apart."""
    buffer = io.StringIO()
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        figure = _chart(scenario, policy, timeline, attempts_top)
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    svg = _METADATA.sub("", _PROLOGUE.sub("", buffer.getvalue(), count=1))
    ids = set(_SVG_ID.findall(svg))
    svg = _SVG_ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    return re.sub(r"#([A-Za-z_][\w.-]*)",
                  lambda m: f"#{prefix}-{m.group(1)}" if m.group(1) in ids else m.group(0), svg)


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem auto;
       max-width: 1400px; padding: 0 1rem; color: #222; }
h1 { margin-bottom: .2rem; } .meta { color: #666; margin-top: 0; }
.lesson { background: #f6f8fa; border-left: 4px solid #1f77b4; padding: .6rem 1rem;
          white-space: pre-wrap; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(430px, 1fr));
          gap: 1rem; }
.charts figure { margin: 0; border: 1px solid #ddd; border-radius: 6px; padding: .4rem; }
.charts svg { width: 100%; height: auto; }
table { border-collapse: collapse; margin: .6rem 0 1.4rem; font-variant-numeric: tabular-nums; }
th, td { padding: .25rem .7rem; border-bottom: 1px solid #e4e4e4; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.section td { font-weight: bold; padding-top: .8rem; }
.pass { color: #1a7f37; font-weight: bold; } .fail { color: #cf222e; font-weight: bold; }
.skip { color: #888; }
"""


def _expectations(outcome: ScenarioOutcome) -> str:
    rows = []
    for expect, check in zip(outcome.scenario.expect, outcome.checks, strict=True):
        state, word = ({None: ("skip", "not run"), True: ("pass", "PASS"),
                        False: ("fail", "FAIL")}[check["ok"]])
        observed = check.get("observed") or (
            "–" if check["value"] is None else f"{check['value']:g}")
        rows.append(f"<tr><td>{_text(expect.label)}</td><td>{_text(expect.column)}</td>"
                    f"<td>{observed}</td><td>{_text(expect.bound)}</td>"
                    f'<td class="{state}">{word}</td></tr>')
    if not rows:
        return "<p>This scenario states no expectations.</p>"
    return ("<table><tr><th>expectation</th><th>policy</th><th>observed</th><th>bound</th>"
            "<th>result</th></tr>" + "".join(rows) + "</table>")


def _figures(outcome: ScenarioOutcome) -> str:
    policies = list(outcome.results)
    head = "".join(f"<th>{_text(p)}</th>" for p in policies)
    rows = []
    for label, cells in summary_rows(outcome.scenario, outcome.results):
        if cells is None:
            rows.append(f'<tr class="section"><td colspan="{len(policies) + 1}">'
                        f"{_text(label)}</td></tr>")
        else:
            rows.append(f"<tr><td>{_text(label)}</td>"
                        + "".join(f"<td>{_text(c)}</td>" for c in cells) + "</tr>")
    return f"<table><tr><th></th>{head}</tr>{''.join(rows)}</table>"


def render_html(outcome: ScenarioOutcome, timelines: dict[str, Timeline]) -> str:
    """The whole page for one scenario's run."""
    scenario = outcome.scenario
    tops = [max(t.per_second(c), default=0) for t in timelines.values()
            for c in t.attempts.values()]
    top = max([1, *tops]) * 1.1  # one scale for every policy: the herd compares honestly
    charts = "".join(
        f'<figure aria-label="{_text(policy)}">'
        f"{chart_svg(scenario, policy, timeline, top, f'c{index}')}</figure>"
        for index, (policy, timeline) in enumerate(timelines.items())
    )
    failed = sum(1 for c in outcome.checks if c["ok"] is False)
    verdict = (f'<span class="fail">{failed} expectation(s) failed</span>' if failed
               else '<span class="pass">every expectation holds</span>'
               if outcome.checks else "")
    meta = (f"seed {scenario.seed} · {scenario.duration_ms / 1000:g} s of virtual time · "
            f"router config {_text(scenario.config.source)} · {verdict}")
    lesson = _text(scenario.description, DESCRIPTION_KEEPS) or "This scenario has no description."
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_text(scenario.name)}: omniroute-sim report</title>
<style>{STYLE}</style></head>
<body>
<h1>{_text(scenario.name)}</h1>
<p class="meta">{meta}</p>
<h2>The lesson</h2>
<div class="lesson">{lesson}</div>
<h2>Expectations</h2>
{_expectations(outcome)}
<h2>Over time, policy by policy</h2>
<p>Attempts per second on each provider (hatched: that provider's breaker was OPEN; orange:
a fault was on), answers per second, and latency percentiles. Every policy's attempts are
drawn on the same scale.</p>
<div class="charts">{charts}</div>
<h2>The figures</h2>
{_figures(outcome)}
</body></html>
"""


def write_html(path: Path, outcome: ScenarioOutcome, timelines: dict[str, Timeline]) -> None:
    """Write the page (beside, then renamed: a reader never sees half of it)."""
    page = render_html(outcome, timelines)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)

