"""The console in a real browser (`--web`): the distribution's Chromium, headless, driven
by Playwright. The page must work with no internet, show the providers and keep updating,
and a read-only page must refuse an operator key."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from .gateway_helpers import free_port
from .waiting import eventually, eventually_sync

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.async_api",
                                 reason="Playwright is not installed (make test installs it)")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine (make test installs Debian's "
                             "chromium where it can: as root, with apt-get)")


@contextlib.contextmanager
def web_console(*args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "omniroute_tui.console", "--web", "--port", str(port), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "NO_COLOR": ""})
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return httpx.get(url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None  # it died: fail below, not after 20 s
        eventually_sync(up, timeout_s=20, what="the web console")
        assert proc.poll() is None, "the web console exited"
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the console it spawned
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def browser_page() -> AsyncIterator[object]:
    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM,
                                          args=["--no-sandbox", "--disable-gpu"])
        try:
            yield await browser.new_page(viewport={"width": 1280, "height": 800})
        finally:
            await browser.close()


async def test_the_web_console_works_offline_updates_and_refuses_operator_keys(
        tmp_path: Path) -> None:
    with web_console("--scenario", "429-storm", "--speed", "5") as url:
        async with browser_page() as page:
            requests: list[str] = []
            frames: list[bytes] = []
            page.on("request", lambda r: requests.append(r.url))  # type: ignore[attr-defined]
            page.on("websocket", lambda ws: ws.on(  # type: ignore[attr-defined]
                "framereceived",
                lambda f: frames.append(f if isinstance(f, bytes) else f.encode())))
            await page.goto(url)  # type: ignore[attr-defined]

            def screen() -> str:
                return b"".join(frames).decode("utf-8", "replace")

            await eventually(lambda: "alpha" in screen() and "CLOSED" in screen(),
                             timeout_s=30, what="the providers in the page")
            assert "Providers" in screen()
            # it keeps updating: the replay's clock moves on in what the page receives
            await eventually(lambda: len(set(re.findall(r"sim (\d\d:\d\d\.\d)", screen())))
                             >= 3, timeout_s=30, what="updates")
            await page.click("#terminal")  # type: ignore[attr-defined]
            await page.keyboard.press("r")  # type: ignore[attr-defined]
            await eventually(lambda: "operator actions are disabled" in screen(),
                             timeout_s=15, what="the read-only refusal")
            await page.screenshot(path=str(tmp_path / "page.png"))  # type: ignore[attr-defined]
            # nothing came from outside: the page works with no internet
            local = (url, url.replace("http://", "ws://"))
            assert requests and all(u.startswith(local) for u in requests), requests
            assert any(u.endswith(".ttf") for u in requests)  # the font, served locally
    await asyncio.sleep(0)
