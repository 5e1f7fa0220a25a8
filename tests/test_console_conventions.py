"""Pilot tests: the conventions SREs bring from other consoles (issue: keys, safe
defaults, sentences instead of raw errors)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from textual.containers import VerticalScroll
from textual.widgets import Input, Static
from textual.widgets._footer import FooterKey

from omniroute_tui.config.durations import format_ms
from omniroute_tui.console.actions import ACTIONS
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.model.text import countdown_text
from omniroute_tui.console.screens.modals import ConfirmScreen, HelpScreen
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.engine.events import CooldownEvent

from .console_helpers import console_app, piloted, say_yes
from .test_console_keys import operator_events


async def test_confirm_focuses_no_so_enter_cancels() -> None:
    app, seen = console_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("down", "o")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.focused is not None and app.screen.focused.id == "no"
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
    assert app.backend.engine.breaker_snapshot("anthropic").state is not BreakerState.OPEN
    assert operator_events(seen) == []


async def test_help_lists_every_key_and_scrolls_at_80x24() -> None:
    async with piloted("question_mark", size=(80, 24)) as (app, pilot):
        assert isinstance(app.screen, HelpScreen)
        listed = {key: what for key, what in app.screen.rows if key is not None}
        for action in ACTIONS:
            assert listed[action.key_display or action.key].startswith(action.help)
        scroll = app.screen.query_one("#keys-scroll", VerticalScroll)
        assert scroll.max_scroll_y > 0  # more keys than lines: it scrolls
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert scroll.scroll_y > 0
        await pilot.press("q")  # closes help, does not quit
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen) and app.is_running


async def test_footer_shows_help_and_quit_first_at_80_columns() -> None:
    app, _ = console_app()
    async with app.run_test(size=(80, 24)) as pilot:
        keys: list[FooterKey] = []
        for _ in range(100):  # a busy machine lays the footer out a few frames later
            await pilot.pause()
            keys = list(app.screen.query(FooterKey))
            if len(keys) >= 2 and all(k.region.width > 0 for k in keys[:2]):
                break
        assert [k.key_display for k in keys[:2]] == ["?", "q"]
        assert all(k.region.right <= 80 and k.region.width > 0 for k in keys[:2])


async def test_j_k_g_G_move_the_cursor() -> None:
    app, _ = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        table = app.query_one("#connections-table", KeyedTable)
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("g")
        assert table.cursor_row == 0


async def test_s_sorts_connections_by_cooldown_left_then_level() -> None:
    app, _ = console_app(at_ms=24_500)  # openai's keys are cooling in the storm
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        table = app.query_one("#connections-table", KeyedTable)
        model, now = app.model, app.backend.now_ms()

        def keys() -> list[tuple[str, str]]:
            return table.shown_keys  # type: ignore[return-value]

        config_order = keys()
        await pilot.press("s")
        await pilot.pause()
        left = [max(0, model.connections[k].cooling_until - now)
                for k in keys()]
        assert left == sorted(left, reverse=True) and left[0] > 0
        await pilot.press("s")
        await pilot.pause()
        levels = [model.connections[k].level for k in keys()]
        assert levels == sorted(levels, reverse=True)
        await pilot.press("s")
        await pilot.pause()
        assert keys() == config_order


async def test_a_filter_that_matches_nothing_says_so() -> None:
    async with piloted("2", "slash", *"zzz", "enter", size=(80, 24)) as (app, pilot):
        line = app.query_one("#no-matches", Static)
        assert line.has_class("-shown") and "no rows match 'zzz'" in str(line.render())
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert not line.has_class("-shown")


async def test_restart_keeps_pause_and_a_finished_replay_says_so() -> None:
    async with piloted(at_ms=200_000) as (app, pilot):  # the demo lasts 3 minutes
        status = str(app.query_one("#status", Static).render())
        assert "finished (R replays)" in status
        assert app.screen.heading == "scorecard: demo"  # type: ignore[attr-defined]
        await pilot.press("escape", "5")
        await pilot.pause()
        assert "finished: R replays it" in str(app.query_one("#timeline", Static).render())
        await say_yes(pilot, "R")
        await pilot.pause()
        assert app.backend.now_ms() == 0
        assert app.backend.replay is not None and app.backend.replay.paused


async def test_a_failed_action_names_the_action_target_and_reason() -> None:
    app, _ = console_app()

    class Unreachable:
        async def reset_breaker(self, provider: str, *, actor: str) -> None:
            raise OSError("the gateway at http://127.0.0.1:9 did not answer "
                          "(All connection attempts failed)")

    app.backend.operator = Unreachable()  # type: ignore[assignment]
    async with app.run_test(size=(100, 30)) as pilot:
        await say_yes(pilot, "r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        messages = [n.message for n in app._notifications]
    assert ("reset of the breaker of openai failed: the gateway at http://127.0.0.1:9 did "
            "not answer (All connection attempts failed)") in messages


async def test_forced_open_is_its_own_state_with_a_countdown_and_who() -> None:
    app, _ = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await say_yes(pilot, "down", "o")
        await app.workers.wait_for_complete()
        await pilot.pause()
        row = app.model.provider_rows(app.backend.now_ms())["anthropic"]
        assert row[1] == "⊘ FORCED OPEN" and row[3] == "5m"
        # who forced it: in the detail (a name in the cell would widen the column)
        _, pairs, _ = app.model.detail(Pane.PROVIDERS, "anthropic", app.backend.now_ms())
        assert ("forced by", "tester") in pairs
        await pilot.press("n")  # a virtual second later
        row = app.model.provider_rows(app.backend.now_ms())["anthropic"]
        assert row[3] == "4m59s"
        await say_yes(pilot, "r")
        await app.workers.wait_for_complete()
        row = app.model.provider_rows(app.backend.now_ms())["anthropic"]
        assert row[1] == "● CLOSED"


def test_cooldowns_say_what_they_wait_for() -> None:
    app, _ = console_app("429-storm", at_ms=35_000)  # the storm's 429s carry Retry-After
    rows = app.model.connection_rows(app.backend.now_ms())
    assert rows["alpha", "a1"][2].endswith(" hinted")
    model = app.model
    model.on_event(CooldownEvent(40_000, "alpha", "a2", FailureKind.QUOTA_EXHAUSTED, 0,
                                 3_640_000, None))
    assert model.connection_rows(40_000)["alpha", "a2"][2] == "◷ 1h00m quota"
    # a success elsewhere resets the level while the quota wait goes on: not a "lift"
    lifted = CooldownEvent(41_000, "alpha", "a2", None, 0, 3_640_000, None)
    model.on_event(lifted)
    assert model.events[-1].line == ("cooldown alpha/a2: backoff level reset to 0, still "
                                   "cooling until 60:40.0")
    assert model.connection_rows(41_000)["alpha", "a2"][2] == "◷ 59m59s quota"


async def test_q_quits() -> None:
    async with piloted("q", size=(80, 24)) as (app, pilot):
        assert not app.is_running


MARKUP_NAMES = """\
name: "[/x] names"
description: "[red]not red[/red] [/x]"
duration: 2m
providers:
  alpha: {models: ["[b]m"], latency: 50ms, connections: [a1]}
  beta: {models: [m], latency: 50ms, connections: [b1]}
