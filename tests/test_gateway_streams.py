"""Streams as real providers break them, through the gateway, with the official `openai`
client (docs/gateway.md, "Streams"): a stream cut at 40 tokens of 60, one that stalls,
one with a malformed event, one without `[DONE]`, a first token that comes late. The
client always sees an error, never a short answer that looks whole; the gateway answers
within its bounds; the cuts count against the provider's breaker; nothing is logged as
an error, and no traceback."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.engine.events import Event, ResultEvent
from omniroute_tui.gateway import Gateway, GatewayServer

from .waiting import eventually

MESSAGES = [{"role": "user", "content": "count to sixty"}]


def _chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _token(i: int) -> bytes:
    return _chunk({"content": f"t{i} "})


@dataclass
class FakeUpstream:
    """An OpenAI-shaped upstream on 127.0.0.1 that streams 60 tokens and misbehaves as
    its model's name says: `cut40` closes the connection mid-body after 40, `stall20`
    goes silent after 20, `bad10` sends a malformed event after 10, `nodone` ends the
    body without `[DONE]`, `slowfirst` sends its headers and role at once and its first
    token 20 s later; any other model streams whole."""

    port: int = 0
    requests: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._release.set()  # the stalled answers end
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                body = json.loads(await reader.readexactly(length))
                model = body["model"]
                self.requests.append(model)
                self.bodies.append(body)
                if not await self._answer(model, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the gateway closed the connection, or the test ended
        finally:
            writer.close()

    async def _answer(self, model: str, writer: asyncio.StreamWriter) -> bool:
        """Streams the answer; False when the connection is to be closed."""
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")

        def send(data: bytes) -> None:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        send(_chunk({"role": "assistant", "content": ""}))
        if model == "slowfirst":
            await writer.drain()
            await self._wait(20)
        for i in range(60):
            if model == "cut40" and i == 40:
                await writer.drain()
                return False  # closed mid-body: no error, no [DONE]
            if model == "stall20" and i == 20:
                await writer.drain()
                await self._wait(30)
            if model == "bad10" and i == 10:
                send(b'data: {"id": "chatcmpl-1", "choices": [{"delta": {"content": "t1\n\n')
            send(_token(i))
            await writer.drain()
        send(_chunk({}, "stop"))
        if model != "nodone":
            send(b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _wait(self, seconds: float) -> None:
        """`seconds` of silence, or until the test ends."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._release.wait(), seconds)


CONFIG = """\
resilience: {{request: {{stream_idle: 300ms}}}}
providers:
  flaky:
    base_url: {url}
    models: [cut40, stall20, bad10, nodone, slowfirst, m]
    connections: [{{id: f1, api_key: sk-flaky-0001}}]
  sixkeys:
    base_url: {url}
    models: [cut40]
    connections: [k1, k2, k3, k4, k5, k6]
  good:
    base_url: {url}
    models: [m]
    connections: [{{id: g1, api_key: sk-good-0001}}]
routes:
  cut: {{targets: [flaky/cut40, good/m]}}
  stall: {{targets: [flaky/stall20, good/m]}}
  bad: {{targets: [flaky/bad10, good/m]}}
  nodone: {{targets: [flaky/nodone, good/m]}}
  slowfirst: {{first_token: 300ms, targets: [flaky/slowfirst, good/m]}}
  whole: {{targets: [flaky/m]}}
  six: {{targets: [sixkeys/cut40, good/m]}}
"""


@dataclass
class Setup:
    api: openai.AsyncOpenAI
    gateway: Gateway
    upstream: FakeUpstream


@asynccontextmanager
async def gateway_and_upstream(config_text: str = CONFIG, upstream: FakeUpstream | None = None
                               ) -> AsyncIterator[Setup]:
    upstream = upstream or FakeUpstream()
    await upstream.start()
    config = load_router_config("router.yaml", text=config_text.format(
        url=f"http://127.0.0.1:{upstream.port}/v1"))
    gateway = Gateway(config.build(SystemClock()), config.providers, token=None)
    server = GatewayServer(gateway, "127.0.0.1", 0)
    await server.start()
    try:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="any",
                                      max_retries=0, timeout=10) as api:
            yield Setup(api, gateway, upstream)
    finally:
        await server.stop()
        await upstream.stop()


