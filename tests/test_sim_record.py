"""`omniroute-sim record`: a gateway's event log becomes a scenario that replays the
incident: the same arrivals, and the upstream's failure windows as faults."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from omniroute_tui.engine.events import ResultEvent
from simulator.cli import main
from simulator.event_sources import events_from_db, events_from_gateway
from simulator.scenario import SCENARIOS_DIR, load_scenario
from simulator.scenario_from_events import scenario_from_events
from simulator.virtual import run_virtual

from .gateway_helpers import TOKEN, running_gateway
from .test_sim_config import split

STORM = """\
name: storm
duration: 40s
resilience: {request: {timeout: 3s}}
providers:
  alpha: {models: [m], latency: {p50: 20ms, p99: 60ms}, connections: [a1, a2]}
  beta: {models: [m], latency: 30ms, connections: [b1]}
routes:
  chat: {targets: [alpha/m, beta/m]}
traffic:
  - {route: chat, rate: 20/s}
faults:
  - {name: storm, target: alpha, error: 429, retry_after: 500ms, at: 10s, for: 15s}
"""


def window(events: list[dict[str, Any]], provider: str) -> tuple[int, int]:
    """When `provider` was seen failing: its first failed attempt's start to the start of
    the first attempt it answered after that (the upstream's storm as a router sees it)."""
    results = sorted((e["t"] - e["latency_ms"], e["kind"]) for e in events
                     if e.get("type") == "result" and e["provider"] == provider)
    start = next(t for t, kind in results if kind is not None)
    end = next(t for t, kind in results if t > start and kind is None)
    return start, end


def trace_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_recorded_storm_replays_with_the_same_window_and_arrivals(tmp_path: Path) -> None:
    original = load_scenario("storm.yaml", text=STORM)
    trace = io.StringIO()
    run_virtual(original, "resilient", trace=trace)
    events = trace_events(trace.getvalue())
    recorded, recording = scenario_from_events(events, name="replay", source="trace")
    (fault,) = recorded["faults"]
    assert (fault["target"], fault["error"], fault["retry_after"]) == ("alpha", 429, "500ms")
    arrivals = [e["t"] for e in events if e["type"] == "request"]
    assert recorded["traffic"] == [{"route": "chat", "at": [t - arrivals[0] for t in arrivals]}]
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump(recorded))
    config, _ = split_text(STORM, tmp_path)
    replay = load_scenario(path, config=config)
    # the storm starts when it did; its end is known only to lie between the last failure
    # and the first answer after it (the router's cooldowns had grown: it looked again late)
    assert abs(replay.faults[0].at_ms + arrivals[0] - 10_000) < 1000
    assert replay.faults[0].until_ms + arrivals[0] >= 25_000
    again = io.StringIO()
    metrics = run_virtual(replay, "resilient", trace=again)
    assert metrics["requests"] == recording.requests == len(arrivals)
    seen, replayed = window(events, "alpha"), window(trace_events(again.getvalue()), "alpha")
    shift = arrivals[0]  # the recording's time 0 is its first request
    assert abs(replayed[0] + shift - seen[0]) < 1000
    assert abs(replayed[1] + shift - seen[1]) < 1000


def split_text(text: str, where: Path) -> tuple[Path, Path]:
    """`split` for a scenario given as text."""
    (where / "original.yaml").write_text(text)
    data = yaml.safe_load(text)
    config = {key: data[key] for key in ("providers", "routes", "resilience") if key in data}
    for body in config["providers"].values():
        body.pop("latency", None)
    path = where / "original.router.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, where / "original.yaml"


def test_a_quota_on_one_model_is_recorded_as_that_models_fault(tmp_path: Path) -> None:
    trace = tmp_path / "quota.jsonl"
    assert main(["run", "quota-exhaustion", "--policy", "resilient", "--trace",
                 str(trace)]) == 0
    out = tmp_path / "recorded.yaml"
    config, _ = split("quota-exhaustion", tmp_path)
    assert main(["record", "--events", str(trace), "-o", str(out), "--config",
                 str(config)]) == 0
    data = yaml.safe_load(out.read_text())
    (fault,) = data["faults"]
    assert (fault["target"], fault["error"], "until" in fault) == ("alpha/*/large", "quota",
                                                                    False)
    assert {t["route"] for t in data["traffic"]} == {"big", "little"}
    assert main(["run", str(out), "--config", str(config), "--check",
                 "--policy", "resilient"]) == 0


