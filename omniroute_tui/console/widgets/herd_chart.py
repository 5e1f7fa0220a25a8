"""The herd, drawn: attempts per second on each provider over the run, the naive
policy's beside them on a replay, fault windows as lines and breaker OPEN spans shaded.

Each provider has its own marker as well as its colour (state never rests on colour
alone): filled for the resilient engine, the same shape hollow for the naive policy. The
key to that, to the shading and to the fault lines, and the legend (one entry per line
drawn, none for the shading) are lines of their own above the plot: a legend inside it
covered the data of a busy run (a row per series, from its top left corner)."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize
from textual.geometry import Size
from textual.widgets import Static
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from ...config.hidden import visible
from ..model.views import HerdChart

__all__ = ["MARKERS", "HerdChartPlot", "key", "legend", "legend_lines", "round_ticks"]

# plotext's colour names, one a provider; its naive line in the same colour
_COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red")
#: each provider's (resilient, naive) markers: one shape, filled and hollow
MARKERS = (("●", "○"), ("■", "□"), ("▲", "△"), ("◆", "◇"), ("★", "☆"), ("✚", "+"))
#: the chart's title: what the markers, the shading and the lines mean (fits 80 columns)
def key(compared: str = "naive") -> str:
    """The chart's title: what filled and hollow markers, shading and bars mean; on real
    time (`compared` empty) no policy is replayed beside the engine and no fault is
    scheduled, so only the markers and the shading."""
    if not compared:
        return "● attempts, a marker a provider; ░ breaker OPEN"
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


def legend(chart: HerdChart) -> list[tuple[str, str]]:
    """One (entry, colour) per line the chart draws: `●● alpha`, then the compared
    policy's `○○ alpha naive` (a line with no attempt is not drawn; the engine's are
    drawn last, over the compared ones)."""
    entries = [(f"{MARKERS[i % len(MARKERS)][0] * 2} {visible(label)}",
                _COLOURS[i % len(_COLOURS)]) for i, (label, _, _) in enumerate(chart.lines)]
    entries += [(f"{MARKERS[i % len(MARKERS)][1] * 2} {visible(label)}",
                 _COLOURS[i % len(_COLOURS)])
                for i, (label, _, ys) in enumerate(chart.compared) if any(ys)]
    return entries


def legend_lines(entries: list[tuple[str, str]], width: int) -> list[list[tuple[str, str]]]:
    """The legend's entries laid out in lines of at most `width` columns (two spaces
    between entries; an entry is never split, one wider than a line has its own)."""
    lines: list[list[tuple[str, str]]] = []
    used = 0
    for entry in entries:
        size = len(entry[0])
        if lines and used + 2 + size <= width:
            lines[-1].append(entry)
            used += 2 + size
        else:
            lines.append([entry])
            used = size
    return lines


class _Plot(PlotextPlot):
    """The plot itself: it tells the chart when its size changes (the points a line
    gets, the ticks that fit)."""

    def __init__(self, on_resize: Callable[[], None]) -> None:
        super().__init__()
        self._on_resize = on_resize

    def on_resize(self, event: Resize) -> None:
        self._on_resize()


class HerdChartPlot(Vertical):
    """The key and the legend, each on lines of their own, over the plot."""

    DEFAULT_CSS = """
    HerdChartPlot { height: 1fr; min-height: 8; }
    HerdChartPlot > #herd-key { height: auto; padding: 0 1; }
    HerdChartPlot > _Plot { height: 1fr; min-height: 5; }
    """

    _make: Callable[[int], HerdChart] | None = None
    xlabel = "scenario seconds"
    _shown_key: tuple[str, list[list[tuple[str, str]]]] | None = None
    #: what the plot shows now: the chart, its x label and the plot's size
    _drawn: tuple[HerdChart, str, Size] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="herd-key", markup=False)
        yield _Plot(self._redraw)

    @property
    def plot(self) -> PlotextPlot:
        return self.query_one(_Plot)

    @property
    def plt(self) -> Plot:
        return self.plot.plt

    def show(self, make: Callable[[int], HerdChart], *, xlabel: str = "scenario seconds"
             ) -> None:
        """Draw what `make(points)` gives for this widget's width, now and on resizes;
        the same chart at the same size is not drawn again (plotext builds the whole
        plot and Rich reads it back from escape codes: most of a paint)."""
        self._make = make
        self.xlabel = xlabel
        self._redraw()

    def _redraw(self) -> None:
        size = self.plot.size
        if self._make is None or size.width <= 0:  # no size yet: the resize draws it
            return
        chart = self._make(max(10, size.width - 12))
        if (chart, self.xlabel, size) != self._drawn:
            self._drawn = (chart, self.xlabel, size)
            self.draw(chart)

    def draw(self, chart: HerdChart) -> None:
        self._show_key(chart)
        plot = self.plot
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        top = max([1.0, *(max(ys, default=0.0) for _, _, ys in [*chart.lines,
                                                                  *chart.compared])])
        for _, start, end in chart.open_spans:
            # the key explains the shading, once for every span
            plt.plot([start, end], [top, top], fillx=True, color="gray", marker="░")
        # the compared policy's first, the engine's over them: where both have a point
        # in a cell, the engine's marker is the one shown
        for i, (_, xs, ys) in enumerate(chart.compared):
            if any(ys):
                plt.plot(xs, ys, color=_COLOURS[i % len(_COLOURS)],
                         marker=MARKERS[i % len(MARKERS)][1])
        for i, (_, xs, ys) in enumerate(chart.lines):
            plt.plot(xs, ys, color=_COLOURS[i % len(_COLOURS)],
                     marker=MARKERS[i % len(MARKERS)][0])
        for _, start, end in chart.faults:
            plt.vline(start, "red")
            if end <= chart.end_s:  # a fault still on has no end line (it read as one now)
                plt.vline(end, "red")
        plt.xlim(chart.start_s, chart.end_s)
        plt.ylim(0, top * 1.05)
        # a tick every other row at most: two on one row would show either label
        rows = max(2, plot.size.height - 4)  # less the axes and the label
        plt.yticks(round_ticks(top, max(1, min(5, rows // 2))))
        span = chart.end_s - chart.start_s
        plt.xticks([chart.start_s + t for t in round_ticks(span, 8) if t <= span])
        plt.xlabel(self.xlabel)
        plot.refresh()

    def _show_key(self, chart: HerdChart) -> None:
        """The key, then the legend in lines that fit the chart's width (written again
        only when they change: an update lays the pane out again)."""
        lines = legend_lines(legend(chart), max(10, self.size.width - 2))
        shown = (chart.compared_policy, lines)
        if shown == self._shown_key:
            return
        self._shown_key = shown
        text = Text(key(chart.compared_policy), no_wrap=True, overflow="ellipsis")
        for line in lines:
            text.append("\n")
            for n, (entry, colour) in enumerate(line):
                text.append(("  " if n else "") + entry, style=colour)
        self.query_one("#herd-key", Static).update(text)
