"""The console attached to a running gateway, and serving one with --listen."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import httpx

from omniroute_tui.console.cli import build_app
from omniroute_tui.console.model.attach import fetch_state
from omniroute_tui.console.model.history_lines import history_line
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.model.text import clock_text
from omniroute_tui.console.widgets.keyed_table import KeyedTable
from omniroute_tui.engine.events import RequestEvent

from .console_helpers import say_yes, settle
from .gateway_helpers import SCENARIO, TOKEN, running_gateway

ATTACH_SCENARIO = SCENARIO.replace(
    "  broken: {models: [m], latency: 5ms, connections: [x1, x2]}",
    "  broken:\n    models: [m]\n    latency: 5ms\n    connections: [x1, x2]\n"
    "    resilience: {breaker: {failure_threshold: 2, degraded_threshold: 1},"
    " dedup: {connection_window: 0s}, cooldown: {base: 1ms, max: 1ms}}\n"
    "  forbidden: {models: [m], latency: 5ms, connections: [f1]}",
).replace(
    "  busy: {targets: [throttled/m]}",
    "  busy: {targets: [throttled/m]}\n  locked: {targets: [forbidden/m, healthy/m]}",
).replace(
    "faults:\n",
    "faults:\n  - {name: forbidden, target: forbidden, error: 403, at: 0s, for: 30m}\n",
)


def attach_args(url: str, token_file: Path) -> argparse.Namespace:
    return argparse.Namespace(
        attach=url, token_file=str(token_file), scenario=None, config=None, live=False,
        db=None, db_recover="ask", speed=2.0, read_only=False, operator="carol", web=False,
        listen=None)


async def attached_app(tmp_path: Path, url: str) -> Any:
    """The console `--attach url --token-file` builds, the gateway's state fetched as the
    CLI fetches it: before the app's loop exists, so off the test's loop."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    state = await asyncio.to_thread(fetch_state, url, TOKEN)
    return build_app(attach_args(url, token_file), attach_state=state)


async def test_attached_console_sees_breakers_and_clears_lockouts(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=ATTACH_SCENARIO) as gw:
        app = await attached_app(tmp_path, gw.url)
        async with app.run_test() as pilot, httpx.AsyncClient(base_url=gw.url,
                                                               timeout=10) as http:
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            for _ in range(3):
                await http.post("/v1/chat/completions",
                                json={"model": "fallback", "messages": []})
            await http.post("/v1/chat/completions", json={"model": "locked", "messages": []})
            await settle(pilot, lambda: app.model.providers["broken"].state == "OPEN")  # type: ignore[attr-defined]
            app.refresh_view()  # type: ignore[attr-defined]
            table = app.query_one("#providers-table", KeyedTable)  # type: ignore[attr-defined]
            assert table.shown_row("broken")[1] == "○ OPEN"
            assert ("forbidden", "f1", "m") in app.model.lockouts  # type: ignore[attr-defined]
            await pilot.press("3")
            await say_yes(pilot, "c")
            await settle(pilot, lambda: not gw.gateway.engine.lockout_snapshots("forbidden"))
            assert gw.gateway.engine.lockout_snapshots("forbidden") == ()
            audit = (await http.get("/api/resilience/audit",
                                    headers={"authorization": f"Bearer {TOKEN}"})).json()
            assert [(e["action"], e["actor"]) for e in audit["entries"]] == [
                ("clear_lockouts", "operator (carol's console)")]


