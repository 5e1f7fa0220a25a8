"""The scenario pane's text: a replay's header, each fault's span as a bar with `│` at
now, and the scenario's description; or, on real time or in a room, what the chart
shows (no Textual here: painting.py puts it on screen)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .text import clock_text
from .views import LIVE_CHART_S

if TYPE_CHECKING:
    from simulator.scenario import Scenario

__all__ = ["live_text", "replay_text", "timeline_lines"]


def live_text(title: str, now: int, total_requests: int, *, in_room: bool) -> str:
    """Over the live chart: whose run and what the chart counts."""
    seen = f"({total_requests:,} requests seen)"
    if not in_room:
        return (f"{title}: a router on real time; attempts per second on each provider "
                f"over the last {LIVE_CHART_S // 60} minutes {seen}")
    # a room's viewer: the trainer's run on its own clock, from its start
    since = ("since its start" if now <= LIVE_CHART_S * 1000 else
             f"over its last {LIVE_CHART_S // 60} minutes")
    return (f"{title}: the trainer's run at {clock_text(now)}; attempts per second on each "
            f"provider {since} {seen}")


def replay_text(scenario: Scenario, now: int, state: str, total_requests: int,
                screen_width: int, *, short: bool) -> str:
    """A replay's header (where it is, `state`: playing, paused, finished), its faults'
    bars and its description, cut to two lines on a `short` screen."""
    width = max(20, screen_width - 40)
    faults = [(f.name, f.at_ms, f.until_ms, str(f.target)) for f in scenario.faults]
    share = min(1.0, now / max(1, scenario.duration_ms))
    header = (f"{scenario.name}: {clock_text(now)} of {clock_text(scenario.duration_ms)} "
              f"({share:.0%}), {state}; {total_requests:,} requests")
    body = "\n".join(timeline_lines(faults, scenario.duration_ms, now, width))
    description = scenario.description.replace("\n", " ")
    gap = "\n\n"
    if short:  # a short screen keeps room for the chart
        room = 2 * max(20, screen_width - 4)
        if len(description) > room:
            description = description[:room - 20].rsplit(" ", 1)[0] + " … (enter: all)"
        gap = "\n"
    return f"{header}{gap}{body}{gap}{description}"


def timeline_lines(
    faults: Iterable[tuple[str, int, int, str]], duration_ms: int, now_ms: int, width: int
) -> list[str]:
    """One line per fault: its span over the scenario as a bar, with `│` at now."""
    width = max(10, width)
    cursor = min(width - 1, now_ms * width // max(1, duration_ms))
    lines = []
    for name, start, end, target in faults:
        a = start * width // max(1, duration_ms)
        b = max(a + 1, min(width, -(-min(end, duration_ms) * width // max(1, duration_ms))))
        bar = ["·"] * width
        for i in range(a, b):
            bar[i] = "█"
        bar[cursor] = "│"
        lines.append(f"{name[:18]:18} {''.join(bar)} {target}")
    ruler = ["─"] * width
    ruler[cursor] = "┼"
    lines.append(f"{'now ' + clock_text(now_ms):18} {''.join(ruler)}")
    return lines
