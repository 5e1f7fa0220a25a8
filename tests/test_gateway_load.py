"""Load on loopback (bounded): concurrent clients through the gateway; nothing lost or
duplicated, the store consistent afterwards; disconnects count as cancelled; the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from omniroute_tui.engine import Event, RequestEvent, ResponseEvent, ResultEvent

from .gateway_helpers import TOKEN, free_port, running_gateway

CLIENTS, PER_CLIENT = 32, 20


async def test_concurrent_clients_lose_nothing(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True) as gw:
        seen: list[Event] = []
        gw.gateway.engine.bus.subscribe(seen.append)

        async def client(n: int, http: httpx.AsyncClient) -> list[int]:
            statuses = []
            for i in range(PER_CLIENT):
                model = "fallback" if (n + i) % 4 == 0 else "chat"
                reply = await http.post("/v1/chat/completions",
                                        json={"model": model, "messages": [], "n": i})
                statuses.append(reply.status_code)
            return statuses

        limits = httpx.Limits(max_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=gw.url, timeout=20, limits=limits) as http:
            results = await asyncio.wait_for(
                asyncio.gather(*(client(n, http) for n in range(CLIENTS))), timeout=120)
        statuses = [s for r in results for s in r]
        assert len(statuses) == CLIENTS * PER_CLIENT
        assert statuses.count(200) == len(statuses)
        requests = [e.id for e in seen if isinstance(e, RequestEvent)]
        responses = [e.request for e in seen if isinstance(e, ResponseEvent)]
        assert len(requests) == len(set(requests)) == CLIENTS * PER_CLIENT
        assert sorted(responses) == sorted(requests)
        assert all(isinstance(e, ResultEvent) for e in seen if e.TYPE == "result")
        store = gw.gateway.store
        assert store is not None
        await store.flush()
        persisted = await store.load()
        live = gw.gateway.engine.snapshot()
        assert {(c.provider, c.connection, c.level, c.cooling_until, c.disabled)
                for c in persisted.connections} == {
            (c.provider, c.connection, c.level, c.cooling_until, c.disabled)
            for c in live.connections}
        assert {(b.provider, b.state, b.failures) for b in persisted.breakers} == {
            (b.provider, b.state, b.failures) for b in live.breakers}


SLOW = """\
name: slow
duration: 30m
resilience: {request: {timeout: 20s}}
providers:
  slowpoke: {models: [m], latency: 5ms, connections: [s1]}
routes:
  chat: {targets: [slowpoke/m]}
faults:
  - {name: slow, target: slowpoke, error: slow, latency: 10s, at: 0s, for: 30m}
"""


async def test_a_client_that_hangs_up_cancels_the_attempt(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SLOW) as gw:
        seen: list[Event] = []
        gw.gateway.engine.bus.subscribe(seen.append)
        async with httpx.AsyncClient(base_url=gw.url, timeout=0.5) as http:
            with contextlib.suppress(httpx.ReadTimeout):  # the client gives up
                await http.post("/v1/chat/completions", json={"model": "chat", "messages": []})
        for _ in range(100):
            if any(isinstance(e, ResponseEvent) for e in seen):
                break
            await asyncio.sleep(0.05)
        results = [e for e in seen if isinstance(e, ResultEvent)]
        assert [r.kind for r in results] == ["cancelled"]
        assert [e.status for e in seen if isinstance(e, ResponseEvent)] == [499]


def _start_cli_gateway(tmp_path: Path) -> tuple[subprocess.Popen[str], int, Path]:
    """`omniroute-gateway` in its own process with a state database; returns once up."""
    config = tmp_path / "router.yaml"
    config.write_text(
        "providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], connections: [k]}\n"
        "routes:\n  r: {targets: [p/m]}\n")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    db = tmp_path / "state.db"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "omniroute_tui.gateway", "--config", str(config), "--listen",
         f"127.0.0.1:{port}", "--db", str(db), "--token-file", str(token)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return proc, port, db


def test_gateway_cli_serves_and_shuts_down_gracefully(tmp_path: Path) -> None:
    proc, port, db = _start_cli_gateway(tmp_path)
    try:
        auth = {"authorization": f"Bearer {TOKEN}", "x-omniroute-reason": "erin"}
        assert httpx.get(f"http://127.0.0.1:{port}/api/resilience/state").status_code == 401
        reply = httpx.post(f"http://127.0.0.1:{port}/api/resilience/connections/p/k/disable",
                           headers=auth)
        assert reply.status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "stopped" in out and "Traceback" not in err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    import sqlite3

    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT disabled FROM connections WHERE connection='k'").fetchone() \
            == (1,)
        assert raw.execute("SELECT actor, action FROM audit").fetchall() == [
            ("operator (erin)", "disable")]


def test_gateway_cli_errors(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "omniroute_tui.gateway", "--config",
                          str(tmp_path / "none.yaml")], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2 and "no such file" in bad.stderr
    assert "Traceback" not in bad.stderr
    import socket

    config = tmp_path / "router.yaml"
    config.write_text("providers:\n  p: {models: [m], connections: [k]}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run([sys.executable, "-m", "omniroute_tui.gateway", "--config",
                               str(config), "--listen", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=30)
    assert busy.returncode == 2 and "could not listen" in busy.stderr
    assert "Traceback" not in busy.stderr
    listen = subprocess.run([sys.executable, "-m", "omniroute_tui.gateway", "--config",
                             str(config), "--listen", "nowhere"], capture_output=True,
                            text=True, timeout=30)
    assert listen.returncode == 2 and "HOST:PORT" in listen.stderr


def test_sigterm_while_the_store_fails_exits_in_time_and_says_what_was_not_written(
        tmp_path: Path) -> None:
    import sqlite3

    proc, port, db = _start_cli_gateway(tmp_path)
    other = sqlite3.connect(db, timeout=5)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another program holds the file from now on
        auth = {"authorization": f"Bearer {TOKEN}"}
        reply = httpx.post(f"http://127.0.0.1:{port}/api/resilience/breakers/p/force-open",
                           headers=auth, json={"for": "1h"})
        assert reply.status_code == 200
        deadline = time.monotonic() + 10
        while httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok":
            assert time.monotonic() < deadline, "the store never reported its failure"
            time.sleep(0.05)
        stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert time.monotonic() - stopping < 10
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        assert "writes are failing" in err
        assert "closed with changes not written (1 breaker(s)" in err
    finally:
        other.close()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
