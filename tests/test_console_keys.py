"""Pilot tests: each key of the console does what it says."""

from __future__ import annotations

from pathlib import Path

from textual.command import CommandPalette
from textual.widgets import TabbedContent

from omniroute_tui.console.screens.modals import ConfirmScreen, DetailScreen, HelpScreen
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.engine import BreakerState, OperatorEvent
from simulator.scenario import SCENARIOS_DIR

from .console_helpers import console_app, say_yes, settle


def operator_events(seen):  # type: ignore[no-untyped-def]
    return [(e.action, e.target, e.actor) for e in seen if isinstance(e, OperatorEvent)]


async def test_number_keys_switch_panes() -> None:
    app, _ = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        for key, pane in [("2", "connections"), ("3", "lockouts"), ("4", "events"),
                          ("5", "scenario"), ("6", "requests"), ("7", "audit"),
                          ("0", "overview"), ("1", "providers")]:
            await pilot.press(key)
            assert app.query_one(TabbedContent).active == pane


async def test_pause_step_and_speed() -> None:
    app, _ = console_app()
    async with app.run_test() as pilot:
        backend = app.backend
        assert backend.paused
        await pilot.press("n")
        assert backend.now_ms() == 41_000
        await pilot.press("space")
        assert not backend.paused
        await pilot.press("space")
        assert backend.paused
        await pilot.press("plus")
        assert backend.speed == 5.0
        await pilot.press("minus", "minus")
        assert backend.speed == 1.0


async def test_reset_breaker_confirmed_is_audited() -> None:
    app, seen = console_app()
    engine = app.backend.engine
    assert engine.breaker_snapshot("openai").state is BreakerState.OPEN
    async with app.run_test() as pilot:
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        assert "openai" in app.screen.question
        await say_yes(pilot)
        await pilot.pause()
        assert engine.breaker_snapshot("openai").state is BreakerState.CLOSED
    assert operator_events(seen) == [("reset_breaker", "openai", "tester")]


