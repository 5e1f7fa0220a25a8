"""Each replica of a fleet says which config it runs; `/health` says when they differ."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.engine.events import OperatorEvent
from omniroute_tui.engine.reload import ReloadSummary
from omniroute_tui.fleet.entries import (
    Accepted,
    ConfigVersion,
    Known,
    Rejected,
    config_field,
    read_config_field,
    read_entry,
)
from omniroute_tui.fleet.redis_link import RedisLink
from omniroute_tui.gateway import Gateway

from .gateway_helpers import TOKEN
from .redis_helpers import REDIS_URL
from .waiting import eventually

NOW = 1_700_000_000_000
CONFIG = """\
providers:
  alpha: {models: [m], base_url: "http://127.0.0.1:9/v1", connections: [a1]}
routes:
  chat: {targets: [alpha/m]}
"""


def test_a_config_version_field_round_trips() -> None:
    raw = config_field("0123456789ab", NOW - 5, NOW)
    assert read_config_field(b"host:1:abc", raw, NOW) == ConfigVersion(
        "host:1:abc", "0123456789ab", NOW - 5, NOW)


@pytest.mark.parametrize(("name", "value", "reason"), [
    (b"r", b"not json", "the config version is not JSON"),
    (b"r", b"[1]", "a config version field is not {v, version, loaded_at_ms, t}"),
    (b"r", b'{"v":1,"version":"0123456789ab","loaded_at_ms":1}',
     "a config version field is not {v, version, loaded_at_ms, t}"),
    (b"r", b'{"v":2,"version":"0123456789ab","loaded_at_ms":1,"t":1}',
     "a config version field of another version"),
    (b"r", b'{"v":1,"version":"0123456789AB","loaded_at_ms":1,"t":1}',
     "a config version is not 12 hex digits"),
    (b"r", b'{"v":1,"version":["0123456789ab"],"loaded_at_ms":1,"t":1}',
     "a config version is not 12 hex digits"),
    (b"r", b'{"v":1,"version":"0123456789ab","loaded_at_ms":true,"t":1}',
     "a config version's loaded_at_ms is not a time up to now"),
    (b"r", b'{"v":1,"version":"0123456789ab","loaded_at_ms":1,"t":1e400}',
     "a config version's t is not a time up to now"),
    (b"r", b'{"v":1,"version":"0123456789ab","loaded_at_ms":1,"t":9999999999999999}',
     "a config version's t is not a time up to now"),
    (b"r", b"{" + b" " * 300 + b"}", "a config version field is over 256 bytes"),
    (b"\xff", config_field("0123456789ab", 1, 1), "the replica is not UTF-8"),
    (b"evil\x1b[2J", config_field("0123456789ab", 1, 1),
     "the replica holds a character that does not show"),
    (b"", config_field("0123456789ab", 1, 1),
     "the replica is empty or over 256 characters"),
])
def test_hostile_config_version_fields_are_refused(name: bytes, value: bytes,
                                                   reason: str) -> None:
    read = read_config_field(name, value, NOW)
    assert isinstance(read, Rejected) and read.reason == reason


def test_another_replicas_reload_is_in_the_fleets_audit() -> None:
    """Its target is that replica's own file, which names nothing of this replica's."""
    known = Known({"alpha": frozenset({"a1"})}, {"alpha": None}, {"alpha": 60_000},
                  {"alpha": 5})
    audit = OperatorEvent(NOW, "reload", "/etc/omniroute/router.yaml", "ana",
                          f"ok 0123456789ab: {ReloadSummary(('beta',)).describe()}")
    read = read_entry({b"replica": b"r2", b"event": audit.to_json().encode()}, known, NOW,
                      own="r1")
    assert isinstance(read, Accepted) and read.event == audit
    hidden = OperatorEvent(NOW, "reload", "/etc/x\x1b[2J", "ana", "ok")
    read = read_entry({b"replica": b"r2", b"event": hidden.to_json().encode()}, known, NOW,
                      own="r1")
    assert isinstance(read, Rejected)
    assert read.reason == "operator.target holds a character that does not show"


async def test_health_says_when_replicas_run_different_config_versions(prefix: str) -> None:
    gateways, links = [], []
    texts = (CONFIG, CONFIG, CONFIG.replace("[a1]", "[a1, a2]"))
    try:
        for n, text in enumerate(texts):
            config = load_router_config(f"router-{n}.yaml", text=text)
            router = config.build(SystemClock())
            link = RedisLink(REDIS_URL, prefix=prefix, replica=f"replica-{n}")
            await link.attach(router.engine, router.models)
            links.append(link)
            gateways.append(Gateway(router, config.providers, token=TOKEN, fleet=link,
                                    config=config))
        client = await aioredis.from_url(REDIS_URL)
        await client.hset(f"{prefix}:configs", "intruder", b"{not json")
        await client.aclose()

        async def health(n: int) -> dict[str, object]:
            transport = httpx.ASGITransport(app=gateways[n].asgi())
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
                body: dict[str, object] = (await http.get("/health")).json()
                return body

        async def all_heard() -> bool:
            versions = links[0].health().config_versions or {}
            return len(versions) == 3

        await eventually(all_heard, what="every replica's version")
        versions = links[0].health().config_versions
        assert versions is not None
        one, other = (load_router_config("x", text=t).version for t in texts[1:])
        assert versions == {"replica-0": one, "replica-1": one, "replica-2": other}
        body = await health(0)
        assert body["config_mismatch"] == versions
        assert body["config"]["version"] == one  # type: ignore[index]
        assert links[0].rejected == 1  # the intruder's field, counted once
        last = links[0].health().last_rejection
        assert last is not None and last["reason"] == "the config version is not JSON"

        # replica 2 stops; once it is silent long enough it no longer counts
        await links.pop().close()
        gateways.pop()
        raw = await aioredis.from_url(REDIS_URL)
        assert await raw.hget(f"{prefix}:configs", "replica-2") is None
        await raw.aclose()

        async def agreed() -> bool:  # on both: each reads the versions every 2 s
            return all(["config_mismatch" not in await health(n) for n in (0, 1)])

        await eventually(agreed, what="the versions agreeing")
        fleet = (await health(1))["fleet"]
        assert fleet["config_versions"] == {  # type: ignore[index]
            "replica-0": one, "replica-1": one}
    finally:
        for link in links:
            await link.close()
