"""Gateway overhead on loopback: the same fake provider called directly and through the
gateway, alternating request by request (the direct call is the baseline), then the
gateway's throughput with 32 concurrent clients. Target: <= 1 ms median overhead.

The fake and the gateway each run in their own process, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

SCENARIO = """\
name: overhead
duration: 1h
providers:
  fake: {models: [m], latency: 0ms, connections: [{id: k, api_key: sk-bench-key-0001}]}
routes:
  chat: {targets: [fake/m]}
"""
BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_up(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latencies(direct: str, gateway: str, count: int) -> tuple[list[float], list[float]]:
    direct_ms, through_ms = [], []
    headers = {"authorization": "Bearer sk-bench-key-0001"}
    async with httpx.AsyncClient(timeout=10) as http:
        for i in range(count + 50):
            start = time.perf_counter()
            reply = await http.post(f"{direct}/chat/completions", json=dict(BODY, model="m"),
                                    headers=headers)
            a = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            through = await http.post(f"{gateway}/v1/chat/completions", json=BODY)
            b = (time.perf_counter() - start) * 1000
            assert reply.status_code == through.status_code == 200, through.text
            if i >= 50:  # warm-up done
                direct_ms.append(a)
                through_ms.append(b)
    return direct_ms, through_ms


async def throughput(gateway: str, clients: int, seconds: float) -> tuple[int, int]:
    done = errors = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=10, limits=limits) as http:
        async def one() -> None:
            nonlocal done, errors
            while time.monotonic() < deadline:
                reply = await http.post(f"{gateway}/v1/chat/completions", json=BODY)
                if reply.status_code == 200:
                    done += 1
                else:
                    errors += 1
        await asyncio.gather(*(one() for _ in range(clients)))
    return done, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "overhead.yaml"
        scenario.write_text(SCENARIO)
        config = Path(folder) / "router.yaml"
        fake = subprocess.Popen([str(bin_dir / "omniroute-sim"), "serve", str(scenario),
                                 "--for", "1h", "--config-out", str(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        gateway_proc = None
        try:
            deadline = time.monotonic() + 30
            while not config.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
            direct = yaml.safe_load(config.read_text())["providers"]["fake"]["base_url"]
            port = free_port()
            gateway_proc = subprocess.Popen(
                [str(bin_dir / "omniroute-gateway"), "--config", str(config), "--listen",
                 f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "OMNIROUTE_TOKEN": ""})
            gateway = f"http://127.0.0.1:{port}"
            wait_until_up(f"{gateway}/health")
            direct_ms, through_ms = asyncio.run(latencies(direct, gateway, args.requests))
            done, errors = asyncio.run(throughput(gateway, args.clients, args.seconds))
        finally:
            for proc in (gateway_proc, fake):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    d50, t50 = statistics.median(direct_ms), statistics.median(through_ms)
    d99, t99 = percentile(direct_ms, 0.99), percentile(through_ms, 0.99)
    print(f"{args.requests} sequential requests, alternating direct / through the gateway:")
    print(f"  direct:   median {d50:6.2f} ms   p99 {d99:6.2f} ms")
    print(f"  gateway:  median {t50:6.2f} ms   p99 {t99:6.2f} ms   ratio {t50 / d50:.2f}")
    print(f"  overhead: median {t50 - d50:6.2f} ms   p99 {t99 - d99:6.2f} ms")
    print(f"throughput, {args.clients} concurrent clients for {args.seconds:g} s: "
          f"{done / args.seconds:,.0f} requests/s ({errors} errors)")


if __name__ == "__main__":
    main()
