"""The herd in the terminal: attempts per second on the faulted provider, resilient
against naive, drawn with plotext under the summary when stdout is a terminal."""

from __future__ import annotations

from collections import Counter

import plotext as plt  # type: ignore[import-untyped]
from rich.text import Text

from .scenario import Policy, Scenario
from .timeline import Timeline

__all__ = ["faulted_provider", "herd_chart"]

_COLORS = {Policy.RESILIENT: "green", Policy.NAIVE: "red"}


def faulted_provider(scenario: Scenario, timelines: dict[str, Timeline]) -> str | None:
    """The provider the first fault aims at; for a fault on every provider, the one the
    naive (else resilient) policy sent most attempts to while faults were on."""
    for fault in scenario.faults:
        if fault.target.provider is not None:
            return fault.target.provider
    timeline = timelines.get(Policy.NAIVE) or timelines.get(Policy.RESILIENT)
    if not scenario.faults or timeline is None:
        return None
    during = Counter({
        name: sum(n for s, n in counts.items()
                  if any(f.at_ms <= s * 1000 < f.until_ms for f in scenario.faults))
        for name, counts in timeline.attempts.items()
    })
    return during.most_common(1)[0][0] if during else None


def herd_chart(scenario: Scenario, timelines: dict[str, Timeline], width: int = 80,
               height: int = 14) -> Text | None:
    """The chart as rich Text, or None when there is no faulted provider or no run."""
    provider = faulted_provider(scenario, timelines)
    shown = [p for p in (Policy.RESILIENT, Policy.NAIVE) if p in timelines]
    if provider is None or not shown:
        return None
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    for policy in shown:
        timeline = timelines[policy]
        # a point a column at most (the axis labels take about 12)
        xs, ys = timeline.binned(timeline.attempts[provider], max(10, width - 12))
        plt.plot(xs, ys, label=policy, marker="braille", color=_COLORS[policy])
    for fault in scenario.faults:
        if fault.target.provider in (None, provider):
            plt.vline(fault.at_ms / 1000, "orange")
            plt.vline(fault.until_ms / 1000, "orange")
    plt.title(f"attempts per second on {provider} (faults between the orange lines)")
    plt.xlabel("seconds")
    return Text.from_ansi(plt.build())
