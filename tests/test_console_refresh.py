"""The refresh path's economies show the same screen: cached cells and rows, an events log
appended without Rich's layout, a status line repainted without a layout of the screen,
the herd chart drawn once a second, the paint clock's beat and full garbage collections
between paints (what they cost: bench/console_refresh.py)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable, RichLog

from omniroute_tui.console.app import FRAME_S, MIN_WAIT_S, next_beat
from omniroute_tui.console.collector import ROOM_S, PacedCollections
from omniroute_tui.console.model.event_lines import LogEntry
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.widgets.herd_chart import HerdChartPlot
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.console.widgets.panels import EventLog, PlainStatic, StatusBar

from .console_helpers import piloted

COLUMNS = (("provider", None), ("connection", None), ("cooldown", 16))


class _Widgets(App[None]):
    def compose(self) -> ComposeResult:
        yield StatusBar("status", id="status")
        yield PlainStatic("one\ntwo", id="summary")
        yield KeyedTable(Pane.CONNECTIONS, COLUMNS, id="table")
        yield EventLog(id="ours")
        yield RichLog(id="rich", max_lines=500, wrap=False, markup=False, highlight=False)


def _layouts(widget: Any) -> list[bool]:
    """Record the `layout` of each refresh the widget asks for."""
    asked: list[bool] = []
    refresh = widget.refresh

    def recorded(*regions: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("layout", False))
        return refresh(*regions, **kwargs)

    widget.refresh = recorded
    return asked


async def test_the_events_log_holds_what_richlog_would_have_written() -> None:
    lines = [LogEntry(1000 * i, "console",
                      f"failure p{i % 5}/k{i}: 429 → 全角 {'x' * (i % 90)}")
             for i in range(700)]
    app = _Widgets()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        ours, rich = app.query_one("#ours", EventLog), app.query_one("#rich", RichLog)
        for batch in (lines[:300], lines[300:600], lines[600:]):  # past the 500 they keep
            ours.show(batch)
            # the time column is drawn as a line is painted, not held in the line
            rich.write(Text("\n".join(entry.line for entry in batch), no_wrap=True, end=""),
                       animate=False)
        await pilot.pause()
        assert [list(strip) for strip in ours.lines] == [list(strip) for strip in rich.lines]
        assert [s.cell_length for s in ours.lines] == [s.cell_length for s in rich.lines]
        assert len(ours.lines) == 500
        stamp = ours._stamp_width()
        assert ours.virtual_size == rich.virtual_size + (stamp, 0)
        assert list(ours.times) == [entry.t for entry in lines[-500:]]
        assert ours._start_line == rich._start_line
        for y in (0, 250, 499):  # the text a painted line shows after its time column
            assert ours._render_line(y, 0, 60).text == rich._render_line(y, 0, 60).text


async def test_a_status_line_repaints_without_a_layout_and_the_same_text_not_at_all() -> None:
    app = _Widgets()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        status, summary = app.query_one(StatusBar), app.query_one("#summary", PlainStatic)
        status_asked, summary_asked = _layouts(status), _layouts(summary)
        status.update("status, later")  # one line high whatever it says
        status.update("status, later")  # the same words: nothing to paint
        summary.update("three\nfour")  # as many lines, none too wide for the widget
        summary.update("three\nfour\nfive")  # a line more: the screen's layout changes
        summary.update("x" * 200 + "\nfour\nfive")  # a line that wraps: so may the height
        assert status_asked == [False]
        assert summary_asked == [False, True, True]
        await pilot.pause()
        assert str(status.render()) == "status, later"
        assert summary.region.height == 4  # the long line on two rows


async def test_a_table_renders_again_only_the_cells_that_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[tuple[int, int]] = []
    render = DataTable._render_cell

    def counted(self: DataTable[str], row: int, column: int, *args: Any, **kwargs: Any) -> Any:
        rendered.append((row, column))
        return render(self, row, column, *args, **kwargs)

    monkeypatch.setattr(DataTable, "_render_cell", counted)
    app = _Widgets()
    async with app.run_test(size=(100, 40)) as pilot:
        table = app.query_one(KeyedTable)
        rows = {f"p/k{i}": ("p", f"k{i}", "✓ ready") for i in range(20)}
        table.sync(rows)
        await pilot.pause()
        rendered.clear()
        table.sync({**rows, "p/k3": ("p", "k3", "◷ 1.9s hinted")})
        await pilot.pause()
        # the one cell, and the cursor's row of the fixed column (its own style): not
        # the table's 60 cells as DataTable renders after any update_cell
        assert (3, 2) in rendered and len(rendered) <= 2
        line = table.render_line(4)  # the header, then k0..k3
        assert "◷ 1.9s hinted" in line.text and "k3" in line.text
        assert "✓ ready" in table.render_line(3).text
        assert table.shown_row("p/k3")[2] == "◷ 1.9s hinted"
        table.notify_style_update()  # a new theme, say: nothing rendered before stays
        assert not table._cells and not table._rows


async def test_a_growing_column_widens_for_a_longer_cell() -> None:
    app = _Widgets()
    async with app.run_test(size=(100, 40)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync({"p/a": ("p", "a", "–")})
        await pilot.pause()
        narrow = table.columns[next(iter(table.columns))].get_render_width(table)
        table.sync({"p/a": ("provider-with-a-long-name", "a", "–")})
        await pilot.pause()
        assert table.columns[next(iter(table.columns))].get_render_width(table) > narrow


async def test_the_herd_chart_is_drawn_by_whole_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []
    draw = HerdChartPlot.draw

    def counted(self: HerdChartPlot, chart: Any) -> None:
        drawn.append(chart.end_s)
        draw(self, chart)

    monkeypatch.setattr(HerdChartPlot, "draw", counted)
    async with piloted("5", scenario="429-storm", at_ms=45_000) as (app, pilot):
        drawn.clear()
        for _ in range(10):  # five paints a second, for two seconds of the storm
            app.backend.replay.step(200)  # type: ignore[union-attr]
            app.refresh_view()
            await pilot.pause()
        assert drawn == [46, 47]  # once each second, when its attempts are all in


def test_the_paint_clock_keeps_its_beat() -> None:
    # a paint done in time: the next beat is a frame after this one
    assert next_beat(10.0, 10.03) == pytest.approx(10.0 + FRAME_S)
    # a tick that came 80 ms late does not push the next one
    assert next_beat(10.0, 10.08 + 0.03) == pytest.approx(10.0 + FRAME_S)
    # a paint that ran past the next beat: the input gets its turn, then the beat again
    assert next_beat(10.0, 10.25) == pytest.approx(10.25 + MIN_WAIT_S)
    assert FRAME_S <= 1 / 6  # six paints a second: a gap under 250 ms leaves 83 for jitter


def test_full_collections_wait_for_the_console_and_come_back_after() -> None:
    before = gc.get_threshold()
    first, second = PacedCollections(), PacedCollections()
    first.start()
    second.start()  # two consoles in one process (a room and a viewer in a test)
    try:
        young, middle, oldest = gc.get_threshold()
        assert (young, middle) == before[:2] and oldest > 10**6  # Python's own: off
        assert gc.get_freeze_count() > 0  # what the console holds once up: left out
        gc.collect()
        assert not first.due and not first.collect(1.0)  # nothing to do yet
        for _ in range(before[2] + 1):  # as many middle collections as Python waits for
            gc.collect(1)
        assert first.due
        assert not first.collect(ROOM_S / 2)  # the next paint is too close: later
        assert first.collect(ROOM_S)
        assert not first.due
        for _ in range(3 * before[2] + 1):  # put off paint after paint: runs anyway
            gc.collect(1)
        assert first.collect(0.0) and not first.due
        first.stop()
        assert gc.get_threshold()[2] == oldest  # the other console still runs
    finally:
        first.stop()  # once is enough: a second stop changes nothing
        second.stop()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    assert not second.due
