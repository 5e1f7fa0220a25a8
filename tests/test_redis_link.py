"""Replicas sharing state through a real Redis (127.0.0.1:6379 on the project's machines):
each test uses its own key prefix and deletes it after."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
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
from omniroute_tui.fleet.redis_link import RedisLink, lease_lifetime_ms
from omniroute_tui.router import Route, Router, Target

from .gateway_helpers import TOKEN, free_port, running_gateway
from .helpers import ADMIT, fail
from .redis_helpers import REDIS_URL
from .waiting import eventually


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
        peers = [link.peer for link in links]
        assert all(peer is not None and peer.engine is e for peer, e in zip(peers, engines,
                                                                            strict=True))
        gates = [partial(peer.may_probe, "p") for peer in peers if peer is not None]
        now = SystemClock().now_ms()
        assert gates[0](now) is False  # asks Redis, does not wait
        await eventually(lambda: gates[0](SystemClock().now_ms()), timeout_s=5,
                         what="the lease for the first replica")
        for _ in range(20):  # the other one never gets it while the first holds it
            assert gates[1](SystemClock().now_ms()) is False
            await eventually(lambda: not peers[1]._asking, timeout_s=5)  # type: ignore[union-attr]


def test_a_lease_lives_the_probe_timeout_at_most_the_reset_window_and_lease_max() -> None:
    assert lease_lifetime_ms(30_000, 2_000, 10_000) == 2_000
    assert lease_lifetime_ms(30_000, 60_000, 10_000) == 10_000
    assert lease_lifetime_ms(500, 60_000, 10_000) == 500
    assert lease_lifetime_ms(0, 60_000, 10_000) == 1


async def test_the_lease_the_peer_asks_for_lives_its_lifetime_and_an_unused_one_lapses(
        prefix: str) -> None:
    """The peer asks for its probe's timeout (30 s); the link asks Redis for the lease's
    lifetime (`lease_max` here), renews it only while a probe is in flight, and hands
    it over for no longer than it lives."""
    engine = replica()
    link = RedisLink(REDIS_URL, prefix=prefix, replica="r0", lease_max_ms=400)
    await link.attach(engine)
    client = redis.from_url(REDIS_URL)
    key = f"{prefix}:lease:p"
    try:
        peer = link.peer
        assert peer is not None and engine.layers("p").timeout_ms > 400
        assert peer.may_probe("p", SystemClock().now_ms()) is False
        await eventually(lambda: peer.may_probe("p", SystemClock().now_ms()), timeout_s=5,
                         what="the lease")
        assert 0 < await client.pttl(key) <= 400
        async def gone() -> bool:
            return await client.exists(key) == 0

        await eventually(gone, timeout_s=5, what="the unused lease lapsed")
        assert not peer.may_probe("p", SystemClock().now_ms())
        await eventually(lambda: peer.may_probe("p", SystemClock().now_ms()), timeout_s=5,
                         what="the lease again")
        link.hand_over("p", 1_000, SystemClock().now_ms())
        await eventually(gone, timeout_s=5, what="the handed-over lease gone")
    finally:
        await client.aclose()
        await link.close()


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
        frames: list[dict[str, object]] = []

        async def follow() -> None:  # a console attached to the other replica
            async with http.stream("GET", f"{other.url}/api/resilience/events",
                                   headers=auth) as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        frames.append(json.loads(line[6:]))

        follower = asyncio.create_task(follow())
        await eventually(lambda: other.gateway.events.subscribers == 1, what="the stream")
        reply = await http.post(f"{one.url}/api/resilience/breakers/healthy/force-open",
                                json={"for": "5m"}, headers=auth)
        assert reply.status_code == 200
        assert one.gateway.fleet is not None and other.gateway.fleet is not None
        first_id, other_id = one.gateway.fleet.replica, other.gateway.fleet.replica

        def told() -> bool:  # the first replica's event, named by it
            return ("breaker", first_id) in {(f["type"], f.get("replica")) for f in frames}

        await eventually(told, timeout_s=5, what="the fleet's events on one stream")

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
        await eventually(lambda: ("breaker", "CLOSED") in {(f["type"], f.get("to"))
                                                          for f in frames},
                         timeout_s=5, what="the reset on the stream")
        follower.cancel()
        # each change once, from where it happened: the other's merge of the force-open
        # (it came before the reset, in order) was not streamed again
        assert [(f["to"], f.get("replica")) for f in frames if f["type"] == "breaker"] == [
            ("OPEN", first_id), ("CLOSED", other_id)]
        # one audit log for the fleet: each action once, on every replica
        for url in (one.url, other.url):
            audit = (await http.get(f"{url}/api/resilience/audit", headers=auth)).json()
            assert [e["action"] for e in audit["entries"]] == ["force_open", "reset_breaker"]


@contextmanager
def private_redis(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A Redis of this test's own (keeping nothing on disk), to stop and start at will."""
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--save", "",
                             "--appendonly", "no", "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