routes:
  "[/x]": {targets: ["alpha/[b]m", beta/m]}
traffic:
  - {route: "[/x]", rate: 5/s}
faults:
  - {name: "[/x]", target: "alpha/*/[b]m", error: quota, at: 1s}
"""


async def test_names_that_look_like_markup_are_shown_as_written(tmp_path: Path) -> None:
    from omniroute_tui.console.cli import _parser, build_app
    from omniroute_tui.console.widgets.panels import FaultBanner

    path = tmp_path / "markup.yaml"
    path.write_text(MARKUP_NAMES)
    app: Any = build_app(_parser().parse_args(["--scenario", str(path), "--speed", "50"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        for key in ("0", "1", "2", "3", "4", "5", "6", "7"):
            await pilot.press(key)
            await pilot.pause(0.1)
            if key in "1236":
                await pilot.press("enter")  # the row's details
                await pilot.pause(0.1)
                await pilot.press("escape")
        await pilot.press("3", "slash", *"[/x", "enter")
        await pilot.pause(0.2)
        await pilot.press("ctrl+p", *"[/", "escape")
        await pilot.pause(0.2)
        assert "[/x] on alpha/*/[b]m" in str(app.query_one(FaultBanner).render())
        assert app.is_running


def test_countdowns_round_up_to_whole_seconds() -> None:
    """A 5 s rest reads `5s` from its start, as a lesson's text says (it read `4s` 0.1 s
    in), and `1s` in its last second."""
    assert [countdown_text(ms) for ms in (5000, 4900, 4001, 4000, 999, 1, 61_500)] == [
        "5s", "5s", "5s", "4s", "1s", "1s", "1m02s"]
    app, _ = console_app(at_ms=40_100)
    model, now = app.model, app.backend.now_ms()
    rows = model.connection_rows(now)
    cooling = [(key, v) for key, v in model.connections.items() if v.cooling_until > now]
    assert cooling
    for (provider, conn), view in cooling:
        left = view.cooling_until - now
        assert rows[provider, conn][2].startswith(f"◷ {countdown_text(left)} ")
        assert countdown_text(left) == format_ms(math.ceil(left / 1000) * 1000)


async def test_the_requests_cursor_stays_on_its_request_as_rows_arrive() -> None:
    """Enter opens the request the cursor was put on, not the one that slid under it."""
    app, _ = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("6", "j", "j")
        await pilot.pause()
        table = app.query_one("#requests-table", KeyedTable)
        chosen = table.selected_key
        assert chosen is not None
        for _ in range(3):
            app.backend.step(100)
            app.refresh_view()
            await pilot.pause()
        assert table.selected_key == chosen
        assert table.row_index(chosen) != 2  # newer requests came above it


async def test_the_filter_box_shows_the_current_panes_filter() -> None:
    async with piloted("2", "slash", "p", "r", "o", "d", "enter", "3") as (app, pilot):
        box = app.query_one("#filter", Input)
        assert box.value == "" and not box.has_class("-shown")  # lockouts: no filter
        await pilot.press("2")
        await pilot.pause()
        assert box.value == "prod" and box.has_class("-shown")


async def test_f1_opens_help_and_f10_quits() -> None:
    async with piloted("f1") as (app, pilot):
        assert isinstance(app.screen, HelpScreen)
        assert ("tab", "the next table of the dashboard (shift+tab: the one before)"
                ) in app.screen.rows
        await pilot.press("f1")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f10")
        await pilot.pause()
        assert app.return_code == 0


async def test_the_command_line_completes_and_runs_panes_and_actions() -> None:
    """`:` (as k9s): `con` + tab completes to `connections`, enter shows it; an action's
    name runs it, a destructive one asking first; an unknown word is said to be."""
    async with piloted(":", "c", "o", "n", "tab") as (app, pilot):
        box = app.query_one("#command", Input)
        assert box.has_focus and box.value == "connections"
        await pilot.press("enter")
        await pilot.pause()
        assert app.active_pane == Pane.CONNECTIONS and not box.has_class("-shown")
        await pilot.press(":", *"reset_breaker", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.press(":", *"nope", "enter")
        await pilot.pause()
        assert any("no pane or action called 'nope'" in n.message for n in app._notifications)
        await pilot.press(":", "escape")
        await pilot.pause()
        assert not box.has_class("-shown") and app.active_pane == Pane.CONNECTIONS
