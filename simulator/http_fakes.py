"""The fake providers over HTTP: starlette apps served by uvicorn on 127.0.0.1.

Each attempt's fate comes from `FakeProviders.answer()`, the same function the virtual
runner uses, with the scenario's time counted from launch. Rendering over a socket:
errors after the provider's latency as JSON bodies with `Retry-After`, and a limited key's
`x-ratelimit-*` headers on every answer (`simulator.rate_limits`); `reset` cuts the
connection mid-body (for SSE too: before any event); `refused` cuts it at once; `timeout`
holds the request past the client's timeout; `slow` adds its latency, then succeeds.
A streamed answer sends its tokens one every 20 ms, and a stream fault really breaks it
(`simulator.fake_streams`): the connection dropped right after token N, a silence, a
`data:` line that is not JSON, no `data: [DONE]`, a first event late.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import uvicorn
from faker import Faker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from omniroute_tui.apis import ApiFamily
from omniroute_tui.clock import Clock, ElapsedClock
from omniroute_tui.engine.classify import TransportFailure

from .fake_streams import DONE, chunk
from .fakes import FakeProviders, error_body
from .scenario import Fault, FaultAction, Scenario, StreamSpec

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


def provider_app(
    scenario: Scenario, provider: str, keys: Mapping[str, str], clock: Clock,
    *, seed: int = 0,
) -> Starlette:
    """One provider's API, in its family's shape: OpenAI's (and Gemini's
    OpenAI-compatible one), Azure's deployment paths and `api-key`, or Anthropic's
    Messages API with `x-api-key`, its error bodies, headers and stream events."""
    fakes = FakeProviders(scenario)
    family = scenario.providers[provider].api.family
    rng = random.Random(seed)
    faker = Faker()
    faker.seed_instance(seed)
    models = scenario.providers[provider].all_models
    timeout_ms = scenario.providers[provider].settings.request.timeout_ms

    async def completions(request: Request) -> Response:
        return await answer(request, embeddings=False)

    async def embeddings(request: Request) -> Response:
        return await answer(request, embeddings=True)

    async def answer(request: Request, *, embeddings: bool) -> Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return JSONResponse({"error": {"message": "body is not JSON",
                                           "type": "invalid_request_error"}}, 400)
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return JSONResponse({"error": {"message": "missing model",
                                           "type": "invalid_request_error"}}, 400)
        connection = keys.get(_key_of(family, request))
        if connection is None:
            return Response(error_body(401, family=family), 401, media_type="application/json")
        model = body["model"]
        stream = body.get("stream") is True
        fault = None
        if stream:
            fate, fault = fakes.answer_stream(clock.now_ms(), provider, connection, model,
                                              timeout_ms, rng)
        else:
            fate = fakes.answer(clock.now_ms(), provider, connection, model, timeout_ms, rng)
        if fate.transport is TransportFailure.CONNECT_REFUSED:
            return _ResetResponse()
        if fate.transport is TransportFailure.READ_TIMEOUT:
            await asyncio.sleep(timeout_ms / 1000 + 1.0)  # the client gives up first
            return JSONResponse(_completion(model, "too late"))
        await asyncio.sleep(fate.delay_ms / 1000)
        if fate.transport is TransportFailure.CONNECTION_RESET:
            return _ResetResponse()
        headers = _family_headers(family, fate.headers)
        if fate.status != 200:
            return Response(fate.body, fate.status, headers=headers,
                            media_type="application/json")
        if embeddings:
            return JSONResponse({"object": "list", "model": model, "data": [{
                "object": "embedding", "index": 0, "embedding": [rng.uniform(-1, 1)
                                                                 for _ in range(8)]}],
                "usage": {"prompt_tokens": 8, "total_tokens": 8}}, headers=headers)
        anthropic = family is ApiFamily.ANTHROPIC
        if stream:  # the rate-limit headers (a key with `limits:`) come with successes too
            options = body.get("stream_options")
            usage = anthropic or (isinstance(options, dict)
                                  and options.get("include_usage") is True)
            words = faker.words(nb=STREAM.tokens)
            events = AnthropicEvents(model) if anthropic else OpenAIEvents(model)
            return StreamingResponse(_stream(events, words, fault, usage=usage),
                                     media_type="text/event-stream", headers=headers)
        text = faker.paragraph(nb_sentences=2)
        return JSONResponse(_message(model, text) if anthropic else _completion(model, text),
                            headers=headers)

    async def list_models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "owned_by": provider} for m in models]})

    if family is ApiFamily.ANTHROPIC:
        return Starlette(routes=[Route("/v1/messages", completions, methods=["POST"]),
                                 Route("/v1/models", list_models, methods=["GET"])])
    prefix = {ApiFamily.AZURE: "/openai/deployments/{deployment}",
              ApiFamily.GEMINI: "/v1beta/openai"}.get(family, "/v1")
    return Starlette(routes=[
        Route(prefix + "/chat/completions", completions, methods=["POST"]),
        Route(prefix + "/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
    ])


def _key_of(family: ApiFamily, request: Request) -> str:
    """The key a request carries, where its family's API takes it."""
    if family is ApiFamily.ANTHROPIC:
        return request.headers.get("x-api-key", "")
    if family is ApiFamily.AZURE:
        return request.headers.get("api-key", "")
    return request.headers.get("authorization", "").removeprefix("Bearer ").strip()


