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

from omniroute_tui.clock import ManualClock
from tests.gateway_helpers import TOKEN, free_port, running_gateway
from tests.waiting import eventually

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus server is not installed (Debian package "
                               "prometheus; `make test` installs it where it can)")

STORM_AT_S, STORM_FOR_S = 5, 6
#: one provider throttled for 6 s, once Prometheus holds three scrapes of its breaker
#: CLOSED: the fakes' scenario time is the test's to move (the storm starts when the test
#: sets it to 5 s); with three keys and a threshold of 2 its breaker opens on the storm's
#: first requests, probes every second (the Retry-After), and closes on the first probe
#: after
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
    port = free_port()
    scenario_time = ManualClock(0)  # before the storm until the test moves it
    with running_prometheus(tmp_path, f"127.0.0.1:{port}") as (url, process):
        async with httpx.AsyncClient(timeout=10) as http, running_gateway(
                tmp_path, scenario=SCENARIO, port=port, fakes_clock=scenario_time) as gw:
            launched = time.time()

            async def ready() -> bool:
                if process.poll() is not None:
                    log = (tmp_path / "prometheus.log").read_text()
                    raise AssertionError(f"prometheus exited {process.returncode}: {log}")
                with contextlib.suppress(httpx.TransportError):
                    return (await http.get(f"{url}/-/ready")).status_code == 200
                return False

            await eventually(ready, timeout_s=15, poll_s=0.1, what="prometheus ready")
            stop = asyncio.Event()
            answers: list[int] = []
            sender = asyncio.create_task(traffic(http, gw.url, stop, answers))
            try:
                async def scraped_before() -> bool:
                    return len(await query_range(http, url, OPEN, launched, time.time())) >= 3

                # Prometheus hands new targets to its scrapers after up to 5 s
                await eventually(scraped_before, timeout_s=20, poll_s=0.2,
                                 what="three scrapes before the storm")
                storm_start = time.time()
                scenario_time.set(STORM_AT_S * 1000)
                await asyncio.sleep(STORM_FOR_S)
                scenario_time.set((STORM_AT_S + STORM_FOR_S) * 1000)
                storm_end = time.time()
                await closed_after(http, url, storm_end)
            finally:
                stop.set()
                await sender
            end = time.time()
            values = await query_range(http, url, OPEN, launched, end)
            first = values[0][0] if values else launched
            up = await query_range(http, url, 'up{job="omniroute"}', first, storm_end)
    before = [v for t, v in values if t < storm_start]
    during = [v for t, v in values if storm_start + 1 <= t < storm_end]
    after = [v for t, v in values if t >= storm_end + 3]
    timeline = [(round(t - storm_start, 1), v) for t, v in values]
    assert len(before) >= 3 and set(before) == {0.0}, timeline  # CLOSED before the storm,
    assert during.count(1.0) >= 3, timeline  # OPEN in it, as scraped every second,
    assert len(after) >= 3 and set(after) == {0.0}, timeline  # and CLOSED once it is over
    assert {v for _, v in up} == {1.0}  # every scrape got through, with the token
    assert answers and set(answers) == {200}  # beta took the traffic the whole time
    assert time.monotonic() - began < 40


async def traffic(http: httpx.AsyncClient, gateway: str, stop: asyncio.Event,
                  answers: list[int]) -> None:
    """Requests every 50 ms until `stop`; the statuses answered go to `answers`."""
    while not stop.is_set():
        reply = await http.post(f"{gateway}/v1/chat/completions", json={
            "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
        answers.append(reply.status_code)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)


async def closed_after(http: httpx.AsyncClient, prometheus: str, storm_end: float) -> None:
    """Until Prometheus holds three scrapes from 3 s after the storm (time for the probe
    that closes the breaker), the last CLOSED; a second more, so that a query aligned
    elsewhere (the test's, from the launch) holds three points there too."""
    async def closed() -> bool:
        if time.time() < storm_end + 6:
            return False
        values = await query_range(http, prometheus, OPEN, storm_end + 3, time.time())
        return len(values) >= 3 and values[-1][1] == 0

    await eventually(closed, timeout_s=25, poll_s=0.2, what="scrapes after the storm")
