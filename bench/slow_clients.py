"""Slow clients against honest ones: a trickle attack from one address while honest clients
on other 127.0.0.x addresses call the gateway's chat API and its management API.

The attacker opens 600 connections from 127.0.0.2, sends the start of a request head on
each and then one more header byte a second, never finishing it; a connection that is
closed (cut at `head_timeout`, or refused) is opened again at once. Honest clients, one
per address from 127.0.0.10, make requests one after another, alternating a chat
completion and `GET /api/resilience/state`. The same gateway config is run twice in the
same run: with `max_connections_per_client` as high as `max_connections` (no cap per
address: what the gateway did before it had one), then with the default.

    .venv/bin/python bench/slow_clients.py [--seconds 20] [--attackers 600] [--honest 16]

Target: honest clients served >= 99 % with the cap (docs/gateway.md, "Limits").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ATTACKER = "127.0.0.2"
#: the honest clients' addresses start here: 127.0.0.10, .11, ...
HONEST_FROM = 10
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nx-slow: "
SCENARIO = """\
name: slow-clients
duration: 1h
providers:
  fake: {models: [m], latency: 5ms, connections: [{id: k, api_key: sk-bench-key-0001}]}
routes:
  chat: {targets: [fake/m]}
"""
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Attack:
    """What the attacker's connections met: `opened`, `refused` (answered at once, 503),
    `cut` (closed after holding a while: 408, or no answer)."""

    counts: Counter[str] = field(default_factory=Counter)
    holding: int = 0  # connections open now, not yet answered


async def _one_attacker(host: str, port: int, source: str, every_s: float, attack: Attack,
                        stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port,
                                                           local_addr=(source, 0))
        except OSError:
            attack.counts["connect failed"] += 1
            await asyncio.sleep(0.05)  # the listen backlog is full: the kernel says so
            continue
        attack.counts["opened"] += 1
        attack.holding += 1
        answer = b""
        try:
            writer.write(HEAD)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(every_s):
                        answer = await reader.read(64)
                        break
                writer.write(b"a")  # one more byte of a header that never ends
        except OSError:
            pass
        finally:
            attack.holding -= 1
            writer.close()
        if answer.startswith(b"HTTP/1.1 503"):
            attack.counts["refused"] += 1
        elif not stop.is_set():
            attack.counts["cut"] += 1


async def trickle(url: str, connections: int, attack: Attack, stop: asyncio.Event, *,
                  source: str = ATTACKER, every_s: float = 1.0) -> None:
    """`connections` trickling connections from `source` until `stop` is set."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    await asyncio.gather(*(_one_attacker(host, int(port), source, every_s, attack, stop)
                           for _ in range(connections)))


Call = Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]]


async def honest(url: str, clients: int, call: Call, *, requests: int | None = None,
                 seconds: float | None = None, timeout_s: float = 10.0) -> Counter[str]:
    """`clients` honest clients, each on its own address (127.0.0.10, ...), making `call`
    one after another, `requests` each or for `seconds`: what their answers were (the
    status, or the error). Each request opens a connection of its own, as many clients
    coming and going would: a kept-alive one, once had, would not show a server that
    refuses new ones."""
    outcomes: Counter[str] = Counter()
    deadline = None if seconds is None else time.monotonic() + seconds

    async def client(n: int) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{HONEST_FROM + n}",
                                             limits=httpx.Limits(max_keepalive_connections=0))
        async with httpx.AsyncClient(base_url=url, transport=transport,
                                     timeout=timeout_s) as http:
            sent = 0
            while (requests is None or sent < requests) and (
                    deadline is None or time.monotonic() < deadline):
                try:
                    outcomes[str((await call(http, sent)).status_code)] += 1
                except httpx.HTTPError as exc:
                    outcomes[type(exc).__name__] += 1
                sent += 1

    await asyncio.gather(*(client(n) for n in range(clients)))
    return outcomes


def chat_and_state(token: str) -> Call:
    """A chat completion and the management API's state, in turn."""
    async def call(http: httpx.AsyncClient, n: int) -> httpx.Response:
        if n % 2:
            return await http.get("/api/resilience/state",
                                  headers={"authorization": f"Bearer {token}"})
        return await http.post("/v1/chat/completions", json=CHAT)
    return call


