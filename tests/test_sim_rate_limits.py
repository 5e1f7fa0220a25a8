"""The fakes' rate limits (`limits: {rpm, tpm}`): fixed windows per key, the remaining and
reset headers on every answer, a 429 with Retry-After when a key is out; bad values are
errors with file, line and field."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import ConfigError
from omniroute_tui.engine.classify import FailureKind
from simulator.fakes import FakeProviders
from simulator.http_fakes import start_fakes, stop_fakes
from simulator.rate_limits import KeyWindow, RateLimits, reset_text
from simulator.scenario import load_scenario

SCENARIO = """\
name: limited
duration: 5m
providers:
  alpha:
    models: [m]
    latency: 100ms
    limits: {rpm: 3}
    connections:
      - a
      - {id: b, limits: {rpm: 2, tpm: 150}}
  beta: {models: [m], latency: 100ms, connections: [x]}
routes:
  r: {strategy: priority, targets: [alpha/m, beta/m]}
faults:
  - {name: down, target: alpha/a, error: 503, at: 4m, for: 10s}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_a_window_counts_requests_and_tokens_and_starts_again_each_minute() -> None:
    window = KeyWindow(RateLimits(rpm=2, tpm=250))
    assert window.take(1_000) and window.take(2_000)
    assert not window.take(3_000)  # the third request of the minute
    assert window.headers(3_000, 500) == {
        "x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "56.5s",
        "x-ratelimit-limit-tokens": "250", "x-ratelimit-remaining-tokens": "50",
        "x-ratelimit-reset-tokens": "56.5s"}
    assert window.retry_after_ms(59_990) == 10
    assert window.take(60_000)  # the next minute
    assert window.headers(60_000, 0)["x-ratelimit-remaining-requests"] == "1"
    tokens = KeyWindow(RateLimits(tpm=250))
    assert [tokens.take(t) for t in (0, 1, 2)] == [True, True, False]  # 100 tokens each
    assert "x-ratelimit-remaining-requests" not in tokens.headers(3, 0)
    assert [reset_text(ms) for ms in (0, 850, 1000, 12_500, 59_999)] == [
        "0ms", "850ms", "1s", "12.5s", "59.999s"]


def test_the_fakes_answer_with_headers_and_a_429_with_retry_after(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, SCENARIO))
    assert scenario.limits == {("alpha", "a"): RateLimits(rpm=3),
                               ("alpha", "b"): RateLimits(rpm=2, tpm=150)}
    fakes, rng = FakeProviders(scenario), random.Random(0)
    answers = [fakes.answer(t, "alpha", "a", "m", 30_000, rng) for t in (0, 10_000, 20_000,
                                                                         45_000)]
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["2", "1", "0",
                                                                              "0"]
    assert answers[0].headers["x-ratelimit-reset-requests"] == "59.9s"  # as the answer says
    limited = answers[3]
    assert limited.headers["retry-after"] == "15"  # 45 s + 100 ms: 14.9 s left, rounded up
    assert limited.classification.kind is FailureKind.RATE_LIMITED
    assert limited.classification.hint_ms == 15_000
    assert "rate_limit_exceeded" in limited.body
    # a key of its own: 150 tokens a minute hold one request of 100
    b = [fakes.answer(t, "alpha", "b", "m", 30_000, rng).status for t in (0, 1)]
    assert b == [200, 429]
    # no limits, no headers: beta answers as before
    assert fakes.answer(0, "beta", "x", "m", 30_000, rng).headers == {}
    # a fault's answer says what is left, and takes nothing from the window
    down = fakes.answer(240_000, "alpha", "a", "m", 30_000, rng)
    assert (down.status, down.headers["x-ratelimit-remaining-requests"]) == (503, "3")
    after = fakes.answer(250_000, "alpha", "a", "m", 30_000, rng)
    assert after.headers["x-ratelimit-remaining-requests"] == "2"


def test_a_scenario_without_limits_draws_the_same_answers(tmp_path: Path) -> None:
    plain = load_scenario(_write(tmp_path, SCENARIO.replace("    limits: {rpm: 3}\n", "")
                                 .replace(", limits: {rpm: 2, tpm: 150}", "")))
    limited = load_scenario(_write(tmp_path, SCENARIO.replace("rpm: 3", "rpm: 1000000")
                                   .replace("rpm: 2, tpm: 150", "rpm: 1000000")))
    a, b = FakeProviders(plain), FakeProviders(limited)
    ra, rb = random.Random(5), random.Random(5)
    for t in range(0, 300_000, 7_000):
        x = a.answer(t, "alpha", "a", "m", 30_000, ra)
        y = b.answer(t, "alpha", "a", "m", 30_000, rb)
        assert (x.status, x.delay_ms) == (y.status, y.delay_ms)


