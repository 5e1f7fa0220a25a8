"""The herd, drawn: attempts per second on each provider over the run, the naive
policy's beside them on a replay, fault windows as lines and breaker OPEN spans shaded.

Each provider has its own marker as well as its colour (state never rests on colour
alone): filled for the resilient engine, the same shape hollow for the naive policy. The
key to that, to the shading and to the fault lines is the title, short enough to stay at
80 columns; the legend holds one entry per provider's line, none for the shading."""

from __future__ import annotations

from collections.abc import Callable

from textual.events import Resize
from textual.geometry import Size
from textual_plotext import PlotextPlot

from ..model.console_model import HerdChart

__all__ = ["MARKERS", "HerdChartPlot", "key", "round_ticks"]

# plotext's colour names, one a provider; its naive line in the same colour
_COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red")
#: each provider's (resilient, naive) markers: one shape, filled and hollow
MARKERS = (("●", "○"), ("■", "□"), ("▲", "△"), ("◆", "◇"), ("★", "☆"), ("✚", "+"))
#: the chart's title: what the markers, the shading and the lines mean (fits 80 columns)
def key(compared: str = "naive") -> str:
    """The chart's title: what filled and hollow markers, shading and bars mean."""
    return f"filled ● resilient, hollow ○ {compared}; ░ breaker OPEN; │ fault start/end"


def round_ticks(top: float, count: int = 5) -> list[float]:
    """Ticks at a round step (1, 2 or 5 times a power of ten) from 0 to at least `top`,
    at most about `count` of them."""
    if top <= 0:
        return [0.0]
    raw = top / max(1, count)
    power = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while power > raw:
        power /= 10
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks, tick = [], 0.0
    while tick < top + step / 2:
        ticks.append(round(tick, 6))
        tick += step
    return ticks


class HerdChartPlot(PlotextPlot):
    DEFAULT_CSS = """
    HerdChartPlot { height: 1fr; min-height: 8; }
    """

    _make: Callable[[int], HerdChart] | None = None
    xlabel = "scenario seconds"
    #: what the plot shows now: the chart, its x label and the widget's size
    _drawn: tuple[HerdChart, str, Size] | None = None

    def show(self, make: Callable[[int], HerdChart], *, xlabel: str = "scenario seconds"
             ) -> None:
        """Draw what `make(points)` gives for this widget's width, now and on resizes;
        the same chart at the same size is not drawn again (plotext builds the whole
        plot and Rich reads it back from escape codes: most of a paint)."""
        self._make = make
        self.xlabel = xlabel
        self._redraw()

    def on_resize(self, event: Resize) -> None:
        self._redraw()

    def _redraw(self) -> None:
        size = self.size
        if self._make is None or size.width <= 0:  # no size yet: the resize draws it
            return
        chart = self._make(max(10, size.width - 12))
        if (chart, self.xlabel, size) != self._drawn:
            self._drawn = (chart, self.xlabel, size)
            self.draw(chart)

    def draw(self, chart: HerdChart) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(key(chart.compared_policy))
        top = max([1.0, *(max(ys, default=0.0) for _, _, ys in [*chart.lines,
                                                                  *chart.compared])])
        for _, start, end in chart.open_spans:
            # no legend entry: the title explains the shading, once for every span
            plt.plot([start, end], [top, top], fillx=True, color="gray", marker="░")
        for i, (label, xs, ys) in enumerate(chart.lines):
            plt.plot(xs, ys, label=label, color=_COLOURS[i % len(_COLOURS)],
                     marker=MARKERS[i % len(MARKERS)][0])
        for i, (label, xs, ys) in enumerate(chart.compared):
            if any(ys):
                plt.plot(xs, ys, label=label, color=_COLOURS[i % len(_COLOURS)],
                         marker=MARKERS[i % len(MARKERS)][1])
        for _, start, end in chart.faults:
            plt.vline(start, "red")
            plt.vline(end, "red")
        plt.xlim(chart.start_s, chart.end_s)
        plt.ylim(0, top * 1.05)
        # a tick every other row at most: two on one row would show either label
        rows = max(2, self.size.height - 5)  # less the title, the axes and the label
        plt.yticks(round_ticks(top, max(1, min(5, rows // 2))))
        span = chart.end_s - chart.start_s
        plt.xticks([chart.start_s + t for t in round_ticks(span, 8) if t <= span])
        plt.xlabel(self.xlabel)
        self.refresh()
