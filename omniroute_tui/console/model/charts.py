"""The attempts charts: the scenario pane's herd chart over a run, and the live chart
of a router on real time or a room's run, drawn from the model's series."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .views import LIVE_CHART_S, AttemptSeries, HerdChart

if TYPE_CHECKING:
    from .console_model import ConsoleModel

__all__ = ["herd_chart", "live_chart"]

def live_chart(model: ConsoleModel, now: int, bins: int, window_s: int = LIVE_CHART_S, *,
               run_clock: bool = False, compared: AttemptSeries | None = None,
               faults: Iterable[tuple[str, int, int]] = ()) -> HerdChart:
    """Attempts per second on each provider over the last `window_s` seconds: on
    real time (a router, an attached gateway) x in seconds before now; on a run's
    clock (a room's replay) in the run's seconds, from its start while it is younger
    than the window, with the trainer's compared policy and fault lines when the room
    sends them."""
    end_s = max(1, -(-now // 1000))
    since = max(0, end_s - window_s) if run_clock else end_s - window_s
    shift = 0 if run_clock else end_s  # real time: x counts back from now
    lines = []
    for name in model.providers:
        xs, ys = model.series.binned(name, end_s, bins, since_s=since)
        lines.append((name, [x - shift for x in xs], ys))
    spans = [(name, start / 1000 - shift, (now if until < 0 else until) / 1000 - shift)
             for name, v in model.providers.items() for start, until in v.open_spans
             if until < 0 or until / 1000 > since]
    spans = [(name, max(a, since - shift), b) for name, a, b in spans]
    other = [] if compared is None else [
        (f"{name} {compared.policy}",
         *compared.binned(name, end_s, bins, since_s=since)) for name in model.providers]
    windows = [(name, at / 1000 - shift, until / 1000 - shift) for name, at, until in faults
               if at <= now and until / 1000 > since]
    return HerdChart(lines, other, spans, windows, end_s - shift,
                     "" if compared is None else compared.policy, start_s=since - shift)


def herd_chart(model: ConsoleModel, now: int, bins: int, *, compared: AttemptSeries | None = None,
               faults: Iterable[tuple[str, int, int]] = ()) -> HerdChart:
    """The scenario pane's chart up to `now`, in at most `bins` points a line."""
    end_s = max(1, -(-now // 1000))
    lines = [(name, *model.series.binned(name, end_s, bins)) for name in model.providers]
    other = [] if compared is None else [
        (f"{name} {compared.policy}", *compared.binned(name, end_s, bins))
        for name in model.providers]
    spans = [(name, start / 1000, (now if until < 0 else until) / 1000)
             for name, v in model.providers.items() for start, until in v.open_spans]
    windows = [(name, at / 1000, until / 1000) for name, at, until in faults if at <= now]
    return HerdChart(lines, other, spans, windows, end_s,
                     "naive" if compared is None else compared.policy)