#: under the line bound, and nested past the interpreter's recursion limit
DEEP = '{"type": "request", "t": 0, "id": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_hostile_event_logs_are_refused_or_skipped_and_nothing_secret_is_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        "not json at all", "[1, 2]", '{"type": "request"}', "{" + "x" * (2 << 20) + "}",
        DEEP,
        '{"type": "request", "t": -5, "id": "r0", "route": "chat"}',
        '{"type": "request", "t": 1000, "id": "r1", "route": "chat", '
        '"api_key": "sk-live-secret-000", "messages": [{"content": "private words"}]}',
        'data: {"type": "result", "t": 1200, "request": "r1", "n": 1, "provider": "alpha", '
        '"connection": "a1", "model": "m", "status": 429, "kind": "rate_limited", '
        '"latency_ms": 100, "body": "private words"}',
        '{"type": "result", "t": 1300, "provider": "alpha", "connection": "a1", '
        '"model": "m", "status": 200, "kind": "teapot", "latency_ms": 5}',
        '{"type": "result", "t": 1400, "provider": "' + "p" * 300 + '", "connection": "a1", '
        '"model": "m", "status": 200, "kind": null, "latency_ms": 5}',
        '{"type": "request", "t": 2000, "id": "r2", "route": "chat"}',
        ": keep-alive", "event: dropped",
    ]
    log = tmp_path / "events.sse"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "recorded.yaml"
    assert main(["record", "--events", str(log), "-o", str(out)]) == 0
    text = out.read_text()
    assert "sk-live" not in text and "private" not in text and "ppp" not in text
    data = yaml.safe_load(text)
    assert data["traffic"] == [{"route": "chat", "at": [0, 1000]}]
    assert data["faults"][0]["target"] == "alpha" and "until" not in data["faults"][0]
    assert "lines skipped" in capsys.readouterr().out
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"type": "breaker", "t": 5}\n')
    assert main(["record", "--events", str(empty), "-o", str(out)]) == 2
    not_ours = tmp_path / "other.db"
    sqlite3.connect(not_ours).execute("CREATE TABLE events (body TEXT)").connection.close()
    assert main(["record", "--db", str(not_ours), "-o", str(out)]) == 2
    (tmp_path / "garbage.db").write_bytes(b"\x00" * 4096)
    assert main(["record", "--db", str(tmp_path / "garbage.db"), "-o", str(out)]) == 2
    assert main(["record", "--db", str(tmp_path / "absent.db"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no requests" in err and "not an omniroute state database" in err
    assert "no such file" in err and "Traceback" not in err
    assert main(["record", "--from", "http://127.0.0.1:9", "--for", "1s", "-o", str(out),
                 "--token-file", str(tmp_path / "absent-token")]) == 2


async def test_record_of_a_gateway_run_replays_the_storm_within_a_second(
    tmp_path: Path,
) -> None:
    """A gateway in front of fakes with a 429 storm, recorded from its database and live
    from its event stream; the recorded scenario, replayed against the gateway's config,
    shows the storm window the gateway saw to within a second."""
    # a router that looks again within a second (cooldowns and breaker windows at most
    # 1 s) sees a storm's end to within a second: that is the precision there is to have
    scenario = STORM.replace("at: 10s, for: 15s", "at: 2s, for: 4s").replace(
        "duration: 40s", "duration: 1m").replace(
        "resilience: {request: {timeout: 3s}}",
        "resilience: {request: {timeout: 3s}, cooldown: {base: 250ms, max: 1s}, "
        "breaker: {reset_timeout: 1s}}")
    started = time.time() * 1000  # the fakes' faults count from about now
    async with running_gateway(tmp_path, db=True, scenario=scenario) as gateway:
        back: list[int] = []  # alpha answered again after the storm

        def on_result(event: ResultEvent) -> None:
            if event.provider == "alpha" and event.kind is None and event.t > started + 6000:
                back.append(event.t)

        gateway.gateway.router.engine.bus.subscribe(on_result, ResultEvent)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="answered 401"):
            await asyncio.to_thread(events_from_gateway, gateway.url, "wrong-token-0123456789",
                                    1_000)
        live = asyncio.create_task(asyncio.to_thread(
            events_from_gateway, gateway.url, TOKEN, 40_000))
        async with httpx.AsyncClient(timeout=10) as client:

            async def worker() -> None:
                # through the storm, until alpha answers again, and three seconds more
                while not back or time.time() * 1000 < back[0] + 3000:
                    assert time.time() * 1000 - started < 40_000, "alpha never came back"
                    await client.post(f"{gateway.url}/v1/chat/completions",
                                      json={"model": "chat", "messages": [
                                          {"role": "user", "content": "private words"}]})

            await asyncio.gather(*(worker() for _ in range(4)))
        gateway.gateway.events.close()  # ends the stream being recorded
        streamed = await asyncio.wait_for(live, timeout=30)
        config_text = gateway.config_text
    config = tmp_path / "router.yaml"
    config.write_text(config_text)
    stored = list(events_from_db(tmp_path / "state.db"))
    seen = window(stored, "alpha")
    assert abs(seen[0] - (started + 2000)) < 1000 and abs(seen[1] - (started + 6000)) < 1500
    from_db, from_api = tmp_path / "from-db.yaml", tmp_path / "from-api.yaml"
    assert main(["record", "--db", str(tmp_path / "state.db"), "-o", str(from_db),
                 "--config", str(config)]) == 0
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in streamed))
    assert main(["record", "--events", str(tmp_path / "events.jsonl"), "-o",
                 str(from_api), "--config", str(config)]) == 0
    for recorded, events in ((from_db, stored), (from_api, streamed)):
        text = recorded.read_text()
        assert "private" not in text and "sk-" not in text
        t0 = min(e["t"] for e in events if e.get("type") in ("request", "result"))
        replay = load_scenario(recorded, config=config)
        trace = io.StringIO()
        run_virtual(replay, "resilient", trace=trace)
        replayed = window(trace_events(trace.getvalue()), "alpha")
        assert abs(replayed[0] + t0 - seen[0]) < 1000, (recorded.name, replayed, seen)
        assert abs(replayed[1] + t0 - seen[1]) < 1000, (recorded.name, replayed, seen)


