"""End to end: the official openai client against the gateway, fakes behind it."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from .gateway_helpers import running_gateway


def client(url: str) -> openai.AsyncOpenAI:
    """Used as `async with`: closed on the test's own event loop. One left to the garbage
    collector closes its connections from a later test's loop, on sockets of a closed one
    ("Event loop is closed", logged as an error in that later test)."""
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="any", max_retries=0, timeout=10)


MESSAGES = [{"role": "user", "content": "hello"}]


async def test_plain_and_streaming_completions_and_models(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, client(gw.url) as api:
        reply = await api.chat.completions.create(model="chat", messages=MESSAGES)
        assert reply.choices[0].message.content
        direct = await api.chat.completions.create(model="healthy/m", messages=MESSAGES)
        assert direct.choices[0].message.content
        pieces = []
        stream = await api.chat.completions.create(model="chat", messages=MESSAGES,
                                                   stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        assert len(pieces) > 3
        models = {m.id for m in (await api.models.list()).data}
        assert {"chat", "fallback", "busy", "healthy/m", "broken/m"} <= models


async def test_fallback_when_a_provider_fails(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        async with httpx.AsyncClient(timeout=10) as http:
            reply = await http.post(f"{gw.url}/v1/chat/completions",
                                    json={"model": "fallback", "messages": MESSAGES})
        assert reply.status_code == 200
        assert reply.headers["x-omniroute-served-by"] == "healthy/h1/m"
        state = gw.gateway.engine.connection_snapshot("broken", "x1")
        assert state.last_error == "server_error" and state.level == 1


@pytest.mark.parametrize(("section", "served_by"), [
    ("", "healthy/h1/m"), ("gateway: {served_by_header: on}\n", "healthy/h1/m"),
    ("gateway: {served_by_header: off}\n", None)])
async def test_the_served_by_header_names_the_connection_at_most_and_can_be_off(
        tmp_path: Path, section: str, served_by: str | None) -> None:
    """`x-omniroute-served-by` is provider/connection/model: never the key nor anything of
    the answer beyond the connection's id; `gateway: {served_by_header: off}` drops it
    from every answer, streamed ones too."""
    async with (running_gateway(tmp_path, gateway_section=section) as gw,
                httpx.AsyncClient(base_url=gw.url, timeout=10) as http):
        plain = await http.post("/v1/chat/completions",
                                json={"model": "fallback", "messages": MESSAGES})
        async with http.stream("POST", "/v1/chat/completions", json={
                "model": "chat", "messages": MESSAGES, "stream": True}) as streamed:
            await streamed.aread()
    assert plain.status_code == streamed.status_code == 200
    for reply in (plain, streamed):
        assert reply.headers.get("x-omniroute-served-by") == served_by
        assert "sk-healthy" not in str(reply.headers)


async def test_aggregated_error_when_everything_is_down(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, client(gw.url) as api:
        with pytest.raises(openai.RateLimitError) as first:  # the upstream 429, passed on
            await api.chat.completions.create(model="busy", messages=MESSAGES)
        # when the key it met comes back out of its cooldown (the upstream said 30 s)
        assert first.value.response.headers["retry-after"] in ("29", "30")
        with pytest.raises(openai.RateLimitError) as info:  # now the key is cooling
            await api.chat.completions.create(model="busy", messages=MESSAGES)
        response = info.value.response
        assert response.headers["retry-after"] in ("29", "30")
        error = response.json()["error"]
        assert error["code"] == "all_targets_unavailable"
        assert error["skipped"][0]["target"] == "throttled/m"
        assert error["skipped"][0]["reason"] == "all_cooling"
        assert 29_000 <= error["skipped"][0]["retry_after_ms"] <= 30_000


async def test_unknown_model_and_malformed_bodies(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, client(gw.url) as api:
        with pytest.raises(openai.NotFoundError) as info:
            await api.chat.completions.create(model="no-such-model", messages=MESSAGES)
        assert info.value.response.json()["error"]["code"] == "model_not_found"
        async with httpx.AsyncClient(timeout=10) as http:
            for body, reason in [(b"{not json", "not valid JSON"),
                                 (b"[1, 2]", "JSON object"),
                                 (b'{"messages": []}', "missing `model`"),
                                 (b'{"model": "chat"}', "missing `messages`")]:
                reply = await http.post(f"{gw.url}/v1/chat/completions", content=body)
                assert reply.status_code == 400
                assert reason in reply.json()["error"]["message"]
            health = await http.get(f"{gw.url}/health")
            assert health.json()["status"] == "ok"


@pytest.mark.parametrize(("text", "on"), [("on", True), ("off", False), ('"off"', False),
                                          ("true", True), ("false", False)])
def test_served_by_header_is_on_or_off(text: str, on: bool) -> None:
    from omniroute_tui.config import load_router_config

    base = ("providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
            "connections: [c]}\n")
    loaded = load_router_config("r.yaml", text=base + f"gateway: {{served_by_header: {text}}}\n")
    assert loaded.gateway_served_by_header is on
    assert load_router_config("r.yaml", text=base).gateway_served_by_header is True


@pytest.mark.parametrize("text", ["hidden", "connection", "1", "[on]", "''", "x" * 5000],
                         ids=lambda text: text[:10])
def test_served_by_header_refuses_anything_else(text: str) -> None:
    from omniroute_tui.config import ConfigError, load_router_config

    with pytest.raises(ConfigError) as caught:
        load_router_config("r.yaml", text=(
            "providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
            f"connections: [c]}}\ngateway: {{served_by_header: {text}}}\n"))
    message = str(caught.value)
    assert "r.yaml:3: gateway.served_by_header: expected on or off" in message
    assert len(message) < 300
