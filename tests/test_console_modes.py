"""The console on a router with a state database, on a live scenario, and its CLI errors."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.console.cli import build_app, main
from omniroute_tui.console.screens.modals import ConfirmScreen
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.engine import BreakerAdmission, Classification, FailureKind
from omniroute_tui.store import SqliteStore

from .console_helpers import say_yes, settle

CONFIG = """\
providers:
  alpha:
    base_url: http://127.0.0.1:9/v1
    models: [m]
    connections: [{id: a, api_key: sk-test-alpha-0001}, {id: b, api_key: sk-test-alpha-0002}]
routes:
  r: {targets: [alpha/m]}
"""


def args(**overrides: object) -> argparse.Namespace:
    base = dict(scenario=None, config=None, live=False, db=None, db_recover="ask",
                speed=2.0, read_only=False, operator="tester", web=False)
    base.update(overrides)
    return argparse.Namespace(**base)


async def seed_store(config_path: Path, db: Path) -> None:
    engine = load_router_config(config_path).build(SystemClock()).engine
    store = await SqliteStore.open(db)
    await store.attach(engine)
    admission = BreakerAdmission(True, 0)
    engine.record("alpha", "a", "m", admission, Classification(FailureKind.AUTH_FAILED))
    engine.record("alpha", "b", "m", admission,
                  Classification(FailureKind.FORBIDDEN, 3_600_000))
    await store.close()


async def test_router_mode_restores_and_persists_operator_actions(tmp_path: Path) -> None:
    config_path, db = tmp_path / "router.yaml", tmp_path / "state.db"
    config_path.write_text(CONFIG)
    await seed_store(config_path, db)
    app = build_app(args(config=config_path, db=str(db)))
    async with app.run_test() as pilot:  # type: ignore[attr-defined]
        await settle(pilot, lambda: app.backend.store is not None, 50)  # type: ignore[attr-defined]
        await pilot.pause()
        await pilot.press("2")
        table = app.query_one("#connections-table", KeyedTable)  # type: ignore[attr-defined]
        assert table.shown_row(("alpha", "a"))[2] == "✗ disabled"
        assert table.shown_row(("alpha", "a"))[5] == "…0001"
        await pilot.press("3")
        lockouts = app.query_one("#lockouts-table", KeyedTable)  # type: ignore[attr-defined]
        assert ("alpha", "b", "m") in lockouts.shown_keys
        await say_yes(pilot, "2", "e")
        await pilot.pause()
    store = await SqliteStore.open(db)
    try:
        audit = await store.audit_log()
        assert [(a.action, a.target, a.actor) for a in audit] == [("enable", "alpha/a", "tester")]
        snapshot = await store.load()
        assert not next(c for c in snapshot.connections if c.connection == "a").disabled
    finally:
        await store.close()


async def test_corrupt_database_offers_to_start_empty(tmp_path: Path) -> None:
    config_path, db = tmp_path / "router.yaml", tmp_path / "state.db"
    config_path.write_text(CONFIG)
    db.write_bytes(b"garbage " * 512)
    app = build_app(args(config=config_path, db=str(db)))
    async with app.run_test() as pilot:  # type: ignore[attr-defined]
        await settle(pilot, lambda: isinstance(app.screen, ConfirmScreen), 50)  # type: ignore[attr-defined]
        assert "Start with an empty store" in app.screen.question  # type: ignore[attr-defined]
        await say_yes(pilot)
        await settle(pilot, lambda: app.backend.store is not None, 50)  # type: ignore[attr-defined]
        assert app.backend.store is not None  # type: ignore[attr-defined]
    assert any(p.name.startswith("state.db.bad-") for p in tmp_path.iterdir())


LIVE = """\
name: live-console
duration: 20s
clock: live
providers:
  alpha: {models: [m], latency: 20ms, connections: [a1, a2]}
routes:
  r: {targets: [alpha/m]}
traffic:
  - {route: r, every: 200ms}