#: OpenAI's rate-limit headers as Anthropic names them (its resets are RFC 3339 times)
_ANTHROPIC_HEADERS = {
    "x-ratelimit-limit-requests": "anthropic-ratelimit-requests-limit",
    "x-ratelimit-remaining-requests": "anthropic-ratelimit-requests-remaining",
    "x-ratelimit-reset-requests": "anthropic-ratelimit-requests-reset",
    "x-ratelimit-limit-tokens": "anthropic-ratelimit-tokens-limit",
    "x-ratelimit-remaining-tokens": "anthropic-ratelimit-tokens-remaining",
    "x-ratelimit-reset-tokens": "anthropic-ratelimit-tokens-reset",
}


def _family_headers(family: ApiFamily, headers: Mapping[str, str]) -> dict[str, str]:
    """An answer's headers as the family's API sends them: Anthropic's names, and its
    resets as the time they come (the fakes' answers count virtual time from launch, the
    reset is a wall-clock time here)."""
    if family is not ApiFamily.ANTHROPIC:
        return dict(headers)
    out: dict[str, str] = {}
    for name, text in headers.items():
        renamed = _ANTHROPIC_HEADERS.get(name)
        if renamed is None:
            out[name] = text
        elif renamed.endswith("-reset"):
            # `reset_text`'s `850ms` or `12.5s`
            seconds = float(text[:-2]) / 1000 if text.endswith("ms") else float(text[:-1])
            out[renamed] = datetime.fromtimestamp(time.time() + seconds, UTC).isoformat(
                timespec="seconds").replace("+00:00", "Z")
        else:
            out[renamed] = text
    return out


def _message(model: str, text: str) -> dict[str, Any]:
    """An Anthropic Messages API answer."""
    return {"id": f"msg_{abs(hash(text)) % 10**12:012d}", "type": "message",
            "role": "assistant", "model": model, "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": len(text.split())}}


