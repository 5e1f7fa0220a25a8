"""The herd, drawn: the scenario pane charts attempts per second on each provider, with
the naive policy replayed alongside, fault windows and breaker OPEN spans."""

from __future__ import annotations

from omniroute_tui.console.screens.modals import DetailScreen
from omniroute_tui.console.widgets.herd_chart import HerdChartPlot

from .console_helpers import console_app


def test_the_chart_shows_the_herd_the_engine_prevents() -> None:
    app, seen = console_app("429-storm", at_ms=120_000)
    backend, model = app.backend, app.model
    chart = model.herd_chart(120_000, 120, compared=backend.comparison,
                             faults=[("storm", 30_000, 270_000)])
    lines = {label: ys for label, _, ys in chart.lines}
    naive = {label: ys for label, _, ys in chart.compared}
    # one point a second here: the storm runs from 30 s and alpha's breaker is OPEN from
    # 41 s; from then on alpha sees its probes alone, one a Retry-After window (10 s)
    resilient_alpha = sum(lines["alpha"][42:120])
    naive_alpha = sum(naive["alpha naive"][42:120])
    on_alpha = [e for e in seen if e.TYPE == "attempt" and e.provider == "alpha"  # type: ignore[attr-defined]
                and 42_000 <= e.t < 120_000]
    assert resilient_alpha == len(on_alpha) == 7
    assert all(e.probe for e in on_alpha)  # type: ignore[attr-defined]
    assert naive_alpha > 20 * 78 * 3  # 20 req/s, each retried against the storm
    assert sum(lines["beta"][42:120]) > 20 * 78 * 0.9  # the fallback takes the traffic
    assert chart.faults == [("storm", 30.0, 120.0)]
    (provider, start, end), *_ = chart.open_spans
    assert provider == "alpha" and 41 < start < 42 and end > start


async def test_the_scenario_pane_draws_the_chart_and_tells_the_whole_lesson() -> None:
    app, _ = console_app("429-storm", at_ms=120_000)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("5")
        await pilot.pause()
        chart = app.query_one(HerdChartPlot)
        assert chart.region.height >= 8
        assert app.backend.comparison is not None
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert " ".join(app.screen.history).startswith("Every key of the primary provider")
        assert ("storm", "alpha from 00:30.0") in app.screen.current


def test_the_naive_replay_keeps_step_with_the_resilient_one() -> None:
    app, _ = console_app("429-storm", at_ms=45_000)
    backend = app.backend
    naive = backend.comparison
    assert naive is not None
    seconds = max(s for counts in naive.counts.values() for s in counts)
    assert seconds == 44  # attempts up to the last second both replays reached
