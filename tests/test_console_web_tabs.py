"""A browser tab's console process (`--web`) ends with its tab, however the tab goes: a
connection dropped without a websocket close, or one that stops answering as a closed laptop
does; and a room's page runs, per tab, a console attached to the room, not a replay of its
own. The tab is a websocket opened by hand on a raw socket: no browser needed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from omniroute_tui.console.web import HEARTBEAT_S, QUIT_WAIT_S

from .console_helpers import console_app, settle, web_console_server
from .gateway_helpers import free_port
from .waiting import eventually, eventually_sync
from .web_tabs import child_processes, connect_tab, read_first_screen

pytest.importorskip("textual_serve", reason="--web needs textual-serve")


#: the console's command line, with the web server's heartbeat set first (`{}` seconds)
WITH_HEARTBEAT = ("import sys; from omniroute_tui.console import web; web.HEARTBEAT_S = {}; "
                  "from omniroute_tui.console.cli import main; sys.exit(main())")


def web_server(*args: str, heartbeat_s: float | None = None
               ) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[bytes], int]]:
    """`--web` in a process of its own; `heartbeat_s` in place of `HEARTBEAT_S`."""
    console = (["-m", "omniroute_tui.console"] if heartbeat_s is None
               else ["-c", WITH_HEARTBEAT.format(heartbeat_s)])
    return web_console_server(*args, console=console)


def tabs(server_pid: int) -> list[tuple[int, str]]:
    """The server's child processes (one per open tab) and their command lines."""
    return child_processes(server_pid)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def open_tab(port: int, *, receive_buffer: int | None = None) -> socket.socket:
    """A websocket to the page's `/ws`, its console's first screen read."""
    tab = connect_tab(port, receive_buffer=receive_buffer)
    read_first_screen(tab)
    return tab


@pytest.mark.parametrize("how", ["dropped", "silent"])
def test_a_tab_that_goes_without_a_close_frees_its_process_within_30s(how: str) -> None:
    # a silent tab is noticed by its unanswered pings: every 2 s here, not HEARTBEAT_S
    # (the bound with HEARTBEAT_S is the arithmetic at the end)
    with web_server("--scenario", "429-storm", "--speed", "20",
                    heartbeat_s=2.0 if how == "silent" else None) as (server, port):
        tab = open_tab(port, receive_buffer=2048 if how == "silent" else None)
        eventually_sync(lambda: len(tabs(server.pid)) == 1, what="the tab's console")
        [(console, cmdline)] = tabs(server.pid)
        assert "--read-only" in cmdline and "--scenario 429-storm" in cmdline
        if how == "dropped":
            tab.close()  # no websocket close: the TCP connection just ends
        # "silent": the socket stays open and nothing more is read, pongs included, as
        # from a laptop whose lid was closed
        try:
            eventually_sync(lambda: not alive(console), timeout_s=30, poll_s=0.2,
                            what="the tab's console ending")
        finally:
            tab.close()
        assert tabs(server.pid) == []
        assert server.poll() is None  # the server serves on
    assert HEARTBEAT_S * 1.5 + QUIT_WAIT_S + 3 < 30  # the bound the design promises


async def test_a_rooms_page_attaches_each_tab_to_the_room() -> None:
    app, _ = console_app("demo", 40_000)
    from omniroute_tui.console.room import RoomServer

    app.room = room = RoomServer("127.0.0.1", 0)
    async with app.run_test() as pilot:
        await settle(pilot, lambda: room.server.started)
        port = free_port()
        page = subprocess.Popen(
            [sys.executable, "-m", "omniroute_tui.console", "--attach", room.url, "--web",
             "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            async def up() -> bool:
                try:
                    async with httpx.AsyncClient() as http:
                        return (await http.get(f"http://127.0.0.1:{port}")).status_code == 200
                except httpx.HTTPError:
                    return page.poll() is not None
            await eventually(up, timeout_s=20, what="the room's page")
            tab = await asyncio.to_thread(open_tab, port)
            [(_, cmdline)] = tabs(page.pid)
            assert f"--attach {room.url}" in cmdline and "--read-only" in cmdline
            assert "--scenario" not in cmdline  # no replay of its own
            await eventually(lambda: room.events.subscribers == 1, timeout_s=20,
                             what="the tab's console on the room's stream")
            tab.close()
            await eventually(lambda: tabs(page.pid) == [], timeout_s=30,
                             what="the tab's console ending")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(page.pid, signal.SIGTERM)
            await asyncio.to_thread(page.wait, 10)


async def test_a_silent_tab_ends_even_where_aiohttp_leaves_its_reader_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Older aiohttp, on unanswered pings, marked the websocket closed without waking the
    handler reading it, and a browser that vanished (a laptop lid: no reset, no ACK) never
    lets the close finish: textual-serve's handler then waited for ever and the tab's
    process ran on. The server here, in this process, with that behaviour put back."""
    from aiohttp import web, web_ws

    from omniroute_tui.console import web as console_web

    def closed_but_reader_left_waiting(self: web_ws.WebSocketResponse,
                                       exc: BaseException) -> None:
        # the transport is not closed here: to a vanished peer, a close with data still
        # to send waits for ever too, so the reader would not hear of it either
        self._set_closed()
        self._exception = exc

    monkeypatch.setattr(web_ws.WebSocketResponse, "_handle_ping_pong_exception",
                        closed_but_reader_left_waiting)
    monkeypatch.setattr(console_web, "HEARTBEAT_S", 2.0)
    command = f"{sys.executable} -m omniroute_tui.console --scenario 429-storm --read-only"
    server = console_web.tab_server(command, host="127.0.0.1", port=0)
    runner = web.AppRunner(await server._make_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        tab = await asyncio.to_thread(open_tab, port, receive_buffer=2048)
        await eventually(lambda: len(tabs(os.getpid())) == 1, what="the tab's console")
        [(console, _)] = tabs(os.getpid())
        # the tab reads and answers nothing from now on
        await eventually(lambda: not alive(console), timeout_s=30, poll_s=0.2,
                         what="the tab's console ending")
        tab.close()
    finally:
        await runner.cleanup()


async def test_a_tab_reader_that_raises_ends_the_tab_with_its_reason() -> None:
    """A tab's bad message ends that tab alone, logged by its handler with the reason: the
    reader's exception reaches it rather than being dropped with the reader."""
    from omniroute_tui.console import web as console_web

    class Open:
        closed = False

    async def bad_message() -> None:
        raise ValueError("Expecting value: line 1 column 1 (char 0)")

    with pytest.raises(ValueError, match="Expecting value"):
        await asyncio.wait_for(console_web._until_closed(bad_message(), Open()), 5)
