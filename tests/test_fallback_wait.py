"""`fallback_wait` (docs/design.md §7): a route may wait for its target's own short
Retry-After, or one quick retry after a 5xx, before it falls back to another model; once
a request, within its timeout and the provider's retry budget."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as Path

from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.engine import FailureKind, WaitEvent
from omniroute_tui.engine.kinds import SkipReason
from omniroute_tui.router import Attempt, Route, Router, Target, Wait
from omniroute_tui.router import Response as Answer
from omniroute_tui.router.core import QUICK_RETRY_MS

from .gateway_helpers import gateway_for, serving
from .helpers import OK, fail, make_engine, settings

RATE, SERVER = FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR


def router_for(engine: Any, wait_ms: int, targets: tuple[str, ...] = ("alpha/m", "beta/n")
               ) -> Router:
    route = Route("r", tuple(Target(*t.split("/")) for t in targets),
                  fallback_wait_ms=wait_ms)
    return Router(engine, {"r": route})


def one_key(**sections: dict[str, Any]) -> tuple[Any, Any, Any]:
    return make_engine({"alpha": ("a1",), "beta": ("b1",)},
                       settings_=settings(**sections) if sections else None)


def test_a_short_retry_after_is_waited_and_the_primary_answers() -> None:
    engine, clock, rec = one_key()
    routing = router_for(engine, 5_000).start("q", "r")
    first = routing.next_step()
    assert isinstance(first, Attempt) and first.provider == "alpha"
    clock.advance(40)
    routing.record(429, fail(RATE, 2_000))
    wait = routing.next_step()
    assert wait == Wait(2_000)
    clock.advance(2_000)
    again = routing.next_step()
    assert isinstance(again, Attempt) and (again.provider, again.connection) == ("alpha", "a1")
    clock.advance(40)
    routing.record(200, OK)
    answer = routing.next_step()
    assert isinstance(answer, Answer) and answer.upstream is again
    assert (answer.latency_ms, answer.waited_ms) == (2_080, 2_000)
    waits = [(e.phase, e.delay_ms, e.target, e.reason) for e in rec.events
             if isinstance(e, WaitEvent)]
    assert waits == [("start", 2_000, "alpha/m", SkipReason.FALLBACK_WAIT),
                     ("end", 2_000, "alpha/m", SkipReason.FALLBACK_WAIT)]
    # the key rides its own backoff's floor (3 s, longer than the hint): the attempt says so
    attempts = rec.of("attempt")
    assert [a.get("cooling_until") for a in attempts] == [None, 3_040]


def test_off_by_default_and_past_the_setting_the_fallback_answers_at_once() -> None:
    for wait_ms, hint in ((0, 2_000), (1_000, 2_000)):
        engine, clock, rec = one_key()
        routing = router_for(engine, wait_ms).start("q", "r")
        routing.next_step()
        routing.record(429, fail(RATE, hint))
        step = routing.next_step()
        assert isinstance(step, Attempt) and step.provider == "beta", (wait_ms, hint)


def test_a_5xx_gets_one_quick_retry_and_then_the_fallback() -> None:
    engine, clock, rec = one_key()
    routing = router_for(engine, 5_000).start("q", "r")
    routing.next_step()
    routing.record(503, fail(SERVER))
    assert routing.next_step() == Wait(QUICK_RETRY_MS)
    clock.advance(QUICK_RETRY_MS)
    again = routing.next_step()
    assert isinstance(again, Attempt) and again.provider == "alpha"
    routing.record(503, fail(SERVER))
    step = routing.next_step()  # once a request: now the fallback
    assert isinstance(step, Attempt) and step.provider == "beta"


def test_a_429_without_a_hint_falls_back_at_once() -> None:
    engine, clock, rec = one_key()
    routing = router_for(engine, 5_000).start("q", "r")
    routing.next_step()
    routing.record(429, fail(RATE))
    step = routing.next_step()
    assert isinstance(step, Attempt) and step.provider == "beta"


@pytest.mark.parametrize("case", ["same_model", "other_key", "no_budget", "deadline",
                                  "breaker_open", "last_target"])
def test_no_wait_where_it_would_not_help(case: str) -> None:
    sections: dict[str, dict[str, Any]] = {}
    if case == "no_budget":
        sections["retry_budget"] = {"burst": 0.0, "ratio": 0.0}
    if case == "deadline":
        sections["request"] = {"timeout_ms": 3_000}
    if case == "breaker_open":
        sections["breaker"] = {"failure_threshold": 1, "degraded_threshold": 1}
    conns = ("a1", "a2") if case == "other_key" else ("a1",)
    engine, clock, rec = make_engine({"alpha": conns, "beta": ("b1",)},
                                     settings_=settings(**sections) if sections else None)
    targets = {"same_model": ("alpha/m", "beta/m"), "last_target": ("alpha/m",)}.get(
        case, ("alpha/m", "beta/n"))
    routing = router_for(engine, 5_000, targets).start("q", "r")
    routing.next_step()
    clock.advance(1_500)
    routing.record(429, fail(RATE, 2_000))
    step = routing.next_step()
    assert not isinstance(step, Wait), case
    if case == "other_key":
        assert isinstance(step, Attempt) and step.connection == "a2"
    elif case != "last_target":
        assert isinstance(step, Attempt) and step.provider == "beta", case


def test_a_client_gone_during_the_wait_ends_it() -> None:
    engine, clock, rec = one_key()
    routing = router_for(engine, 5_000).start("q", "r")
    routing.next_step()
    routing.record(429, fail(RATE, 2_000))
    assert routing.next_step() == Wait(2_000)
    clock.advance(700)
    assert routing.cancel().status == 499
    assert [(e.phase, e.delay_ms) for e in rec.events if isinstance(e, WaitEvent)] == [
        ("start", 2_000), ("end", 700)]


def test_the_config_reads_it_and_refuses_nonsense() -> None:
    base = {"providers": {"p": {"base_url": "http://127.0.0.1:9/v1", "models": ["m", "n"],
                                "connections": [{"id": "k", "api_key": "sk-test-0000001"}]}}}

    def load(value: Any) -> Any:
        data = dict(base, routes={"r": {"targets": ["p/m", "p/n"], "fallback_wait": value}})
        return load_router_config("r.yaml", text=yaml.safe_dump(data))

    assert load("2s").routes["r"].fallback_wait_ms == 2_000
    assert load(0).routes["r"].fallback_wait_ms == 0
    for bad, said in (("61s", "fallback_wait"), ("soon", "fallback_wait"),
                      (-5, "fallback_wait"), ([1], "fallback_wait")):
        with pytest.raises(ConfigError, match=said):
            load(bad)


# -- through the gateway, with the official client --------------------------------------

def limited_once() -> tuple[Starlette, list[tuple[str, float]]]:
    """`primary` answers 429 with Retry-After: 2 once, then 200; `fallback` always 200."""
    calls: list[tuple[str, float]] = []

    async def completions(request: Request) -> Response:
        model = json.loads(await request.body())["model"]
        calls.append((model, time.monotonic()))
        if model == "primary" and sum(1 for m, _ in calls if m == "primary") == 1:
            return JSONResponse({"error": {"message": "Rate limit reached", "type": "requests",
                                           "code": "rate_limit_exceeded"}}, 429,
                                headers={"retry-after": "2"})
        return JSONResponse({"id": "c", "object": "chat.completion", "created": 1,
                             "model": model, "choices": [{
                                 "index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": model}}]})

    return Starlette(routes=[Path("/v1/chat/completions", completions, methods=["POST"])]), calls


async def test_the_openai_client_gets_the_primary_after_its_retry_after() -> None:
    app, calls = limited_once()
    async with serving(app) as url:
        data = {"providers": {"p": {"base_url": url, "models": ["primary", "fallback"],
                                    "connections": [{"id": "k", "api_key": "sk-test-0000001"}]}},
                "routes": {"chat": {"targets": ["p/primary", "p/fallback"],
                                    "fallback_wait": "5s"}}}
        async with gateway_for(yaml.safe_dump(data)) as gw, openai.AsyncOpenAI(
                base_url=f"{gw.url}/v1", api_key="any", max_retries=0, timeout=10) as api:
            reply = await api.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "hi"}])
            assert reply.parse().choices[0].message.content == "primary"
            assert [m for m, _ in calls] == ["primary", "primary"]
            waited = calls[1][1] - calls[0][1]
            assert 2.0 <= waited < 4.0  # the server's 2 s, and no fallback meanwhile
