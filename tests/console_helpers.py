"""A console app on a seeded scenario at a fixed virtual time, for Pilot and snapshots."""

from __future__ import annotations

import html
import re
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
from textual.pilot import Pilot

from omniroute_tui.console.app import ConsoleApp
from omniroute_tui.console.model.backends import SimulationBackend
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.console.screens.modals import CONFIRM_GUARD_S, ConfirmScreen, GuardedScreen
from omniroute_tui.engine import Event
from simulator.scenario import SCENARIOS_DIR, load_scenario

from .gateway_helpers import free_port
from .waiting import eventually_sync
from .web_tabs import process_group


def console_app(scenario: str | Path = "demo", at_ms: int = 40_000, *,
                read_only: bool = False) -> tuple[ConsoleApp, list[Event]]:
    """The app paused at `at_ms` with no timers running; also every event it sees.
    `scenario`: a shipped one's name, or a file."""
    loaded = load_scenario(scenario if isinstance(scenario, Path)
                           else SCENARIOS_DIR / f"{scenario}.yaml")
    seen: list[Event] = []
    model = ConsoleModel(loaded.providers, lambda: 0, routes=loaded.config.routes)
    backend = SimulationBackend(loaded, speed=2.0, subscribers=(model.on_event, seen.append))
    model.now = backend.now_ms
    backend.step(at_ms)
    backend.paused = True
    app = ConsoleApp(backend, model, operator="tester", read_only=read_only, autoplay=False)
    return app, seen


@asynccontextmanager
async def piloted(*keys: str, scenario: str = "demo", at_ms: int = 40_000,
                  size: tuple[int, int] = (100, 30), read_only: bool = False
                  ) -> AsyncIterator[tuple[ConsoleApp, Pilot[Any]]]:
    """console_app's app running under Pilot at `size`, `keys` pressed and one pause let
    the screen catch up. The first pause lets the mounted app settle: a key pressed
    before it can be lost on a busy machine."""
    app, _ = console_app(scenario, at_ms, read_only=read_only)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
        await pilot.pause()
        yield app, pilot


@contextmanager
def web_console_server(*args: str, console: Sequence[str] = ("-m", "omniroute_tui.console"),
                       **popen: Any) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`--web` on a free port in a process group of its own (`console`: how Python starts
    the console), once its page answers: the process and its port."""
    port = free_port()
    with process_group(*console, "--web", "--port", str(port), *args, **popen) as proc:
        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}", timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None  # it died: fail below, not after 20 s
        eventually_sync(up, timeout_s=20, what="the web console")
        assert proc.poll() is None, "the web console exited"
        yield proc, port


async def settle(pilot: object, condition: object, tries: int = 100) -> None:
    """Let the app run until `condition()` holds or `tries` short pauses have passed; the
    caller asserts what it needs afterwards."""
    for _ in range(tries):
        if condition():  # type: ignore[operator]
            return
        await pilot.pause(0.05)  # type: ignore[attr-defined]


_CELL = re.compile(r'<text class="terminal-[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+" '
                   r'clip-path="url\(#terminal-(?:\d+-)?line-(\d+)\)">([^<]*)</text>')


def screen_lines(app: Any) -> list[str]:
    """The screen as it is painted, one string a row (from the app's SVG screenshot: each
    run of text sits at its cell, 12.2 units wide)."""
    rows: dict[int, dict[int, str]] = {}
    for match in _CELL.finditer(app.export_screenshot()):
        column, row = round(float(match.group(1)) / 12.2), int(match.group(2))
        cells = rows.setdefault(row, {})
        for i, char in enumerate(html.unescape(match.group(3)).replace("\xa0", " ")):
            cells[column + i] = char
    return ["".join(rows.get(r, {}).get(c, " ") for c in range(max(rows.get(r, {0: ""}))
                                                               + 1)).rstrip()
            for r in range(max(rows, default=-1) + 1)]


async def say_yes(pilot: Pilot[Any], *keys: str) -> None:
    """Press `keys` (the last one asks a question, or one is up already) and answer Yes
    as an operator does: once the dialog has been shown for its guard time."""
    if keys:
        await pilot.press(*keys)
    await past_the_guard(pilot, ConfirmScreen)
    await pilot.press("y")


async def past_the_guard(pilot: Pilot[Any], kind: type[GuardedScreen[Any]]) -> None:
    """Once a `kind` dialog is up and painted, as if it had been on screen for its guard
    time: its next answer counts."""
    app = pilot.app
    await settle(pilot, lambda: isinstance(app.screen, kind) and app.screen.shown_at is not None)
    dialog = app.screen
    assert isinstance(dialog, kind) and dialog.shown_at is not None
    dialog.shown_at -= CONFIRM_GUARD_S
