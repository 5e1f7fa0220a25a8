"""The providers pane shows each provider's share of the last minute's attempts, and the
overview the routes with their strategies: the config's, or an attached gateway's as its
state lists them, read again after a reload."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yaml

from omniroute_tui.console.cli import build_app
from omniroute_tui.console.model.attach import fetch_state
from omniroute_tui.console.model.console_model import COLUMNS, ConsoleModel
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.model.views import SHARE_S
from omniroute_tui.console.widgets.keyed_table import KeyedTable

from .console_helpers import console_app, piloted, settle

_SHARE = [name for name, _ in COLUMNS[Pane.PROVIDERS]].index("share")


async def test_the_providers_pane_shows_the_last_minutes_share_of_attempts() -> None:
    # 45 s in, 15 s into the 429 storm: alpha took most of the minute before it
    app, seen = console_app("429-storm", at_ms=45_000)
    now_s = 45
    counts = Counter(e.provider for e in seen if e.TYPE == "attempt"  # type: ignore[attr-defined]
                     and now_s - SHARE_S < e.t // 1000 <= now_s)
    total = sum(counts.values())
    assert {name: round(100 * n / total) for name, n in counts.items()} == {
        "alpha": 69, "beta": 31}
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.press("1", "w")  # every column (160 show the share, not the fails)
        await pilot.pause()
        table = app.query_one("#providers-table", KeyedTable)
        shown = {key: table.shown_row(key)[_SHARE] for key in ("alpha", "beta")}
        assert shown == {"alpha": "69%", "beta": "31%"}
        await pilot.press(*["n"] * 30)  # 30 virtual seconds on: the storm's first half
        await pilot.pause()
        rows = app.model.provider_rows(app.backend.now_ms())
        later = Counter(e.provider for e in seen if e.TYPE == "attempt"  # type: ignore[attr-defined]
                        and 75 - SHARE_S < e.t // 1000 <= 75)
        assert rows["alpha"][_SHARE] == f"{round(100 * later['alpha'] / later.total())}%"


async def test_the_share_shows_from_100_columns_and_every_column_from_180() -> None:
    """80 columns show name, breaker, failures, retry and last error; from 100 the
    attempts and their share too, as `1` shows them without `w`; from 180 every one."""
    names = [name for name, _ in COLUMNS[Pane.PROVIDERS]]
    for width, shown in ((80, ["provider", "breaker", "fail/thr", "retry in",
                               "last error, age"]),
                         (99, ["provider", "breaker", "fail/thr", "retry in",
                               "last error, age"]),
                         (100, ["provider", "breaker", "fail/thr", "retry in",
                                "last error, age", "attempts", "share"]),
                         (180, names)):
        async with piloted("1", scenario="429-storm", at_ms=45_000, size=(width, 30)) as (
                app, pilot):
            table = app.query_one("#providers-table", KeyedTable)
            assert [str(column.key.value) for column in table.columns.values()] == shown
            if "share" in shown:
                at = shown.index("share")
                assert [table.shown_row(key)[at] for key in ("alpha", "beta")] == [
                    "69%", "31%"]
            # every column shown is on the screen, none scrolled off to the right
            assert table.virtual_size.width <= table.size.width, width


def test_no_attempts_in_the_last_minute_is_no_share() -> None:
    app, _ = console_app("429-storm", at_ms=0)
    assert {row[_SHARE] for row in app.model.provider_rows(0).values()} == {"–"}


async def test_the_overview_names_each_routes_strategy() -> None:
    async with piloted("0", scenario="demo", at_ms=10_000) as (app, pilot):
        lines = app.model.overview_lines(app.backend.now_ms())
        assert lines[-1] == "routes     chat priority, fast round_robin, reason weighted"
        assert lines[-1] in str(app.query_one("#overview-summary").render())


async def test_an_attached_console_reads_the_routes_and_follows_a_reload(
        tmp_path: Path) -> None:
    """The gateway's state lists its routes with their strategies; a `reload` event makes
    an attached console read them again."""
    from .gateway_helpers import TOKEN
    from .test_console_attach import attach_args
    from .test_gateway_reload import AUTH, config_text, served

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with served(tmp_path, config_text("http://127.0.0.1:9/v1", providers=2)) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        state = await asyncio.to_thread(fetch_state, gw.url, TOKEN)
        assert state["routes"] == [{"name": "chat", "strategy": "round_robin",
                                    "targets": ["p0/m", "p1/m"], "weights": None}]
        app = build_app(attach_args(gw.url, token_file), attach_state=state)
        async with app.run_test(size=(100, 30)) as pilot:  # type: ignore[attr-defined]
            backend = app.backend  # type: ignore[attr-defined]
            await settle(pilot, lambda: backend.connected)
            await pilot.press("0")
            await pilot.pause()
            assert routes_line(app) == "routes     chat round_robin"  # it names none
            text = yaml.safe_load(gw.path.read_text())
            text["routes"] = {
                "chat": {"targets": [{"target": "p0/m", "weight": 3}, "p1/m"],
                         "strategy": "weighted"},
                "fast": {"targets": ["p1/m"], "strategy": "round_robin"}}
            gw.path.write_text(yaml.safe_dump(text))
            reply = await http.post("/api/resilience/reload", headers=AUTH)
            assert reply.status_code == 200, reply.text
            await settle(pilot, lambda: routes_line(app) ==
                         "routes     chat weighted, fast round_robin")
            assert routes_line(app) == "routes     chat weighted, fast round_robin"
            reread = (await http.get("/api/resilience/state", headers=AUTH)).json()
            assert reread["routes"][0]["weights"] == [3, 1]


def routes_line(app: Any) -> str:
    """The overview's routes line as painted (refreshed first: the test drives no ticks)."""
    app.refresh_view()
    lines = str(app.query_one("#overview-summary").render()).splitlines()
    return next((line for line in lines if line.startswith("routes")), "")


