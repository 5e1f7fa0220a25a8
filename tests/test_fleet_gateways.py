"""Three `omniroute-gateway` processes on one Redis, in front of `omniroute-sim serve`
fakes with a provider outage: the outage opens the breaker on every replica, an operator's
force-open and reset reach the others, a replica killed with SIGKILL changes nothing for
the others, and a restarted one resumes from the shared state."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from .gateway_helpers import TOKEN, free_port
from .redis_helpers import REDIS_URL
from .waiting import eventually_sync

FAKES = """\
name: fleet-outage
duration: 10m
resilience: {breaker: {failure_threshold: 2, degraded_threshold: 1, reset_timeout: 10m},
             dedup: {connection_window: 0s, network_window: 0s}}
providers:
  broken: {models: [m], latency: 2ms, connections: [b1, b2]}
  healthy: {models: [m], latency: 2ms, connections: [h1]}
routes:
  chat: {targets: [broken/m, healthy/m]}
faults:
  - {name: outage, target: broken, error: 503, at: 0s, for: 10m}
"""
AUTH = {"authorization": f"Bearer {TOKEN}", "x-omniroute-reason": "fleet-test"}


@contextlib.contextmanager
def process(args: list[str], **kwargs: object) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def gateway(config: Path, port: int) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    return process(["omniroute_tui.gateway", "--config", str(config), "--listen",
                    f"127.0.0.1:{port}"], env={**os.environ, "OMNIROUTE_TOKEN": TOKEN})


def up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def breaker(url: str, provider: str) -> dict[str, object]:
    state = httpx.get(f"{url}/api/resilience/state", headers=AUTH, timeout=5).json()
    return next(b for b in state["breakers"] if b["provider"] == provider)


@contextlib.contextmanager
def fakes_and_fleet(tmp_path: Path, prefix: str, fakes: str
                    ) -> Iterator[tuple[Path, list[int], list[subprocess.Popen[str]]]]:
    """`omniroute-sim serve` fakes, and three gateways on them sharing Redis under
    `prefix`: yields the router config, the gateways' ports and their processes."""
    scenario = tmp_path / "fakes.yaml"
    scenario.write_text(fakes)
    config = tmp_path / "router.yaml"
    with process(["simulator.cli", "serve", str(scenario), "--for", "5m", "--config-out",
                  str(config)]):
        eventually_sync(config.exists, timeout_s=20, what="the fakes' router config")
        config.write_text(config.read_text()
                          + f"store: {{redis: '{REDIS_URL}', prefix: {prefix}}}\n")
        ports = [free_port() for _ in range(3)]
        with gateway(config, ports[0]) as a, gateway(config, ports[1]) as b, \
                gateway(config, ports[2]) as c:
            for port in ports:
                url = f"http://127.0.0.1:{port}"
                eventually_sync(lambda url=url: up(url), timeout_s=20, what=url)
            yield config, ports, [a, b, c]


