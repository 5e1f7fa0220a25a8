"""Numbers from files, the management API and event logs stay within what the product can
hold: durations in ASCII with a unit, counts under the caps, recorded times bounded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml

from omniroute_tui.config import ConfigError, load_router_config, parse_duration_ms
from omniroute_tui.config.limits import MAX_COUNTS
from omniroute_tui.config.problems import Problem
from simulator.cli import main
from simulator.scenario import load_scenario

from .gateway_helpers import TOKEN, running_gateway


def router_problem(section: str) -> Problem:
    """The one problem of a router config that is one provider (line 2) and `section`."""
    with pytest.raises(ConfigError) as info:
        load_router_config("router.yaml",
                           text="providers:\n  p: {models: [m], connections: [a]}\n" + section)
    (problem,) = info.value.problems
    return problem


GOOD_DURATIONS = [("250ms", 250), ("3s", 3000), ("1.5s", 1500), ("5m", 300_000),
                  ("1h", 3_600_000), ("7d", 7 * 86_400_000), ("1m30s", 90_000), (1200, 1200),
                  (1500.0, 1500)]
NOT_A_NUMBER = "write a number with a unit (250ms, 3s, 5m, 1h) or integer milliseconds"
#: (text, words of the refusal)
BAD_DURATIONS = [("5 m", "write it without spaces, like 5m or 1m30s"),
                 (" 5m", "write it without spaces, like 5m or 1m30s"),
                 ("5m ", "write it without spaces, like 5m or 1m30s"),
                 ("5m\t", "write it without spaces, like 5m or 1m30s"),
                 ("\u00a05m", "write it without spaces, like 5m or 1m30s"),
                 ("٥m", "write it in ASCII digits 0-9 and a unit (ms, s, m, h, d), like 5m"),
                 ("５s", "write it in ASCII digits 0-9 and a unit (ms, s, m, h, d), like 5m"),
                 ("5ｍ", "write it in ASCII digits 0-9 and a unit (ms, s, m, h, d), like 5m"),
                 ("1e3ms", NOT_A_NUMBER), ("1_000ms", NOT_A_NUMBER)]
#: digits enough that the number reads as infinity (float() gives inf, not an error)
ENDLESS = "9" * 400 + "ms"


@pytest.mark.parametrize(("text", "ms"), GOOD_DURATIONS)
def test_durations_in_ascii_with_a_unit_are_read(text: str | int, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(("text", "words"), BAD_DURATIONS)
def test_durations_with_spaces_or_other_digits_are_refused_naming_the_field(
        text: str, words: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: " + words.replace("(", r"\(")
                       .replace(")", r"\)")):
        parse_duration_ms(text)
    scenario = ("name: s\nduration: 1m\nproviders:\n  p: {models: [m], connections: [a]}\n"
                "routes: {r: {targets: [p/m]}}\nfaults:\n"
                f"  - {{name: f, target: p, error: 503, at: 1s, for: {json.dumps(text)}}}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario("s.yaml", text=scenario)
    (problem,) = info.value.problems
    assert (problem.file, problem.line, problem.field) == ("s.yaml", 7, "faults[0].for")
    assert words in problem.reason
    problem = router_problem(f"gateway: {{limits: {{head_timeout: {json.dumps(text)}}}}}\n")
    assert (problem.line, problem.field) == (3, "gateway.limits.head_timeout")


async def test_the_management_api_refuses_such_durations_with_400_and_the_reason(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers={"authorization": f"Bearer {TOKEN}"}) as http:
        force = "/api/resilience/breakers/healthy/force-open"
        for text, words in BAD_DURATIONS:
            reply = await http.post(force, json={"for": text})
            assert reply.status_code == 400, (text, reply.text)
            assert reply.json()["error"]["message"] == (
                f"`for`: {text!r} is not a duration: {words}")
        reply = await http.post(force, json={"for": ENDLESS})  # a 500 once
        assert reply.status_code == 400, reply.text
        assert "is longer than 30 days" in reply.json()["error"]["message"]
        reply = await http.post(force, json={"for": "7d"})
        assert reply.status_code == 200
        assert reply.json()["ok"] is True


def test_a_duration_too_long_to_count_is_refused_not_a_crash() -> None:
    with pytest.raises(ValueError, match="is longer than 30 days"):
        parse_duration_ms(ENDLESS)
    with pytest.raises(ValueError, match="is longer than 3650 days"):
        parse_duration_ms("1" + "0" * 320 + "d", longest_ms=3650 * 86_400_000)
    problem = router_problem(f"store: {{history: {{max_age: {ENDLESS}}}}}\n")
    assert (problem.line, problem.field) == (3, "store.history.max_age")
    assert "is longer than 3650 days" in problem.reason


def _providers(count: int, connections: int = 1, models: int = 1) -> str:
    conns = ", ".join(f"c{i}" for i in range(connections))
    names = ", ".join(f"m{i}" for i in range(models))
    return "providers:\n" + "".join(
        f"  p{i}: {{models: [{names}], connections: [{conns}]}}\n" for i in range(count))


#: (a file's text, the line and field refused, why); the test's id is the count refused
OVER_THE_CAPS = [
    (_providers(1, connections=1001), 2, "providers.p0.connections",
     "more than 1,000 connections: at most 1,000 connections per provider"),
    (_providers(1, connections=200_000), 2, "providers.p0.connections",
     "more than 1,000 connections: at most 1,000 connections per provider"),
    (_providers(101), 1, "providers", "more than 100 providers: at most 100 providers"),
    (_providers(11, connections=1000), 1, "providers",
     "more than 10,000 connections: at most 10,000 connections in all"),
    (_providers(1, models=1001), 2, "providers.p0.models",
     "more than 1,000 models: at most 1,000 models per provider"),
    (_providers(1) + "routes:\n" + "".join(f"  r{i}: {{targets: [p0/m0]}}\n"
                                           for i in range(1001)),
     3, "routes", "more than 1,000 routes: at most 1,000 routes"),
    (_providers(1, models=101) + "routes:\n  r: {targets: ["
     + ", ".join(f"p0/m{i}" for i in range(101)) + "]}\n",
     4, "routes.r.targets", "more than 100 targets: at most 100 targets per route"),
]


@pytest.mark.parametrize(("text", "line", "field", "reason"), OVER_THE_CAPS,
                         ids=[reason.split(":")[0] for *_, reason in OVER_THE_CAPS])
def test_counts_over_the_caps_are_refused_naming_the_file_and_line(
        text: str, line: int, field: str, reason: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    started = time.process_time()
    with pytest.raises(ConfigError) as info:
        load_router_config("router.yaml", text=text)
    assert time.process_time() - started < 10  # 200,000 connections: YAML parsing, no start
    problem = info.value.problems[0]
    assert (problem.file, problem.line, problem.field, problem.reason) == (
        "router.yaml", line, field, reason)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nduration: 1m\n" + text)
    assert main(["validate", str(scenario)]) == 2
    assert f"{scenario}:{line + 2}: {field}: {reason}" in capsys.readouterr().err


def test_the_caps_leave_room_for_a_thousand_connections_a_provider() -> None:
    assert MAX_COUNTS["connections per provider"] >= 1000  # bench/route_decision.py's pool
    text = _providers(3, connections=1000, models=10) + "routes:\n  r: {targets: [" + \
        ", ".join(f"p{i}/m{j}" for i in range(3) for j in range(10)) + "]}\n"
    config = load_router_config("router.yaml", text=text)
    assert [len(p.connections) for p in config.providers.values()] == [1000, 1000, 1000]


LOG_CONFIG = ("providers:\n  p: {models: [m], connections: [a, b]}\n"
              "routes:\n  chat: {targets: [p/m]}\n")


def test_a_recording_of_hostile_numbers_always_passes_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = 10 ** 40
    lines = [
        '{"type": "request", "t": 1000, "id": 1, "route": "chat"}',
        '{"type": "request", "t": 1e40, "id": 2, "route": "chat"}',
        f'{{"type": "request", "t": {big}, "id": 3, "route": "chat"}}',
        '{"type": "request", "t": NaN, "id": 4, "route": "chat"}',
        '{"type": "request", "t": -1e40, "id": 5, "route": "chat"}',
        '{"type": "request", "t": Infinity, "id": 6, "route": "chat"}',
        '{"type": "result", "t": 1200, "provider": "p", "connection": "a", "model": "m", '
        '"status": 200, "kind": null, "latency_ms": 1e40}',
        '{"type": "result", "t": 1250, "provider": "p", "connection": "a", "model": "m", '
        '"status": 200, "kind": null, "latency_ms": Infinity}',
        '{"type": "result", "t": 1300, "provider": "p", "connection": "a", "model": "m", '
        '"status": 999, "kind": "server_error", "latency_ms": 10}',
        '{"type": "result", "t": 1400, "provider": "p", "connection": "a", "model": "m", '
        '"status": 429, "kind": "rate_limited", "latency_ms": 10}',
        f'{{"type": "cooldown", "t": 1400, "provider": "p", "hint_ms": {big}}}',
        '{"type": "cooldown", "t": 1400, "provider": "p", "hint_ms": -5}',
        '{"type": "cooldown", "t": 1400, "provider": "p", "hint_ms": 2000}',
        '{"type": "result", "t": 1500, "provider": "p", "connection": "a", "model": "m", '
        '"status": 200, "kind": null, "latency_ms": 20}',
        '{"type": "request", "t": 3000, "id": 7, "route": "chat"}',
    ]
    log = tmp_path / "events.jsonl"
    log.write_text("\n".join(lines) + "\n")
    out, config = tmp_path / "recorded.yaml", tmp_path / "router.yaml"
    config.write_text(LOG_CONFIG)
    assert main(["record", "--events", str(log), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert ("warning: 10 event(s) left out: a time, latency or Retry-After hint over 30 days "
            "from the rest, not finite or negative, a status that is no HTTP error, or "
            "requests over the limit of a run") in captured.err
    recorded = yaml.safe_load(out.read_text())
    assert recorded["duration"] == "3s"
    assert recorded["traffic"] == [{"route": "chat", "at": [0, 2000]}]
    assert recorded["faults"] == [{"name": "p-429-1", "target": "p", "error": 429,
                                   "at": "390ms", "until": "435ms", "retry_after": "2s"}]
    assert recorded["latency"] == {"p": {"p50": "20ms", "p99": "20ms"}}
    assert main(["validate", str(out), "--config", str(config)]) == 0


def test_a_log_spanning_more_than_30_days_keeps_its_busiest_stretch(tmp_path: Path) -> None:
    day = 86_400_000
    times = [0, 40 * day, 40 * day + 500, 40 * day + 900, 75 * day]
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps({"type": "request", "t": t, "id": i, "route": "chat"})
                           + "\n" for i, t in enumerate(times)))
    out, config = tmp_path / "recorded.yaml", tmp_path / "router.yaml"
    config.write_text(LOG_CONFIG)
    assert main(["record", "--events", str(log), "-o", str(out)]) == 0
    recorded = yaml.safe_load(out.read_text())
    assert recorded["traffic"] == [{"route": "chat", "at": [0, 500, 900]}]
    assert recorded["duration"] == "1s"
    assert main(["validate", str(out), "--config", str(config)]) == 0


def test_an_expectations_bound_is_written_in_ascii_digits() -> None:
    base = ("name: s\nduration: 1m\nproviders:\n  p: {models: [m], connections: [a]}\n"
            "routes: {r: {targets: [p/m]}}\nexpect:\n  - {metric: attempts, check: '%s'}\n")
    assert load_scenario("s.yaml", text=base % "<= 5").expect[0].value == 5
    with pytest.raises(ConfigError, match=r"s.yaml:7: expect\[0\].check: expected an operator "
                                          r"and a number like \"<= 1.3\", got '<= ٥'"):
        load_scenario("s.yaml", text=base % "<= ٥")
