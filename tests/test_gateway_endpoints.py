"""Every endpoint apps send, through the gateway, with the official SDKs: OpenAI's chat,
completions, embeddings and responses, Anthropic's messages and count_tokens, native and
translated across families, JSON and streams (docs/gateway.md, "Endpoints")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest

from .family_upstream import FamilyUpstream
from .gateway_helpers import gateway_for, serving

CONFIG = """\
resilience: {{request: {{timeout: 5s}}}}
providers:
  openai:
    base_url: {host}/v1
    models: [gpt-4o]
    embedding_models: [text-embedding-3-small]
    connections: [{{id: k1, api_key: sk-openai-key-0001}}]
  azure:
    api: azure
    base_url: {host}
    deployments: {{gpt-4o: prod-gpt4o}}
    models: [gpt-4o]
    connections: [{{id: k1, api_key: azure-key-0001}}]
  anthropic:
    api: anthropic
    base_url: {host}
    models: [claude-sonnet-4-5]
    connections: [{{id: k1, api_key: sk-ant-key-0001}}]
routes:
  gpt: {{targets: [openai/gpt-4o]}}
  claude: {{targets: [anthropic/claude-sonnet-4-5]}}
  mixed: {{targets: [openai/gpt-4o, anthropic/claude-sonnet-4-5]}}
  claude_first: {{targets: [anthropic/claude-sonnet-4-5, openai/gpt-4o]}}
  embed: {{targets: [openai/text-embedding-3-small]}}
