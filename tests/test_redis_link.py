"""Replicas sharing state through a real Redis (127.0.0.1:6379 on the project's machines):
each test uses its own key prefix and deletes it after."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import redis.asyncio as redis

from omniroute_tui.clock import SystemClock
from omniroute_tui.engine import (
    BreakerState,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.router import Route, Router, Target
from omniroute_tui.store.redis_link import RedisLink

from .gateway_helpers import TOKEN, running_gateway
from .helpers import ADMIT, fail
from .waiting import eventually

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    client = redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        pytest.skip(f"no Redis answers at {REDIS_URL}: {exc}")
    name = f"omniroute-test-{uuid.uuid4().hex[:12]}"
    yield name
    keys = [key async for key in client.scan_iter(match=f"{name}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


def replica() -> ResilienceEngine:
    return ResilienceEngine([ProviderSpec("p", ("a", "b"), default_settings())], SystemClock())


@asynccontextmanager
async def fleet(prefix: str, size: int) -> AsyncIterator[tuple[list[ResilienceEngine],
                                                               list[RedisLink]]]:
    """`size` engines, each linked to the others through Redis under `prefix`."""
    engines = [replica() for _ in range(size)]
    links = [RedisLink(REDIS_URL, prefix=prefix, replica=f"r{i}") for i in range(size)]
    for engine, link in zip(engines, links, strict=True):
        await link.attach(engine)
    try:
        yield engines, links
    finally:
        for link in links:
            await link.close()


async def test_replicas_converge_on_cooldowns_and_breakers(prefix: str) -> None:
    async with fleet(prefix, 3) as (engines, links):
        first, second, third = engines
        first.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
        until = first.connection_snapshot("p", "a").cooling_until

        def cooled() -> bool:
            return all(e.connection_snapshot("p", "a").cooling_until == until
                       for e in (second, third))

        await eventually(cooled, timeout_s=5, what="the cooldown on every replica")
        # a failure a replica's router saw counts on every replica (once: dedup windows)
        routing = Router(second, {"r": Route("r", (Target("p", "m"),))}).start("x", "r")
        routing.next_step()  # an attempt on b, the key that is not cooling
        routing.record(500, fail(FailureKind.SERVER_ERROR))
        await eventually(lambda: third.breaker_snapshot("p").failures == 1, timeout_s=5,
                         what="the failure counted on the third replica")
        # a breaker opened on one replica is OPEN on the others until the same deadline
        first.force_open("p", 600_000, actor="test")
        deadline = SystemClock().now_ms() + 600_000

        def opened() -> bool:
            snap = third.breaker_snapshot("p")
            return (snap.state is BreakerState.OPEN and snap.retry_after_ms is not None
                    and abs(SystemClock().now_ms() + snap.retry_after_ms - deadline) < 2_000)

        await eventually(opened, timeout_s=5, what="the OPEN window on the third replica")
        assert all(link.health().ok for link in links)


async def test_one_probe_lease_for_the_fleet(prefix: str) -> None:
    async with fleet(prefix, 2) as (engines, links):
        gates = [e.layers("p").breaker.probe_gate for e in engines]
        assert all(g is not None for g in gates)
        now = SystemClock().now_ms()
        assert gates[0](now) is False  # type: ignore[misc]  # asks Redis, does not wait
        await eventually(lambda: gates[0](SystemClock().now_ms()), timeout_s=5,  # type: ignore[misc]
                         what="the lease for the first replica")
        for _ in range(20):  # the other one never gets it while the first holds it
            assert gates[1](SystemClock().now_ms()) is False  # type: ignore[misc]
            await eventually(lambda: not links[1]._asking, timeout_s=5)


async def test_without_redis_routing_goes_on_and_changes_queue() -> None:
    engine = replica()
    link = RedisLink("redis://127.0.0.1:1/0", prefix="omniroute-test-none", replica="lonely")
    await link.attach(engine)
    try:
        engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
        assert list(engine.candidates("p", "m")) == ["b"]  # routing did not wait
        await eventually(lambda: not link.health().ok, timeout_s=10, what="the failure")
        health = link.health()
        assert health.pending >= 1 and "Error" in (health.error or "")
    finally:
        await link.close()


async def test_two_gateways_on_one_redis_share_a_force_open(prefix: str, tmp_path: Path
                                                             ) -> None:
    async with running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as one, \
            running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as other, \
            httpx.AsyncClient(timeout=10) as http:
        auth = {"authorization": f"Bearer {TOKEN}"}
        reply = await http.post(f"{one.url}/api/resilience/breakers/healthy/force-open",
                                json={"for": "5m"}, headers=auth)
        assert reply.status_code == 200

        async def open_there() -> bool:
            health = (await http.get(f"{other.url}/health")).json()
            return bool(health["providers"]["healthy"] == "OPEN")

        await eventually(open_there, timeout_s=5, what="the force-open on the other replica")
        health = (await http.get(f"{other.url}/health")).json()
        assert health["status"] == "ok" and health["fleet"]["ok"] is True
        # an operator's reset on the other replica closes it here too, audited there only
        reply = await http.post(f"{other.url}/api/resilience/breakers/healthy/reset",
                                headers=auth)
        assert reply.status_code == 200

        async def closed_here() -> bool:
            health = (await http.get(f"{one.url}/health")).json()
            return bool(health["providers"]["healthy"] == "CLOSED")

        await eventually(closed_here, timeout_s=5, what="the reset on the first replica")
        audit = (await http.get(f"{one.url}/api/resilience/audit", headers=auth)).json()
        assert [e["action"] for e in audit["entries"]] == ["force_open"]
