"""The console in a real browser (`--web`): the distribution's Chromium, headless, driven
by Playwright. The page must work with no internet, show the providers and keep updating,
and a read-only page must refuse an operator key."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .console_helpers import web_console_server
from .waiting import eventually

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.async_api",
                                 reason="Playwright is not installed (make test installs it)")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine (make test installs Debian's "
                             "chromium where it can: as root, with apt-get)")


@contextlib.contextmanager
def web_console(*args: str) -> Iterator[str]:
    """`--web` with colour on (NO_COLOR empty): its page's URL."""
    with web_console_server(*args, env={**os.environ, "NO_COLOR": ""}) as (_, port):
        yield f"http://127.0.0.1:{port}"


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
