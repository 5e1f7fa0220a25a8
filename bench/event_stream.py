"""Event stream fan-out: how far behind SSE readers of `/api/resilience/events` fall.

A fake provider (`omniroute-sim serve`) and `omniroute-gateway` run in their own
processes on 127.0.0.1; another process drives completions at `--rate` requests a second
(open loop) for `--seconds`, while this one holds the readers. Each reader's lag is the
time from an event's emission (its `t`, epoch ms on the gateway's clock, the same machine's
clock as the readers') to its arrival at the reader, p50/p99/max. The same load with one
reader is the baseline, in the same run. Target: 50 readers at 200 requests/s, none
dropped and none behind (every reader gets every event, p99 within a few tens of ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from gateway_overhead import (
    cpu_s,
    fakes_process,
    free_port,
    gateway_process,
    percentile,
    stop,
    wait_for_file,
    wait_until_up,
)
from sim_throughput import loop_step_ns

SCENARIO = """\
name: event-stream
duration: 1h
providers:
  fake: {models: [m], latency: 5ms, connections: [{id: k, api_key: sk-bench-key-0001}]}
routes:
  chat: {targets: [fake/m]}
"""
BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
TOKEN = "bench-token-0123456789abcdef"
#: an engine event's frame: its `t` comes first in the data line
EMITTED_AT = re.compile(rb'\ndata: \{"t":(\d+)')
#: a reader whose p99 lag is over this is behind
BEHIND_MS = 1000


@dataclass
class Reader:
    lags_ms: list[int] = field(default_factory=list)
    dropped: bool = False
    ended: bool = False
    last_read: float = 0.0


async def follow(reader: Reader, port: int, connected: asyncio.Event) -> None:
    """Read the stream over a bare socket (httpx would cost this process more than the
    gateway spends on it): the arrival time is taken as each read returns."""
    stream, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /api/resilience/events HTTP/1.1\r\nhost: bench\r\n"
                 f"authorization: Bearer {TOKEN}\r\n\r\n".encode())
    head = await stream.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(f"the event stream answered {head[:40]!r}")
    tail = b""
    try:
        while data := await stream.read(1 << 18):
            now_ms = time.time_ns() // 1_000_000
            reader.last_read = time.monotonic()
            data = tail + data
            cut = data.rfind(b"\n\n") + 2 if b"\n\n" in data else 0  # whole frames
            data, tail = data[:cut], data[cut:]
            if b": connected" in data:
                connected.set()
            reader.lags_ms.extend(now_ms - int(t) for t in EMITTED_AT.findall(data))
            if b"event: dropped" in data:
                reader.dropped = True
    except (asyncio.CancelledError, ConnectionError):
        pass
    finally:
        reader.ended = True
        writer.close()


async def phase(port: int, readers: int, rate: int, seconds: float, gateway_pid: int
                ) -> tuple[list[Reader], float, dict[str, float]]:
    """`readers` readers through `seconds` of load: the readers, the gateway's CPU
    seconds per second of load, and the driver's counts."""
    state = [Reader() for _ in range(readers)]
    connected = [asyncio.Event() for _ in state]
    tasks = [asyncio.create_task(follow(r, port, c)) for r, c in zip(state, connected,
                                                                    strict=True)]
    await asyncio.wait_for(asyncio.gather(*(c.wait() for c in connected)), 30)
    cpu, own = cpu_s(gateway_pid), time.process_time()
    driver = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--drive", str(port), str(rate), str(seconds),
        stdout=subprocess.PIPE)
    out, _ = await driver.communicate()
    cpu_per_s = (cpu_s(gateway_pid) - cpu) / seconds
    counts: dict[str, float] = {**json.loads(out),
                                "readers_cpu": (time.process_time() - own) / seconds}
    ended = time.monotonic()
    deadline = ended + 60  # readers behind go on receiving: until all are quiet
    while time.monotonic() < deadline and any(
            not r.ended and time.monotonic() - r.last_read < 0.5 for r in state):
        await asyncio.sleep(0.1)
    counts["drain_s"] = max(r.last_read for r in state) - ended
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks)
    return state, cpu_per_s, counts


async def drive(port: int, rate: int, seconds: float) -> None:
    """`rate` completions a second for `seconds`, each started on time (open loop)."""
    counts = {"sent": 0, "ok": 0, "errors": 0}
    took_ms: list[float] = []
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                 limits=limits) as http:
        async def one() -> None:
            start = time.perf_counter()
            try:
                reply = await http.post("/v1/chat/completions", json=BODY)
                counts["ok" if reply.status_code == 200 else "errors"] += 1
                took_ms.append((time.perf_counter() - start) * 1000)
            except httpx.HTTPError:
                counts["errors"] += 1

        pending = []
        started = time.monotonic()
        for n in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
            pending.append(asyncio.create_task(one()))
            counts["sent"] += 1
        await asyncio.gather(*pending)
    took_ms = took_ms or [0.0]
    print(json.dumps({**counts, "p50_ms": statistics.median(took_ms),
                      "p99_ms": percentile(took_ms, 0.99)}))


