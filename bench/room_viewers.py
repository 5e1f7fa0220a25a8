"""What a room costs: one trainer's replay (`--serve-room`) followed by N viewers, in a
terminal (`--attach`, each a console process of its own, headless here) and in a browser
(`--attach URL --web`: one page server, a console process per tab; the tabs are websockets
opened by hand that read everything sent). Prints, for each kind, the memory (RSS) and CPU
(cores, over a window of play) of the trainer, of the viewers one by one and together, and
the machine's speed, so figures from two machines can be compared.

With `--browser`, the tabs are real: the distribution's Chromium (through playwright, as
the browser test drives it) opens the room's page N times, and the browser's own
processes are measured too, by proportional set size (PSS: its processes share much of
their memory, which RSS would count once a process), per tab and in all. Left out, with
why, where Chromium or playwright is missing.

    .venv/bin/python bench/room_viewers.py [--viewers 20] [--seconds 20] [--speed 5] [--browser]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # the checkout: tests/web_tabs.py
from tests.web_tabs import child_processes, connect_tab, process_group

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

TRAINER = """
import sys
from omniroute_tui.console.cli import _parser, build_app
args = _parser().parse_args(["--scenario", sys.argv[1], "--speed", sys.argv[2],
                             "--serve-room", sys.argv[3], "--operator", "trainer"])
app = build_app(args)
app.run(headless=True, size=(120, 40))
"""
VIEWER = """
import sys
from omniroute_tui.console.cli import _parser, build_app
app = build_app(_parser().parse_args(["--attach", sys.argv[1], "--operator", "trainee"]))
app.run(headless=True, size=(120, 40))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def children(pid: int) -> list[int]:
    return [child for child, _ in child_processes(pid)]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: a browser's renderers, GPU and utility processes."""
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def pss_mib(pid: int) -> float:
    """A process's proportional set size: shared pages divided among their sharers."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def marked(marker: str) -> int | None:
    """The process whose command line holds `marker` (the browser we launched)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    return int(entry.name)
    return None


async def browser_tabs(url: str, viewers: int, seconds: float, trainer: int) -> None:
    """N real tabs of the room's page in one Chromium: the browser's processes, the page
    server and the tabs' consoles, measured over `seconds`."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        print("no playwright here: real browser tabs left out (make test installs it)")
        return
    if chromium is None:
        print("no Chromium here: real browser tabs left out (make browser installs it)")
        return
    web_port = free_port()
    marker = f"--omniroute-bench={os.getpid()}-{web_port}"  # Chromium ignores it
    with spawned("-m", "omniroute_tui.console", "--attach", url, "--web",
                 "--port", str(web_port)) as page_server:
        wait_for(lambda: listening(web_port), 30, "the room's page")
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--disable-gpu", marker])
            try:
                for _ in range(viewers):
                    tab = await browser.new_page(viewport={"width": 1280, "height": 800})
                    await tab.goto(f"http://127.0.0.1:{web_port}")
                wait_for(lambda: len(children(page_server.pid)) == viewers, 60,
                         "every tab's console")
                await asyncio.sleep(5)
                root = marked(marker)
                if root is None:
                    raise SystemExit("the browser's process was not found")
                browser_pids = [root, *descendants(root)]
                consoles = children(page_server.pid)
                pids = [trainer, page_server.pid, *consoles, *browser_pids]
                cores, rss = measure(pids, seconds)
                pss = [pss_mib(pid) for pid in browser_pids]
            finally:
                await browser.close()
    print(f"{viewers} real browser tabs (Chromium {len(browser_pids)} processes, "
          f"--attach URL --web):")
    report("trainer", cores[:1], rss[:1])
    report("page server", cores[1:2], rss[1:2])
    report("tab consoles", cores[2:2 + viewers], rss[2:2 + viewers])
    browser_cores = cores[2 + viewers:]
    print(f"  {'Chromium':<22} {len(browser_pids):>3} process(es): CPU "
          f"{sum(browser_cores):5.2f} cores in all; PSS {sum(pss):7.1f} MiB in all")
    print(f"  a tab costs the serving machine {sum(rss[2:2 + viewers]) / viewers:.0f} MiB "
          f"and {sum(cores[2:2 + viewers]) / viewers:.3f} cores (its console), and the "
          f"viewer's browser {sum(pss) / viewers:.0f} MiB and "
          f"{sum(browser_cores) / viewers:.3f} cores")


def wait_for(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.1)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def spawned(*argv: str) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """`python *argv` in a process group of its own, stopped with it at the end."""
    return process_group(*argv, stdin=subprocess.DEVNULL)


def measure(pids: list[int], seconds: float) -> tuple[list[float], list[float]]:
    """Each process's CPU (cores) over `seconds`, and its RSS (MiB) at the end."""
    before = [cpu_s(p) for p in pids]
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    cores = [(cpu_s(p) - b) / wall for p, b in zip(pids, before, strict=True)]
    return cores, [rss_mib(p) for p in pids]


