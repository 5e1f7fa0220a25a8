"""Concurrency caps through the gateway (docs/configuration.md, "Concurrency caps"): a key
capped at 2 under 20 concurrent requests from the official openai client, streams
included; a full queue answers 429 with Retry-After; the queue on /metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .gateway_helpers import TOKEN, gateway_for, serving
from .helpers import Recorder
from .test_gateway_reload import served
from .waiting import eventually

MESSAGES = [{"role": "user", "content": "hello"}]


@dataclass
class Upstream:
    """An upstream that holds every request until `gate` is set, and keeps count of how
    many it holds at once and the order they came in (the client's request ids)."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0
    most: int = 0
    order: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        async def completions(request: Request) -> Response:
            body = json.loads(await request.body())
            self.order.append(body["messages"][0]["content"])
            self.held += 1
            self.most = max(self.most, self.held)
            if body.get("stream"):
                return StreamingResponse(self._chunks(body["model"]),
                                         media_type="text/event-stream")
            try:
                await self.gate.wait()
            finally:
                self.held -= 1
            return JSONResponse({"id": "c1", "object": "chat.completion", "created": 1,
                                 "model": body["model"], "choices": [{
                                     "index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "hi"}}]})

        return Starlette(routes=[Route("/v1/chat/completions", completions,
                                       methods=["POST"])])

    async def _chunks(self, model: str) -> AsyncIterator[bytes]:
        """A stream that holds its slot until the gate opens, after its first token."""
        head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model}
        try:
            for piece in ("h", "i"):
                chunk = {**head, "choices": [{"index": 0, "delta": {"content": piece},
                                              "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                await self.gate.wait()
            yield b"data: [DONE]\n\n"
        finally:
            self.held -= 1


def config(url: str, max_queued: int = 100) -> str:
    return yaml.safe_dump({
        "providers": {"seat": {
            "base_url": url, "models": ["m"], "max_queued": max_queued,
            "connections": [{"id": "k1", "api_key": "sk-seat-key-0001", "max_in_flight": 2}]}},
        "routes": {"chat": {"targets": ["seat/m"]}}})


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="any", max_retries=0, timeout=20)


async def test_a_key_capped_at_2_serves_20_concurrent_requests_2_at_a_time_in_order(
) -> None:
    upstream = Upstream()
    async with serving(upstream.app()) as url, gateway_for(config(url)) as gw, \
            client(gw.url) as api:
        events = Recorder(gw.gateway.router.engine.bus)

        async def ask(i: int) -> str:
            if i % 4 == 3:  # every fourth one streams
                stream = await api.chat.completions.create(
                    model="chat", messages=[{"role": "user", "content": f"c{i}"}],
                    stream=True, extra_headers={"x-request-id": f"c{i}"})
                return "".join([c.choices[0].delta.content or "" async for c in stream
                                if c.choices])
            reply = await api.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": f"c{i}"}],
                extra_headers={"x-request-id": f"c{i}"})
            return reply.choices[0].message.content or ""

        tasks = [asyncio.create_task(ask(i)) for i in range(20)]
        engine = gw.gateway.router.engine
        await eventually(lambda: engine.in_flight("seat") == (2, 18),
                         what="2 in flight and 18 waiting")
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            scrape = (await http.get("/metrics", headers={
                "authorization": f"Bearer {TOKEN}"})).text
        assert 'omniroute_queued_requests{provider="seat"} 18.0' in scrape
        upstream.gate.set()
        answers = await asyncio.gather(*tasks)
        assert answers == ["hi"] * 20
        assert upstream.most == 2
        assert engine.in_flight("seat") == (0, 0)
        queued = [w["request"] for w in events.of("wait") if w["phase"] == "start"]
        assert len(queued) == 18
        assert upstream.order[2:] == queued  # handed slots oldest first
        assert {w["reason"] for w in events.of("wait")} == {"at_capacity"}


async def test_a_full_queue_is_refused_with_429_and_retry_after() -> None:
    upstream = Upstream()
    async with serving(upstream.app()) as url, gateway_for(config(url, max_queued=3)) as gw, \
            client(gw.url) as api:
        tasks = [asyncio.create_task(api.chat.completions.create(model="chat",
                                                                 messages=MESSAGES))
                 for _ in range(5)]
        engine = gw.gateway.router.engine
        await eventually(lambda: engine.in_flight("seat") == (2, 3), what="a full queue")
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            refused = await http.post("/v1/chat/completions",
                                      json={"model": "chat", "messages": MESSAGES})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["code"] == "all_targets_unavailable"
        assert error["skipped"] == [
            {"target": "seat/m", "reason": "at_capacity", "retry_after_ms": None}]
        try:
            await api.chat.completions.create(model="chat", messages=MESSAGES)
        except openai.RateLimitError as refusal:  # what an app's client makes of it
            assert refusal.response.headers["retry-after"] == "1"
        else:
            raise AssertionError("a request past a full queue was served")
        upstream.gate.set()
        assert len(await asyncio.gather(*tasks)) == 5
        assert upstream.most == 2


async def test_a_reload_that_adds_a_key_serves_the_queued_request_on_it(
        tmp_path: Path) -> None:
    """The waiter began under the old config, whose mapping lacks the new key: it is sent
    with the new key's credential, not answered 500."""
    def text(url: str, keys: int) -> str:
        return yaml.safe_dump({
            "providers": {"seat": {"base_url": url, "models": ["m"], "connections": [
                {"id": f"k{i}", "api_key": f"sk-seat-key-000{i}", "max_in_flight": 1}
                for i in range(keys)]}},
            "routes": {"chat": {"targets": ["seat/m"]}}})

    upstream = Upstream()
    async with serving(upstream.app()) as url, served(tmp_path, text(url, 1)) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        engine = gw.gateway.router.engine
        body = {"model": "chat", "messages": [{"role": "user", "content": "x"}]}
        first = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        await eventually(lambda: upstream.held == 1, what="the first upstream")
        waiting = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        await eventually(lambda: engine.in_flight("seat") == (1, 1), what="one queued")
        gw.path.write_text(text(url, 2))
        reload = await http.post("/api/resilience/reload",
                                 headers={"authorization": f"Bearer {TOKEN}"})
        assert reload.status_code == 200, reload.text
        await eventually(lambda: upstream.held == 2, what="the queued one sent on k1")
        upstream.gate.set()
        answers = await asyncio.gather(first, waiting)
        assert [a.status_code for a in answers] == [200, 200]
        assert answers[1].headers["x-omniroute-served-by"] == "seat/k1/m"