class OpenAIEvents:
    """A chat-completions stream's events."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.created = int(time.time())

    def role(self) -> bytes:
        return chunk(self.model, {"role": "assistant", "content": ""}, created=self.created)

    def token(self, word: str) -> bytes:
        return chunk(self.model, {"content": word + " "}, created=self.created)

    def finish(self, words: list[str], usage: bool) -> bytes:
        out = chunk(self.model, {}, "stop", created=self.created)
        if usage:
            last = {"id": "chatcmpl-stream", "object": "chat.completion.chunk",
                    "model": self.model, "choices": [],
                    "usage": _completion(self.model, " ".join(words))["usage"]}
            out += f"data: {json.dumps(last)}\n\n".encode()
        return out

    def done(self) -> bytes:
        return DONE


class AnthropicEvents:
    """A Messages API stream's events."""

    def __init__(self, model: str) -> None:
        self.model = model

    @staticmethod
    def _event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    def role(self) -> bytes:
        return self._event("message_start", {"type": "message_start", "message": {
            "id": "msg_stream", "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}) + self._event(
            "content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}})

    def token(self, word: str) -> bytes:
        return self._event("content_block_delta", {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": word + " "}})

    def finish(self, words: list[str], usage: bool) -> bytes:
        return self._event("content_block_stop", {"type": "content_block_stop", "index": 0}) \
            + self._event("message_delta", {"type": "message_delta", "delta": {
                "stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(words)}})

    def done(self) -> bytes:
        return self._event("message_stop", {"type": "message_stop"})


#: a streamed answer over HTTP: 60 tokens, one every 20 ms (the traffic's defaults)
STREAM = StreamSpec()
#: where a token would be, a `bad_chunk` fault sends this: a `data:` line cut mid-JSON
BAD_EVENT = b'data: {"id": "chatcmpl-stream", "choices": [{"delta": {"content": "tok\n\n'


async def _stream(events: OpenAIEvents | AnthropicEvents, words: list[str],
                  fault: Fault | None, *, usage: bool = False) -> AsyncIterator[bytes]:
    """A streamed answer after its headers, as `fault` breaks it (or whole). `usage`: the
    client asked for it (`stream_options: {include_usage: true}`), and it comes as OpenAI
    sends it, in a last chunk without choices."""
    action = fault.action if fault is not None else None
    after = fault.after_tokens if fault is not None else 0
    gap = STREAM.interval_ms / 1000
    if action is FaultAction.FIRST_TOKEN:
        assert fault is not None
        await asyncio.sleep(fault.hold_ms / 1000)  # the headers are out: a late first event
    yield events.role()
    for k, word in enumerate(words, 1):
        if action is FaultAction.STREAM_CUT and after == k - 1:
            raise _CutConnection("stream cut by the fake provider")
        if action is FaultAction.STREAM_STALL and after == k - 1:
            assert fault is not None
            await asyncio.sleep(fault.hold_ms / 1000)  # silence, then the stream goes on
        elif not (action is FaultAction.FIRST_TOKEN and k == 1):
            await asyncio.sleep(gap)
        if action is FaultAction.BAD_CHUNK and after == k - 1:
            yield BAD_EVENT
        yield events.token(word)
    yield events.finish(words, usage)
    if action is not FaultAction.NO_DONE:
        yield events.done()


@dataclass
class FakeServer:
    provider: str
    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int

    family: ApiFamily = ApiFamily.OPENAI

    @property
    def base_url(self) -> str:
        """The URL as the family's own SDK takes it."""
        host = f"http://127.0.0.1:{self.port}"
        if self.family in (ApiFamily.ANTHROPIC, ApiFamily.AZURE):
            return host
        return host + ("/v1beta/openai" if self.family is ApiFamily.GEMINI else "/v1")


async def start_server(app: ASGIApp, what: str, *, port: int = 0,
                       startup_timeout_s: float = 10.0
                       ) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    """`app` served by uvicorn on 127.0.0.1:`port` (0: a free one), quiet, once it listens:
    the server, its task and its port. RuntimeError naming `what` if it does not start."""
    # log_config=None: no handler of uvicorn's own on stderr, which would also take the
    # lines of a gateway served beside the fakes (the console's --live)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical",
                            log_config=None, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(), name=what)
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"{what} did not start")
        await asyncio.sleep(0.01)
    return server, task, server.servers[0].sockets[0].getsockname()[1]


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
            server, task, port = await start_server(
                app, f"the fake provider {provider!r}", startup_timeout_s=startup_timeout_s)
            servers.append(FakeServer(provider, server, task, port,
                                      scenario.providers[provider].api.family))
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
