"""The herd, drawn: attempts per second on each provider over the run, the naive
policy's beside them on a replay, fault windows as lines and breaker OPEN spans shaded."""

from __future__ import annotations

from collections.abc import Callable

from textual.events import Resize
from textual_plotext import PlotextPlot

from ..model.console_model import HerdChart

__all__ = ["HerdChartPlot"]

# plotext's colour names, one a provider; the naive policy's line is dotted in the same one
_COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red")


class HerdChartPlot(PlotextPlot):
    DEFAULT_CSS = """
    HerdChartPlot { height: 1fr; min-height: 8; }
    """

    _make: Callable[[int], HerdChart] | None = None

    def show(self, make: Callable[[int], HerdChart]) -> None:
        """Draw what `make(points)` gives for this widget's width, now and on resizes."""
        self._make = make
        self._redraw()

    def on_resize(self, event: Resize) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = self.size.width
        if self._make is not None and width > 0:  # no size yet: the resize draws it
            self.draw(self._make(max(10, width - 12)))

    def draw(self, chart: HerdChart) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(f"attempts per second: resilient (solid) vs {chart.compared_policy} (dots); "
                  "░ breaker OPEN, │ fault start and end")
        top = max([1.0, *(max(ys, default=0.0) for _, _, ys in [*chart.lines,
                                                                  *chart.compared])])
        for provider, start, end in chart.open_spans:
            xs = [start, end]
            plt.plot(xs, [top, top], fillx=True, color="gray", marker="░",
                     label=f"{provider} OPEN")
        for i, (label, xs, ys) in enumerate(chart.lines):
            plt.plot(xs, ys, label=label, color=_COLOURS[i % len(_COLOURS)],
                     marker="braille")
        for i, (label, xs, ys) in enumerate(chart.compared):
            if any(ys):
                plt.plot(xs, ys, label=label, color=_COLOURS[i % len(_COLOURS)],
                         marker="dot")
        for _, start, end in chart.faults:
            plt.vline(start, "red")
            plt.vline(end, "red")
        plt.xlim(0, chart.end_s)
        plt.ylim(0, top * 1.05)
        plt.xlabel("scenario seconds")
        self.refresh()
