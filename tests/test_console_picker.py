"""The scenario picker: at start when no scenario was named, on `p` and `:pick_scenario`."""

from __future__ import annotations

import argparse

from textual.widgets import OptionList

from omniroute_tui.console.cli import build_app
from omniroute_tui.console.model.scenarios import shipped_with_summaries
from omniroute_tui.console.screens.picker import ScenarioPicker
from simulator.scenario import SCENARIOS_DIR

from .console_helpers import past_the_guard, piloted, settle


def args(**overrides: object) -> argparse.Namespace:
    base = dict(scenario=None, config=None, live=False, db=None, db_recover="ask",
                speed=2.0, read_only=False, operator="tester", web=False, lesson=None,
                attach=None, listen=None, serve_room=None)
    base.update(overrides)
    return argparse.Namespace(**base)


def test_the_picker_lists_every_shipped_scenario_with_what_happens() -> None:
    listed = shipped_with_summaries()
    assert [name for name, _ in listed] == sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
    assert all(summary and not summary.startswith("invalid") for _, summary in listed)


async def test_started_with_no_scenario_the_picker_opens_over_the_paused_demo() -> None:
    app = build_app(args())
    async with app.run_test(size=(120, 36)) as pilot:  # type: ignore[attr-defined]
        await settle(pilot, lambda: isinstance(app.screen, ScenarioPicker))
        options = app.screen.query_one(OptionList)
        assert options.get_option_at_index(options.highlighted or 0).id == "demo"
        assert app.backend.paused  # the demo waits behind the list
        await pilot.press("escape")  # keeps it, running as it was
        await settle(pilot, lambda: not isinstance(app.screen, ScenarioPicker))
        assert app.backend.title == "demo" and not app.backend.paused


async def test_a_named_scenario_starts_without_the_picker() -> None:
    app = build_app(args(scenario="demo"))
    async with app.run_test(size=(120, 36)) as pilot:  # type: ignore[attr-defined]
        await pilot.pause()
        assert not isinstance(app.screen, ScenarioPicker)


async def test_p_replays_the_chosen_scenario_from_its_start() -> None:
    async with piloted("p") as (app, pilot):
        await settle(pilot, lambda: isinstance(app.screen, ScenarioPicker))
        options = app.screen.query_one(OptionList)
        options.highlighted = options.get_option_index("vpn-blip")
        await past_the_guard(pilot, ScenarioPicker)
        await pilot.press("enter")
        await settle(pilot, lambda: app.backend.title == "vpn-blip")
        assert app.backend.now_ms() == 0
        assert set(app.model.providers) == set(app.backend.providers)
        assert app.model.total_requests == 0  # nothing of the demo's run is left


async def test_enter_in_the_burst_that_opened_it_replays_nothing() -> None:
    """`p` and Enter together (a paste, keys bunched by a laggy link) would throw the
    run away for the scenario under the cursor: Enter counts once the list has been
    shown for the guard time, as a Yes does."""
    async with piloted("p", "enter", at_ms=40_000) as (app, pilot):
        await settle(pilot, lambda: isinstance(app.screen, ScenarioPicker))
        assert app.backend.title == "demo" and app.backend.now_ms() == 40_000
        await past_the_guard(pilot, ScenarioPicker)
        await pilot.press("enter")  # now it counts: the demo, from its start
        await settle(pilot, lambda: app.backend.now_ms() == 0)
        assert app.backend.title == "demo"


async def test_the_command_line_opens_it_and_a_burst_after_p_lands_in_it() -> None:
    async with piloted(":", *"pick_scenario", "enter") as (app, pilot):
        await settle(pilot, lambda: isinstance(app.screen, ScenarioPicker))
        await pilot.press("escape")
    # `p` and `j` `j` `q` in one burst: the list moves and closes; no pane key acted
    async with piloted("p", "j", "j", "q") as (app, pilot):
        await settle(pilot, lambda: not isinstance(app.screen, ScenarioPicker))
        assert app.backend.title == "demo" and app.is_running