def test_three_gateways_share_one_state(tmp_path: Path, prefix: str) -> None:
    with fakes_and_fleet(tmp_path, prefix, FAKES) as (config, ports, procs):
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        third = procs[2]
        # the outage: answered by the fallback, and the breaker opens fleet-wide
        for i in range(6):
            reply = httpx.post(f"{urls[i % 3]}/v1/chat/completions", timeout=10,
                               json={"model": "chat", "messages": []})
            assert reply.status_code == 200
        for url in urls:
            eventually_sync(lambda url=url: breaker(url, "broken")["state"] == "OPEN",
                            timeout_s=5, what=f"the broken provider's breaker at {url}")
        # an operator's force-open on one replica is in force on the others
        delays = []
        for i in range(20):
            minutes = 10 + i
            started = time.perf_counter()
            assert httpx.post(f"{urls[0]}/api/resilience/breakers/healthy/force-open",
                              json={"for": f"{minutes}m"}, headers=AUTH).status_code == 200

            def arrived(minutes: int = minutes) -> bool:
                b = breaker(urls[1], "healthy")
                return b["state"] == "OPEN" and int(b["retry_after_ms"] or 0) > (
                    minutes * 60_000 - 5_000)

            eventually_sync(arrived, timeout_s=5, poll_s=0.002, what="the force-open")
            delays.append((time.perf_counter() - started) * 1000)
        delays.sort()  # printed, not asserted: wall-clock time (bench/fleet.py times it)
        # an action acknowledged by a replica has reached the fleet: SIGKILL right after
        # it loses nothing; and the others go on as before
        reply = httpx.post(f"{urls[2]}/api/resilience/connections/broken/b1/disable",
                           headers=AUTH)
        assert reply.status_code == 200 and reply.json()["shared"] is True
        os.kill(third.pid, signal.SIGKILL)
        third.wait(timeout=10)

        def disabled_there() -> bool:
            state = httpx.get(f"{urls[1]}/api/resilience/state", headers=AUTH).json()
            return any(c["connection"] == "b1" and c["disabled"]
                       for c in state["connections"])

        eventually_sync(disabled_there, timeout_s=5, what="the action of the killed one")
        assert httpx.post(f"{urls[0]}/api/resilience/breakers/healthy/reset",
                          headers=AUTH).status_code == 200
        eventually_sync(lambda: breaker(urls[1], "healthy")["state"] == "CLOSED",
                        timeout_s=5, what="the reset on the second replica")
        reply = httpx.post(f"{urls[1]}/v1/chat/completions", timeout=10,
                           json={"model": "chat", "messages": []})
        assert reply.status_code == 200
        # restarted, it resumes from the shared state: broken is OPEN there at once
        with gateway(config, ports[2]):
            eventually_sync(lambda: up(urls[2]), timeout_s=20, what="the restart")
            eventually_sync(lambda: breaker(urls[2], "broken")["state"] == "OPEN",
                            timeout_s=5, what="the shared state on the restarted one")
            assert breaker(urls[2], "healthy")["state"] == "CLOSED"
    print(f"force-open propagation: p50 {statistics.median(delays):.1f} ms, "
          f"max {delays[-1]:.1f} ms")


def test_the_failing_provider_sees_one_probe_per_reset_window_from_the_fleet(
        tmp_path: Path, prefix: str) -> None:
    fakes = FAKES.replace("reset_timeout: 10m", "reset_timeout: 1s")
    with fakes_and_fleet(tmp_path, prefix, fakes) as (_, ports, _):
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        attempts: list[tuple[float, dict[str, object]]] = []
        stop = threading.Event()

        def follow(url: str) -> None:  # each replica's own attempts on `broken`
            with httpx.stream("GET", f"{url}/api/resilience/events", headers=AUTH,
                              timeout=httpx.Timeout(5, read=30)) as stream:
                for line in stream.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("data: "):
                        frame = json.loads(line[6:])
                        if frame["type"] == "attempt" and frame["provider"] == "broken":
                            attempts.append((time.monotonic(), frame))

        threads = [threading.Thread(target=follow, args=(url,), daemon=True)
                   for url in urls]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # the streams are open (a missed frame would only help)
        sent = 0

        def all_open() -> bool:
            return all(breaker(url, "broken")["state"] in ("OPEN", "HALF_OPEN")
                       for url in urls)

        while not all_open():  # the outage, until the fleet has opened the breaker
            httpx.post(f"{urls[sent % 3]}/v1/chat/completions", timeout=10,
                       json={"model": "chat", "messages": []})
            sent += 1
            assert sent < 100, "the fleet never opened the breaker"
        opened = time.monotonic()
        while time.monotonic() - opened < 3.5:  # 20 requests a second for 3.5 s
            reply = httpx.post(f"{urls[sent % 3]}/v1/chat/completions", timeout=10,
                               json={"model": "chat", "messages": []})
            assert reply.status_code == 200  # the fallback answers
            sent += 1
            time.sleep(0.05)
        stop.set()
        after = [frame for t, frame in attempts if t > opened + 0.2]
        # 1 s windows over 3.5 s: the whole fleet probed at most once a window, where
        # three isolated replicas would have sent three
        print(f"probes on the failing provider in 3.5 s of 1 s windows: {len(after)}")
        assert 1 <= len(after) <= 4, after
        assert all(frame["probe"] for frame in after)


HANGING_PROBE = """\
name: lease-holder
duration: 10m
resilience: {breaker: {failure_threshold: 2, degraded_threshold: 1, reset_timeout: 1s},
             dedup: {connection_window: 0s, network_window: 0s}, request: {timeout: 30s}}
providers:
  broken: {models: [m], latency: 2ms, connections: [b1, b2]}
  healthy: {models: [m], latency: 2ms, connections: [h1]}
routes:
  chat: {targets: [broken/m, healthy/m]}
faults:
  - {name: outage, target: broken, error: 503, at: 0s, for: 1m}
  - {name: hanging, target: broken, error: timeout, at: 1m, for: 1m}
"""


