"""The overview pane: a few lines at 80x24, every layer and the events at once from
120x36 up, following the terminal's size live."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static, TabbedContent

from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.engine import BreakerState

from .console_helpers import console_app, piloted, say_yes
from .test_console_keys import operator_events

DASHBOARD = ("#dash-providers", "#dash-connections", "#dash-lockouts", "#dash-events")


def on_screen(app: Any, selector: str) -> bool:
    widget = app.query_one(selector)
    region = widget.region
    return (widget.display and region.width > 0 and region.height > 2
            and region.right <= app.size.width and region.bottom <= app.size.height)


async def test_a_large_terminal_opens_on_the_dashboard() -> None:
    async with piloted(scenario="429-storm", at_ms=45_000, size=(160, 48)) as (app, pilot):
        assert app.query_one(TabbedContent).active == "overview"
        assert all(on_screen(app, s) for s in DASHBOARD)
        assert app.query_one("#dash-providers", KeyedTable).row_count == 2
        assert app.query_one("#dash-connections", KeyedTable).row_count == 6
        summary = str(app.query_one("#overview-summary", Static).render())
        assert "1 OPEN (alpha)" in summary and "(1 hinted)" in summary


async def test_80x24_keeps_the_tabs_and_the_overview_is_a_summary() -> None:
    app, _ = console_app("429-storm", at_ms=45_000)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.query_one(TabbedContent).active == "providers"
        await pilot.press("0")
        await pilot.pause()
        # four summary lines, then a compact providers table that fits 80 columns
        lines = str(app.query_one("#overview-summary", Static).render()).splitlines()
        assert [line.split()[0] for line in lines] == [
            "breakers", "cooldowns", "lockouts", "traffic", "routes"]
        assert lines[-1] == "routes     chat priority"
        providers = app.query_one("#dash-providers", KeyedTable)
        assert on_screen(app, "#dash-providers") and providers.row_count == 2
        assert [str(c.label) for c in providers.columns.values()] == [
            "provider", "breaker", "fail/thr", "retry in", "last error, age"]
        assert providers.virtual_size.width <= providers.region.width
        assert not any(on_screen(app, s) for s in DASHBOARD[1:])
        await pilot.resize_terminal(160, 48)  # the dashboard follows the size
        await pilot.pause()
        assert all(on_screen(app, s) for s in DASHBOARD)
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert not any(on_screen(app, s) for s in DASHBOARD[1:])


async def test_keys_act_on_the_dashboard_table_in_focus() -> None:
    app, seen = console_app()
    engine = app.backend.engine
    assert engine.breaker_snapshot("openai").state is BreakerState.OPEN
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.focused is app.query_one("#dash-providers")
        await say_yes(pilot, "r")
        await app.workers.wait_for_complete()
        assert engine.breaker_snapshot("openai").state is BreakerState.CLOSED
        app.query_one("#dash-connections", KeyedTable).focus()
        await say_yes(pilot, "j", "e")
        await app.workers.wait_for_complete()
        assert engine.connection_snapshot("openai", "prod-2").disabled
    assert operator_events(seen) == [("reset_breaker", "openai", "tester"),
                                     ("disable", "openai/prod-2", "tester")]


def test_dashboard_snapshot_in_a_429_storm(snap_compare: Any) -> None:
    app, _ = console_app("429-storm", at_ms=45_000)
    assert snap_compare(app, terminal_size=(160, 48))