async def test_the_fakes_send_the_headers_over_http(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, SCENARIO))
    clock = ManualClock(30_000)
    servers = await start_fakes(scenario, clock)
    try:
        alpha = next(s for s in servers if s.provider == "alpha")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        auth = {"authorization": "Bearer sk-fake-alpha-a"}
        async with httpx.AsyncClient(base_url=alpha.base_url, timeout=10) as client:
            seen = [await client.post("/chat/completions", json=body, headers=auth)
                    for _ in range(4)]
            stream = await client.post("/chat/completions", json={**body, "stream": True},
                                       headers={"authorization": "Bearer sk-fake-alpha-b"})
    finally:
        await stop_fakes(servers)
    assert [r.status_code for r in seen] == [200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in seen] == ["2", "1", "0", "0"]
    assert seen[0].headers["x-ratelimit-reset-requests"] == "29.9s"
    assert seen[3].headers["retry-after"] == "30"
    assert seen[3].json()["error"]["code"] == "rate_limit_exceeded"
    assert stream.status_code == 200
    assert stream.headers["x-ratelimit-remaining-tokens"] == "50"
    assert stream.text.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize(("limits", "field", "reason"), [
    ("{rpm: -5}", "providers.alpha.limits.rpm", "at least 1, got -5"),
    ("{rpm: 0}", "providers.alpha.limits.rpm", "at least 1, got 0"),
    ("{rpm: '600'}", "providers.alpha.limits.rpm", "got str '600'"),
    ("{rpm: 6.5}", "providers.alpha.limits.rpm", "got float 6.5"),
    ("{rpm: true}", "providers.alpha.limits.rpm", "got bool True"),
    ("{tpm: 99999999999999999999999}", "providers.alpha.limits.tpm", "at most 10,000,000,000"),
    ("{rpm: 1.0e+400}", "providers.alpha.limits.rpm", "got float inf"),
    ("{rpm: 1e400}", "providers.alpha.limits.rpm", "got str '1e400'"),
    ("{}", "providers.alpha.limits", "give rpm"),
    ("{rps: 5}", "providers.alpha.limits.rps", "unknown"),
    ("600", "providers.alpha.limits", "mapping"),
])
def test_nonsense_limits_are_errors_with_file_line_and_field(
    tmp_path: Path, limits: str, field: str, reason: str
) -> None:
    path = _write(tmp_path, SCENARIO.replace("limits: {rpm: 3}", f"limits: {limits}"))
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    problem = caught.value.problems[0]
    assert (problem.file, problem.line, problem.field) == (str(path), 7, field)
    assert reason in problem.reason


def test_a_connections_limits_are_checked_too(tmp_path: Path) -> None:
    path = _write(tmp_path, SCENARIO.replace("rpm: 2, tpm: 150", "rpm: 2, tpm: -1"))
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    problem = caught.value.problems[0]
    assert (problem.line, problem.field) == (10, "providers.alpha.connections[1].limits.tpm")


def test_a_scenario_against_a_router_config_gives_its_limits_by_key(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text("providers:\n  alpha: {models: [m], connections: [a, b]}\n"
                      "routes:\n  r: {targets: [alpha/m]}\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("duration: 1m\nlimits:\n  alpha/b: {rpm: 5}\n  alpha: {rpm: 9}\n")
    loaded = load_scenario(scenario, config=config)
    assert loaded.limits == {("alpha", "a"): RateLimits(rpm=9), ("alpha", "b"): RateLimits(rpm=5)}
    scenario.write_text("duration: 1m\nlimits:\n  alpha/z: {rpm: 5}\n  gamma: {rpm: 0}\n")
    with pytest.raises(ConfigError) as caught:
        load_scenario(scenario, config=config)
    assert [(p.line, p.field, p.reason.split(" (")[0]) for p in caught.value.problems] == [
        (3, "limits.alpha/z", f"provider 'alpha' in {config} has no connection 'z'"),
        (4, "limits.gamma", f"unknown provider 'gamma' in {config}"),
    ]
    own = tmp_path / "own.yaml"
    own.write_text(SCENARIO + "limits: {alpha: {rpm: 1}}\n")
    with pytest.raises(ConfigError, match="gives each provider's limits in its providers"):
        load_scenario(own)
