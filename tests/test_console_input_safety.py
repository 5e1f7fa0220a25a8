"""Keys that arrive together (a paste, keys bunched by a laggy SSH link) never act on what
is behind a filter box or a dialog: `/` and the text after it land in the filter, and a
destructive action is confirmed only by a key pressed once its dialog has been shown for
CONFIRM_GUARD_S."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.keys import _character_to_key
from textual.widgets import Input, TabbedContent

from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.screens.modals import CONFIRM_GUARD_S, ConfirmScreen
from omniroute_tui.engine import OperatorEvent

from .console_helpers import console_app, settle

#: every pane, as its key
PANE_KEYS = {Pane.OVERVIEW: "0", Pane.PROVIDERS: "1", Pane.CONNECTIONS: "2",
             Pane.LOCKOUTS: "3", Pane.EVENTS: "4", Pane.SCENARIO: "5", Pane.REQUESTS: "6",
             Pane.AUDIT: "7"}
#: filter texts made of the keys of destructive actions and their answers
FILTER_TEXTS = ("key", "eyo", "rcyCR", "prod-1 y")
#: a destructive key and its answer in one burst
ACT_AND_ANSWER = (("e", "y"), ("r", "y"), ("o", "y"), ("c", "y"), ("C", "y"),
                  ("R", "y"), ("e", "enter"), ("r", "space", "y"))


class FakeClock:
    """The dialogs' clock: it moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keys_of(text: str) -> list[str]:
    return ["space" if ch == " " else ch for ch in text]


def state_of(app: Any) -> tuple[object, ...]:
    """Everything an operator action or a restart would change."""
    engine = app.backend.engine
    model = app.model
    return (app.backend, app.backend.now_ms(),
            tuple(engine.breaker_snapshot(p).state for p in model.providers),
            tuple(c.disabled for c in model.connections.values()), len(model.lockouts),
            tuple(model.audit))


def burst(app: Any, *keyed: events.Event) -> None:
    """Events posted together, as a terminal delivers a paste or a bunch of keys: none is
    handled before the last is in."""
    driver = app._driver
    for event in keyed:
        event.set_sender(app)
        driver.send_message(event)


def key(name: str) -> events.Key:
    """A key as a terminal sends it: its name and the character it types."""
    char = {"slash": "/", "space": " ", "enter": "\r"}.get(
        name, name if len(name) == 1 else None)
    return events.Key(_character_to_key(name) if len(name) == 1 else name, char)


async def close_filter(app: Any, pilot: Any) -> None:
    await pilot.press("escape")
    await pilot.pause()
    if app._pane_filters.get(app.active_pane):
        await pilot.press("escape")
        await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])
@pytest.mark.parametrize("pane", list(PANE_KEYS))
async def test_bursts_on_every_pane_act_on_nothing(pane: Pane, size: tuple[int, int]) -> None:
    app, seen = console_app()
    app.clock = FakeClock()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.press(PANE_KEYS[pane])
        await settle(pilot, lambda: app.active_pane == pane)
        assert app.query_one(TabbedContent).active == pane
        before = state_of(app)
        box = app.query_one("#filter", Input)
        for text in FILTER_TEXTS:
            await pilot.press("slash", *keys_of(text))  # typed in one burst
            await pilot.pause()
            assert box.value == text, (pane, text)
            assert box.has_focus
            await close_filter(app, pilot)
            burst(app, key("slash"), events.Paste(text))  # `/` and a paste
            await pilot.pause()
            assert box.value == text, (pane, text, "pasted")
            await close_filter(app, pilot)
            burst(app, *map(key, ["slash", *keys_of(text)]))  # a bunch from the wire
            await pilot.pause()
            assert box.value == text, (pane, text, "bunched")
            await close_filter(app, pilot)
        for keys in ACT_AND_ANSWER:
            await pilot.press(*keys)
            await pilot.pause()
            burst(app, *map(key, keys))
            await pilot.pause()
            await pilot.pause()
            if isinstance(app.screen, ConfirmScreen):  # asked and not answered: say no
                app.screen.action_answer(False)
                await pilot.pause()
        assert state_of(app) == before
        assert app.query_one(TabbedContent).active == pane
    assert [e for e in seen if isinstance(e, OperatorEvent)] == []


async def test_a_dialog_answers_only_after_its_guard_time() -> None:
    """Yes counts only once the dialog has been on screen CONFIRM_GUARD_S; No is focused
    and answers at once."""
    app, seen = console_app()
    clock = app.clock = FakeClock()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert dialog.focused is not None and dialog.focused.id == "no"
        clock.now += CONFIRM_GUARD_S * 0.9
        await pilot.press("y")
        await pilot.pause()
        assert app.screen is dialog  # too soon: not an answer
        await pilot.click("#yes")
        await pilot.pause()
        assert app.screen is dialog
        clock.now += CONFIRM_GUARD_S * 0.2
        await pilot.press("y")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
    assert [(e.action, e.target) for e in seen if isinstance(e, OperatorEvent)] == [
        ("reset_breaker", "openai")]


async def test_no_answers_at_once() -> None:
    app, seen = console_app()
    app.clock = FakeClock()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("r", "n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("r", "enter")  # No has the focus
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
    assert [e for e in seen if isinstance(e, OperatorEvent)] == []


async def test_slash_typed_in_the_filter_is_text() -> None:
    app, _ = console_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("2", "slash", "o", "p", "e", "n", "a", "i", "slash", "p")
        await pilot.pause()
        assert app.query_one("#filter", Input).value == "openai/p"


async def test_a_burst_after_a_colon_lands_in_the_command_line() -> None:
    app, seen = console_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        before = state_of(app)
        burst(app, key(":"), *map(key, "eyrc"))
        await pilot.pause()
        assert app.query_one("#command", Input).value == "eyrc"
        await pilot.press("escape")
        await pilot.pause()
        burst(app, key(":"), events.Paste("key"))
        await pilot.pause()
        assert app.query_one("#command", Input).value == "key"
        assert state_of(app) == before
    assert [e for e in seen if isinstance(e, OperatorEvent)] == []
