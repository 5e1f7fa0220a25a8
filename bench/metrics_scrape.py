"""CPU of one `GET /metrics` scrape of 3 providers x 1,000 connections (target: < 50 ms).

The router of a config file at the limit of connections per provider, with 30 % of every
pool cooling, a few models locked and traffic counted on every connection, so each
per-connection series carries a value; a scrape is what the gateway's handler does:
`exposition(registry)` (the collector reads the engine, then the text is written). It is
measured in this process, as CPU time, the median of `--scrapes`; the same text written by
prometheus_client's own `generate_latest` is timed beside it, and the machine's speed is
printed (the figures scale with it).

With `--concurrent N`, what scrapes cost the requests instead: a gateway (`gateway: {metrics:
public}`, 3 providers x `--connections` keys) in front of the
simulator's fake, chat requests from `CHAT_CLIENTS` clients one after another, in
alternating rounds without and with N scrapers, each scraping once a second, all at the
same moment (the worst case for a burst); the chat latency's p50 and p99 in each (target:
p99 with scrapers at most 10 % above without). The fake, the gateway and the scrapers each
run in their own process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from prometheus_client import generate_latest

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import (
    BreakerAdmission,
    Classification,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.engine.events import ResultEvent
from omniroute_tui.metrics import build_registry, exposition
from omniroute_tui.router import Route, Router, Target

sys.path.insert(0, str(Path(__file__).parent))
from gateway_overhead import (
    fakes_process,
    free_port,
    gateway_process,
    percentile,
    stop,
    wait_for_file,
    wait_until_up,
)
from sim_throughput import loop_step_ns

PROVIDERS = ("p0", "p1", "p2")
T0 = 1_700_000_000_000


def build(connections: int) -> tuple[Router, ManualClock]:
    clock = ManualClock(T0)
    names = tuple(f"key-{i:04d}" for i in range(connections))
    engine = ResilienceEngine([ProviderSpec(p, names, default_settings()) for p in PROVIDERS],
                              clock)
    router = Router(engine, {"chat": Route("chat", tuple(Target(p, "m") for p in PROVIDERS)),
                             "alt": Route("alt", tuple(Target(p, "n") for p in PROVIDERS))},
                    models={p: frozenset({"m", "n"}) for p in PROVIDERS})
    return router, clock


def load(router: Router, clock: ManualClock) -> None:
    """Cooling keys, locked models and one counted attempt on every key."""
    engine = router.engine
    admission = BreakerAdmission(True, 0)
    for provider in PROVIDERS:
        names = engine.spec(provider).connections
        cooling = len(names) * 3 // 10
        for name in names[:cooling]:
            engine.record(provider, name, "m", admission,
                          Classification(FailureKind.QUOTA_EXHAUSTED, 3_600_000))
        for name in names[cooling:cooling + 20]:
            engine.record(provider, name, "n", admission, Classification(FailureKind.FORBIDDEN))
        for name in names:
            engine.bus.emit(ResultEvent(clock.now_ms(), "r", 1, provider, name, "m", 200, None,
                                        800))


def cpu_ms(work: object, scrapes: int) -> list[float]:
    times = []
    for _ in range(scrapes):
        started = time.process_time_ns()
        work()  # type: ignore[operator]
        times.append((time.process_time_ns() - started) / 1e6)
    return times


#: chat clients in the concurrent bench, each sending one request after another
CHAT_CLIENTS = 4


def scenario(connections: int) -> str:
    """Three fake providers of `connections` keys each, one route over them."""
    lines = ["name: scrapes", "duration: 1h", "providers:"]
    for provider in PROVIDERS:
        lines.append(f"  {provider}:")
        lines.append("    models: [m]")
        lines.append("    latency: 0ms")
        lines.append("    connections:")
        lines.extend(f"      - {{id: key-{i:04d}, api_key: sk-bench-{provider}-{i:04d}}}"
                     for i in range(connections))
    lines.append("routes:")
    lines.append(f"  chat: {{targets: [{', '.join(p + '/m' for p in PROVIDERS)}]}}")
    return "\n".join(lines) + "\n"


SCRAPER = """\
import asyncio, sys, time
from urllib.parse import urlsplit
url, count, aligned = urlsplit(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "aligned"
REQUEST = f"GET {url.path} HTTP/1.1\\r\\nhost: {url.netloc}\\r\\n\\r\\n".encode()
async def scraper(phase):
    # raw HTTP/1.1 on one kept-alive connection: the bytes read, not parsed, so that the
    # scrapers' own CPU takes little from the machine the gateway and the chat clients share
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    while True:
        writer.write(REQUEST)
        head = await reader.readuntil(b"\\r\\n\\r\\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\\r\\n")
                      if line.startswith(b"content-length:"))
        await reader.readexactly(length)
        await asyncio.sleep((phase - time.time()) % 1)  # next on its phase in the second
async def main():
    # each at its own phase of the second (as Prometheus spreads its targets), or all at 0
    await asyncio.gather(*(scraper(0 if aligned else i / count) for i in range(count)))