async def test_attached_console_says_when_the_gateway_is_gone(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        app = await attached_app(tmp_path, gw.url)
        async with app.run_test() as pilot:
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            await gw_stop(gw)
            shown: list[str] = []

            def disconnection_shown() -> bool:
                # read while it lasts: the console reconnects within half a second
                app.refresh_view()  # type: ignore[attr-defined]
                status = str(app.query_one("#status").render())  # type: ignore[attr-defined]
                if "DISCONNECTED" in status or "connecting" in status:
                    shown.append(status)
                return bool(shown)

            await settle(pilot, disconnection_shown)
            assert shown, "the status bar never said the gateway was gone"
            assert "│ age " in shown[0]  # how old the data on screen is, kept in view


async def gw_stop(gw: object) -> None:
    """Stop the gateway's event streams: what a gateway restart looks like to the console."""
    gw.gateway.events.close()  # type: ignore[attr-defined]


async def test_console_listen_serves_its_own_router(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    async with running_gateway(tmp_path) as gw:
        config.write_text(gw.config_text)
        args = argparse.Namespace(
            attach=None, token_file=None, scenario=None, config=config, live=False, db=None,
            db_recover="ask", speed=2.0, read_only=False, operator="dave", web=False,
            listen="127.0.0.1:0")
        app = build_app(args)
        async with app.run_test() as pilot:
            await settle(pilot, lambda: app.gateway_server is not None)  # type: ignore[attr-defined]
            url = app.gateway_server.url  # type: ignore[attr-defined]
            async with httpx.AsyncClient(timeout=10) as http:
                reply = await http.post(f"{url}/v1/chat/completions",
                                        json={"model": "chat", "messages": []})
            assert reply.status_code == 200
            await settle(pilot, lambda: app.model.total_requests, 50)  # type: ignore[attr-defined]
            assert app.model.total_requests == 1  # type: ignore[attr-defined]
            # its server ends on its own: the console says so, and stops cleanly after
            app.gateway_server.server.servers[0].close()  # type: ignore[attr-defined]
            await settle(pilot, lambda: app.servers_down)  # type: ignore[attr-defined]
            assert app.servers_down == ["GATEWAY"]  # type: ignore[attr-defined]
            app.refresh_view()  # type: ignore[attr-defined]
            assert "GATEWAY DOWN │" in str(app.query_one("#status").render())  # type: ignore[attr-defined]
            assert list(app._notifications)[-1].message == (  # type: ignore[attr-defined]
                f"the gateway on {url} ended: its listening socket was closed: its clients "
                "get no answers; restart the console to serve it again")


async def test_attached_console_reconnects_after_a_gateway_restart(tmp_path: Path) -> None:
    from omniroute_tui.gateway import Gateway, GatewayServer

    async with running_gateway(tmp_path) as gw:
        app = await attached_app(tmp_path, gw.url)
        port = int(gw.url.rsplit(":", 1)[1])
        first = gw.gateway
        async with app.run_test() as pilot:
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            await gw.server.stop()  # the gateway goes away; then serve again on its port
            await settle(pilot, lambda: not app.backend.connected)  # type: ignore[attr-defined]
            assert not app.backend.connected  # type: ignore[attr-defined]
            again = GatewayServer(Gateway(first.router, first.providers, token=TOKEN),
                                  "127.0.0.1", port)
            await again.start()
            try:
                await settle(pilot, lambda: app.backend.connected, 200)  # type: ignore[attr-defined]
                assert app.backend.connected  # type: ignore[attr-defined]
                async with httpx.AsyncClient(base_url=again.url, timeout=10) as http:
                    await http.post("/api/resilience/breakers/healthy/force-open",
                                    json={"for": "1m"},
                                    headers={"authorization": f"Bearer {TOKEN}"})
                await settle(pilot, lambda: app.model.providers["healthy"].state == "OPEN")  # type: ignore[attr-defined]
                assert app.model.providers["healthy"].state == "OPEN"  # type: ignore[attr-defined]
            finally:
                await again.stop()


async def test_attach_sees_what_happened_before(tmp_path: Path) -> None:
    auth = {"authorization": f"Bearer {TOKEN}", "x-omniroute-reason": "dave"}
    async with running_gateway(tmp_path, scenario=ATTACH_SCENARIO) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        # before any console: the breaker of `broken` opens, an operator forces `healthy`
        for _ in range(3):
            await http.post("/v1/chat/completions", json={"model": "fallback", "messages": []})
        assert (await http.post("/api/resilience/breakers/healthy/force-open",
                                json={"for": "1h"}, headers=auth)).status_code == 200
        history = (await http.get("/api/resilience/history?limit=1000", headers=auth)).json()
        kinds = [e["type"] for e in history["events"]]
        assert "breaker" in kinds and kinds[-1] == "operator"
        assert (await http.get("/api/resilience/history?limit=0", headers=auth)
                ).status_code == 400
        app = await attached_app(tmp_path, gw.url)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            model = app.model  # type: ignore[attr-defined]
            # each breaker's transitions, from before the console existed
            assert any("→ OPEN" in history_line(e) for e in model.providers["broken"].history)
            # the operator's action: in the audit pane, and the forced state says who
            assert [(a[1], a[2], a[3]) for a in model.audit] == [
                ("operator (dave)", "force_open", "healthy")]
            assert model.provider_rows(app.backend.now_ms())["healthy"][1] == "⊘ FORCED OPEN"  # type: ignore[attr-defined]
            _, pairs, _ = model.detail(Pane.PROVIDERS, "healthy", app.backend.now_ms())  # type: ignore[attr-defined]
            assert ("forced by", "operator (dave)") in pairs
            await pilot.press("7")
            await pilot.pause()
            table = app.query_one("#audit-table", KeyedTable)  # type: ignore[attr-defined]
            assert table.row_count == 1 and table.get_row_at(0)[1:4] == [
                "operator (dave)", "force_open", "healthy"]
            # the events pane starts with the past, not empty
            assert any("breaker broken" in e.line for e in model.events)


async def test_an_attached_console_says_when_the_fleets_redis_fails(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, redis=("redis://127.0.0.1:1/0", "none")) as gw:
        app = await attached_app(tmp_path, gw.url)
        async with app.run_test() as pilot:

            def failing() -> bool:
                app.refresh_view()  # type: ignore[attr-defined]
                return "STORE FAILING" in str(app.query_one("#status").render())  # type: ignore[attr-defined]

            await settle(pilot, failing, tries=200)
            assert failing()


async def _a_breaker_then_a_burst(tmp_path: Path) -> int:
    """A gateway on a state database sees `broken`'s breaker open, then a burst of
    100,000 per-request events (what 20,000 requests leave), and stops; returns when the
    breaker opened."""
    async with running_gateway(tmp_path, db=True, scenario=ATTACH_SCENARIO) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        for _ in range(3):
            await http.post("/v1/chat/completions", json={"model": "fallback", "messages": []})
        engine = gw.gateway.engine
        assert engine.breaker_snapshot("broken").state == "OPEN"
        opened_at = engine.breaker_snapshot("broken").opened_at
        assert opened_at is not None
        now = engine.now()
        for n in range(100_000):
            engine.bus.emit(RequestEvent(now, f"burst{n}", "chat"))
        assert gw.gateway.store is not None and await gw.gateway.store.flush()
    return opened_at


def _opened(events: list[dict[str, object]], opened_at: int) -> bool:
    return any(e["type"] == "breaker" and e["provider"] == "broken" and e["to"] == "OPEN"
               and e["t"] == opened_at for e in events)


async def test_history_after_a_restart_has_the_state_changes_from_before_a_burst(
        tmp_path: Path) -> None:
    opened_at = await _a_breaker_then_a_burst(tmp_path)
    async with running_gateway(tmp_path, db=True, scenario=ATTACH_SCENARIO) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        answer = await http.get("/api/resilience/history",
                                headers={"authorization": f"Bearer {TOKEN}"})
        events = answer.json()["events"]
        assert _opened(events, opened_at)
        assert {e["type"] for e in events} <= {"breaker", "cooldown", "lockout", "disabled",
                                               "enabled", "operator", "fault"}


async def test_an_attaching_console_sees_a_breaker_opened_before_a_burst_and_a_restart(
        tmp_path: Path) -> None:
    opened_at = await _a_breaker_then_a_burst(tmp_path)
    async with running_gateway(tmp_path, db=True, scenario=ATTACH_SCENARIO) as gw:
        app = await attached_app(tmp_path, gw.url)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            model = app.model  # type: ignore[attr-defined]
            # the transition itself, at its time, from the store's history log
            lines = [history_line(e) for e in model.providers["broken"].history]
            assert any(line.startswith(clock_text(opened_at)) and "→ OPEN" in line
                       for line in lines)
            assert any("breaker broken" in e.line for e in model.events)