async def test_confirmation_can_be_cancelled() -> None:
    app, seen = console_app()
    async with app.run_test() as pilot:
        await pilot.press("r", "n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("r", "escape")
        await pilot.pause()
    assert app.backend.engine.breaker_snapshot("openai").state is BreakerState.OPEN
    assert operator_events(seen) == []


async def test_read_only_refuses_with_a_reason() -> None:
    app, seen = console_app(read_only=True)
    async with app.run_test() as pilot:
        await pilot.press("r")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("read-only" in n.message for n in app._notifications)
    assert app.backend.engine.breaker_snapshot("openai").state is BreakerState.OPEN
    assert operator_events(seen) == []


async def test_force_open_the_selected_provider() -> None:
    app, seen = console_app()
    async with app.run_test() as pilot:
        await say_yes(pilot, "down", "o")
        await pilot.pause()
    assert app.backend.engine.breaker_snapshot("anthropic").state is BreakerState.OPEN
    assert operator_events(seen) == [("force_open", "anthropic", "tester")]


async def test_clear_cooldown_and_toggle_connection() -> None:
    app, seen = console_app(at_ms=24_500)
    engine = app.backend.engine
    async with app.run_test() as pilot:
        await pilot.press("2")
        table = app.query_one("#connections-table", KeyedTable)
        table.focus()
        assert table.selected_key == ("openai", "prod-1")
        assert engine.connection_snapshot("openai", "prod-1").cooling_until > 24_500
        await say_yes(pilot, "c")
        await pilot.pause()
        assert engine.connection_snapshot("openai", "prod-1").cooling_until <= 24_500
        await say_yes(pilot, "e")
        await pilot.pause()
        assert engine.connection_snapshot("openai", "prod-1").disabled
        await say_yes(pilot, "e")
        await pilot.pause()
        assert not engine.connection_snapshot("openai", "prod-1").disabled
    assert [a for a, _, _ in operator_events(seen)] == ["clear_cooldown", "disable", "enable"]


async def test_clear_one_lockout_then_all_of_a_provider() -> None:
    app, seen = console_app(at_ms=110_000)
    engine = app.backend.engine
    before = {(s.connection, s.model) for s in engine.lockout_snapshots("mistral")}
    assert len(before) == 2
    async with app.run_test() as pilot:
        await pilot.press("3")
        table = app.query_one("#lockouts-table", KeyedTable)
        table.focus()
        first = table.selected_key
        await say_yes(pilot, "c")
        await pilot.pause()
        left = {(s.connection, s.model) for s in engine.lockout_snapshots("mistral")}
        assert len(left) == 1 and isinstance(first, tuple) and first[1:] not in left
        await say_yes(pilot, "C")
        await pilot.pause()
        assert engine.lockout_snapshots("mistral") == ()
    assert [a for a, _, _ in operator_events(seen)] == ["clear_lockouts", "clear_lockouts"]


async def test_a_model_named_with_a_slash_is_acted_on_whole(tmp_path: Path) -> None:
    """A row's key is the tuple of its names, never text split again: a lockout of the
    model `org/large` is cleared, and the dialog and the audit name it whole."""
    scenario = tmp_path / "slashes.yaml"
    scenario.write_text((SCENARIOS_DIR / "demo.yaml").read_text()
                        .replace("[large, small]", "[org/large, small]")
                        .replace("mistral/large", "mistral/org/large")
                        .replace("mistral/*/large", "mistral/*/org/large"))
    app, seen = console_app(scenario, at_ms=110_000)
    engine = app.backend.engine
    before = {(s.connection, s.model) for s in engine.lockout_snapshots("mistral")}
    assert before == {("m-1", "org/large"), ("m-2", "org/large")}
    async with app.run_test() as pilot:
        await pilot.press("3")
        table = app.query_one("#lockouts-table", KeyedTable)
        table.focus()
        assert table.select_key(("mistral", "m-2", "org/large"))
        await pilot.press("c")
        await settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Clear the lockout of mistral/m-2/org/large?"
        await say_yes(pilot)
        await pilot.pause()
        assert {(s.connection, s.model) for s in engine.lockout_snapshots("mistral")} == {
            ("m-1", "org/large")}
    assert [(a, target) for a, target, _ in operator_events(seen)] == [
        ("clear_lockouts", "mistral/m-2/org/large")]


async def test_filter_keeps_matching_rows() -> None:
    app, _ = console_app()
    async with app.run_test() as pilot:
        await pilot.press("2", "slash")
        await pilot.press(*"mistral", "enter")
        await pilot.pause()
        table = app.query_one("#connections-table", KeyedTable)
        assert table.row_count == 2
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert table.row_count == 7


async def test_help_detail_and_palette() -> None:
    app, _ = console_app()
    async with app.run_test() as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        assert "openai" in app.screen.heading
        assert any("CLOSED → DEGRADED" in line or "→ OPEN" in line
                   for line in app.screen.history)
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"jump to connection mistral/m-2", "enter")
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "connections"
        assert app.query_one("#connections-table", KeyedTable).selected_key == ("mistral", "m-2")


async def test_restart_replays_from_the_start() -> None:
    app, _ = console_app()
    async with app.run_test() as pilot:
        await say_yes(pilot, "R")
        await pilot.pause()
        assert app.backend.now_ms() == 0
        assert app.model.total_requests == 0


async def test_event_log_is_bounded() -> None:
    app, _ = console_app("hour-long-mixed", at_ms=20 * 60_000)
    assert len(app.model.events) == 500
    async with app.run_test() as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert len(app.query_one("#events-log").lines) <= 500


def test_core_and_console_model_do_not_import_textual() -> None:
    import subprocess
    import sys

    code = ("import sys, omniroute_tui.engine, omniroute_tui.router, omniroute_tui.store, "
            "omniroute_tui.console.model.console_model, omniroute_tui.console.model.backends, "
            "simulator.virtual; "
            "sys.exit(1 if any(m.split('.')[0] == 'textual' for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
