"""The herd, drawn: the scenario pane charts attempts per second on each provider, with
the naive policy replayed alongside, fault windows and breaker OPEN spans."""

from __future__ import annotations

import re

import pytest
from textual.widgets import Static

from omniroute_tui.console.model.views import HerdChart
from omniroute_tui.console.screens.modals import DetailScreen
from omniroute_tui.console.widgets.herd_chart import (
    MARKERS,
    HerdChartPlot,
    key,
    legend,
    legend_lines,
    round_ticks,
)

from .console_helpers import console_app, piloted, settle


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
    assert chart.faults == [("storm", 30.0, 270.0)]  # as scheduled: it is still on
    (provider, start, end), *_ = chart.open_spans
    assert provider == "alpha" and 41 < start < 42 and end > start


async def test_the_scenario_pane_draws_the_chart_and_tells_the_whole_lesson() -> None:
    async with piloted("5", scenario="429-storm", at_ms=120_000) as (app, pilot):
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


def test_round_ticks() -> None:
    assert round_ticks(23.0) == [0, 5, 10, 15, 20, 25]
    assert round_ticks(120.0, 8) == [0, 20, 40, 60, 80, 100, 120]
    assert round_ticks(600.0, 8) == [0, 100, 200, 300, 400, 500, 600]
    assert round_ticks(1.0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert round_ticks(0.0) == [0.0]


def _canvas(chart: HerdChartPlot) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", chart.plt.build())


async def test_each_provider_has_its_own_marker_and_one_legend_entry_a_series() -> None:
    async with piloted("5", scenario="429-storm", at_ms=300_000, size=(80, 24)) as (app, pilot):
        chart = app.query_one(HerdChartPlot)
        shown = str(chart.query_one("#herd-key", Static).render()).splitlines()
        # the key stays at 80 columns: filled resilient, hollow naive, the shading, faults
        assert shown == [key(), "●● alpha  ■■ beta  ○○ alpha naive  □□ beta naive"]
        spans = app.model.herd_chart(300_000, 60).open_spans
        assert len(spans) > 1  # alpha opened more than once ...
        assert "\n".join(shown).count("OPEN") == 1  # ... and the shading is explained once
        markers = {MARKERS[0][0], MARKERS[1][0], MARKERS[0][1], MARKERS[1][1]}
        assert all(m in _canvas(chart) for m in markers)  # alpha ● ○, beta ■ □


@pytest.mark.parametrize(("scenario", "at_ms", "size"), [
    ("429-storm", 300_000, (80, 24)), ("hour-long-mixed", 1_200_000, (120, 36)),
    ("hour-long-mixed", 1_200_000, (160, 48))])
async def test_the_legend_never_covers_the_data(scenario: str, at_ms: int,
                                                size: tuple[int, int]) -> None:
    """A busy run draws a line per provider and policy (eight in hour-long-mixed): the
    legend is lines of its own above the plot, never rows over its top left corner."""
    async with piloted("5", scenario=scenario, at_ms=at_ms, size=size) as (app, pilot):
        chart = app.query_one(HerdChartPlot)
        # on a busy machine the first paint of the chart may come after the first pause
        await settle(pilot, lambda: chart._make is not None and chart.plot.region.height
                     and str(chart.query_one("#herd-key", Static).render()).strip(),
                     tries=400)
        drawn = chart._make(max(10, chart.plot.size.width - 12)) if chart._make else None
        assert drawn is not None
        entries = [entry for entry, _ in legend(drawn)]
        assert len(entries) == len(drawn.lines) + sum(1 for *_, ys in drawn.compared
                                                      if any(ys))
        assert len(entries) == (4 if scenario == "429-storm" else 8)
        text = str(chart.query_one("#herd-key", Static).render())
        assert all(text.count(entry) == 1 for entry in entries)  # one entry a line drawn
        legend_box = chart.query_one("#herd-key").region
        assert legend_box.bottom <= chart.plot.region.y  # above the plot, not over it
        assert chart.plot.region.height >= 8
        canvas = _canvas(chart)
        assert not any(label in canvas for label, _, _ in drawn.lines)  # no name in the plot


async def test_the_engines_line_is_drawn_over_the_naive_one() -> None:
    """In the demo's first seconds both policies send the same: the engine's ● is what
    shows where they meet, the naive ○ only where the naive one sends more."""
    async with piloted("5", scenario="429-storm", at_ms=15_000, size=(80, 24)) as (app, _):
        chart = app.query_one(HerdChartPlot)
        same = HerdChart([("alpha", [0.0, 5.0, 10.0], [4.0, 4.0, 4.0])],
                         [("alpha", [0.0, 5.0, 10.0], [4.0, 4.0, 4.0])], [], [], 10)
        chart.draw(same)
        canvas = _canvas(chart)
        assert MARKERS[0][0] in canvas and MARKERS[0][1] not in canvas
        more = HerdChart([("alpha", [0.0, 5.0, 10.0], [4.0, 4.0, 4.0])],
                         [("alpha", [0.0, 5.0, 10.0], [4.0, 40.0, 4.0])], [], [], 10)
        chart.draw(more)
        canvas = _canvas(chart)
        assert MARKERS[0][0] in canvas and MARKERS[0][1] in canvas


def test_the_legend_wraps_between_entries() -> None:
    entries = [("●● openai", "cyan"), ("■■ anthropic", "magenta"), ("○○ openai naive", "cyan")]
    assert legend_lines(entries, 30) == [entries[:2], entries[2:]]
    assert legend_lines(entries, 8) == [[e] for e in entries]  # never split mid-entry
    assert legend_lines([], 80) == []


def test_attached_the_chart_is_the_last_ten_minutes_live() -> None:
    from omniroute_tui.console.model.console_model import ConsoleModel
    from omniroute_tui.engine.events import AttemptEvent

    model = ConsoleModel({}, lambda: 0)
    model.load_state_document({"breakers": [
        {"provider": "alpha", "state": "CLOSED", "failures": 0, "cycles": 0, "threshold": 5,
         "opened_at": None, "open_for_ms": 0}], "connections": [], "lockouts": []})
    now = 1_800_000_000_000  # epoch milliseconds, as a gateway's events carry
    for second in range(0, 900):  # 15 minutes, 3 attempts a second
        for _ in range(3):
            model.on_event(AttemptEvent(t=now - 900_000 + second * 1000, request="r",
                                        provider="alpha", connection="a1", model="m", n=1,
                                        probe=False))
    chart = model.live_chart(now, 60)
    (label, xs, ys), = chart.lines
    assert label == "alpha" and chart.start_s == -600 and chart.end_s == 0
    assert xs[0] == -600 and xs[-1] == -10 and len(xs) == 60
    assert all(y == 3.0 for y in ys)


async def test_the_live_charts_key_names_no_policy_and_no_fault_it_does_not_draw() -> None:
    """On real time no naive policy is replayed and no fault is scheduled: the key says
    what the markers and the shading are, not `hollow ○ naive` or fault lines."""
    from omniroute_tui.console.model.console_model import ConsoleModel

    model = ConsoleModel({}, lambda: 0)
    model.load_state_document({"breakers": [
        {"provider": "alpha", "state": "CLOSED", "failures": 0, "cycles": 0, "threshold": 5,
         "opened_at": None, "open_for_ms": 0}], "connections": [], "lockouts": []})
    chart = model.live_chart(1_800_000_000_000, 60)
    assert chart.compared == [] and chart.compared_policy == ""
    assert key(chart.compared_policy) == "● attempts, a marker a provider; ░ breaker OPEN"
    assert key() == ("filled ● resilient, hollow ○ naive; ░ breaker OPEN; "
                     "│ fault start/end")


@pytest.mark.parametrize(("at_ms", "lines"), [(40_000, 1), (70_000, 2)])
async def test_a_fault_still_on_has_its_start_line_and_no_end_line(at_ms: int,
                                                                   lines: int) -> None:
    """The demo's storm runs from 15 s to 60 s: at 40 s only its start is drawn (an end
    line at the right edge said it had ended now), at 70 s both."""
    async with piloted("5", at_ms=at_ms, size=(120, 36)) as (app, pilot):
        top = _canvas(app.query_one(HerdChartPlot)).splitlines()[0]
        assert top.count("┬") == lines  # each fault line meets the plot's top border


async def test_a_finished_replay_shows_its_scorecard_once_and_s_again() -> None:
    """At the run's end the scorecard comes up by itself: the engine beside naive, per
    provider and per fault, the numbers `omniroute-sim run` reports for the same run."""
    from simulator.scenario import Policy, load_scenario
    from simulator.virtual import run_virtual

    from .console_helpers import SCENARIOS_DIR

    async with piloted(scenario="429-storm", at_ms=290_000) as (app, pilot):
        await pilot.press("S")
        assert not isinstance(app.screen, DetailScreen)  # not before the end
        replay = app.backend.replay
        assert replay is not None
        replay.step(20_000)  # past the end, its requests answered
        app.refresh_view()
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        title, fields, lines = app.screen.heading, dict(app.screen.current), app.screen.history
        assert title == "scorecard: 429-storm"
        scenario = load_scenario(SCENARIOS_DIR / "429-storm.yaml")
        engine = run_virtual(scenario, Policy.RESILIENT)
        naive = run_virtual(scenario, Policy.NAIVE)
        assert fields["requests"] == f"{engine['requests']:,} · {naive['requests']:,}"
        assert fields["attempts"].startswith(f"{engine['attempts']:,} (")
        for fault, stats in engine["faults"].items():
            assert any(line.startswith(f"  {fault}: engine {stats['attempts']:,} attempts")
                       for line in lines), (fault, lines)
        await pilot.press("escape")
        app.refresh_view()
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)  # once by itself
        await pilot.press("S")
        assert isinstance(app.screen, DetailScreen)
