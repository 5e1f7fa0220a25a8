"""A console app on a seeded scenario at a fixed virtual time, for Pilot and snapshots."""

from __future__ import annotations

from omniroute_tui.console.app import ConsoleApp
from omniroute_tui.console.model.backends import SimulationBackend
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.engine import Event
from simulator.scenario import SCENARIOS_DIR, load_scenario


def console_app(scenario: str = "demo", at_ms: int = 40_000, *, read_only: bool = False
                ) -> tuple[ConsoleApp, list[Event]]:
    """The app paused at `at_ms` with no timers running; also every event it sees."""
    loaded = load_scenario(SCENARIOS_DIR / f"{scenario}.yaml")
    seen: list[Event] = []
    model = ConsoleModel(loaded.providers, lambda: 0, routes=loaded.config.routes)
    backend = SimulationBackend(loaded, speed=2.0, subscribers=(model.on_event, seen.append))
    model.now = backend.now_ms
    backend.step(at_ms)
    backend.paused = True
    app = ConsoleApp(backend, model, operator="tester", read_only=read_only, autoplay=False)
    return app, seen


async def settle(pilot: object, condition: object, tries: int = 100) -> None:
    """Let the app run until `condition()` holds or `tries` short pauses have passed; the
    caller asserts what it needs afterwards."""
    for _ in range(tries):
        if condition():  # type: ignore[operator]
            return
        await pilot.pause(0.05)  # type: ignore[attr-defined]
