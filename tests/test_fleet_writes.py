"""What a fleet replica writes to Redis (a real one, as in tests/test_redis_link.py): a
batch is one atomic step, so a failed one leaves no duplicate on the stream; a fleet key
of the wrong type is reported and retried slowly; the state fields are versioned JSON; and
when the outgoing queue overflows, nothing an operator did is lost and what was dropped
is said."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis

from omniroute_tui.engine import BreakerState, FailureKind
from omniroute_tui.engine.events import CooldownEvent, ResultEvent

from .gateway_helpers import TOKEN, free_port, running_gateway
from .helpers import ADMIT, fail
from .redis_helpers import REDIS_URL
from .test_redis_link import REDIS_SERVER, fleet, private_redis
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}", "x-omniroute-reason": "ops"}


async def entries(client: Any, stream: str) -> list[dict[str, Any]]:
    return [json.loads(fields[b"event"]) for _, fields in await client.xrange(stream)]


async def test_a_state_hash_of_another_type_is_reported_retried_slowly_and_leaves_no_duplicate(
        prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    client = redis.from_url(REDIS_URL)
    state, stream = f"{prefix}:state", f"{prefix}:events"
    await client.set(state, "not a hash")
    try:
        async with fleet(prefix, 1) as ((engine,), (link,)):
            attempts: list[float] = []
            write = link._write_batch

            async def counted(**kwargs: Any) -> Any:
                attempts.append(time.monotonic())
                return await write(**kwargs)

            link._write_batch = counted  # type: ignore[assignment]
            engine.force_open("p", 600_000, actor="test")
            engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
            await eventually(lambda: len(attempts) >= 2, timeout_s=5, what="a second try")
            health = link.health()
            assert not health.ok and health.error == (
                f"the fleet's Redis key {state} holds a string, not a hash: nothing is "
                "shared until it is deleted or renamed (or the fleet given another "
                "store.prefix)")
            assert attempts[1] - attempts[0] >= 0.9  # backed off, not a tight loop
            assert await client.xlen(stream) == 0  # the failed batch wrote nothing
            await client.delete(state)
            await eventually(lambda: link.health().ok, timeout_s=10, what="the link ok")
            assert attempts[2] - attempts[1] >= 1.9
            sent = await entries(client, stream)
            # the force-open as its command, ahead of the changes it caused
            assert [e.get("command", e.get("type")) for e in sent] == [
                "force_open", "breaker", "operator", "cooldown"]
            field = json.loads(await client.hget(state, "breaker:p"))
            assert field == {"v": 1, "order": sent[1]["t"], "event": sent[1]}
            forced = json.loads(await client.hget(state, "forced:p"))
            assert forced == {"v": 1, "order": sent[0]["t"], "event": sent[0]}
    finally:
        await client.aclose()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([line for line in said if "holds a string" in line]) == 1  # once a minute


async def test_a_stream_of_another_type_is_reported_and_a_bad_field_rewritten(
        prefix: str) -> None:
    client = redis.from_url(REDIS_URL)
    state, stream = f"{prefix}:state", f"{prefix}:events"
    await client.hset(stream, "x", "y")
    await client.hset(state, mapping={"breaker:p": "{\"v\": 1, \"order\": 1e400}",
                                      "connection:p/a": "99999999999999999999|x"})
    try:
        async with fleet(prefix, 1) as ((engine,), (link,)):
            await eventually(lambda: "holds a hash, not a stream" in (link.health().error
                                                                      or ""),
                             timeout_s=5, what="the stream's wrong type said")
            assert link.health().ok is False and link.rejected == 0  # nothing read yet
            await client.delete(stream)
            engine.force_open("p", 600_000, actor="test")
            engine.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 60_000))
            await eventually(lambda: link.health().ok and not link.health().pending,
                             timeout_s=10, what="the link ok again")
            # the fields that did not parse (an order past 2^53) were rewritten
            kept = await client.hgetall(state)
            for name in (b"breaker:p", b"connection:p/a"):
                assert json.loads(kept[name])["v"] == 1
            assert engine.breaker_snapshot("p").state is BreakerState.OPEN
    finally:
        await client.aclose()


@pytest.mark.skipif(REDIS_SERVER == "redis-server" and not Path("/usr/bin/redis-server")
                    .exists(), reason="no redis-server binary")
async def test_a_full_queue_loses_no_operator_action_and_says_what_it_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    async with running_gateway(tmp_path, redis=(url, "full")) as one, \
            httpx.AsyncClient(timeout=10) as http:
        engine, link = one.gateway.engine, one.gateway.fleet
        assert link is not None
        now = engine.now()
        emitted = 0
        for i in range(7_000):  # cooldowns of four connections, deadlines growing
            provider, connection = (("broken", "x1"), ("broken", "x2"), ("healthy", "h1"),
                                    ("throttled", "t1"))[i % 4]
            engine.bus.emit(CooldownEvent(now, provider, connection,
                                          FailureKind.RATE_LIMITED, 1, now + 60_000 + i, None))
        for i in range(12_000):  # failures seen, and operator actions among them
            engine.bus.emit(ResultEvent(now, f"r{i}", 1, "broken", "x1", "m", 503,
                                        FailureKind.SERVER_ERROR, 5))
            if i % 24 == 0:
                engine.set_enabled("broken", "x2", i % 48 != 0, actor="ops")
        # each action: its command, the enabled state, the audit record
        emitted = 7_000 + 12_000 + 3 * 500
        assert emitted == 20_500
        health = link.health()
        assert health.pending == 10_000 and health.dropped == 3_005
        assert health.dropped_kinds == {"event": health.dropped, "state": 0, "operator": 0}
        assert health.dropped_since is not None and health.dropped_since >= now - 1_000
        reply = await http.post(f"{one.url}/api/resilience/connections/broken/x1/disable",
                                headers=AUTH)
        answer = reply.json()
        assert answer["shared"] is False and answer["dropped"] == link.health().dropped
        fleet_health = (await http.get(f"{one.url}/health")).json()["fleet"]
        assert fleet_health["dropped"] == answer["dropped"]
        assert fleet_health["dropped_since"] == health.dropped_since
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
                  and "outgoing queue is full" in r.getMessage()]
        assert len(errors) == 1 and " event(s), 0 state change(s), 0 operator action(s)" \
            in errors[0]
        dropped = link.health().dropped
        # 10,000 kept: 4 cooldowns, 2 enabled states, 501 actions (each its command and
        # its audit record), 8,992 failures
        assert (dropped, link.health().coalesced) == (3_008, 7_495)
        with private_redis(port):
            client = redis.from_url(url)
            try:
                await eventually(lambda: link.health().pending == 0, timeout_s=20,
                                 what="the queue drained")
                sent = await entries(client, "full:events")
                operators = [e for e in sent if e.get("type") == "operator"]
                assert len(operators) == 501  # every action, the one answered too
                commands = [e["command"] for e in sent if "command" in e]
                assert commands == ["enable" if i % 48 else "disable"
                                    for i in range(0, 12_000, 24)] + ["disable"]
                cooldowns = [e for e in sent if e.get("type") == "cooldown"]
                assert sorted(c["until"] for c in cooldowns) == [  # the latest of each
                    now + 60_000 + i for i in range(6_996, 7_000)]
                results = [e for e in sent if e.get("type") == "result"]
                assert len(results) == 12_000 - dropped
                assert [r["request"] for r in results] == [
                    f"r{i}" for i in range(dropped, 12_000)]  # the oldest were dropped
                state = await client.hgetall("full:state")
                assert json.loads(state[b"connection:throttled/t1"])["order"] == \
                    now + 60_000 + 6_999
            finally:
                await client.aclose()
        assert link.health().ok