def test_a_shipped_scenario_recorded_from_its_own_trace_loads_against_its_config(
    tmp_path: Path,
) -> None:
    trace = io.StringIO()
    run_virtual(load_scenario(SCENARIOS_DIR / "vpn-blip.yaml"), "resilient", trace=trace)
    data, _ = scenario_from_events(trace_events(trace.getvalue()), name="blip",
                                   source="trace")
    (tmp_path / "blip.yaml").write_text(yaml.safe_dump(data))
    config, _ = split("vpn-blip", tmp_path)
    replay = load_scenario(tmp_path / "blip.yaml", config=config)
    assert replay.faults and all(f.target.provider == "alpha" for f in replay.faults)


def test_the_config_says_what_the_database_keeps_and_for_how_long() -> None:
    from omniroute_tui.config import ConfigError, load_router_config
    from omniroute_tui.config.limits import StoreRetention

    base = "providers: {a: {models: [m], connections: [k]}}\n"
    assert load_router_config("r.yaml", text=base).store_retention == StoreRetention(
        history_max_age_ms=7 * 86_400_000, history_max_events=200_000,
        requests_max_age_ms=3_600_000, requests_max_events=500_000,
        audit_max_age_ms=90 * 86_400_000, audit_max_entries=100_000)
    text = base + ("store:\n  path: x.db\n  history: {max_age: 30d, max_events: 1000}\n"
                   "  requests: {max_age: 2h, max_events: 800000}\n"
                   "  audit: {max_age: 3650d, max_entries: 500}\n")
    assert load_router_config("r.yaml", text=text).store_retention == StoreRetention(
        history_max_age_ms=30 * 86_400_000, history_max_events=1000,
        requests_max_age_ms=7_200_000, requests_max_events=800_000,
        audit_max_age_ms=3650 * 86_400_000, audit_max_entries=500)
    for bad, message in (
            ("{requests: {max_events: 50}}", "r.yaml:2: store.requests.max_events: expected "
                                             "a whole number >= 100, got 50"),
            ("{history: {max_events: 6000000}}", "r.yaml:2: store.history.max_events: at "
                                                 "most 5,000,000"),
            ("{audit: {max_age: 3651d}}", "r.yaml:2: store.audit.max_age: '3651d' is longer "
                                          "than 3650 days"),
            ("{requests: {max_age: 30s}}", "r.yaml:2: store.requests.max_age: at least 1m"),
            ("{history: {max_entries: 5}}", "r.yaml:2: store.history.max_entries: unknown "
                                            "field; expected one of: max_age, max_events"),
            ("{audit: 7}", "r.yaml:2: store.audit: expected a mapping"),
            ("{events: 100000}", "r.yaml:2: store.events: state changes and per-request "
                                 "events are kept apart now: write store.requests.max_events")):
        with pytest.raises(ConfigError) as info:
            load_router_config("r.yaml", text=base + f"store: {bad}\n")
        assert message in str(info.value), str(info.value)


async def test_ctrl_c_ends_a_live_recording_and_keeps_what_came(tmp_path: Path) -> None:
    import signal
    import sys

    from .waiting import eventually

    out = tmp_path / "early.yaml"
    token = tmp_path / "token"
    token.write_text(TOKEN)
    async with running_gateway(tmp_path) as gateway:
        recorder = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "simulator.cli", "record", "--from", gateway.url,
            "--for", "10m", "--token-file", str(token), "-o", str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            await eventually(lambda: gateway.gateway.events.subscribers > 0, timeout_s=30,
                             what="the recorder following the event stream")
            async with httpx.AsyncClient(timeout=10) as client:
                for _ in range(5):
                    await client.post(f"{gateway.url}/v1/chat/completions",
                                      json={"model": "chat", "messages": []})
            # every frame handed to the recorder's connection before the signal
            await eventually(lambda: gateway.gateway.events.caught_up, timeout_s=10,
                             what="the stream's frames sent")
            recorder.send_signal(signal.SIGINT)
            stdout, stderr = await asyncio.wait_for(recorder.communicate(), timeout=30)
        finally:
            if recorder.returncode is None:
                recorder.kill()
                await recorder.wait()
    assert recorder.returncode == 0, stderr.decode()
    assert "Traceback" not in stderr.decode()
    data = yaml.safe_load(out.read_text())
    (traffic,) = data["traffic"]
    assert traffic["route"] == "chat" and 1 <= len(traffic["at"]) <= 5
    assert b"Ctrl-C ends it early" in stdout
