"""The console in a browser (`--web`), for training rooms: textual-serve's page, with its
one outside fetch (a font stylesheet from a public font service) replaced by the same font
served by the console itself, so the page works with no internet.

Each tab runs a console process of its own, and it must end with its tab, however the
tab goes. textual-serve stops a tab's process by asking it to quit and waiting for it,
unbounded, once the tab's messages end: with a browser that vanished without closing (a
laptop lid), they could never end (older aiohttp marks the websocket closed when its pings
go unanswered, but leaves the reader waiting), and the wait could hang on a write to the
vanished browser (a full send buffer); the process ran on, painting for nobody. Here a
dead browser is noticed within `HEARTBEAT_S * 1.5` (pings unanswered) whatever aiohttp
does with its reader, the process's output is read and dropped from then on (so it never
blocks writing), and a process that has not quit `QUIT_WAIT_S` after being asked is
terminated, then killed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from pathlib import Path
from typing import Any

__all__ = ["HEARTBEAT_S", "QUIT_WAIT_S", "offline_templates", "tab_server"]

log = logging.getLogger("omniroute.web")

#: a browser that answers no ping for 1.5 times this is gone
HEARTBEAT_S = 10.0
#: a tab's console has this long to quit once its tab is gone, then SIGTERM, then SIGKILL
QUIT_WAIT_S = 5.0
KILL_WAIT_S = 3.0
#: a write to a tab that takes this long means the tab is gone
WRITE_S = 10.0

_FONT_LINK = re.compile(
    r'<link\s+rel="stylesheet"\s+href="https://fonts\.googleapis\.com/[^"]*"\s*/>')
_LOCAL_FONT = """<style>
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf");
      }
    </style>"""


def offline_templates(folder: Path) -> Path:
    """Write textual-serve's page template into `folder` with the font served locally;
    returns the folder, for `Server(templates_path=...)`.

    Raises RuntimeError if the page no longer has the link this replaces (a textual-serve
    upgrade): better refused at start than a page that quietly fetches from outside.
    """
    import textual_serve

    package = Path(textual_serve.__file__).parent
    page = (package / "templates" / "app_index.html").read_text()
    page, replaced = _FONT_LINK.subn(_LOCAL_FONT, page)
    if replaced != 1 or "https://" in page.replace("http://www.w3.org/2000/svg", ""):
        raise RuntimeError("textual-serve's page changed: cannot make it work offline")
    if not (package / "static" / "fonts" / "RobotoMono-VariableFont_wght.ttf").exists():
        raise RuntimeError("textual-serve no longer ships the Roboto Mono font")
    (folder / "app_index.html").write_text(page)
    return folder


def tab_server(command: str, **options: Any) -> Any:
    """textual-serve's `Server` for `command`, whose tab processes end with their tabs."""
    from aiohttp import web
    from textual_serve.app_service import AppService
    from textual_serve.server import Server

    class TabConsole(AppService):
        """One tab's console process: its output goes to the tab until the tab is gone,
        then is read and dropped; `stop()` ends the process, bounded."""

        gone = False
        stopped = False

        async def on_data(self, payload: bytes) -> None:
            if self.gone:
                return
            try:
                await asyncio.wait_for(self.remote_write_bytes(payload), WRITE_S)
            except (ConnectionError, RuntimeError, TimeoutError):
                self.gone = True

        async def stop(self) -> None:
            if self.stopped:
                return
            self.stopped = self.gone = True
            await self._download_manager.cancel_app_downloads(
                app_service_id=self.app_service_id)
            process = self._process
            if process is None:
                return
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.send_meta({"type": "quit"}), 1.0)
            with contextlib.suppress(Exception):
                self.stdin.close()  # and its input ends
            for signal_it, wait_s in ((None, QUIT_WAIT_S), (process.terminate, KILL_WAIT_S),
                                      (process.kill, None)):
                if signal_it is not None:
                    with contextlib.suppress(ProcessLookupError):
                        signal_it()
                try:
                    await asyncio.wait_for(process.wait(), wait_s)
                    break
                except TimeoutError:
                    continue
            if self._task is not None:
                await self._task  # its output has ended with the process

    class TabServer(Server):
        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            websocket = web.WebSocketResponse(heartbeat=HEARTBEAT_S)
            query = request.query
            width = int(query["width"]) if query.get("width", "").isdigit() else 80
            height = int(query["height"]) if query.get("height", "").isdigit() else 24
            tab: TabConsole | None = None
            try:
                await websocket.prepare(request)
                tab = TabConsole(self.command, write_bytes=websocket.send_bytes,
                                 write_str=websocket.send_str,
                                 close=websocket.close,  # type: ignore[arg-type]
                                 download_manager=self.download_manager, debug=self.debug)
                await tab.start(min(max(width, 10), 500), min(max(height, 5), 200))
                await _until_closed(self._process_messages(websocket, tab), websocket)
            except asyncio.CancelledError:
                pass
            except Exception as error:  # a tab's bad message ends that tab alone
                log.warning("a browser tab ended: %s: %s", type(error).__name__, error)
            finally:
                if tab is not None:
                    await asyncio.shield(tab.stop())
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(websocket.close(), 1.0)
            return websocket

    return TabServer(f"exec {command}", **options)


async def _until_closed(messages: Any, websocket: Any) -> None:
    """Read the tab's messages until the tab closes or its websocket is closed under the
    reader: older aiohttp versions marked a websocket whose pings went unanswered closed but
    left its reader waiting, and with it the tab's process, for ever. What ended the
    reader (a message that is not textual-serve's JSON) is raised, for the tab's end to be
    logged with it."""
    reading = asyncio.ensure_future(messages)
    try:
        while not reading.done() and not websocket.closed:
            await asyncio.wait({reading}, timeout=1.0)
        if reading.done() and not reading.cancelled():
            reading.result()
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
