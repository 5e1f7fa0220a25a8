"""A prompt longer than a model's context (docs/design.md §2): its own kind, charged to
no one, and the request moves to the route's next target; with none left, the client gets
the provider's own 400. A content-policy 400 still goes straight back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from omniroute_tui.engine import FailureKind
from omniroute_tui.router import Attempt
from omniroute_tui.router import Response as Answer

from .gateway_helpers import gateway_for, serving
from .helpers import OK, fail, make_engine, make_router

TOO_LONG = FailureKind.CONTEXT_LENGTH


def test_the_next_target_takes_a_prompt_too_long_for_the_first() -> None:
    engine, clock, rec = make_engine()
    routing = make_router(engine).start("r1", "r")
    first = routing.next_step()
    assert isinstance(first, Attempt) and first.provider == "alpha"
    routing.record(400, fail(TOO_LONG))
    second = routing.next_step()
    assert isinstance(second, Attempt) and second.provider == "beta"
    routing.record(200, OK)
    answer = routing.next_step()
    assert isinstance(answer, Answer) and answer.upstream is second
    # charged to no one: no cooldown, no lockout, no breaker count
    assert not rec.of("cooldown") and not rec.of("lockout") and not rec.of("breaker")
    assert engine.breaker_snapshot("alpha").failures == 0


@pytest.mark.parametrize("then", [None, 503])
def test_with_no_target_left_the_client_gets_the_providers_own_400(then: int | None) -> None:
    engine, clock, rec = make_engine()
    routing = make_router(engine, ("alpha/m",) if then is None else ("alpha/m", "beta/m")
                          ).start("r1", "r")
    first = routing.next_step()
    assert isinstance(first, Attempt)
    routing.record(400, fail(TOO_LONG))
    if then is not None:  # the larger model is out: the 400 still says what to fix
        second = routing.next_step()
        assert isinstance(second, Attempt) and second.provider == "beta"
        routing.record(then, fail(FailureKind.SERVER_ERROR))
    answer = routing.next_step()
    assert isinstance(answer, Answer)
    assert (answer.status, answer.upstream, answer.body) == (400, first, None)


# -- through the gateway, with the official client --------------------------------------

CONTEXT_BODY = {"error": {
    "message": "This model's maximum context length is 8192 tokens. However, your messages "
               "resulted in 9013 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
POLICY_BODY = {"error": {
    "message": "Your request was rejected as a result of our safety system.",
    "type": "invalid_request_error", "param": None, "code": "content_policy_violation"}}


def upstream_app(calls: list[str]) -> Starlette:
    """`small` says the prompt is too long, `strict` rejects it by policy, `large` answers
    (a stream when asked)."""

    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        model = body["model"]
        calls.append(model)
        if model == "small":
            return JSONResponse(CONTEXT_BODY, 400)
        if model == "strict":
            return JSONResponse(POLICY_BODY, 400)
        if body.get("stream"):
            return StreamingResponse(chunks(model), media_type="text/event-stream")
        return JSONResponse({"id": "c1", "object": "chat.completion", "created": 1,
                             "model": model, "choices": [{
                                 "index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "long enough"}}]})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


async def chunks(model: str) -> AsyncIterator[bytes]:
    for piece in ("long", " enough"):
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
                 "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def config(url: str) -> str:
    data: dict[str, Any] = {
        "providers": {"p": {"base_url": url, "models": ["small", "large", "strict"],
                            "connections": [{"id": "k1", "api_key": "sk-test-key-00001"}]}},
        "routes": {"grow": {"targets": ["p/small", "p/large"]},
                   "small": {"targets": ["p/small"]},
                   "strict": {"targets": ["p/strict", "p/large"]}}}
    return yaml.safe_dump(data)


MESSAGES = [{"role": "user", "content": "a very long prompt"}]


async def test_the_openai_client_gets_the_larger_models_answer_json_and_stream() -> None:
    calls: list[str] = []
    async with serving(upstream_app(calls)) as url, gateway_for(config(url)) as gw, \
            openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="any", max_retries=0,
                               timeout=10) as api:
        reply = await api.chat.completions.create(model="grow", messages=MESSAGES)
        assert reply.choices[0].message.content == "long enough"
        stream = await api.chat.completions.create(model="grow", messages=MESSAGES,
                                                   stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream
                        if c.choices])
        assert text == "long enough"
        assert calls == ["small", "large", "small", "large"]
        # a prompt too long is no failure of the key's or the provider's
        snap = gw.gateway.engine.connection_snapshot("p", "k1")
        assert (snap.level, snap.cooling_until) == (0, 0)
        assert gw.gateway.engine.breaker_snapshot("p").failures == 0


async def test_the_openai_client_gets_the_original_400_and_a_policy_400_at_once() -> None:
    calls: list[str] = []
    async with serving(upstream_app(calls)) as url, gateway_for(config(url)) as gw, \
            openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="any", max_retries=0,
                               timeout=10) as api:
        with pytest.raises(openai.BadRequestError) as info:
            await api.chat.completions.create(model="small", messages=MESSAGES)
        assert info.value.code == "context_length_exceeded"
        assert info.value.response.json() == CONTEXT_BODY
        with pytest.raises(openai.BadRequestError) as info:
            await api.chat.completions.create(model="small", messages=MESSAGES, stream=True)
        assert info.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as info:  # no fallback: the same anywhere
            await api.chat.completions.create(model="strict", messages=MESSAGES)
        assert info.value.code == "content_policy_violation"
        assert calls == ["small", "small", "strict"]
