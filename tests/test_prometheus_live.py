"""A real Prometheus scrapes a gateway in front of fakes through a 429 storm: what it
stored, read back through its HTTP query API, shows the breaker OPEN during the storm and
CLOSED after it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.gateway_helpers import TOKEN, free_port, running_gateway
from tests.waiting import eventually

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus server is not installed (Debian package "
                               "prometheus; `make test` installs it where it can)")

STORM_AT_S, STORM_FOR_S = 5, 6
#: one provider throttled for 6 s, 5 s after launch (time for Prometheus to start and
#: scrape); with three keys and a threshold of 2 its breaker opens on the storm's first
#: requests, probes every second (the Retry-After), and closes on the first probe after
SCENARIO = f"""\
name: prometheus-live
duration: 10m
resilience: {{request: {{timeout: 3s}}, breaker: {{failure_threshold: 2, degraded_threshold: 1}}}}
providers:
  alpha: {{models: [m], latency: 5ms, connections: [a1, a2, a3]}}
  beta: {{models: [m], latency: 5ms, connections: [b1]}}
routes:
  chat: {{targets: [alpha/m, beta/m]}}
faults:
  - {{name: storm, target: alpha, error: 429, retry_after: 1s, at: {STORM_AT_S}s,
     for: {STORM_FOR_S}s}}
"""
OPEN = 'omniroute_breaker_state{provider="alpha",state="OPEN"}'


def prometheus_config(tmp_path: Path, target: str) -> Path:
    token = tmp_path / "token.txt"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                   "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": "omniroute", "metrics_path": "/metrics",
            "authorization": {"type": "Bearer", "credentials_file": str(token)},
            "static_configs": [{"targets": [target]}],
        }],
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def running_prometheus(tmp_path: Path, target: str) -> Any:
    """`prometheus` on 127.0.0.1 on a free port with its storage in `tmp_path`; stopped
    (and waited for) on the way out, whatever happened."""
    assert PROMETHEUS is not None
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={prometheus_config(tmp_path, target)}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
         "--storage.tsdb.retention.time=1h", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


async def query_range(http: httpx.AsyncClient, url: str, expr: str, start: float,
                      end: float) -> list[tuple[float, float]]:
    reply = await http.get(f"{url}/api/v1/query_range",
                           params={"query": expr, "start": start, "end": end, "step": "1s"})
    body = reply.json()
    assert reply.status_code == 200 and body["status"] == "success", body
    results = body["data"]["result"]
    assert len(results) <= 1, results
    return [(float(t), float(v)) for t, v in results[0]["values"]] if results else []


async def test_prometheus_sees_the_breaker_open_in_the_storm_and_closed_after(
        tmp_path: Path) -> None:
    began = time.monotonic()
    port = free_port()  # Prometheus first, so that it scrapes from the gateway's first second
    with running_prometheus(tmp_path, f"127.0.0.1:{port}") as (url, process):
        async with httpx.AsyncClient(timeout=10) as http:
            async def ready() -> bool:
                if process.poll() is not None:
                    log = (tmp_path / "prometheus.log").read_text()
                    raise AssertionError(f"prometheus exited {process.returncode}: {log}")
                with contextlib.suppress(httpx.TransportError):
                    return (await http.get(f"{url}/-/ready")).status_code == 200
                return False

            await eventually(ready, timeout_s=15, poll_s=0.1, what="prometheus ready")

            async def scraping() -> bool:  # its first scrape (down: nothing listens yet)
                reply = await http.get(f"{url}/api/v1/query", params={"query": "up"})
                return bool(reply.json()["data"]["result"])

            # Prometheus hands new targets to its scrapers after up to 5 s
            await eventually(scraping, timeout_s=15, poll_s=0.2, what="a first scrape")
            launched = time.time()  # the fakes' timeline starts here (a few ms later)
            async with running_gateway(tmp_path, scenario=SCENARIO, port=port) as gw:
                storm_end = launched + STORM_AT_S + STORM_FOR_S
                answers = await traffic_until_closed(http, gw.url, url, storm_end)
            end = time.time()
            values = await query_range(http, url, OPEN, launched, end)
            up = await query_range(http, url, 'up{job="omniroute"}', launched + 1, storm_end)
    storm = (launched + STORM_AT_S, storm_end)
    before = [v for t, v in values if t < storm[0]]
    during = [v for t, v in values if storm[0] + 1 <= t < storm[1]]
    after = [v for t, v in values if t >= storm_end + 3]
    timeline = [(round(t - launched, 1), v) for t, v in values]
    assert len(before) >= 3 and set(before) == {0.0}, timeline  # CLOSED before the storm,
    assert during.count(1.0) >= 3, timeline  # OPEN in it, as scraped every second,
    assert len(after) >= 3 and set(after) == {0.0}, timeline  # and CLOSED once it is over
    assert {v for _, v in up} == {1.0}  # every scrape got through, with the token
    assert answers and set(answers) == {200}  # beta took the traffic the whole time
    assert time.monotonic() - began < 40


async def traffic_until_closed(http: httpx.AsyncClient, gateway: str, prometheus: str,
                               storm_end: float) -> list[int]:
    """Requests every 50 ms until Prometheus holds three scrapes from 3 s after the storm
    (time for the probe that closes the breaker), the last CLOSED; the statuses answered."""
    stop = asyncio.Event()
    answers: list[int] = []

    async def traffic() -> None:
        while not stop.is_set():
            reply = await http.post(f"{gateway}/v1/chat/completions", json={
                "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
            answers.append(reply.status_code)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)

    async def closed_after_storm() -> bool:
        if time.time() < storm_end + 6:
            return False
        values = await query_range(http, prometheus, OPEN, storm_end + 3, time.time())
        return len(values) >= 3 and values[-1][1] == 0

    sender = asyncio.create_task(traffic())
    try:
        await eventually(closed_after_storm, timeout_s=25, poll_s=0.5,
                         what="scrapes after the storm")
    finally:
        stop.set()
        await sender
    return answers
