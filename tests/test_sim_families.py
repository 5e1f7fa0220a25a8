"""The simulator's fakes of each API family over HTTP (docs/simulator.md, "API
families"): their shapes, keys, error bodies and headers, driven through the gateway by
the official SDKs; and the documented OpenAI + Azure + Anthropic config working as
written against them."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import yaml

from omniroute_tui.apis import ApiFamily
from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.engine import FailureKind
from omniroute_tui.engine.classify import classify
from omniroute_tui.gateway import Gateway, GatewayServer
from simulator.fakes import error_body
from simulator.http_fakes import FakeServer, start_fakes, stop_fakes
from simulator.scenario import load_scenario

DOCS = Path(__file__).resolve().parents[1] / "docs"
KEYS = {"OPENAI_API_KEY": "sk-docs-openai-0001", "AZURE_OPENAI_KEY": "azure-docs-0001",
        "ANTHROPIC_API_KEY": "sk-ant-docs-0001"}


def documented_families() -> str:
    text = (DOCS / "configuration.md").read_text()
    section = text[text.index("## API families"):]
    return re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)[0]


@asynccontextmanager
async def fakes_for(config_text: str, faults: str = "") -> AsyncIterator[list[FakeServer]]:
    """The fakes of a router config's providers (each key as the config's env gives it)."""
    data = yaml.safe_load(config_text)
    for provider in data["providers"].values():
        for connection in provider["connections"]:
            name = connection["api_key"].strip("${}")
            connection["api_key"] = KEYS[name]
        provider.pop("base_url", None)
    scenario_text = yaml.safe_dump({"name": "families", "duration": "5m", **data}) + faults
    servers = await start_fakes(load_scenario("families.yaml", text=scenario_text))
    try:
        yield servers
    finally:
        await stop_fakes(servers)


@asynccontextmanager
async def gateway_over(config_text: str, servers: list[FakeServer]) -> AsyncIterator[str]:
    """The config as written, its `base_url`s those of the fakes."""
    for server in servers:
        config_text = re.sub(rf"(  {server.provider}:\n(?:    .*\n)*?    base_url: )\S+",
                             rf"\g<1>{server.base_url}", config_text)
    config = load_router_config("router.yaml", text=config_text, env=KEYS)
    gateway = Gateway(config.build(SystemClock()), config.providers, token=None)
    server = GatewayServer(gateway, "127.0.0.1", 0)
    await server.start()
    try:
        yield server.url
    finally:
        await server.stop()


async def test_the_documented_config_works_as_written_against_the_fakes() -> None:
    text = documented_families()
    async with fakes_for(text) as servers, gateway_over(text, servers) as url, \
            openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="app", max_retries=0) as client, \
            anthropic.AsyncAnthropic(base_url=url, api_key="app", max_retries=0) as messages:
        answer = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "Hi"}])
        assert answer.choices[0].message.content
        embedded = await client.embeddings.create(model="embed", input="hello")
        assert len(embedded.data[0].embedding) == 8
        for target in ("azure/gpt-4o", "anthropic/claude-sonnet-4-5"):
            raw = await client.chat.completions.with_raw_response.create(
                model=target, messages=[{"role": "user", "content": "Hi"}])
            assert raw.headers["x-omniroute-served-by"].startswith(target.split("/")[0])
            assert raw.parse().choices[0].message.content
        stream = await client.chat.completions.create(
            model="anthropic/claude-sonnet-4-5", stream=True,
            messages=[{"role": "user", "content": "Hi"}])
        text_out = "".join([c.choices[0].delta.content or "" async for c in stream
                            if c.choices])
        assert len(text_out.split()) == 60  # the fakes' 60 tokens, translated
        async with messages.messages.stream(
                model="chat", max_tokens=50,
                messages=[{"role": "user", "content": "Hi"}]) as events:
            assert len("".join([p async for p in events.text_stream]).split()) == 60


async def test_an_anthropic_fake_sends_anthropics_529_and_the_chat_falls_back() -> None:
    text = documented_families().replace(
        "chat: {targets: [openai/gpt-4o, azure/gpt-4o, anthropic/claude-sonnet-4-5]}",
        "chat: {targets: [anthropic/claude-sonnet-4-5, openai/gpt-4o]}")
    faults = "faults:\n  - {name: overloaded, target: anthropic, error: 529, at: 0s, for: 5m}\n"
    async with fakes_for(text, faults) as servers:
        fake = next(s for s in servers if s.provider == "anthropic")
        async with httpx.AsyncClient() as http:
            direct = await http.post(f"{fake.base_url}/v1/messages", headers={
                "x-api-key": KEYS["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"},
                json={"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []})
        assert direct.status_code == 529
        assert direct.json() == {"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "Overloaded"}}
        async with gateway_over(text, servers) as url, openai.AsyncOpenAI(
                base_url=f"{url}/v1", api_key="app", max_retries=0) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "Hi"}])
            assert raw.headers["x-omniroute-served-by"].startswith("openai/")


async def test_each_fake_takes_its_familys_key_where_its_api_takes_it() -> None:
    text = documented_families()
    async with fakes_for(text) as servers, httpx.AsyncClient() as http:
        by = {s.provider: s for s in servers}
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}
        azure = f"{by['azure'].base_url}/openai/deployments/prod-gpt-4o/chat/completions"
        assert (await http.post(azure, json=body, headers={
            "api-key": KEYS["AZURE_OPENAI_KEY"]})).status_code == 200
        assert (await http.post(azure, json=body, headers={
            "authorization": f"Bearer {KEYS['AZURE_OPENAI_KEY']}"})).status_code == 401
        wrong = await http.post(f"{by['anthropic'].base_url}/v1/messages", json=body,
                                headers={"authorization": "Bearer x"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(("family", "status", "quota", "kind"), [
    (ApiFamily.ANTHROPIC, 529, False, FailureKind.SERVER_ERROR),
    (ApiFamily.ANTHROPIC, 429, False, FailureKind.RATE_LIMITED),
    (ApiFamily.ANTHROPIC, 429, True, FailureKind.QUOTA_EXHAUSTED),
    (ApiFamily.ANTHROPIC, 401, False, FailureKind.AUTH_FAILED),
    (ApiFamily.GEMINI, 429, False, FailureKind.RATE_LIMITED),
    (ApiFamily.GEMINI, 429, True, FailureKind.QUOTA_EXHAUSTED),
    (ApiFamily.GEMINI, 503, False, FailureKind.SERVER_ERROR),
    (ApiFamily.AZURE, 404, False, FailureKind.MODEL_NOT_FOUND),
    (ApiFamily.OPENAI, 429, True, FailureKind.QUOTA_EXHAUSTED),
])
def test_every_familys_fake_error_classifies_as_its_fault_means(
        family: ApiFamily, status: int, quota: bool, kind: FailureKind) -> None:
    body = error_body(status, quota=quota, family=family)
    json.loads(body)  # a real JSON body, in the family's shape
    assert classify(status, {}, body).kind is kind


async def test_serve_writes_each_fakes_family_and_its_sdks_base_url() -> None:
    from simulator.scenario import SCENARIOS_DIR
    from simulator.serve import router_config_for

    scenario = load_scenario(SCENARIOS_DIR / "mixed-families.yaml")
    servers = await start_fakes(scenario)
    try:
        written = router_config_for(scenario, servers)
    finally:
        await stop_fakes(servers)
    providers = written["providers"]
    assert providers["anthropic"]["api"] == "anthropic"
    assert "api" not in providers["openai"]
    assert providers["openai"]["base_url"].endswith("/v1")
    assert not providers["anthropic"]["base_url"].endswith("/v1")
    config = load_router_config("served.yaml", text=yaml.safe_dump(written))
    assert config.providers["anthropic"].api.family is ApiFamily.ANTHROPIC