async def handler_cost(readers: int, rounds: int = 200) -> float:
    """CPU microseconds the bus handler costs the routing path an event, with `readers`
    clients (in this process, without sockets): the emits are timed, the clients' reads
    between rounds are not."""
    from omniroute_tui.engine.bus import EventBus
    from omniroute_tui.engine.events import ResultEvent
    from omniroute_tui.engine.kinds import FailureKind
    from omniroute_tui.gateway.events_stream import EventBroadcaster

    bus = EventBus()
    broadcaster = EventBroadcaster(bus)
    streams = [broadcaster.stream() for _ in range(readers)]
    for stream in streams:
        await anext(stream)
    pending = [asyncio.ensure_future(anext(stream)) for stream in streams]
    event = ResultEvent(time.time_ns() // 1_000_000, "r1", 1, "fake", "k", "m", 429,
                        FailureKind.RATE_LIMITED, 12)
    spent = 0
    for _ in range(rounds):
        started = time.process_time_ns()
        for _ in range(4):  # a request's events
            bus.emit(event)
        spent += time.process_time_ns() - started
        await asyncio.sleep(0)
        await asyncio.gather(*pending)
        pending = [asyncio.ensure_future(anext(stream)) for stream in streams]
    for task in pending:
        task.cancel()
    broadcaster.close()
    return spent / (rounds * 4) / 1000


def summary(name: str, state: list[Reader], cpu_per_s: float, counts: dict[str, float],
            seconds: float) -> None:
    most = max(len(r.lags_ms) for r in state)
    rows = []
    behind = 0
    for r in state:
        lags = r.lags_ms or [0]
        p50, p99, worst = statistics.median(lags), percentile(lags, 0.99), max(lags)
        behind += (p99 > BEHIND_MS or len(r.lags_ms) < most) and not r.dropped
        rows.append((p50, p99, worst, len(r.lags_ms), r.dropped))
    print(f"{name}: {counts['sent'] / seconds:.0f} requests/s sent, {counts['ok']:.0f} answered "
          f"(p50 {counts['p50_ms']:.1f} ms, p99 {counts['p99_ms']:.1f} ms), "
          f"{counts['errors']:.0f} errors; CPU a second: gateway {cpu_per_s:.2f} s, "
          f"readers {counts['readers_cpu']:.2f} s")
    print(f"  events a reader: {min(row[3] for row in rows):,} to {most:,}; "
          f"dropped {sum(row[4] for row in rows)}; behind {behind} "
          f"(p99 over {BEHIND_MS} ms, or fewer events than the others); the last event "
          f"arrived {max(0.0, counts['drain_s']):.1f} s after the load's end")
    print(f"  lag, worst reader: p50 {max(row[0] for row in rows):.0f} ms, "
          f"p99 {max(row[1] for row in rows):.0f} ms, max {max(row[2] for row in rows)} ms")
    if len(rows) > 1:
        print("  each reader's lag, p50/p99/max ms:")
        cells = [f"{i:3d}: {p50:5.0f}/{p99:5.0f}/{worst:5d}{' dropped' if dropped else ''}"
                 for i, (p50, p99, worst, _, dropped) in enumerate(rows)]
        for start in range(0, len(cells), 4):
            print("   " + "   ".join(cells[start:start + 4]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--rate", type=int, default=200, help="requests a second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--drive", nargs=3, metavar=("PORT", "RATE", "SECONDS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        asyncio.run(drive(int(args.drive[0]), int(args.drive[1]), float(args.drive[2])))
        return
    speed = loop_step_ns()
    handler_us = {n: asyncio.run(handler_cost(n)) for n in (0, 1, args.readers)}
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "stream.yaml"
        scenario.write_text(SCENARIO)
        config = Path(folder) / "router.yaml"
        procs = [fakes_process(scenario, config)]
        try:
            wait_for_file(config)
            yaml.safe_load(config.read_text())  # written whole
            port = free_port()
            procs.append(gateway_process(config, port, token=TOKEN))
            wait_until_up(f"http://127.0.0.1:{port}/health")
            results = [(f"{n} reader{'s' if n > 1 else ''}",
                        *asyncio.run(phase(port, n, args.rate, args.seconds, procs[1].pid)))
                       for n in (1, args.readers)]
        finally:
            stop(procs)
    print(f"machine: {speed:.1f} ns a Python loop step (now {loop_step_ns():.1f}); "
          f"{args.rate} requests/s for {args.seconds:g} s a phase")
    print("the bus handler (the routing path's part of the stream), CPU an event: " + ", ".join(
        f"{us:.2f} µs with {n} client{'' if n == 1 else 's'}" for n, us in handler_us.items()))
    for name, state, cpu_per_s, counts in results:
        summary(name, state, cpu_per_s, counts, args.seconds)


if __name__ == "__main__":
    main()
