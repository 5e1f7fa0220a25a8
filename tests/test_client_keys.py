"""Client keys (docs/gateway.md, "Client keys"): tenants by the SHA-256 of their keys, the
routes each may use, requests and tokens a minute and tokens a day; enforced with the
official openai and anthropic clients, fleet-wide through Redis, rotated by reload."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.config.clients import Tenant
from omniroute_tui.gateway.tenant_limits import (
    WINDOW_MS,
    LocalUsage,
    RedisUsage,
    refusal,
)

from .gateway_helpers import TOKEN, running_gateway
from .helpers import Recorder
from .redis_helpers import REDIS_URL
from .test_gateway_reload import config_text, served, upstream
from .waiting import eventually

ALPHA_KEY, BETA_KEY, NEW_KEY = "sk-tenant-alpha-0001", "sk-tenant-beta-0002", "sk-new-0003"
MESSAGES = [{"role": "user", "content": "hello"}]


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def clients_section(alpha_rpm: int = 2, alpha_key: str = ALPHA_KEY, extra: str = "") -> str:
    return (f"gateway:\n  clients:\n"
            f"    alpha: {{keys: [{digest(alpha_key)}], rpm: {alpha_rpm}, routes: [chat]}}\n"
            f"    beta: {{keys: [{digest(BETA_KEY)}]{extra}}}\n")


def client(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=10)


# -- the config ---------------------------------------------------------------------------

ROUTER = """\
providers:
  p: {base_url: http://p.test/v1, models: [m], connections: [{id: k, api_key: sk-1}]}
routes:
  chat: {targets: [p/m]}
"""


def problems(section: str) -> list[str]:
    try:
        load_router_config("c.yaml", text=ROUTER + section, env={})
    except ConfigError as error:
        return [str(p) for p in error.problems]
    return []


def test_a_config_names_tenants_by_their_keys_digests() -> None:
    config = load_router_config("c.yaml", text=ROUTER + clients_section(
        extra=", tpm: 1000, tokens_per_day: 50000, routes: [chat, p/m]"), env={})
    clients = config.gateway_clients
    alpha = clients.identify(ALPHA_KEY)
    assert alpha is not None and (alpha.name, alpha.rpm, alpha.routes) == (
        "alpha", 2, frozenset({"chat"}))
    beta = clients.identify(BETA_KEY)
    assert beta is not None and (beta.tpm, beta.tokens_per_day) == (1000, 50000)
    assert clients.identify("sk-anything-else") is None
    assert not load_router_config("c.yaml", text=ROUTER, env={}).gateway_clients


@pytest.mark.parametrize(("section", "said"), [
    (f"gateway:\n  clients:\n    a: {{keys: [{ALPHA_KEY}]}}\n", "the SHA-256 of the key"),
    (f"gateway:\n  clients:\n    a: {{keys: [{digest(ALPHA_KEY)}]}}\n"
     f"    b: {{keys: [{digest(ALPHA_KEY)}]}}\n", "the same key as tenant 'a'"),
    (f"gateway:\n  clients:\n    a: {{keys: [{digest(ALPHA_KEY)}], routes: [chta]}}\n",
     "'chta' is neither a route"),
    (f"gateway:\n  clients:\n    a: {{keys: [{digest(ALPHA_KEY)}], rpm: 0}}\n",
     "expected a whole number from 1"),
    (f"gateway:\n  clients:\n    a: {{keys: [{digest(ALPHA_KEY)}], tpm: true}}\n",
     "expected a whole number from 1"),
    (f"gateway:\n  clients:\n    a: {{keys: [{digest(ALPHA_KEY)}], budget: 5}}\n", "budget"),
    ("gateway:\n  clients:\n    a: {keys: []}\n", "expected a list of 1 to 100"),
    ("gateway:\n  clients:\n    'a b': {keys: []}\n", "a tenant's name is"),
    ("gateway:\n  clients: [a]\n", "clients"),
])
def test_a_bad_clients_section_is_refused_naming_the_field(section: str, said: str) -> None:
    found = problems(section)
    assert any(said in problem for problem in found), found


# -- the sliding minute -------------------------------------------------------------------

def test_the_sliding_minute_weighs_the_last_one_by_what_it_still_covers() -> None:
    tenant = Tenant("t", rpm=10)
    minute = 100 * WINDOW_MS
    # 8 last minute, 4 this one, a quarter in: 8 * 0.75 + 4 = 10 -> refused
    refused = refusal(tenant, (8, 4), (0, 0), 0, minute + 15_000)
    assert refused is not None and (refused.limit, refused.used, refused.allowed) == (
        "rpm", 10, 10)
    # one more fits once 8 * share <= 5: share 0.625, 22.5 s into the minute
    assert refused.retry_after_ms == 7_500
    assert refusal(tenant, (8, 4), (0, 0), 0, minute + 22_500) is None
    # this minute alone is full: the next one, once its share of 10 is under 9 (6 s in)
    full = refusal(tenant, (0, 10), (0, 0), 0, minute + 30_000)
    assert full is not None and full.retry_after_ms == 30_000 + 6_000
    day = refusal(Tenant("t", tokens_per_day=100), (0, 0), (0, 0), 100, minute + 1)
    assert day is not None and day.limit == "tokens_per_day"
    assert day.retry_after_ms == 86_400_000 - (minute + 1) % 86_400_000


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50), st.lists(st.integers(0, 5_000), min_size=1, max_size=300))
def test_a_minute_never_admits_more_than_the_limit_and_retry_after_is_exact(
        rpm: int, gaps: list[int]) -> None:
    """Requests arriving at any pace: no fixed minute lets in more than `rpm`, and a
    refusal's retry time is the first moment one more would be let in."""
    tenant = Tenant("t", rpm=rpm)
    usage = LocalUsage()
    now = 7 * WINDOW_MS
    per_minute: dict[int, int] = {}
    for gap in gaps:
        now += gap
        shadow = copy.deepcopy(usage)  # the same counts, to probe the retry time
        refused = usage.admit_now(tenant, now)
        if refused is None:
            per_minute[now // WINDOW_MS] = per_minute.get(now // WINDOW_MS, 0) + 1
            assert per_minute[now // WINDOW_MS] <= rpm
        else:
            later = now + refused.retry_after_ms
            if refused.retry_after_ms > 1:
                assert copy.deepcopy(shadow).admit_now(tenant, later - 1) is not None
            assert shadow.admit_now(tenant, later) is None


# -- through the gateway ------------------------------------------------------------------

async def test_a_tenant_over_its_limit_is_refused_and_the_others_are_not(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="omniroute.access")
    async with running_gateway(tmp_path, gateway_section=clients_section()) as gw, \
            client(gw.url, ALPHA_KEY) as alpha, client(gw.url, BETA_KEY) as beta:
        events = Recorder(gw.gateway.router.engine.bus)
        for _ in range(2):
            assert (await alpha.chat.completions.create(model="chat", messages=MESSAGES)
                    ).choices[0].message.content
        with pytest.raises(openai.RateLimitError) as refused:
            await alpha.chat.completions.create(model="chat", messages=MESSAGES)
        error = refused.value.body
        assert isinstance(error, dict)
        assert (error["code"], error["param"]) == ("tenant_limit_exceeded", "rpm")
        assert "'alpha' is at its limit of 2 requests a minute" in error["message"]
        # 2 of 2 this minute: one more fits 30 s into the next, when half of it is left
        assert 30 <= int(refused.value.response.headers["retry-after"]) <= 90
        for _ in range(3):  # beta has no limit, and alpha's does not touch it
            await beta.chat.completions.create(model="chat", messages=MESSAGES)
        stream = await beta.chat.completions.create(
            model="chat", messages=MESSAGES, stream=True,
            stream_options={"include_usage": True})
        assert [chunk async for chunk in stream]
        with pytest.raises(openai.PermissionDeniedError) as denied:
            await alpha.chat.completions.create(model="healthy/m", messages=MESSAGES)
        assert "may not use 'healthy/m'" in str(denied.value)
        async with client(gw.url, "sk-unknown") as stranger:
            with pytest.raises(openai.AuthenticationError):
                await stranger.chat.completions.create(model="chat", messages=MESSAGES)
        async with anthropic.AsyncAnthropic(base_url=gw.url, api_key=BETA_KEY,
                                            max_retries=0) as claude:
            message = await claude.messages.create(model="chat", max_tokens=16,
                                                   messages=MESSAGES)  # type: ignore[arg-type]
            assert message.content
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            scrape = (await http.get("/metrics", headers={
                "authorization": f"Bearer {TOKEN}"})).text
    assert 'omniroute_client_requests_total{outcome="admitted",tenant="alpha"} 2.0' in scrape
    assert 'omniroute_client_requests_total{outcome="rpm",tenant="alpha"} 1.0' in scrape
    assert 'omniroute_client_requests_total{outcome="route",tenant="alpha"} 1.0' in scrape
    assert 'omniroute_client_requests_total{outcome="admitted",tenant="beta"} 5.0' in scrape
    assert "omniroute_client_unauthenticated_total 1.0" in scrape
    tokens = [line for line in scrape.splitlines()
              if line.startswith('omniroute_client_tokens_total{tenant="beta"}')]
    assert tokens and float(tokens[0].split()[-1]) > 0  # JSON and the stream's usage
    tenants = {getattr(r, "tenant", None) for r in caplog.records
               if r.name == "omniroute.access"}
    assert {"alpha", "beta", None} <= tenants
    # the why: each routed request's first event names its tenant
    assert {r.get("tenant") for r in events.of("request")} == {"alpha", "beta"}


async def test_a_tenants_tokens_a_minute_refuse_it_once_spent(tmp_path: Path) -> None:
    """Let in while under 60 tokens this minute; refused from the request after the one
    that took it there (a request's tokens are known at its end)."""
    section = clients_section(extra=", tpm: 60")
    async with running_gateway(tmp_path, gateway_section=section) as gw, \
            client(gw.url, BETA_KEY) as beta:
        spent = 0
        while spent < 60:
            reply = await beta.chat.completions.create(model="chat", messages=MESSAGES)
            assert reply.usage is not None
            spent += reply.usage.total_tokens
        with pytest.raises(openai.RateLimitError) as refused:
            await beta.chat.completions.create(model="chat", messages=MESSAGES)
        assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "tpm"
        assert f"({spent} used)" in refused.value.body["message"]


async def test_keys_rotate_by_reload_without_a_request_dropped(tmp_path: Path) -> None:
    """Requests in flight on the old key are answered; after the reload the old key is
    refused, the new one let in, and the tenant's count goes on."""
    def text(url: str, *keys: str) -> str:
        return config_text(url, extra={"gateway": {"clients": {
            "alpha": {"keys": [digest(key) for key in keys], "rpm": 7}}}})

    async with upstream() as fake, served(tmp_path, text("http://x/v1", ALPHA_KEY)) as gw:
        gw.path.write_text(text(fake.url, ALPHA_KEY))
        auth = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            assert (await http.post("/api/resilience/reload", headers=auth)).status_code == 200
            fake.release.clear()
            async with client(gw.url, ALPHA_KEY) as old, client(gw.url, NEW_KEY) as new:
                held = [asyncio.create_task(old.chat.completions.create(
                    model="chat", messages=MESSAGES)) for _ in range(5)]
                await eventually(lambda: fake.count == 5, what="5 requests upstream")
                gw.path.write_text(text(fake.url, NEW_KEY))
                answer = await http.post("/api/resilience/reload", headers=auth)
                assert answer.status_code == 200, answer.text
                fake.release.set()
                assert len(await asyncio.gather(*held)) == 5  # none dropped
                with pytest.raises(openai.AuthenticationError):
                    await old.chat.completions.create(model="chat", messages=MESSAGES)
                await new.chat.completions.create(model="chat", messages=MESSAGES)
                await new.chat.completions.create(model="chat", messages=MESSAGES)
                with pytest.raises(openai.RateLimitError):  # 7 of 7: the count went on
                    await new.chat.completions.create(model="chat", messages=MESSAGES)


# -- a fleet ------------------------------------------------------------------------------

async def test_two_gateways_share_one_budget_through_redis(tmp_path: Path, prefix: str
                                                          ) -> None:
    section = clients_section(alpha_rpm=3)
    async with running_gateway(tmp_path / "a", redis=(REDIS_URL, prefix),
                               gateway_section=section) as one, \
            running_gateway(tmp_path / "b", redis=(REDIS_URL, prefix),
                            gateway_section=section) as two, \
            client(one.url, ALPHA_KEY) as via_one, client(two.url, ALPHA_KEY) as via_two:
        await via_one.chat.completions.create(model="chat", messages=MESSAGES)
        await via_two.chat.completions.create(model="chat", messages=MESSAGES)
        await via_one.chat.completions.create(model="chat", messages=MESSAGES)
        for api in (via_two, via_one):  # the fourth is refused wherever it lands
            with pytest.raises(openai.RateLimitError):
                await api.chat.completions.create(model="chat", messages=MESSAGES)


@pytest.mark.parametrize("stranger", ["lots", "nan", "inf", "0x10", "-1000000", "1e3",
                                      "9" * 16, "list"])
async def test_a_strangers_value_in_redis_fails_open_counted_and_logged(
        prefix: str, stranger: str, caplog: pytest.LogCaptureFixture) -> None:
    """A counter holding what is not a count (another program's key, a stranger's): the
    request is let in and counted by the replica alone, and the failure logged and
    counted; Redis is then left alone for a while (a hung one costs one wait)."""
    client_ = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        usage = RedisUsage(client_, prefix)
        tenant = Tenant("t", rpm=1)
        now = 1_000 * WINDOW_MS + 5
        keys = usage._keys("t", now)
        if stranger == "list":
            await client_.rpush(keys[4], "x")
        else:
            await client_.set(keys[1], stranger)
        assert await usage.admit(tenant, now) is None
        assert usage.errors == 1
        assert "Redis failed to admit for tenant t" in caplog.text
        assert await usage.admit(tenant, now) is not None  # its own count: 1 of 1
        await usage.spend(tenant, 10, now)
        assert usage.errors == 1  # counted alone meanwhile, Redis not asked
    finally:
        await client_.delete(*usage._keys("t", now))
        await client_.aclose()


async def test_counts_in_redis_expire_on_their_own(prefix: str) -> None:
    client_ = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        usage = RedisUsage(client_, prefix)
        tenant = Tenant("t", rpm=5)
        now = 1_000 * WINDOW_MS + 5
        assert await usage.admit(tenant, now) is None
        await usage.spend(tenant, 10, now)
        keys = usage._keys("t", now)
        assert int(await client_.get(keys[1])) == 1
        assert int(await client_.get(keys[4])) == 10
        assert 0 < await client_.pttl(keys[1]) <= 2 * WINDOW_MS
        assert 0 < await client_.pttl(keys[3]) <= 2 * WINDOW_MS
        assert usage.errors == 0
    finally:
        await client_.delete(*usage._keys("t", now))
        await client_.aclose()


async def test_models_are_listed_to_a_key_and_only_what_its_tenant_may_use(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway_section=clients_section()) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        assert (await http.get("/v1/models")).status_code == 401
        listed = await http.get("/v1/models", headers={"authorization": f"Bearer {ALPHA_KEY}"})
        assert [m["id"] for m in listed.json()["data"]] == ["chat"]
        everything = await http.get("/v1/models", headers={"x-api-key": BETA_KEY})
        assert len(everything.json()["data"]) > 1


def test_an_embeddings_usage_counts_its_prompt_tokens() -> None:
    from omniroute_tui.drivers.usage import Usage, usage_of

    assert usage_of(b'{"usage": {"prompt_tokens": 5000, "total_tokens": 5000}}') == \
        Usage(5000, 0)
    assert usage_of(b'{"usage": {"prompt_tokens": 5, "total_tokens": 9}}') is None


async def test_a_reload_cannot_turn_client_keys_off_and_none_is_refused(
        tmp_path: Path) -> None:
    assert any("no tenants" in p for p in problems("gateway:\n  clients: {}\n"))
    def text(url: str, clients: bool) -> str:
        extra = {"gateway": {"clients": {"alpha": {"keys": [digest(ALPHA_KEY)]}}}} \
            if clients else {}
        return config_text(url, extra=extra)

    async with upstream() as fake, served(tmp_path, text("http://x/v1", True)) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        gw.path.write_text(text(fake.url, False))
        answer = await http.post("/api/resilience/reload",
                                 headers={"authorization": f"Bearer {TOKEN}"})
        assert answer.status_code != 200
        assert "turns them off" in answer.text
        refused = await http.post("/v1/chat/completions",
                                  json={"model": "chat", "messages": MESSAGES})
        assert refused.status_code == 401  # still on


def test_the_manuals_example_loads() -> None:
    from .test_docs import blocks, section

    (example, _) = (*blocks(section(Path("docs/gateway.md"), "Client keys"), "yaml"), None)
    router = ("providers:\n  openai: {base_url: http://o.test/v1, models: [gpt-4o-mini], "
              "connections: [{id: k, api_key: sk-1}]}\nroutes:\n  chat: {targets: "
              "[openai/gpt-4o-mini]}\n")
    clients = load_router_config("c.yaml", text=router + example, env={}).gateway_clients
    search, batch = clients.identify("1"), clients.identify("2")
    assert search is not None and batch is not None
    assert (search.rpm, search.tpm, search.tokens_per_day) == (600, 200_000, 5_000_000)
    assert (batch.rpm, batch.routes) == (60, None)


async def test_hostile_key_headers_are_refused_plainly(tmp_path: Path) -> None:
    """Whatever the key headers hold (no scheme, another scheme, no key, 8 kB, bytes that
    are not UTF-8, a wrong key in both): a 401 in the API's shape, never a 500. The
    scheme's case does not matter, and a good key in either header is taken."""
    refused: list[list[tuple[str, str | bytes]]] = [
        [("authorization", BETA_KEY)], [("authorization", "Basic " + BETA_KEY)],
        [("authorization", "Bearer")], [("x-api-key", "")],
        [("authorization", "Bearer " + "k" * 8192)], [("authorization", b"Bearer \xff\xfe")],
        [("authorization", "Bearer sk-nope"), ("x-api-key", "sk-nope")]]
    taken: list[list[tuple[str, str | bytes]]] = [
        [("authorization", f"bearer {BETA_KEY}")], [("x-api-key", BETA_KEY)],
        [("authorization", "Basic x"), ("x-api-key", BETA_KEY)]]
    async with running_gateway(tmp_path, gateway_section=clients_section()) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        body = {"model": "chat", "messages": MESSAGES}
        for headers in refused:
            answer = await http.post("/v1/chat/completions", json=body, headers=headers)
            assert answer.status_code == 401, (headers, answer.text)
            assert answer.json()["error"]["code"] == "invalid_api_key"
        for headers in taken:
            answer = await http.post("/v1/chat/completions", json=body, headers=headers)
            assert answer.status_code == 200, (headers, answer.text)
        anthropic_style = await http.post("/v1/messages", headers={"x-api-key": "bad"},
                                          json={"model": "chat", "max_tokens": 8,
                                                "messages": MESSAGES})
        assert anthropic_style.status_code == 401
        assert anthropic_style.json()["type"] == "error"  # Anthropic's shape


async def test_the_keys_may_live_in_a_file_of_their_own_read_again_by_reload(
        tmp_path: Path) -> None:
    keys = tmp_path / "clients.yaml"
    keys.write_text(f"alpha: {{keys: [{digest(ALPHA_KEY)}]}}\n")
    text = config_text("http://x/v1") + "gateway: {clients: clients.yaml}\n"
    config = load_router_config(tmp_path / "router.yaml", text=text)
    assert config.gateway_clients.identify(ALPHA_KEY) is not None
    keys.write_text("alpha: {keys: [not-a-digest]}\n")
    with pytest.raises(ConfigError) as bad:
        load_router_config(tmp_path / "router.yaml", text=text)
    assert str(keys) in str(bad.value) and "alpha.keys[0]" in str(bad.value)
    keys.unlink()
    with pytest.raises(ConfigError) as missing:
        load_router_config(tmp_path / "router.yaml", text=text)
    assert str(keys) in str(missing.value)
    async with upstream() as fake:
        keys.write_text(f"alpha: {{keys: [{digest(ALPHA_KEY)}]}}\n")
        async with served(tmp_path, config_text(fake.url) + "gateway: {clients: clients.yaml}\n"
                          ) as gw, client(gw.url, ALPHA_KEY) as old, \
                client(gw.url, NEW_KEY) as new, \
                httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            await old.chat.completions.create(model="chat", messages=MESSAGES)
            keys.write_text(f"alpha: {{keys: [{digest(NEW_KEY)}]}}\n")
            answer = await http.post("/api/resilience/reload",
                                     headers={"authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 200, answer.text
            with pytest.raises(openai.AuthenticationError):
                await old.chat.completions.create(model="chat", messages=MESSAGES)
            await new.chat.completions.create(model="chat", messages=MESSAGES)


async def test_tokens_go_to_redis_together_and_alone_when_it_fails(prefix: str) -> None:
    """Answers' tokens are sent in one round trip a tenth of a second; a send that fails
    counts them on this replica instead, and the gateway's stop sends what is pending."""
    client_ = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        usage = RedisUsage(client_, prefix)
        one, two = Tenant("one", tpm=100), Tenant("two", tpm=100)
        now = 1_000 * WINDOW_MS + 5
        for tenant, tokens in ((one, 30), (two, 5), (one, 40)):
            usage.spend_soon(tenant, tokens, now)
        assert await client_.get(usage._keys("one", now)[3]) is None  # not yet sent
        await usage.flush()
        assert [int(await client_.get(usage._keys(t, now)[k])) for t in ("one", "two")
                for k in (3, 4)] == [70, 70, 5, 5]
        usage.spend_soon(one, 31, now)
        await usage.close()  # a stop sends what is pending
        assert int(await client_.get(usage._keys("one", now)[3])) == 101
        assert (await usage.admit(one, now)) is not None  # 101 of 100 tokens a minute
        await client_.delete(usage._keys("two", now)[4])
        await client_.rpush(usage._keys("two", now)[4], "x")  # the next send fails
        usage.spend_soon(two, 7, now)
        await usage.flush()
        assert usage.errors == 1
        assert usage.local._counts["two"].day_tokens == 7  # counted here instead
    finally:
        for name in ("one", "two"):
            await client_.delete(*usage._keys(name, now))
        await client_.aclose()