def served(outcomes: Counter[str]) -> float:
    return outcomes["200"] / max(1, sum(outcomes.values()))


async def attacked(url: str, call: Call, *, attackers: int, clients: int,
                   requests: int | None = None, seconds: float | None = None,
                   timeout_s: float = 10.0) -> tuple[Counter[str], Attack]:
    """`honest(...)` once the attack holds its connections; the attack runs in a process
    of its own, as an attacker would: its loop is not the honest clients'."""
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--attack", url, str(attackers), "600",
        stdout=asyncio.subprocess.PIPE)
    assert attacker.stdout is not None
    try:
        async with asyncio.timeout(60):
            await attacker.stdout.readline()  # "ready": every connection opened once
        outcomes = await honest(url, clients, call, requests=requests, seconds=seconds,
                                timeout_s=timeout_s)
    finally:
        attacker.send_signal(signal.SIGINT)
        last = await attacker.stdout.read()
        await attacker.wait()
    attack = Attack(Counter(json.loads(last.splitlines()[-1]) if last.strip() else {}))
    return outcomes, attack


def _attack(url: str, connections: int, seconds: float) -> None:
    """The attacker's process: says `ready` once every connection was opened once, and
    its counts as JSON when interrupted or after `seconds`."""
    async def run() -> Attack:
        attack, stop = Attack(), asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        task = asyncio.create_task(trickle(url, connections, attack, stop))
        while attack.counts["opened"] < connections and not task.done():
            await asyncio.sleep(0.1)
        print("ready", flush=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await stop.wait()
        stop.set()
        await task
        return attack

    print(json.dumps(asyncio.run(run()).counts), flush=True)


def _wait_until_up(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{url}/health", timeout=1)
            return
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long the honest clients run in each round (the attack's "
                             "connections are cut at head_timeout, 10 s)")
    parser.add_argument("--attackers", type=int, default=600)
    parser.add_argument("--honest", type=int, default=16)
    parser.add_argument("--attack", nargs=3, metavar=("URL", "CONNECTIONS", "SECONDS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        _attack(args.attack[0], int(args.attack[1]), float(args.attack[2]))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from gateway_overhead import fakes_process, free_port, gateway_process, stop, wait_for_file

    token = "bench-token-" + os.urandom(8).hex()
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "slow.yaml"
        scenario.write_text(SCENARIO)
        config = Path(folder) / "router.yaml"
        procs = [fakes_process(scenario, config)]
        try:
            wait_for_file(config)
            data = yaml.safe_load(config.read_text())
            rounds = {"no cap per address (before)": {"max_connections_per_client": 512},
                      "the default cap per address": {}}
            results = []
            for label, limits in rounds.items():
                data["gateway"] = {**(data.get("gateway") or {}), "limits": limits}
                path = Path(folder) / "gateway.yaml"
                path.write_text(yaml.safe_dump(data))
                port = free_port()
                gateway = gateway_process(path, port, "--log-level", "warning", token=token)
                procs.append(gateway)
                url = f"http://127.0.0.1:{port}"
                _wait_until_up(url)
                calm = asyncio.run(honest(url, args.honest, chat_and_state(token),
                                          seconds=2))
                outcomes, attack = asyncio.run(attacked(
                    url, chat_and_state(token), attackers=args.attackers,
                    clients=args.honest, seconds=args.seconds))
                results.append((label, calm, outcomes, attack))
                stop([gateway])
                procs.remove(gateway)
        finally:
            stop(procs)
    print(f"{args.attackers} trickling connections from {ATTACKER}; {args.honest} honest "
          f"clients on 127.0.0.{HONEST_FROM}-{HONEST_FROM + args.honest - 1} for "
          f"{args.seconds:g} s (a chat completion and a management GET in turn):")
    for label, calm, outcomes, attack in results:
        total = sum(outcomes.values())
        print(f"  {label + ':':30s} honest served {served(outcomes):7.2%} of {total:,} "
              f"({dict(outcomes)}); without the attack {served(calm):.2%} of "
              f"{sum(calm.values()):,}; attacker: {dict(attack.counts)}")


if __name__ == "__main__":
    main()