REDIS_SERVER = shutil.which("redis-server") or "redis-server"


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server binary")
async def test_a_redis_restart_loses_nothing_queued(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"

    async def answers() -> bool:
        client = redis.from_url(url, socket_connect_timeout=0.2)
        try:
            return bool(await client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            await client.aclose()

    engines = [replica(), replica()]
    links = [RedisLink(url, prefix="restart", replica=f"r{i}") for i in range(2)]
    with private_redis(port) as server:
        await eventually(answers, timeout_s=10, what="the private Redis")
        for engine, link in zip(engines, links, strict=True):
            await link.attach(engine)
        try:
            engines[0].record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
            await eventually(lambda: engines[1].connection_snapshot("p", "a").cooling_until
                             > 0, timeout_s=5, what="the first cooldown")
            server.kill()
            server.wait(timeout=10)
            engines[0].record("p", "b", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
            assert list(engines[0].candidates("p", "m")) == []  # routing did not wait
            await eventually(lambda: not links[0].health().ok, timeout_s=10,
                             what="the link saying Redis is gone")
            assert links[0].health().pending >= 1
            with private_redis(port):  # back, empty: what was queued goes out
                await eventually(answers, timeout_s=10, what="the restarted Redis")
                until = engines[0].connection_snapshot("p", "b").cooling_until
                await eventually(lambda: engines[1].connection_snapshot("p", "b")
                                 .cooling_until == until, timeout_s=10,
                                 what="the queued cooldown after the restart")
                await eventually(lambda: all(link.health().ok for link in links),
                                 timeout_s=10, what="both links healthy again")
        finally:
            for link in links:
                await link.close()


async def test_a_replica_that_joins_later_reads_the_whole_state(prefix: str) -> None:
    async with fleet(prefix, 1) as ((first,), _):
        first.force_open("p", 600_000, actor="test")
        first.record("p", "a", "m", ADMIT, fail(FailureKind.QUOTA_EXHAUSTED, 3_600_000))
        client = redis.from_url(REDIS_URL)
        try:
            async def kept() -> bool:
                return len(await client.hgetall(f"{prefix}:state")) >= 2
            await eventually(kept, timeout_s=5, what="the state hash")
            await client.delete(f"{prefix}:events")  # the stream forgot it all
        finally:
            await client.aclose()
        async with fleet(prefix, 1) as ((late,), _):
            await eventually(lambda: late.breaker_snapshot("p").state is BreakerState.OPEN,
                             timeout_s=5, what="the OPEN breaker on the late replica")
            assert late.connection_snapshot("p", "a").cooling_until == \
                first.connection_snapshot("p", "a").cooling_until



async def _following(first: ResilienceEngine, second: ResilienceEngine,
                     connection: str) -> None:
    """A cooldown on `first` reaches `second`: from then on its follower reads the stream."""
    first.record("p", connection, "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
    until = first.connection_snapshot("p", connection).cooling_until
    await eventually(
        lambda: second.connection_snapshot("p", connection).cooling_until == until,
        timeout_s=5, what=f"the cooldown of {connection} on the second replica")


async def _add_entries(prefix: str, *entries: dict[str, str | bytes]) -> None:
    client = redis.from_url(REDIS_URL)
    try:
        for entry in entries:
            await client.xadd(f"{prefix}:events", entry)  # type: ignore[arg-type]
    finally:
        await client.aclose()


async def test_entries_no_replica_wrote_are_skipped_and_the_follower_goes_on(
        prefix: str) -> None:
    """Another program's entries on the stream (a replica name that is not UTF-8, an event
    nested past the recursion limit): each is one log line, and what follows them still
    reaches the replica (its follower task used to end at the first, silently)."""
    async with fleet(prefix, 2) as (engines, _links):
        first, second = engines
        await _following(first, second, "a")
        await _add_entries(prefix, {"replica": b"\xff", "event": b"{}"}, {
            "replica": "x", "event": '{"type": "breaker", "x": ' + "[" * 100_000
            + "]" * 100_000 + "}"})
        await _following(first, second, "b")


async def test_an_entry_holding_a_lone_surrogate_is_skipped(prefix: str) -> None:
    """JSON can escape a lone surrogate, which no UTF-8 database or answer can hold: merged,
    a disable by such an operator would make every write of a replica's state database
    fail (its reason names the operator). Such an entry is skipped like any other that is
    not ours."""
    async with fleet(prefix, 2) as (engines, _links):
        first, second = engines
        await _following(first, second, "b")
        await _add_entries(prefix, {"replica": "x", "event": json.dumps(
            {"t": 1, "type": "operator", "action": "disable", "target": "p/a",
             "actor": "\ud800", "result": "ok"})})
        first.force_open("p", 60_000, actor="test")
        await eventually(lambda: second.breaker_snapshot("p").state is BreakerState.OPEN,
                         timeout_s=5, what="the force-open on the second replica")
        assert not second.connection_snapshot("p", "a").disabled


async def test_a_failing_redis_is_logged_without_its_password(
        caplog: pytest.LogCaptureFixture) -> None:
    engine = replica()
    link = RedisLink("redis://ops:s3cret-pass@127.0.0.1:1/0", prefix="omniroute-test-none",
                     replica="lonely")
    with caplog.at_level(logging.ERROR, logger="omniroute.fleet"):
        await link.attach(engine)
        try:
            engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
            await eventually(lambda: not link.health().ok, timeout_s=10, what="the failure")
        finally:
            await link.close()
    assert "the fleet's Redis at redis://ops:***@127.0.0.1:1/0 fails" in caplog.text
    assert "s3cret" not in caplog.text and "s3cret" not in str(link.health().to_dict())