def report(kind: str, cores: list[float], rss: list[float]) -> None:
    print(f"  {kind:<22} {len(cores):>3} process(es): CPU {sum(cores):5.2f} cores in all "
          f"(median {statistics.median(cores):.3f}, max {max(cores):.3f}); RSS "
          f"{sum(rss):7.1f} MiB in all (median {statistics.median(rss):.1f}, "
          f"max {max(rss):.1f})")


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    start = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    rate = 5 / (time.perf_counter() - start)
    return (f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}: "
            f"{rate:.1f} M loop iterations/s (a pure-Python loop, for comparing machines)")


class Tab(threading.Thread):
    """A browser tab's websocket that reads and drops all its console sends."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = connect_tab(port, timeout_s=30)
        self.received = 0
        self.start()

    def run(self) -> None:
        """Read frames; answer each ping with its pong, as a browser does (a tab that
        answers none is taken for gone within 15 s)."""
        buffer = b""
        with contextlib.suppress(OSError):
            _, _, buffer = self._read_until(b"\r\n\r\n", buffer).partition(b"\r\n\r\n")
            while True:
                while (frame := _frame(buffer)) is not None:
                    opcode, payload, buffer = frame
                    if opcode == 0x9:
                        mask = os.urandom(4)
                        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
                        self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask + masked)
                chunk = self.sock.recv(65536)
                if not chunk:
                    return
                self.received += len(chunk)
                buffer += chunk

    def _read_until(self, marker: bytes, buffer: bytes) -> bytes:
        while marker not in buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("closed")
            buffer += chunk
        return buffer


def _frame(buffer: bytes) -> tuple[int, bytes, bytes] | None:
    """The first whole websocket frame from the server (never masked): opcode, payload,
    what follows; None while it is not whole."""
    if len(buffer) < 2:
        return None
    size, at = buffer[1] & 0x7F, 2
    if size == 126:
        if len(buffer) < 4:
            return None
        size, at = int.from_bytes(buffer[2:4], "big"), 4
    elif size == 127:
        if len(buffer) < 10:
            return None
        size, at = int.from_bytes(buffer[2:10], "big"), 10
    if len(buffer) < at + size:
        return None
    return buffer[0] & 0x0F, buffer[at:at + size], buffer[at + size:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--speed", default="5")
    parser.add_argument("--scenario", default="429-storm")
    parser.add_argument("--browser", action="store_true",
                        help="also open the room's page in real Chromium tabs (playwright)")
    args = parser.parse_args()
    print(machine())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with spawned("-c", TRAINER, args.scenario, args.speed, f"127.0.0.1:{port}") as trainer:
        wait_for(lambda: listening(port), 30, "the room")
        cores, rss = measure([trainer.pid], args.seconds / 2)
        print(f"the trainer's replay of {args.scenario} at x{args.speed}, "
              f"{args.seconds:g} s windows:")
        report("trainer, alone", cores, rss)

        with contextlib.ExitStack() as stack:
            viewers = [stack.enter_context(spawned("-c", VIEWER, url))
                       for _ in range(args.viewers)]
            time.sleep(5)  # started and attached
            alive = [v for v in viewers if v.poll() is None]
            if len(alive) < len(viewers):
                raise SystemExit(f"{len(viewers) - len(alive)} terminal viewers exited")
            cores, rss = measure([trainer.pid, *(v.pid for v in viewers)], args.seconds)
            print(f"{args.viewers} terminal viewers (--attach, headless):")
            report("trainer", cores[:1], rss[:1])
            report("terminal viewers", cores[1:], rss[1:])

        web_port = free_port()
        with spawned("-m", "omniroute_tui.console", "--attach", url, "--web",
                     "--port", str(web_port)) as page:
            wait_for(lambda: listening(web_port), 30, "the room's page")
            tabs = [Tab(web_port) for _ in range(args.viewers)]
            wait_for(lambda: len(children(page.pid)) == args.viewers, 60, "every tab's console")
            time.sleep(5)
            consoles = children(page.pid)
            cores, rss = measure([trainer.pid, page.pid, *consoles], args.seconds)
            print(f"{args.viewers} web viewers, each a websocket client standing in for a "
                  "tab (--attach URL --web; the server's side only: --browser measures "
                  "real Chromium tabs):")
            report("trainer", cores[:1], rss[:1])
            report("page server", cores[1:2], rss[1:2])
            report("tab consoles", cores[2:], rss[2:])
            sent = sum(t.received for t in tabs) / 2**20
            print(f"  sent to the tabs: {sent:.1f} MiB in all")
            for tab in tabs:
                tab.sock.close()
            start = time.monotonic()
            wait_for(lambda: children(page.pid) == [], 60, "the tab consoles ending")
            print(f"  after the tabs dropped their connections: every tab console ended in "
                  f"{time.monotonic() - start:.1f} s")
        if args.browser:
            asyncio.run(browser_tabs(url, args.viewers, args.seconds, trainer.pid))


if __name__ == "__main__":
    main()
