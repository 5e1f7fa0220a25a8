"""Resuming a cut stream through the gateway (`stream_resume: continue`, docs/gateway.md,
"Streams"), with the official `openai` client: the primary closes mid-body at 40 tokens
of 60, the route's next target continues the answer from the text relayed, and the client
reads the 60 tokens once, as one answer, with one `[DONE]`. A next target that refuses the
prefill leaves the cut's own error event; a tool-call stream is not continued."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import openai
import pytest

from omniroute_tui.engine.events import Event

from .test_gateway_streams import (
    MESSAGES,
    FakeUpstream,
    _access,
    _no_traceback,
    _token,
    _tokens,
    gateway_and_upstream,
)
from .waiting import eventually

ANSWER = [f"t{i} " for i in range(60)]


def _their_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """A chunk of the next target's own stream: its own id, model and created."""
    data = {"id": "chatcmpl-other", "object": "chat.completion.chunk", "created": 99,
            "model": "cont", "choices": [{"index": 0, "delta": delta,
                                          "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _tool_chunk(i: int) -> bytes:
    data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
            "model": "m", "choices": [{"index": 0, "finish_reason": None, "delta": {
                "tool_calls": [{"index": 0, "id": "call_1" if i == 0 else None,
                                "type": "function",
                                "function": {"name": "count" if i == 0 else None,
                                             "arguments": f"{i},"}}]}}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class ResumingUpstream(FakeUpstream):
    """Besides FakeUpstream's models: `cont` continues the tokens of a trailing assistant
    message up to 60, `contcut` does and closes after 5 more, `noprefill` answers 400 as
    a provider without prefill does, `tools40` streams 40 parts of a tool call and
    closes."""

    async def _answer(self, model: str, writer: asyncio.StreamWriter) -> bool:
        if model == "noprefill":
            body = json.dumps({"error": {
                "message": "This model does not support assistant message prefill. The "
                           "conversation must end with a user message.",
                "type": "invalid_request_error", "param": None, "code": None}}).encode()
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return True
        if model not in ("cont", "contcut", "tools40"):
            return await super()._answer(model, writer)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")

        def send(data: bytes) -> None:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        if model == "tools40":
            send(_token(0).replace(b'"t0 "', b'null'))  # a role-less start
            for i in range(40):
                send(_tool_chunk(i))
            await writer.drain()
            return False
        last = self.bodies[-1]["messages"][-1]
        start = len(last["content"].split()) if last["role"] == "assistant" else 0
        send(_their_chunk({"role": "assistant", "content": ""}))
        for i in range(start, 60):
            if model == "contcut" and i == start + 5:
                await writer.drain()
                return False
            send(_their_chunk({"content": f"t{i} "}))
        send(_their_chunk({}, "stop"))
        send(b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


CONFIG = """\
resilience: {{request: {{stream_idle: 300ms}}}}
providers:
  flaky:
    base_url: {url}
    models: [cut40, tools40]
    connections: [{{id: f1, api_key: sk-flaky-0001}}]
  next:
    base_url: {url}
    models: [cont, contcut, noprefill, slowfirst]
    connections: [{{id: n1, api_key: sk-next-0001}}]
routes:
  resumed: {{stream_resume: continue, targets: [flaky/cut40, next/cont]}}
  refused: {{stream_resume: continue, targets: [flaky/cut40, next/noprefill]}}
  twice: {{stream_resume: continue, targets: [flaky/cut40, next/contcut]}}
  tools: {{stream_resume: continue, targets: [flaky/tools40, next/cont]}}
  late: {{stream_resume: continue, first_token: 300ms,
          targets: [flaky/cut40, next/slowfirst]}}
  quiet: {{stream_resume: continue, targets: [flaky/cut40, next/slowfirst]}}
  plain: {{targets: [flaky/cut40, next/cont]}}
"""


def _setup() -> Any:
    return gateway_and_upstream(CONFIG, ResumingUpstream())


def _events(seen: list[Event], type_: str) -> list[dict[str, Any]]:
    return [e.to_dict() for e in seen if type_ == e.TYPE]


async def test_a_cut_stream_is_continued_by_the_next_target_as_one_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with _setup() as setup:
        seen: list[Event] = []
        setup.gateway.engine.bus.subscribe(seen.append)
        got, raised = await _tokens(setup.api, "resumed")
        assert raised is None
        assert "".join(got) == "".join(ANSWER) and got == ANSWER  # whole, and once
        assert setup.upstream.requests == ["cut40", "cont"]
        continued = setup.upstream.bodies[-1]
        assert continued["model"] == "cont" and continued["messages"] == [
            *MESSAGES, {"role": "assistant", "content": "".join(ANSWER[:40])}]
        await _ended(caplog)
        attempts = [(a["n"], a["provider"], a.get("why")) for a in _events(seen, "attempt")]
        why = "resume: continues attempt 1's answer, cut (reset) after 40 chunk(s)"
        assert attempts == [(1, "flaky", None), (2, "next", why)]
        results = [(r["n"], r["provider"], r["kind"], r.get("reason"), r["relayed_chunks"])
                   for r in _events(seen, "result")]
        assert results == [(1, "flaky", "stream_cut", "reset", 40), (2, "next", None, None, 21)]
        assert len(_events(seen, "response")) == 1
        state = setup.gateway.engine.connection_snapshot("flaky", "f1")
        assert state.last_error == "stream_cut"  # the cut still counts against the primary
    [line] = _access_lines(caplog)
    assert line == {"route": "resumed", "status": 200, "stream": "whole", "reason": None,
                    "relayed_chunks": 61, "provider": "flaky", "resume": "resumed",
                    "resumed_by": "next/n1/cont"}
    _no_traceback(caplog)


async def test_the_spliced_stream_is_one_stream_with_one_done() -> None:
    """The bytes the client reads: the first stream's id, model and created on every
    chunk, one role chunk, one finish, one `[DONE]`, no error."""
    async with _setup() as setup, httpx.AsyncClient() as client, client.stream(
            "POST", f"{setup.api.base_url}chat/completions",
            json={"model": "resumed", "messages": MESSAGES, "stream": True}) as response:
        body = b"".join([piece async for piece in response.aiter_bytes()])
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]" and body.count(b"[DONE]") == 1
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert {(c["id"], c["model"], c["created"]) for c in chunks} == {("chatcmpl-1", "m", 0)}
    assert [c["choices"][0]["delta"].get("role") for c in chunks].count("assistant") == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks].count("stop") == 1
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "".join(
        ANSWER)


@pytest.mark.parametrize(("route", "tokens", "outcome", "asked"), [
    ("refused", 40, "failed: client_error (400)", ["cut40", "noprefill"]),
    ("tools", 0, "refused: tool_calls", ["tools40"]),
    ("late", 40, "failed: timeout (0)", ["cut40", "slowfirst"]),
    ("quiet", 40, "failed: timeout (0)", ["cut40", "slowfirst"]),  # at stream_idle
    ("plain", 40, None, ["cut40"]),
])
async def test_a_cut_that_is_not_continued_ends_with_its_own_error(
        caplog: pytest.LogCaptureFixture, route: str, tokens: int, outcome: str | None,
        asked: list[str]) -> None:
    """A next target that refuses the prefill or whose first token is late (past the
    route's `first_token`, or past `stream_idle`: the client's stream is silent while it
    is waited for), a tool-call stream, a route without the setting: the client gets the
    cut's error event after what it had, never the continuation's error in its place, and
    nothing twice."""
    caplog.set_level(logging.DEBUG)
    async with _setup() as setup:
        started = time.monotonic()
        got, raised = await _tokens(setup.api, route)
        assert time.monotonic() - started < 2.0  # a late continuation at first_token
        assert got == ANSWER[:tokens]
        assert isinstance(raised, openai.APIError)
        assert raised.body == {"message": raised.message, "type": "upstream_error",
                               "param": None, "code": "stream_cut", "reason": "reset"}
        assert "prefill" not in raised.message and "after 40 chunk(s)" in raised.message
        assert setup.upstream.requests == asked
        await _ended(caplog)
    [line] = _access_lines(caplog)
    assert (line["stream"], line["reason"], line["relayed_chunks"], line["resume"],
            line["resumed_by"]) == ("stream_cut", "reset", 40, outcome, None)
    _no_traceback(caplog)


async def test_a_continuation_that_breaks_too_ends_with_an_error_after_both(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with _setup() as setup:
        got, raised = await _tokens(setup.api, "twice")
        assert got == ANSWER[:45]
        assert isinstance(raised, openai.APIError) and raised.code == "stream_cut"
        assert "after 45 chunk(s)" in raised.message
        assert setup.upstream.requests == ["cut40", "contcut"]  # resumed once, not again
        await _ended(caplog)
    [line] = _access_lines(caplog)
    assert (line["stream"], line["relayed_chunks"], line["resume"]) == (
        "stream_cut", 45, "resumed")
    _no_traceback(caplog)


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    lines = _access(caplog)
    records = [r for r in caplog.records if r.name == "omniroute.access"]
    for line, record in zip(lines, records, strict=True):
        line.update(resume=getattr(record, "resume", None),
                    resumed_by=getattr(record, "resumed_by", None))
    return lines


async def _ended(caplog: pytest.LogCaptureFixture) -> None:
    await eventually(lambda: _access(caplog), what="the access line")