async def test_a_lease_holder_killed_mid_probe_blocks_the_others_one_reset_window_at_most(
        tmp_path: Path, prefix: str) -> None:
    """The replica whose probe hangs holds the fleet's lease (renewed past its lifetime
    while the probe is in flight); SIGKILLed, and the outage over, another replica probes
    (and closes the breaker) within one reset window + 1 s, not the request timeout."""
    import redis.asyncio as aredis

    from omniroute_tui.clock import ManualClock
    from simulator.http_fakes import start_fakes, stop_fakes
    from simulator.scenario import load_scenario
    from simulator.serve import router_config_for

    from .waiting import eventually

    clock = ManualClock(0)  # the fakes' scenario time: the test moves it
    loaded = load_scenario("fakes.yaml", text=HANGING_PROBE)
    fakes = await start_fakes(loaded, clock)
    client = aredis.from_url(REDIS_URL)
    pending: set[asyncio.Task[object]] = set()
    try:
        config = tmp_path / "router.yaml"
        config.write_text(yaml.safe_dump(router_config_for(loaded, fakes))
                          + f"store: {{redis: '{REDIS_URL}', prefix: {prefix}}}\n")
        ports = [free_port() for _ in range(3)]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        async with httpx.AsyncClient(timeout=httpx.Timeout(40)) as http:
            async def state(url: str) -> dict[str, Any]:
                reply = await http.get(f"{url}/api/resilience/state", headers=AUTH)
                return next(b for b in reply.json()["breakers"] if b["provider"] == "broken")

            async def is_up(url: str) -> bool:
                try:
                    return (await http.get(f"{url}/health", timeout=1)).status_code == 200
                except httpx.HTTPError:
                    return False

            def send(url: str) -> None:  # not awaited: a probe that hangs must not stall
                task = asyncio.create_task(http.post(f"{url}/v1/chat/completions",
                                                     json={"model": "chat", "messages": []}))
                pending.add(task)
                task.add_done_callback(pending.discard)
                # the killed one's answers fail: seen here, not logged as never retrieved
                task.add_done_callback(lambda t: t.cancelled() or t.exception())

            with gateway(config, ports[0]) as a, gateway(config, ports[1]) as b, \
                    gateway(config, ports[2]) as c:
                procs = {p.pid: p for p in (a, b, c)}
                for url in urls:
                    await eventually(lambda url=url: is_up(url), timeout_s=20, what=url)
                for i in range(12):  # the outage opens the breaker fleet-wide
                    send(urls[i % 3])
                await eventually(lambda: all_open(urls, state), timeout_s=10,
                                 what="the breaker OPEN on every replica")
                clock.set(60_000)  # the provider now hangs: the probe never answers
                holder, holder_url = "", urls[0]
                while not holder or not (await state(holder_url))["probes_in_flight"]:
                    for url in urls:
                        send(url)
                    await asyncio.sleep(0.05)
                    raw = await client.get(f"{prefix}:lease:broken")
                    holder = raw.decode() if raw else ""
                    holder_url = next((u for u, pid in zip(urls, procs, strict=True)
                                       if f":{pid}:" in holder), urls[0])
                # longer than the lease lives unrenewed (the reset window, 1 s): renewed
                await asyncio.sleep(1.5)
                assert (await client.get(f"{prefix}:lease:broken")).decode() == holder
                victim = next(p for pid, p in procs.items() if f":{pid}:" in holder)
                victim.kill()
                victim.wait(timeout=10)
                killed = time.monotonic()
                clock.set(120_000)  # the outage is over
                others = [u for u in urls if u != holder_url]

                async def probed() -> bool:
                    for url in others:
                        send(url)
                    states = [(await state(url))["state"] for url in others]
                    return "CLOSED" in states

                await eventually(probed, timeout_s=60, poll_s=0.05,
                                 what="a probe by another replica")
                blocked = time.monotonic() - killed
                print(f"probes blocked after the lease holder died: {blocked:.2f} s")
                assert blocked <= 1 + 1  # one reset window, and a second
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
    finally:
        await client.aclose()
        for fake in fakes:  # the hanging answer to the killed one is not waited for
            fake.server.force_exit = True
        await stop_fakes(fakes)


async def all_open(urls: list[str], state: Any) -> bool:
    states = [(await state(url))["state"] for url in urls]
    return all(s in ("OPEN", "HALF_OPEN") for s in states)
