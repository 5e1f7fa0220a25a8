"""`GET /metrics` on the gateway and on the console's --listen: who may read it, what it
never holds, and a scrape that fails answering 503, never 500."""

from __future__ import annotations

import argparse
import hashlib
import logging
from pathlib import Path

import httpx
import pytest
import yaml

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import MetricsAccess, load_router_config
from omniroute_tui.config.problems import ConfigError
from omniroute_tui.console.cli import build_app
from omniroute_tui.engine import BreakerState
from omniroute_tui.gateway import Gateway, GatewayServer
from omniroute_tui.metrics import CONTENT_TYPE_LATEST
from omniroute_tui.router import Router
from omniroute_tui.store.sqlite_store import StoreHealth

from .console_helpers import settle
from .gateway_helpers import TOKEN, running_gateway
from .metrics_helpers import parse, value
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}"}
CONTENT = "the-users-private-words-7f3a"

CONFIG = """\
providers:
  p:
    models: [m]
    base_url: http://127.0.0.1:9/v1
    connections: [{id: k1, api_key: sk-config-secret-4242}]
routes:
  chat: {targets: [p/m]}
"""


async def test_the_token_is_needed_unless_metrics_are_public(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        for headers in ({}, {"authorization": "Bearer wrong-token-xxxxxxxxxxxx"},
                        {"authorization": TOKEN}):
            reply = await http.get("/metrics", headers=headers)
            assert reply.status_code == 401
            assert reply.headers["www-authenticate"] == "Bearer"
        reply = await http.get("/metrics", headers=AUTH)
        assert reply.status_code == 200
        assert reply.headers["content-type"] == CONTENT_TYPE_LATEST
        # what a scraper may add or get wrong: the same answer, or a clear 4xx
        odd = await http.get("/metrics?name[]=x&format=%00", headers={
            **AUTH, "accept": "application/openmetrics-text; version=1.0.0"})
        assert odd.status_code == 200 and odd.content.startswith(b"# HELP")
        for method in ("POST", "DELETE"):
            refused = await http.request(method, "/metrics", headers=AUTH, content=b"x" * 10)
            assert refused.status_code == 405
            assert refused.json()["error"]["message"] == f"no {method} /metrics here"
        assert value(parse(reply.content), "omniroute_breaker_state", provider="healthy",
                     state="CLOSED") == 1
    async with running_gateway(tmp_path, metrics=MetricsAccess.PUBLIC) as gw, \
            httpx.AsyncClient(base_url=gw.url) as http:
        assert (await http.get("/metrics")).status_code == 200
    async with running_gateway(tmp_path, metrics=MetricsAccess.OFF) as gw, \
            httpx.AsyncClient(base_url=gw.url) as http:
        assert (await http.get("/metrics", headers=AUTH)).status_code == 404
        assert gw.gateway.metrics is None  # nothing counted either


async def test_a_scrape_counts_proxied_requests_and_holds_no_key_nor_content(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        body = {"model": "chat", "messages": [{"role": "user", "content": CONTENT}]}
        for _ in range(3):
            assert (await http.post("/v1/chat/completions", json=body)).status_code == 200
        assert (await http.post("/v1/chat/completions", json=dict(
            body, model="busy"))).status_code == 429
        reply = await http.get("/metrics", headers=AUTH)
        m = parse(reply.content)
        assert value(m, "omniroute_requests_total", route="chat", status_class="2xx") == 3
        assert value(m, "omniroute_requests_total", route="busy", status_class="4xx") == 1
        assert value(m, "omniroute_attempts_total", provider="healthy", connection="h1",
                     model="m", outcome="ok") == 3
        assert value(m, "omniroute_store_up") == 1
        keys = [c["api_key"] for p in yaml.safe_load(gw.config_text)["providers"].values()
                for c in p["connections"] if isinstance(c, dict) and "api_key" in c]
        assert keys and "sk-healthy-key-0001" in keys
        for secret in (*keys, CONTENT, TOKEN):
            assert secret.encode() not in reply.content
            assert secret[-8:].encode() not in reply.content


class FailingStore:
    """A store whose health cannot be read: the collector raises."""

    def health(self) -> StoreHealth:
        raise RuntimeError("the health of the store is unreadable")


async def test_a_failing_collector_answers_503_and_logs_it(
        caplog: pytest.LogCaptureFixture) -> None:
    config = load_router_config("router.yaml", text=CONFIG)
    gateway = Gateway(config.build(SystemClock()), config.providers, token=TOKEN,
                      store=FailingStore())  # type: ignore[arg-type]
    server = GatewayServer(gateway, "127.0.0.1", 0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            with caplog.at_level(logging.ERROR, logger="omniroute.gateway"):
                for _ in range(2):
                    reply = await http.get("/metrics", headers=AUTH)
                    assert reply.status_code == 503
                    assert reply.text.startswith("metrics unavailable")
                    assert reply.headers["retry-after"] == "15"
                    assert len(reply.content) < 200
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 2
            assert "the health of the store is unreadable" in errors[0].getMessage()
            assert errors[0].exc_info is not None and not errors[1].exc_info
            assert (await http.get("/v1/models")).status_code == 200  # the gateway serves on
    finally:
        await server.stop()


async def test_no_token_no_metrics_unless_public(tmp_path: Path) -> None:
    for access, status in ((MetricsAccess.TOKEN, 404), (MetricsAccess.PUBLIC, 200)):
        config = load_router_config("router.yaml", text=CONFIG)
        gateway = Gateway(config.build(SystemClock()), config.providers, token=None,
                          metrics=access)
        server = GatewayServer(gateway, "127.0.0.1", 0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url) as http:
                reply = await http.get("/metrics")
                assert reply.status_code == status
                assert b"sk-config-secret-4242" not in reply.content
                assert b"4242" not in reply.content
        finally:
            await server.stop()


async def test_console_listen_serves_metrics(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with running_gateway(tmp_path) as gw:
        for extra, headers in (("", AUTH), ("gateway: {metrics: public}\n", {})):
            config.write_text(gw.config_text + extra)
            args = argparse.Namespace(
                attach=None, token_file=str(token_file), scenario=None, config=config,
                live=False, db=None, db_recover="ask", speed=2.0, read_only=False,
                operator="dave", web=False, listen="127.0.0.1:0")
            app = build_app(args)
            async with app.run_test() as pilot:
                await settle(pilot, lambda app=app: app.gateway_server is not None)  # type: ignore[misc]
                url = app.gateway_server.url  # type: ignore[attr-defined]
                async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                    assert (await http.post("/v1/chat/completions", json={
                        "model": "chat", "messages": []})).status_code == 200
                    if not headers:
                        assert (await http.get("/metrics")).status_code == 200
                    else:
                        assert (await http.get("/metrics")).status_code == 401
                    reply = await http.get("/metrics", headers=headers)
            assert reply.status_code == 200
            m = parse(reply.content)
            assert value(m, "omniroute_requests_total", route="chat", status_class="2xx") == 1
            version = hashlib.sha256(config.read_bytes()).hexdigest()[:12]
            assert value(m, "omniroute_config_info", version=version) == 1


@pytest.mark.parametrize("text", ["Public", "tokens", "1", "[public]", "{a: 1}", "''",
                                  "true", "x" * 5000], ids=lambda text: text[:10])
def test_gateway_metrics_takes_token_public_or_off(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_router_config("router.yaml", text=CONFIG + f"gateway: {{metrics: {text}}}\n")
    message = str(caught.value)
    assert "router.yaml:8: gateway.metrics: expected token" in message
    assert len(message) < 300


@pytest.mark.parametrize(("text", "access"), [("token", MetricsAccess.TOKEN),
                                              ("public", MetricsAccess.PUBLIC),
                                              ("off", MetricsAccess.OFF),
                                              ('"off"', MetricsAccess.OFF)])
def test_gateway_metrics_values(text: str, access: MetricsAccess) -> None:
    loaded = load_router_config("router.yaml", text=CONFIG + f"gateway: {{metrics: {text}}}\n")
    assert loaded.gateway_metrics is access
    assert load_router_config("router.yaml", text=CONFIG).gateway_metrics is MetricsAccess.TOKEN


async def test_a_fleet_replica_counts_what_it_applies_and_how_late(
        prefix: str) -> None:
    from omniroute_tui.clock import ManualClock
    from omniroute_tui.metrics import build_registry, exposition

    from .test_redis_link import fleet

    async with fleet(prefix, 2) as (engines, links):  # type: ignore[arg-type]
        first, second = engines
        router = Router(second, {})
        registry = build_registry(router, clock=ManualClock(0), fleet=links[1])

        def applied_here() -> bool:
            """Once the other replica follows the stream (what it read of the state at
            its start is state, not events, and not counted), a force-open is one."""
            if links[1].health().applied:
                return True
            first.force_open("p", 60_000, actor="ops")
            return False

        await eventually(applied_here, poll_s=0.2, what="an event applied on the other replica")
        assert second.breaker_snapshot("p").state is BreakerState.OPEN
        m = parse(exposition(registry))
        applied = value(m, "omniroute_fleet_events_applied_total")
        assert applied == links[1].health().applied >= 1
        assert value(m, "omniroute_fleet_propagation_lag_seconds_count") == applied
        assert value(m, "omniroute_fleet_propagation_lag_seconds_bucket", le="10.0") == applied
        assert value(m, "omniroute_fleet_up") == 1
        assert value(m, "omniroute_fleet_queued_changes") >= 0


async def test_tokens_and_time_to_first_token_through_the_openai_client(
        tmp_path: Path) -> None:
    """The official client asks for plain and streamed answers: a plain one's usage counts
    its tokens by provider, route and model, a stream its time to first token, and its
    tokens when it ends if it asked for its usage; a failed answer counts none."""
    import openai

    messages = [{"role": "user", "content": "hello"}]
    async with running_gateway(tmp_path) as gw, openai.AsyncOpenAI(
            base_url=f"{gw.url}/v1", api_key="any", max_retries=0, timeout=10) as api, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        reply = await api.chat.completions.create(model="chat", messages=messages)
        assert reply.usage is not None
        direct = await api.chat.completions.create(model="healthy/m", messages=messages)
        assert direct.usage is not None
        stream = await api.chat.completions.create(model="fallback", messages=messages,
                                                   stream=True)
        async for _ in stream:
            pass
        counted = None  # a stream that asks for its usage: counted when it ends
        stream = await api.chat.completions.create(
            model="fallback", messages=messages, stream=True,
            stream_options={"include_usage": True})
        async for chunk in stream:
            counted = chunk.usage or counted
        assert counted is not None
        await eventually(lambda: gw.gateway.answers is not None and gw.gateway.answers.tokens[
            ("healthy", "fallback", "m")][1] > 0, what="the stream's end counted")
        with pytest.raises(openai.RateLimitError):
            await api.chat.completions.create(model="busy", messages=messages)
        m = parse((await http.get("/metrics", headers=AUTH)).content)
    tokens = {(route, kind): value(m, "omniroute_upstream_tokens_total", provider="healthy",
                                   route=route, model="m", type=kind)
              for route in ("chat", "healthy/m", "fallback") for kind in ("prompt",
                                                                          "completion")}
    assert tokens == {("chat", "prompt"): reply.usage.prompt_tokens,
                      ("chat", "completion"): reply.usage.completion_tokens,
                      ("healthy/m", "prompt"): direct.usage.prompt_tokens,
                      ("healthy/m", "completion"): direct.usage.completion_tokens,
                      ("fallback", "prompt"): counted.prompt_tokens,
                      ("fallback", "completion"): counted.completion_tokens}
    assert value(m, "omniroute_upstream_tokens_total", provider="throttled", route="busy",
                 model="m", type="prompt") == 0
    assert value(m, "omniroute_upstream_time_to_first_token_seconds_count",
                 provider="healthy", model="m") == 2
    first = value(m, "omniroute_upstream_time_to_first_token_seconds_sum", provider="healthy",
                  model="m")
    assert 0 < first < 3
    # every answered attempt, the broken provider's 503s and the throttled 429 included
    assert value(m, "omniroute_upstream_latency_seconds_count", provider="healthy",
                 model="m") == 4
    assert value(m, "omniroute_upstream_latency_seconds_count", provider="throttled",
                 model="m") == 1
    assert value(m, "omniroute_upstream_latency_seconds_count", provider="broken",
                 model="m") >= 1