async def _tokens(api: openai.AsyncOpenAI, route: str) -> tuple[list[str], BaseException | None]:
    """The tokens a client read, and what it raised (None: the stream ended whole)."""
    tokens: list[str] = []
    try:
        stream = await api.chat.completions.create(model=route, messages=MESSAGES,
                                                   stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens.append(chunk.choices[0].delta.content)
    except openai.APIError as exc:
        return tokens, exc
    return tokens, None


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.levelno < logging.ERROR, record.getMessage()
        assert record.exc_info is None and "Traceback" not in record.getMessage(), (
            record.getMessage())


def _access(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [{k: getattr(r, k, None) for k in ("route", "status", "stream", "reason",
                                              "relayed_chunks", "provider")}
            for r in caplog.records if r.name == "omniroute.access"]


@pytest.mark.parametrize(("route", "tokens", "reason", "said"), [
    ("cut", 40, "reset", "the peer closed the connection mid-body"),
    ("stall", 20, "idle", "nothing came for 0.3 s"),
    ("bad", 10, "bad_event", "an event that is not JSON"),
    ("nodone", 60, "no_done", "the body ended without data: [DONE]"),
])
async def test_a_broken_stream_is_an_error_the_client_sees(
        caplog: pytest.LogCaptureFixture, route: str, tokens: int, reason: str,
        said: str) -> None:
    caplog.set_level(logging.DEBUG)
    async with gateway_and_upstream() as setup:
        started = time.monotonic()
        got, raised = await _tokens(setup.api, route)
        took = time.monotonic() - started
        assert got == [f"t{i} " for i in range(tokens)]  # all it had, and no more
        assert isinstance(raised, openai.APIError)  # never a short answer that looks whole
        assert raised.body == {"message": raised.message, "type": "upstream_error",
                               "param": None, "code": "stream_cut", "reason": reason}
        chunks = tokens + (reason == "no_done")  # the finish came too: a chunk with content
        assert said in raised.message and f"after {chunks} chunk(s)" in raised.message
        assert took < 2.0  # a stall is cut at stream_idle (0.3 s), not when it ends (30 s)
        # the stream's end is recorded, and its access line written, once its body is sent
        await eventually(lambda: _access(caplog), what="the access line")
        state = setup.gateway.engine.connection_snapshot("flaky", "f1")
        assert (state.last_error, state.level) == ("stream_cut", 1)
        assert setup.gateway.engine.breaker_snapshot("flaky").failures == 1
    [line] = [a for a in _access(caplog) if a["route"] == route]
    assert line == {"route": route, "status": 200, "stream": "stream_cut", "reason": reason,
                    "relayed_chunks": chunks, "provider": "flaky"}
    _no_traceback(caplog)


async def test_a_whole_stream_is_a_success(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with gateway_and_upstream() as setup:
        got, raised = await _tokens(setup.api, "whole")
        assert raised is None and len(got) == 60
    [line] = _access(caplog)
    assert (line["stream"], line["reason"], line["relayed_chunks"]) == ("whole", None, 61)
    _no_traceback(caplog)


async def test_a_first_token_too_late_falls_back_before_anything_is_sent(
        caplog: pytest.LogCaptureFixture) -> None:
    """Headers and the role at once, the first token 20 s later: with `first_token:
    300ms` on the route, the next target answers, and the client sees one answer."""
    caplog.set_level(logging.DEBUG)
    async with gateway_and_upstream() as setup:
        started = time.monotonic()
        response = await setup.api.chat.completions.with_raw_response.create(
            model="slowfirst", messages=MESSAGES, stream=True)
        got = [c.choices[0].delta.content async for c in response.parse()
               if c.choices and c.choices[0].delta.content]
        took = time.monotonic() - started
        assert got == [f"t{i} " for i in range(60)]
        assert response.headers["x-omniroute-served-by"] == "good/g1/m"
        assert 0.3 <= took < 2.0
        assert setup.upstream.requests == ["slowfirst", "m"]
        state = setup.gateway.engine.connection_snapshot("flaky", "f1")
        assert state.last_error == "timeout"
    [line] = _access(caplog)
    assert (line["provider"], line["stream"]) == ("good", "whole")
    _no_traceback(caplog)


async def test_six_cuts_in_a_row_open_the_breaker(caplog: pytest.LogCaptureFixture) -> None:
    """Defaults (apikey): three counted failures make the breaker DEGRADED, five open it
    (docs/design.md §3); each cut cools its key, so the next request takes the next key, and the
    sixth goes to the route's next target."""
    caplog.set_level(logging.DEBUG)
    async with gateway_and_upstream() as setup:
        states = []
        for _ in range(5):
            got, raised = await _tokens(setup.api, "six")
            assert len(got) == 40 and isinstance(raised, openai.APIError)
            await eventually(lambda: len(_access(caplog)) > len(states),
                             what="the stream's end")
            states.append(setup.gateway.engine.breaker_snapshot("sixkeys").state.value)
        assert states == ["CLOSED", "CLOSED", "DEGRADED", "DEGRADED", "OPEN"]
        got, raised = await _tokens(setup.api, "six")
        assert raised is None and len(got) == 60  # from good: sixkeys is not asked
        assert setup.upstream.requests == ["cut40"] * 5 + ["m"]
    _no_traceback(caplog)


async def test_a_client_that_leaves_mid_stream_ends_it_cancelled(
        caplog: pytest.LogCaptureFixture) -> None:
    """The client hangs up while the upstream is silent: the relay stops at once (not at
    stream_idle), the attempt counts as cancelled, neither success nor failure."""
    import httpx

    caplog.set_level(logging.DEBUG)
    async with gateway_and_upstream() as setup:
        seen = _Seen()
        setup.gateway.engine.bus.subscribe(seen)
        url = str(setup.api.base_url).rstrip("/")
        async with httpx.AsyncClient(timeout=10) as http, http.stream(
                "POST", f"{url}/chat/completions",
                json={"model": "stall", "messages": MESSAGES, "stream": True}) as answer:
            read = b""
            async for piece in answer.aiter_bytes():
                read += piece
                if read.count(b"\n\n") >= 21:  # the role and 20 tokens: then it stalls
                    break
        await eventually(lambda: _access(caplog), what="the access line")
        assert [(r.kind, r.provider) for r in seen.results] == [("cancelled", "flaky")]
        state = setup.gateway.engine.connection_snapshot("flaky", "f1")
        assert state.last_error is None
    [line] = _access(caplog)
    assert (line["stream"], line["reason"], line["relayed_chunks"]) == ("cancelled", None, 20)
    _no_traceback(caplog)


class _Seen:
    def __init__(self) -> None:
        self.results: list[ResultEvent] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, ResultEvent):
            self.results.append(event)