asyncio.run(main())
"""


async def chat_round(url: str, seconds: float) -> list[float]:
    """Milliseconds per chat request, `CHAT_CLIENTS` clients for `seconds`."""
    took: list[float] = []
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    stop_at = time.monotonic() + seconds

    async def client(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop_at:
            start = time.perf_counter()
            reply = await http.post("/v1/chat/completions", json=body)
            took.append((time.perf_counter() - start) * 1000)
            assert reply.status_code == 200, reply.text

    limits = httpx.Limits(max_connections=CHAT_CLIENTS)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(CHAT_CLIENTS)))
    return took


#: the rounds of the concurrent bench, in turn: no scrapers, scrapers each at its own
#: phase of the second, scrapers all at once
MODES = ("none", "spread", "aligned")


def concurrent(connections: int, scrapers: int, rounds: int, seconds: float, path: str
               ) -> None:
    """Chat latency without and with `scrapers` scraping `path`, in alternating rounds."""
    took: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as folder:
        scenario_path = Path(folder) / "scrapes.yaml"
        scenario_path.write_text(scenario(connections))
        config = Path(folder) / "router.yaml"
        procs = [fakes_process(scenario_path, config)]
        try:
            wait_for_file(config)
            data = yaml.safe_load(config.read_text())
            data["gateway"] = {**(data.get("gateway") or {}), "metrics": "public"}
            config.write_text(yaml.safe_dump(data))
            port = free_port()
            procs.append(gateway_process(config, port))
            url = f"http://127.0.0.1:{port}"
            wait_until_up(f"{url}/health")
            size = len(httpx.get(f"{url}{path}", timeout=30).content)
            asyncio.run(chat_round(url, 1))  # warm-up: connections, the first decisions
            for index in range(rounds * len(MODES)):
                mode = MODES[index % len(MODES)]
                crowd = None if mode == "none" else subprocess.Popen(
                    [sys.executable, "-c", SCRAPER, f"{url}{path}", str(scrapers), mode])
                try:
                    if crowd is not None:
                        time.sleep(1.5)  # connected and on their phases
                    took[mode].extend(asyncio.run(chat_round(url, seconds)))
                finally:
                    if crowd is not None:
                        crowd.kill()
                        crowd.wait()
        finally:
            stop(procs)
    print(f"a gateway of {len(PROVIDERS)} providers x {connections:,} connections, "
          f"{CHAT_CLIENTS} chat clients, {rounds} rounds of {seconds:g} s of each, {scrapers} "
          f"scrapers of {path} ({size / 1e3:,.0f} kB) each once a second:")
    labels = {"none": "no scrapers", "spread": "spread", "aligned": "all at once"}
    for mode in MODES:
        values = took[mode]
        print(f"  {labels[mode]:>12}: chat p50 {percentile(values, 0.5):6.2f} ms   "
              f"p99 {percentile(values, 0.99):6.2f} ms   ({len(values):,} requests)")
    base = percentile(took["none"], 0.99)
    print(f"p99 with / without scrapers: {percentile(took['spread'], 0.99) / base:.3f} "
          f"spread over the second (target <= 1.10), "
          f"{percentile(took['aligned'], 0.99) / base:.3f} all at once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=None,
                        help="connections per provider, 3 providers (default: 1,000; "
                        "100 with --concurrent)")
    parser.add_argument("--scrapes", type=int, default=30)
    parser.add_argument("--concurrent", type=int, metavar="N",
                        help="N scrapers against a gateway serving chat, each once a second")
    parser.add_argument("--rounds", type=int, default=3, help="rounds each way (--concurrent)")
    parser.add_argument("--seconds", type=float, default=5, help="a round's length "
                        "(--concurrent)")
    parser.add_argument("--path", default="/metrics", help="what the scrapers ask for "
                        "(--concurrent; /health: what any N requests cost, for comparison)")
    args = parser.parse_args()
    speed = loop_step_ns()
    if args.concurrent is not None:
        if args.concurrent < 1 or args.rounds < 1 or args.seconds <= 0:
            parser.error("--concurrent, --rounds, --seconds: at least 1 (seconds above 0)")
        concurrent(args.connections or 100, args.concurrent, args.rounds, args.seconds,
                   args.path)
        print(f"machine: {speed:.1f} ns a Python loop step (now {loop_step_ns():.1f})")
        return
    args.connections = args.connections or 1_000
    router, clock = build(args.connections)
    registry = build_registry(router, clock=clock)
    load(router, clock)
    text = exposition(registry)
    assert text == generate_latest(registry)
    clock.advance(1_000)
    ours = cpu_ms(lambda: exposition(registry), args.scrapes)
    theirs = cpu_ms(lambda: generate_latest(registry), max(3, args.scrapes // 5))
    collect = cpu_ms(lambda: list(registry.collect()), args.scrapes)
    samples = text.count(b"\n") - 2 * text.count(b"# TYPE")
    print(f"one scrape of {len(PROVIDERS)} providers x {args.connections:,} connections: "
          f"{samples:,} samples, {len(text) / 1e6:.1f} MB of text")
    print(f"  CPU per scrape:    median {statistics.median(ours):6.1f} ms   "
          f"worst {max(ours):6.1f} ms   (target < 50 ms)")
    print(f"  of which reading:  median {statistics.median(collect):6.1f} ms "
          "(the collector: engine snapshots, families)")
    print(f"  generate_latest:   median {statistics.median(theirs):6.1f} ms "
          "(prometheus_client's writer, the same bytes)")
    print(f"  machine: {speed:.1f} ns a Python loop step (now {loop_step_ns():.1f}); the "
          "figures scale with it")


if __name__ == "__main__":
    main()
