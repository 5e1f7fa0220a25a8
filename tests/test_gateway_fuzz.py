"""Generated bodies, headers and paths thrown at the gateway in-process (ASGI): never a
5xx of its own, never an exception in the log, memory bounded."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.drivers import UpstreamClient
from omniroute_tui.gateway import Gateway

from .gateway_helpers import TOKEN

CONFIG = """\
providers:
  alpha: {models: [m], base_url: "http://upstream.test/v1", connections: [a1, a2]}
routes:
  chat: {targets: [alpha/m]}
"""

OK = {"id": "x", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def _upstream(request: httpx.Request) -> httpx.Response:
    """A healthy upstream: whatever 5xx the client sees is the gateway's own."""
    if json.loads(request.content).get("stream"):
        return httpx.Response(200, content=b"data: {}\n\ndata: [DONE]\n\n",
                              headers={"content-type": "text/event-stream"})
    return httpx.Response(200, json=OK)


def _gateway() -> Gateway:
    config = load_router_config("router.yaml", text=CONFIG)
    client = UpstreamClient(httpx.AsyncClient(transport=httpx.MockTransport(_upstream)))
    return Gateway(config.build(SystemClock()), config.providers, token=TOKEN, client=client)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)
chat_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["chat", "alpha/m", "alpha/nope", "nope", ""]) | json_values,
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                                 "content": st.text(max_size=30)}),
                          max_size=3) | json_values},
    optional={"stream": st.booleans() | json_values, "temperature": json_values,
              "max_tokens": json_values, "stop": json_values})
bodies = (chat_bodies.map(lambda b: json.dumps(b).encode())
          | json_values.map(lambda v: json.dumps(v).encode())
          | st.binary(max_size=300)
          | st.integers(1, 400).map(lambda n: b"[" * n + b"]" * n)
          | st.just(b'{"model": "chat", "messages": [], "temperature": NaN}'))
header_names = st.sampled_from(["content-type", "x-omniroute-reason", "authorization",
                                "content-encoding", "x-request-id", "accept"]) | st.from_regex(
    r"\Ax-[a-z]{1,10}\Z")
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=255,
                                      blacklist_characters="\x7f"), max_size=40)
requests = st.tuples(
    st.sampled_from([("POST", "/v1/chat/completions")] * 6 + [
        ("GET", "/v1/models"), ("GET", "/health"), ("POST", "/v1/models"),
        ("DELETE", "/api/resilience/lockouts"),
        ("POST", "/api/resilience/breakers/alpha/force-open"),
        ("POST", "/api/resilience/connections/alpha/a1/disable"),
        ("GET", "/api/resilience/state"), ("POST", "/v1/chat/completions/../x")]),
    bodies,
    st.dictionaries(header_names, header_values.map(lambda v: v.encode("latin-1")),
                    max_size=4),
    st.booleans())


@pytest.fixture(scope="module")
def loop() -> Any:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_the_gateway_never_answers_5xx_of_its_own_nor_logs_a_traceback(
        loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture) -> None:
    gateway = _gateway()
    app = gateway.asgi()
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw")
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(requests)
    def one(request: tuple[tuple[str, str], bytes, dict[str, bytes], bool]) -> None:
        (method, path), body, headers, authorised = request
        if authorised:
            headers = {**headers, "authorization": f"Bearer {TOKEN}".encode()}
        reply = loop.run_until_complete(http.request(method, path, content=body,
                                                     headers=headers))
        if reply.status_code >= 500:  # only the router's designed answer: no target free
            # (the fuzz force-opens and disables things too)
            assert reply.json()["error"]["code"] == "all_targets_unavailable", (
                method, path, body[:80], reply.text[:200])
        if reply.status_code >= 400 and path.startswith("/v1/chat"):
            assert "error" in reply.json()

    one()
    loop.run_until_complete(http.aclose())
    loop.run_until_complete(gateway.aclose())
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024
    assert grown_mb < 100, f"peak memory grew by {grown_mb:.0f} MB"
