"""The fake providers over HTTP: starlette apps served by uvicorn on 127.0.0.1.

Each attempt's fate comes from `FakeProviders.answer()`, the same function the virtual
runner uses, with the scenario's time counted from launch. Rendering over a socket:
errors after the provider's latency as JSON bodies with `Retry-After`, and a limited key's
`x-ratelimit-*` headers on every answer (`simulator.rate_limits`); `reset` cuts the
connection mid-body (mid-stream for SSE); `refused` cuts it at once; `timeout` holds
the request past the client's timeout; `slow` adds its latency, then succeeds.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from faker import Faker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from omniroute_tui.clock import Clock, ElapsedClock
from omniroute_tui.engine.classify import TransportFailure

from .fakes import FakeProviders, error_body
from .scenario import Scenario

__all__ = ["FakeServer", "fake_api_keys", "provider_app", "start_fakes"]


class _CutConnection(Exception):
    """Raised inside a response body to make the server drop the connection."""


class _ResetResponse(Response):
    """Promises a body, sends part of it, then drops the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", b"4096")]})
        await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-', "more_body": True})
        raise _CutConnection("connection reset by the fake provider")


def fake_api_keys(scenario: Scenario) -> dict[str, dict[str, str]]:
    """provider -> connection id -> api key; keys the scenario leaves out are made up."""
    return {
        name: {c.id: c.api_key.reveal() if c.api_key else f"sk-fake-{name}-{c.id}"
               for c in provider.connections}
        for name, provider in scenario.providers.items()
    }


def _completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{abs(hash(text)) % 10**12:012d}", "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": len(text.split()),
                  "total_tokens": 12 + len(text.split())},
    }


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "chatcmpl-stream", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(data)}\n\n".encode()


def provider_app(
    scenario: Scenario, provider: str, keys: Mapping[str, str], clock: Clock,
    *, seed: int = 0,
) -> Starlette:
    """One provider's OpenAI-compatible API."""
    fakes = FakeProviders(scenario)
    rng = random.Random(seed)
    faker = Faker()
    faker.seed_instance(seed)
    models = scenario.providers[provider].models
    timeout_ms = scenario.providers[provider].settings.request.timeout_ms

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return JSONResponse({"error": {"message": "body is not JSON",
                                           "type": "invalid_request_error"}}, 400)
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return JSONResponse({"error": {"message": "missing model",
                                           "type": "invalid_request_error"}}, 400)
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        connection = keys.get(token)
        if connection is None:
            return Response(error_body(401), 401, media_type="application/json")
        model = body["model"]
        stream = bool(body.get("stream"))
        fate = fakes.answer(clock.now_ms(), provider, connection, model, timeout_ms, rng)
        if fate.transport is TransportFailure.CONNECT_REFUSED:
            return _ResetResponse()
        if fate.transport is TransportFailure.READ_TIMEOUT:
            await asyncio.sleep(timeout_ms / 1000 + 1.0)  # the client gives up first
            return JSONResponse(_completion(model, "too late"))
        await asyncio.sleep(fate.delay_ms / 1000)
        if fate.transport is TransportFailure.CONNECTION_RESET:
            if stream:
                return StreamingResponse(_cut_stream(model, faker.sentence()),
                                         media_type="text/event-stream")
            return _ResetResponse()
        if fate.status != 200:
            return Response(fate.body, fate.status, headers=fate.headers,
                            media_type="application/json")
        text = faker.paragraph(nb_sentences=2)
        if stream:  # the rate-limit headers (a key with `limits:`) come with successes too
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            return StreamingResponse(_stream(model, text, usage=usage),
                                     media_type="text/event-stream", headers=fate.headers)
        return JSONResponse(_completion(model, text), headers=fate.headers)

    async def list_models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "owned_by": provider} for m in models]})

    return Starlette(routes=[
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
    ])


async def _stream(model: str, text: str, *, usage: bool = False) -> AsyncIterator[bytes]:
    """`usage`: the client asked for it (`stream_options: {include_usage: true}`), and it
    comes as OpenAI sends it, in a last chunk without choices."""
    yield _chunk(model, {"role": "assistant", "content": ""})
    for word in text.split():
        yield _chunk(model, {"content": word + " "})
    yield _chunk(model, {}, "stop")
    if usage:
        last = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "model": model,
                "choices": [], "usage": _completion(model, text)["usage"]}
        yield f"data: {json.dumps(last)}\n\n".encode()
    yield b"data: [DONE]\n\n"


async def _cut_stream(model: str, text: str) -> AsyncIterator[bytes]:
    """A stream that breaks half-way: the SSE equivalent of a connection reset."""
    words = text.split()
    yield _chunk(model, {"role": "assistant", "content": ""})
    for word in words[: max(1, len(words) // 2)]:
        yield _chunk(model, {"content": word + " "})
    raise _CutConnection("stream cut by the fake provider")


@dataclass
class FakeServer:
    provider: str
    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


async def start_fakes(
    scenario: Scenario, clock: Clock | None = None, *, startup_timeout_s: float = 10.0
) -> list[FakeServer]:
    """Serve every provider of the scenario on its own ephemeral port on 127.0.0.1."""
    clock = clock or ElapsedClock()
    keys = fake_api_keys(scenario)
    servers: list[FakeServer] = []
    try:
        for index, provider in enumerate(scenario.providers):
            connection_of = {key: conn for conn, key in keys[provider].items()}
            app = provider_app(scenario, provider, connection_of, clock,
                               seed=scenario.seed + index)
            # log_config=None: no handler of uvicorn's own on stderr, which would also
            # take the lines of a gateway served beside the fakes (the console's --live)
            config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical",
                                    log_config=None, lifespan="off", access_log=False)
            server = uvicorn.Server(config)
            task = asyncio.create_task(server.serve(), name=f"fake-{provider}")
            deadline = time.monotonic() + startup_timeout_s
            while not server.started:
                if task.done() or time.monotonic() > deadline:
                    raise RuntimeError(f"the fake provider {provider!r} did not start")
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            servers.append(FakeServer(provider, server, task, port))
    except BaseException:
        await stop_fakes(servers)
        raise
    return servers


async def stop_fakes(servers: list[FakeServer]) -> None:
    for fake in servers:
        fake.server.should_exit = True
    for fake in servers:
        try:
            await asyncio.wait_for(fake.task, timeout=5)
        except (TimeoutError, asyncio.CancelledError):
            fake.task.cancel()