"""


@dataclass
class Setup:
    url: str
    upstream: FamilyUpstream
    clients: tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic]

    def openai(self) -> openai.AsyncOpenAI:
        return self.clients[0]

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return self.clients[1]


@asynccontextmanager
async def setup() -> AsyncIterator[Setup]:
    """The gateway over the family upstream, and one client of each SDK, closed after
    (a client left to the garbage collector closes on a loop that is gone)."""
    upstream = FamilyUpstream()
    async with serving(upstream.app()) as base:
        host = base.removesuffix("/v1")
        async with gateway_for(CONFIG.format(host=host)) as gateway, openai.AsyncOpenAI(
                base_url=f"{gateway.url}/v1", api_key="client", max_retries=0) as chat, \
                anthropic.AsyncAnthropic(base_url=gateway.url, api_key="client",
                                         max_retries=0) as messages:
            yield Setup(gateway.url, upstream, (chat, messages))


async def test_chat_served_by_anthropic_is_translated_both_ways() -> None:
    async with setup() as s:
        answer = await s.openai().chat.completions.create(model="claude", messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}], stop="END")
        seen = s.upstream.seen[-1]
        assert (seen.family, seen.path) == ("anthropic", "/v1/messages")
        assert seen.headers["x-api-key"] == "sk-ant-key-0001"
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in seen.headers
        assert seen.body == {"model": "claude-sonnet-4-5", "system": "Be brief.",
                             "messages": [{"role": "user",
                                           "content": [{"type": "text", "text": "Hi"}]}],
                             "max_tokens": 4096, "stop_sequences": ["END"]}
        assert answer.choices[0].message.content == "Hello there"
        assert answer.choices[0].finish_reason == "stop"
        assert answer.usage is not None
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (12, 6)
        assert answer.id == "chatcmpl-msg_01"


async def test_a_chat_stream_from_anthropic_reads_as_chat_chunks() -> None:
    async with setup() as s:
        stream = await s.openai().chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "Hi"}], stream=True,
            stream_options={"include_usage": True})
        text, finish, usage = "", None, None
        async for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
            usage = chunk.usage or usage
        assert (text, finish) == ("Hello there ", "stop")
        assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (12, 6)
        assert s.upstream.seen[-1].body["stream"] is True


async def test_messages_served_by_openai_are_translated_both_ways() -> None:
    async with setup() as s:
        message = await s.anthropic().messages.create(
            model="gpt", max_tokens=100, system="Be brief.",
            messages=[{"role": "user", "content": "Hi"}], stop_sequences=["END"])
        seen = s.upstream.seen[-1]
        assert (seen.family, seen.path) == ("openai", "/v1/chat/completions")
        assert seen.headers["authorization"] == "Bearer sk-openai-key-0001"
        assert seen.body == {"model": "gpt-4o", "max_tokens": 100, "stop": ["END"],
                             "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}]}
        assert [b.text for b in message.content if b.type == "text"] == ["Hello there"]
        assert message.stop_reason == "end_turn"
        assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 2)


async def test_a_messages_stream_from_openai_reads_as_anthropic_events() -> None:
    async with setup() as s:
        async with s.anthropic().messages.stream(
                model="gpt", max_tokens=100,
                messages=[{"role": "user", "content": "Hi"}]) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()
        assert text == "Hello there "
        assert final.stop_reason == "end_turn"
        assert final.usage.output_tokens == 2
        assert s.upstream.seen[-1].body["stream_options"] == {"include_usage": True}


async def test_native_messages_stream_and_count_tokens_pass_through() -> None:
    async with setup() as s:
        client = s.anthropic()
        async with client.messages.stream(
                model="claude", max_tokens=100, messages=[{"role": "user", "content": "Hi"}],
                extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"}) as stream:
            text = "".join([piece async for piece in stream.text_stream])
        assert text == "Hello there "
        assert s.upstream.seen[-1].headers["anthropic-beta"] == "prompt-caching-2024-07-31"
        counted = await client.messages.count_tokens(
            model="claude", messages=[{"role": "user", "content": "Hi"}])
        assert counted.input_tokens == 14
        assert s.upstream.seen[-1].path == "/v1/messages/count_tokens"


async def test_embeddings_completions_and_responses_reach_openai() -> None:
    async with setup() as s:
        client = s.openai()
        embedded = await client.embeddings.create(model="embed", input="hello")
        assert embedded.data[0].embedding == [0.25, -0.5]
        assert s.upstream.seen[-1].path == "/v1/embeddings"
        completion = await client.completions.create(model="gpt", prompt="Say hi")
        assert completion.choices[0].text == "Hello there"
        streamed = await client.completions.create(model="gpt", prompt="Say hi", stream=True)
        assert "".join([c.choices[0].text async for c in streamed]) == "Hello there"
        response = await client.responses.create(model="gpt", input="Hi")
        assert response.output_text == "Hello there"
        events = await client.responses.create(model="gpt", input="Hi", stream=True)
        kinds = [event.type async for event in events]
        assert kinds == ["response.created", "response.output_text.delta",
                         "response.completed"]
        assert s.upstream.seen[-1].path == "/v1/responses"


async def test_azure_is_reached_at_its_deployment_with_its_key() -> None:
    upstream = FamilyUpstream()
    async with serving(upstream.app()) as base:
        text = CONFIG.format(host=base.removesuffix("/v1")).replace(
            "gpt: {targets: [openai/gpt-4o]}", "gpt: {targets: [azure/gpt-4o]}")
        async with gateway_for(text) as gateway, openai.AsyncOpenAI(
                base_url=f"{gateway.url}/v1", api_key="c", max_retries=0) as client:
            answer = await client.chat.completions.create(
                model="gpt", messages=[{"role": "user", "content": "Hi"}])
    seen = upstream.seen[-1]
    assert (seen.path, seen.query) == ("/openai/deployments/prod-gpt4o/chat/completions",
                                       "api-version=2024-10-21")
    assert seen.headers["api-key"] == "azure-key-0001"
    assert "authorization" not in seen.headers
    assert answer.choices[0].message.content == "Hello there"


async def test_a_chat_falls_back_from_openai_to_anthropic() -> None:
    async with setup() as s:
        s.upstream.fail["openai"] = (503, {"error": {"message": "down"}}, {})
        raw = await s.openai().chat.completions.with_raw_response.create(
            model="mixed", messages=[{"role": "user", "content": "Hi"}])
        assert raw.headers["x-omniroute-served-by"] == "anthropic/k1/claude-sonnet-4-5"
        assert raw.parse().choices[0].message.content == "Hello there"
        assert [seen.family for seen in s.upstream.seen] == ["openai", "anthropic"]


async def test_an_anthropic_529_falls_back_to_openai_for_a_messages_client() -> None:
    async with setup() as s:
        s.upstream.fail["anthropic"] = (529, {"type": "error", "error": {
            "type": "overloaded_error", "message": "Overloaded"}}, {})
        message = await s.anthropic().messages.create(
            model="claude_first", max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
        assert [b.text for b in message.content if b.type == "text"] == ["Hello there"]
        assert [seen.family for seen in s.upstream.seen] == ["anthropic", "openai"]
        with pytest.raises(anthropic.APIStatusError) as info:  # no fallback: Anthropic's shape
            await s.anthropic().messages.create(
                model="claude", max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
        assert info.value.status_code == 529  # the upstream's own status, passed on
        body = info.value.body
        assert isinstance(body, dict) and body["type"] == "error"
        assert body["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize(("path", "body", "param", "code"), [
    ("/v1/embeddings", {"model": "gpt", "input": "x"}, None, "unsupported_endpoint"),
    ("/v1/chat/completions", {"model": "embed", "messages": [{"role": "user",
                                                              "content": "x"}]},
     None, "unsupported_endpoint"),
    ("/v1/chat/completions", {"model": "claude", "n": 2, "messages": [
        {"role": "user", "content": "x"}]}, "n", "unsupported_parameter"),
    ("/v1/chat/completions", {"model": "claude", "temperature": 1.5, "messages": [
        {"role": "user", "content": "x"}]}, "temperature", "unsupported_parameter"),
    ("/v1/responses", {"model": "claude", "input": "x"}, None, "unsupported_endpoint"),
])
async def test_a_request_no_target_serves_is_a_400_before_any_upstream_call(
        path: str, body: dict[str, object], param: str | None, code: str) -> None:
    async with setup() as s, httpx.AsyncClient(base_url=s.url) as http:
        answer = await http.post(path, json=body)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert (error["param"], error["code"]) == (param, code)
        assert s.upstream.seen == []


async def test_a_mixed_route_skips_the_target_that_cannot_take_the_request() -> None:
    """`n: 2` cannot go to Anthropic: the mixed route's OpenAI target takes it, and
    when it fails the route has nothing left (not_served says nothing of a retry)."""
    async with setup() as s, httpx.AsyncClient(base_url=s.url) as http:
        body = {"model": "mixed", "n": 2, "messages": [{"role": "user", "content": "x"}]}
        assert (await http.post("/v1/chat/completions", json=body)).status_code == 200
        s.upstream.fail["openai"] = (503, {"error": {"message": "down"}}, {})
        failed = await http.post("/v1/chat/completions", json=body)
        assert failed.status_code == 503
        assert [(skip["target"], skip["reason"]) for skip in failed.json()["error"]["skipped"]
                ] == [("anthropic/claude-sonnet-4-5", "not_served")]
        assert [seen.family for seen in s.upstream.seen] == ["openai", "openai"]


async def test_stored_response_calls_are_a_clear_501() -> None:
    async with setup() as s, httpx.AsyncClient(base_url=s.url) as http:
        for method in ("GET", "DELETE"):
            answer = await http.request(method, "/v1/responses/resp_123")
            assert answer.status_code == 501
            assert answer.json()["error"]["code"] == "stored_responses_unsupported"


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/messages", {"model": "claude", "messages": [{"role": "user", "content": "x"}]},
     "max_tokens"),
    ("/v1/messages", {"model": "claude", "max_tokens": True, "messages": []}, "messages"),
    ("/v1/embeddings", {"model": "embed", "input": 5}, "input"),
    ("/v1/embeddings", {"model": "embed", "input": "x", "stream": True}, "stream"),
    ("/v1/completions", {"model": "gpt", "prompt": {"a": 1}}, "prompt"),
    ("/v1/responses", {"model": "gpt", "input": 7}, "input"),
    ("/v1/responses", {"model": ["gpt"], "input": "x"}, "model"),
])
async def test_type_confused_bodies_are_400s_in_the_clients_api(
        path: str, body: dict[str, object], param: str) -> None:
    async with setup() as s, httpx.AsyncClient(base_url=s.url) as http:
        answer = await http.post(path, json=body)
        assert answer.status_code == 400
        data = answer.json()
        if path == "/v1/messages":
            assert data["type"] == "error"
            assert data["error"]["type"] == "invalid_request_error"
        assert data["error"]["param"] == param
        assert s.upstream.seen == []