faults:
  - {name: s, target: alpha/a1, error: 503, at: 0s, for: 10s}
"""


async def test_live_console_shows_real_traffic(tmp_path: Path) -> None:
    path = tmp_path / "live.yaml"
    path.write_text(LIVE)
    app = build_app(args(scenario=str(path)))
    async with app.run_test() as pilot:  # type: ignore[attr-defined]
        for _ in range(100):
            if app.model.total_requests >= 5 and app.model.connections[  # type: ignore[attr-defined]
                    ("alpha", "a1")].level >= 1:
                break
            await pilot.pause(0.05)
        assert app.model.total_requests >= 5  # type: ignore[attr-defined]
        assert app.model.connections[("alpha", "a1")].last_error.kind == "server_error"  # type: ignore[attr-defined]
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--db", "x.db"], "--db keeps a router's state"),
        (["--scenario", "no-such-scenario"],
         "no shipped scenario of that name (shipped: 429-storm, auth-revoked, demo,"),
        (["--speed", "0"], "--speed must be above 0"),
    ],
)
def test_cli_errors_are_sentences(argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(("operator", "login", "message"), [
    # an argument byte that is not UTF-8 arrives as a lone surrogate, which no database can
    # hold: every later write of the store failed on the audit entry
    ("ops\udcff", "ops", "--operator: the operator name holds U+DCFF, a lone surrogate, at "
     "character 4"),
    ("\x1b[2Jops", "ops", "--operator: the operator name holds U+001B, a control character, "
     "at character 1"),
    (None, "ops\udcff", "the operator name (from the login name; give --operator NAME) holds "
     "U+DCFF"),
])
def test_an_operator_name_that_would_not_show_is_refused_at_start(
        monkeypatch: pytest.MonkeyPatch, operator: str | None, login: str,
        message: str) -> None:
    from omniroute_tui.console.cli import _parser

    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # what getpass reads
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LOGNAME", login)
    args = _parser().parse_args([] if operator is None else ["--operator", operator])
    with pytest.raises(ValueError) as info:
        build_app(args)
    assert message in str(info.value)


def test_web_sessions_run_read_only_unless_asked() -> None:
    import sys

    from omniroute_tui.console.cli import web_command

    assert web_command(["--web", "--port", "9000", "--scenario", "demo"], writable=False) == [
        sys.executable, "-m", "omniroute_tui.console", "--scenario", "demo", "--read-only"]
    assert web_command(["--web", "--web-write", "--host=0.0.0.0"], writable=True) == [
        sys.executable, "-m", "omniroute_tui.console"]


async def test_the_status_bar_says_when_the_store_is_failing(tmp_path: Path) -> None:
    import sqlite3

    from omniroute_tui.console.widgets.panels import StatusBar

    config_path, db = tmp_path / "router.yaml", tmp_path / "state.db"
    config_path.write_text(CONFIG)
    app = build_app(args(config=config_path, db=str(db)))
    async with app.run_test() as pilot:  # type: ignore[attr-defined]
        backend = app.backend  # type: ignore[attr-defined]
        await settle(pilot, lambda: backend.store is not None, 50)
        await settle(pilot, lambda: backend.store.health().pending == 0, 50)
        other = sqlite3.connect(db, timeout=5)
        other.execute("BEGIN EXCLUSIVE")  # another program holds the file
        try:
            backend.engine.force_open("alpha", 60_000, actor="tester")
            await settle(pilot, lambda: backend.store_failing_since() is not None, 100)
            await pilot.pause(0.3)
            status = app.query_one(StatusBar)  # type: ignore[attr-defined]
            assert str(status.render()).startswith("STORE FAILING")
            assert status.has_class("-alert")
        finally:
            other.rollback()
            other.close()
        await settle(pilot, lambda: backend.store_failing_since() is None, 100)
        await pilot.pause(0.3)
        assert not str(app.query_one(StatusBar).render()).startswith(  # type: ignore[attr-defined]
            "STORE FAILING")
