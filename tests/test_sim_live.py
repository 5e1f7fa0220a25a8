"""Live mode: HTTP fakes on 127.0.0.1, real httpx calls through the async driver."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from omniroute_tui.config import load_router_config
from simulator.live import run_live
from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

from .waiting import eventually_sync

LIVE = """\
name: live-mix
duration: 5s
clock: live
resilience: {admission: {max_wait: 0s}, request: {timeout: 2s}}
providers:
  throttled: {models: [m], latency: 30ms, connections: [t1]}
  broken: {models: [m], latency: 30ms, connections: [b1]}
  flaky: {models: [m], latency: 30ms, connections: [f1]}
  billing: {models: [m], latency: 30ms, connections: [q1]}
  streamer: {models: [m], latency: 30ms, connections: [s1]}
routes:
  r429: {targets: [throttled/m]}
  r503: {targets: [broken/m]}
  rreset: {targets: [flaky/m]}
  rquota: {targets: [billing/m]}
  rsse: {targets: [streamer/m]}
traffic:
  - {route: r429, at: [200ms, 4s]}
  - {route: r503, at: [200ms]}
  - {route: rreset, at: [200ms]}
  - {route: rquota, at: [200ms]}
  - {route: rsse, at: [200ms, 4s], stream: true}
faults:
  - {name: t, target: throttled, error: 429, retry_after: 3500ms, at: 0s, for: 1s}
  - {name: b, target: broken, error: 503, at: 0s, for: 1s}
  - {name: f, target: flaky, error: reset, at: 0s, for: 1s}
  - {name: q, target: billing, error: quota, at: 0s, for: 1s}
  - {name: s, target: streamer, error: reset, at: 0s, for: 1s}
"""


def facts(trace: str) -> dict[str, Any]:
    events = [json.loads(line) for line in trace.splitlines()]
    return {
        # request ids depend on which task starts first; the facts do not
        "results": sorted(((e["provider"], e["kind"], e["status"])
                           for e in events if e["type"] == "result"), key=str),
        "cooldowns": sorted(((e["provider"], e["kind"], e["level"], e["hint_ms"])
                             for e in events if e["type"] == "cooldown"), key=str),
        "responses": sorted(e["status"] for e in events if e["type"] == "response"),
    }


async def test_live_mode_matches_virtual_mode() -> None:
    scenario = load_scenario("live.yaml", text=LIVE)
    virtual, live = io.StringIO(), io.StringIO()
    run_virtual(scenario, trace=virtual)
    metrics = await run_live(scenario, trace=live)
    assert facts(live.getvalue()) == facts(virtual.getvalue())
    results = facts(live.getvalue())["results"]
    kinds = set(results)
    assert kinds == {
        ("throttled", "rate_limited", 429), ("broken", "server_error", 503),
        ("flaky", "network", 0), ("billing", "quota_exhausted", 429),
        ("streamer", "network", 0),  # the SSE answer cut before its first event
        ("throttled", None, 200), ("streamer", None, 200),  # after the cooldowns
    }
    assert metrics["requests"] == 7 and metrics["successes"] == 2


def test_serve_writes_a_router_config_for_the_fakes(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(LIVE.replace("duration: 5s", "duration: 1m"))
    config_path = tmp_path / "router.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator.cli", "serve", str(scenario), "--for", "20s",
         "--config-out", str(config_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # the file is written whole, once the fakes are up
        eventually_sync(config_path.exists, timeout_s=20, what="the router config")
        config = load_router_config(config_path)
        raw = yaml.safe_load(config_path.read_text())
        assert set(raw["routes"]) == {"r429", "r503", "rreset", "rquota", "rsse"}
        broken = config.providers["broken"]
        assert broken.base_url is not None and broken.base_url.startswith("http://127.0.0.1:")
        key = broken.connections[0].api_key
        assert key is not None
        with httpx.Client(timeout=5) as client:
            replies: list[httpx.Response] = []

            def answered() -> bool:  # the 503 fault is over 1 s after launch
                replies.append(client.post(f"{broken.base_url}/chat/completions",
                                           headers={"authorization": f"Bearer {key.reveal()}"},
                                           json={"model": "m", "messages": []}))
                return replies[-1].status_code == 200

            eventually_sync(answered, poll_s=0.1, what="the fake's answer after its fault")
            assert {r.status_code for r in replies} <= {503, 200}
            assert replies[-1].json()["choices"][0]["message"]["content"]
            unknown = client.post(f"{broken.base_url}/chat/completions",
                                  headers={"authorization": "Bearer nope"},
                                  json={"model": "m", "messages": []})
            assert unknown.status_code == 401
            models = client.get(f"{broken.base_url}/models").json()
            assert [m["id"] for m in models["data"]] == ["m"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert "fakes stopped" in out and "Traceback" not in err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_serve_stops_by_itself_after_for(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(LIVE)
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "serve", str(scenario), "--for", "1s",
         "--config-out", str(tmp_path / "r.yaml")],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 0 and "fakes stopped" in proc.stdout
