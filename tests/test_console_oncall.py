"""The console on call: keys that work on every screen, filters that stay in their pane,
read-only that shows, a display that freezes, a log that holds still while read, the
providers at 80 columns, a request found by its id, and an attach that waits."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Static, TabbedContent
from textual.widgets._footer import FooterKey
from textual.widgets.data_table import ColumnKey

from omniroute_tui.config.durations import format_ms
from omniroute_tui.console.commands import ConsoleCommands
from omniroute_tui.console.model.attach import fetch_state
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.painting import MIDDLE_PROVIDERS
from omniroute_tui.console.screens.modals import DetailScreen, HelpScreen
from omniroute_tui.console.widgets.herd_chart import HerdChartPlot
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.console.widgets.panels import EventLog
from omniroute_tui.console.widgets.scrollbars import WholeCellScrollBar

from .console_helpers import console_app, piloted, say_yes, screen_lines, settle
from .gateway_helpers import TOKEN, free_port, running_gateway
from .test_console_attach import attach_args


def status(app: Any) -> str:
    return str(app.query_one("#status").render())


def labels(table: KeyedTable) -> list[str]:
    return [str(c.label) for c in table.columns.values()]


async def test_keys_4_and_5_switch_panes_on_the_dashboard() -> None:
    async with piloted(scenario="429-storm", at_ms=45_000, size=(160, 48)) as (app, pilot):
        assert app.query_one(TabbedContent).active == "overview"
        for key, pane in [("4", "events"), ("5", "scenario"), ("0", "overview"),
                          ("4", "events")]:
            await pilot.press(key)
            await pilot.pause()
            assert app.query_one(TabbedContent).active == pane
        assert app.focused is app.query_one("#events-log")


async def test_no_match_line_shows_above_the_filter_box() -> None:
    async with piloted("2", "slash", *"nothing-like-this", "enter", at_ms=40_000) as (app, pilot):
        line, box = app.query_one("#no-matches", Static), app.query_one("#filter", Input)
        assert line.display and box.display
        assert "no rows match 'nothing-like-this'" in str(line.render())
        assert line.region.height == 1 and line.region.bottom <= box.region.y


async def test_after_filtering_the_events_the_keys_go_to_the_pane() -> None:
    async with piloted("4", "slash", *"breaker", "enter", at_ms=40_000) as (app, pilot):
        log = app.query_one("#events-log", EventLog)
        assert app.focused is log and 0 < log.matched < log.seen == len(app.model.events)
        newest = format_ms(app.backend.now_ms() - app.model.events[-1][0])
        # the count before the filter is every line the log was given, as without one
        assert str(log.border_title) == (f"Events [{log.seen}] newest {newest} ago "
                                         f"/breaker {log.matched} of {log.seen}")
        await pilot.press("1")  # a pane key, not a letter typed into the filter
        assert app.query_one(TabbedContent).active == "providers"
        assert app.query_one("#filter", Input).value == ""  # this pane's filter: none
        await pilot.press("4")
        assert app.query_one("#filter", Input).value == "breaker"


async def test_a_filter_stays_in_its_pane_and_its_title_says_so() -> None:
    async with piloted("2", "slash", *"prod", "enter", at_ms=40_000) as (app, pilot):
        conns = app.query_one("#connections-table", KeyedTable)
        assert conns.row_count == 3  # openai's prod-1..3 of the demo's 7
        assert str(conns.border_title) == "Conns [7] 1 cooling /prod 3 of 7"
        await pilot.press("1")
        await pilot.pause()
        providers = app.query_one("#providers-table", KeyedTable)
        assert providers.row_count == 3 and str(providers.border_title) == (
            "Providers [3] 1 open")
        await pilot.press("4")
        await pilot.pause()
        assert app.query_one("#events-log", EventLog).matched > 10
        await pilot.press("2", "escape")  # escape clears this pane's filter
        await pilot.pause()
        assert conns.row_count == 7 and str(conns.border_title) == "Conns [7] 1 cooling"


async def test_escape_goes_back_to_the_pane_before() -> None:
    app, _ = console_app(at_ms=40_000)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2", "3", "escape")
        assert app.query_one(TabbedContent).active == "connections"
        await pilot.press("escape")
        assert app.query_one(TabbedContent).active == "providers"


async def test_read_only_badge_first_and_its_actions_out_of_the_footer() -> None:
    async with piloted(read_only=True, size=(80, 24)) as (app, pilot):
        assert status(app).startswith("READ-ONLY │ sim 00:40.0")
        keys = {k.key for k in app.query_one(Footer).query(FooterKey)}
        assert {"question_mark", "q", "slash"} <= keys
        assert not keys & {"r", "c", "o", "e", "C"}
        await pilot.press("question_mark")
        shown = "\n".join(what for _, what in app.screen.rows)
        assert "(refused: read-only)" in shown and "(asks first)" not in shown


async def test_footer_is_never_cut_mid_word() -> None:
    for width in (80, 100, 120, 160):
        async with piloted(size=(width, 30)) as (app, pilot):
            keys = list(app.query_one(Footer).query(FooterKey))
            palette = next(k for k in keys if k.has_class("-command-palette"))
            for key in keys:
                if key is not palette:
                    assert key.region.right <= palette.region.x, (width, key.description)


async def test_z_freezes_the_display_while_the_data_goes_on() -> None:
    async with piloted(at_ms=40_000) as (app, pilot):
        table = app.query_one("#providers-table", KeyedTable)
        before = table.shown_row("openai")

        def shown_by_the_model() -> list[str]:
            row = app.model.provider_rows(app.backend.now_ms())["openai"]
            return [row[i] for i in MIDDLE_PROVIDERS]  # what 100 columns show

        assert before == shown_by_the_model()
        await pilot.press("z")
        assert "FROZEN 0ms (z)" in status(app)
        app.backend.step(20_000)  # type: ignore[attr-defined]
        app.refresh_view()
        assert shown_by_the_model() != before  # the data moved on
        assert table.shown_row("openai") == before  # the display did not
        await pilot.press("z")
        assert "FROZEN" not in status(app)
        assert table.shown_row("openai") == shown_by_the_model()


async def test_the_events_log_holds_still_while_scrolled_back() -> None:
    async with piloted("4", at_ms=40_000) as (app, pilot):
        log = app.query_one("#events-log", EventLog)
        await settle(pilot, lambda: log.max_scroll_y > 0)
        await pilot.press("g")  # to the top, to read
        await pilot.pause()
        held = len(log.lines)
        for _ in range(20):
            await pilot.press("n")  # twenty virtual seconds: new events arrive
        await pilot.pause()
        assert log.scroll_y == 0 and len(log.lines) == held
        await pilot.press("G")  # back at the end: it catches up
        app.refresh_view()
        await pilot.pause()
        assert len(log.lines) > held
        await pilot.press("g", "slash", *"breaker", "enter")  # a new filter starts afresh
        await pilot.pause()
        assert log.lines and log.matched == len(log.lines)


async def test_retry_in_keeps_its_width_when_a_breaker_is_forced() -> None:
    async with piloted() as (app, pilot):
        table = app.query_one("#providers-table", KeyedTable)

        def width() -> int:
            return table.columns[ColumnKey("retry in")].get_render_width(table)

        before = width()
        await say_yes(pilot, "down", "o")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert table.shown_row("anthropic")[3] == "5m" and width() == before
        await pilot.press("7")
        await pilot.pause()
        audit = app.query_one("#audit-table", KeyedTable)
        assert audit.get_row_at(0)[2:] == ["force_open", "anthropic", "open for 5m"]


def test_counts_read_as_words_and_failures_stop_at_the_threshold() -> None:
    app, _ = console_app(at_ms=110_000)
    now = app.backend.now_ms()
    assert app.model.overview_lines(now)[2] == (
        "lockouts   2 keys locked on 1 model (mistral/large)")
    app, _ = console_app(at_ms=40_000)
    now = app.backend.now_ms()
    engine = app.backend.engine  # type: ignore[attr-defined]
    snapshot = engine.breaker_snapshot("openai")
    assert snapshot.failures > 5  # the failures in flight when it tripped
    row = app.model.provider_rows(now)["openai"]
    assert row[1] == "○ OPEN" and row[2] == "5/5"
    _, pairs, _ = app.model.detail(Pane.PROVIDERS, "openai", now)  # type: ignore[misc]
    assert ("fail/thr", f"{snapshot.failures}/5") in pairs


def test_last_error_and_budget_say_how_old_they_are() -> None:
    app, seen = console_app("429-storm", at_ms=45_000)
    now = app.backend.now_ms()
    failed = [e for e in seen if e.TYPE == "result" and e.provider == "alpha"  # type: ignore[attr-defined]
              and e.kind is not None]  # type: ignore[attr-defined]
    row = app.model.provider_rows(now)["alpha"]
    assert row[5] == f"rate_limited (429) {(now - failed[-1].t) // 1000}s"
    app.backend.step(30_000)  # type: ignore[attr-defined]
    later = app.model.provider_rows(app.backend.now_ms())["alpha"]
    assert later[5] != row[5] and later[5].startswith("rate_limited (429) ")


async def test_providers_fit_80_columns_and_w_shows_every_column() -> None:
    async with piloted(size=(80, 24)) as (app, pilot):
        table = app.query_one("#providers-table", KeyedTable)
        assert labels(table) == ["provider", "breaker", "fail/thr", "retry in",
                                 "last error, age"]
        assert table.virtual_size.width <= table.region.width
        assert table.fixed_columns == 1  # the name stays put when the columns scroll
        await pilot.press("w")
        await pilot.pause()
        assert "skipped" in labels(table) and table.row_count == 3
        assert table.virtual_size.width > table.region.width


async def test_the_dashboard_lockouts_name_their_provider() -> None:
    async with piloted(at_ms=110_000, size=(160, 48)) as (app, pilot):
        locks = app.query_one("#dash-lockouts", KeyedTable)
        assert labels(locks)[:3] == ["provider", "connection", "model"]
        assert locks.get_row_at(0)[:3] == ["mistral", "m-1", "large"]


async def test_sort_marks_its_column() -> None:
    async with piloted() as (app, pilot):
        table = app.query_one("#providers-table", KeyedTable)
        assert not any("▼" in label for label in labels(table))
        await pilot.press("s")
        await pilot.pause()
        assert [label for label in labels(table) if "▼" in label] == ["fail/thr ▼"]
        await pilot.press("s")
        await pilot.pause()
        assert [label for label in labels(table) if "▼" in label] == ["breaker ▼"]


async def test_the_detail_is_wide_on_a_wide_screen_and_j_k_scroll_it() -> None:
    async with piloted("1", "enter", size=(160, 48)) as (app, pilot):
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.query_one("#dialog").region.width == 120
    app, _ = console_app(at_ms=110_000)  # openai has cycled OPEN and HALF_OPEN by then
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        history = app.screen.query_one("#history", VerticalScroll)
        assert history.max_scroll_y > 0
        await pilot.press("j", "j")
        assert history.scroll_y == 2
        await pilot.press("k")
        assert history.scroll_y == 1
        assert app.query_one("#providers-table", KeyedTable).cursor_row == 0  # not moved


async def test_the_details_keys_and_history_fit_80x24() -> None:
    app, _ = console_app(at_ms=110_000)  # openai: 15 fields and a history of transitions
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        dialog = app.screen.query_one("#dialog")
        shown = screen_lines(app)[dialog.region.y:dialog.region.bottom]
        # the keys whole on the dialog's bottom border, the history's first lines above
        assert "j k scroll · escape closes" in shown[-1]
        assert sum("→" in line for line in shown) >= 3
        assert "00:23.8 CLOSED → DEGRADED (failures, 3 failures)" in "\n".join(shown)


async def test_help_lists_this_panes_keys_first() -> None:
    app, _ = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = app.screen.rows
        assert rows[0] == (None, "On this pane (connections):")
        assert [key for key, _ in rows[1:6]] == ["enter", "s", "c", "e", "/"]


async def test_a_help_line_too_long_for_80_columns_wraps_under_its_description() -> None:
    """Not under the keys: the column of keys stays clear to read down."""
    app, _ = console_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "question_mark")
        await pilot.pause()
        lines = screen_lines(app)
        at = next(i for i, line in enumerate(lines) if "s  sort the rows:" in line)
        column = lines[at].index("sort the rows:")
        wrapped = lines[at + 1]
        assert wrapped[column - 9:column].strip() == ""  # the keys' column, blank
        assert wrapped[column:].startswith("the column)")


async def test_palette_entries_carry_their_keys() -> None:
    async with piloted() as (app, pilot):
        titles = [title for title, _, _ in ConsoleCommands(app.screen)._entries()]
        assert {"Providers (1)", "Reset (r)", "Freeze (z)", "Filter (/)"} <= set(titles)


async def test_ctrl_c_quits() -> None:
    async with piloted("ctrl+c", size=(80, 24)) as (app, pilot):
        assert not app.is_running


def test_scrollbars_draw_no_glyph_that_reads_as_a_sparkline() -> None:
    """At 80x24 a table's scrollbar is the last two columns, beside a dialog: its thumb's
    eighth-block ends (`▃▃`) read as stray sparkline bars."""
    segments = WholeCellScrollBar.render_bar(size=17, virtual_size=96, window_size=17,
                                             position=78, thickness=2)
    assert {s.text for s in segments.segments} <= {"  "}


async def test_a_request_is_found_by_its_id() -> None:
    app, seen = console_app(at_ms=40_000)
    ids = [e.id for e in seen if e.TYPE == "request"]  # type: ignore[attr-defined]
    wanted = ids[-30]
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("6", "slash", *wanted, "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.heading == f"request {wanted}"
        assert any("answered the client" in line for line in app.screen.history)
        await pilot.press("escape")
        table = app.query_one("#requests-table", KeyedTable)
        assert table.selected_key == wanted
        await pilot.press("escape", "slash", *"no-such-id", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)
        assert "among the last 200" in str(app.query_one("#no-matches", Static).render())


async def test_attach_to_a_gateway_that_is_down_waits_and_says_so(tmp_path: Path) -> None:
    from omniroute_tui.console.cli import build_app

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    app: Any = build_app(attach_args(f"http://127.0.0.1:{free_port()}", token_file))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, lambda: app.backend.retry_in_s is not None)
        app.refresh_view()
        assert status(app).startswith("WAITING for the gateway, retry in")
        assert app.is_running
        await pilot.press("5")  # real time: the live herd chart, not an empty pane
        await pilot.pause()
        assert "over the last 10 minutes" in str(app.query_one("#timeline").render())
        assert app.query_one(HerdChartPlot)._make is not None
        await pilot.press("space")  # real time: nothing to pause, the display freezes
        assert "FROZEN" in status(app)


async def test_a_lost_gateway_leaves_a_mark_in_the_events(tmp_path: Path) -> None:
    from omniroute_tui.console.cli import build_app

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with running_gateway(tmp_path) as gw:
        # fetched off the loop that serves the gateway: else the fetch waits out its 5 s
        # timeout on a gateway that cannot answer, and the console opens waiting for it
        state = await asyncio.to_thread(fetch_state, gw.url, TOKEN)
        app: Any = build_app(attach_args(gw.url, token_file), attach_state=state)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, lambda: app.backend.connected)
            await gw.server.stop()
            await settle(pilot, lambda: not app.backend.connected)
            lines = [e.line for e in app.model.events if e.kind == "console"]
            assert len(lines) == 1 and lines[0].startswith(
                f"link: DISCONNECTED from {gw.url}")
            await asyncio.sleep(0)


async def test_the_details_fields_line_up_however_long_a_name() -> None:
    app, _ = console_app(at_ms=55_000)  # openai's fields end with its skip reasons
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("1", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        lines = str(app.screen.query_one("#current", Static).render()).splitlines()
        names = [name for name, _ in app.screen.current]
        assert "skipped: circuit_open" in names and "last error, age" in names
        width = max(map(len, names))
        assert {line.index(name) + len(name) for line, name in zip(lines, names,
                                                                   strict=True)} == {width}


async def test_help_and_detail_scroll_with_whole_cell_scrollbars() -> None:
    app, _ = console_app(at_ms=110_000)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        scroll = app.screen.query_one("#keys-scroll", VerticalScroll)
        assert scroll.max_scroll_y > 0
        assert scroll.vertical_scrollbar.renderer is WholeCellScrollBar
        await pilot.press("escape", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        history = app.screen.query_one("#history", VerticalScroll)
        assert history.vertical_scrollbar.renderer is WholeCellScrollBar