def test_routes_of_another_shape_are_left_out_and_many_are_counted() -> None:
    model = ConsoleModel({}, lambda: 0)
    empty: dict[str, list[object]] = {"breakers": [], "connections": [], "lockouts": []}
    model.load_state_document({**empty, "routes": [
        {"name": "chat", "strategy": "weighted"}, {"name": 5, "strategy": "priority"},
        {"name": "x"}, "fast", None, {"name": "fast", "strategy": "least_busy",
                                      "targets": "odd"}]})
    assert model.routes == {"chat": "weighted", "fast": "least_busy"}
    model.load_state_document(empty)  # an older gateway says nothing of routes
    assert model.routes == {"chat": "weighted", "fast": "least_busy"}
    model.load_state_document({**empty, "routes": "all of them"})
    assert model.routes == {"chat": "weighted", "fast": "least_busy"}
    model.load_state_document({**empty, "routes": [
        {"name": f"r{n}", "strategy": "priority"} for n in range(5000)]})
    assert len(model.routes) == 1000
    assert model.overview_lines(0)[-1] == (
        "routes     " + ", ".join(f"r{n} priority" for n in range(8)) + " and 992 more")


async def test_hostile_route_names_from_a_gateway_show_as_written_on_one_line() -> None:
    """An attached gateway's routes are not ours to check: markup shows as written, a
    control character as its escape, a line break cannot start a line of its own (a
    forged `breakers` line), and a name of 200,000 characters is cut to ROUTE_TEXT."""
    app, _ = console_app("demo", at_ms=10_000)
    empty: dict[str, list[object]] = {"breakers": [], "connections": [], "lockouts": []}
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.press("0")
        await pilot.pause()
        app.model.load_state_document({**empty, "routes": [
            {"name": "[red]chat[/red]", "strategy": "[b]priority"},
            {"name": "x\nbreakers   0 OPEN", "strategy": "weighted\x1b[2J"},
            {"name": "n" * 200_000, "strategy": "least_busy"}]})
        assert routes_line(app) == (
            "routes     [red]chat[/red] [b]priority, x\\nbreakers   0 OPEN "
            "weighted\\x1b[2J, " + "n" * 39 + "… least_busy")
        lines = str(app.query_one("#overview-summary").render()).splitlines()
        assert [line[:11] for line in lines] == [
            "breakers   ", "cooldowns  ", "lockouts   ", "traffic    ", "routes     "]
