"""A hostile writer on the fleet's Redis: gateways on one prefix (a real Redis, as in
tests/test_redis_link.py) go on following each other whatever else is in the stream and
the state hash, adopt no absurd deadline, count what they refused and log no traceback."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis

from omniroute_tui.clock import SystemClock
from omniroute_tui.engine import BreakerState
from omniroute_tui.engine.events import (
    BreakerEvent,
    CooldownEvent,
    LockoutEvent,
    OperatorEvent,
)
from omniroute_tui.engine.kinds import BreakerReason, FailureKind
from omniroute_tui.fleet.entries import SKEW_MS

from .gateway_helpers import TOKEN, running_gateway
from .redis_helpers import REDIS_URL
from .test_redis_link import fleet
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}"}
HORIZON = 30 * 86_400_000 + SKEW_MS  # the gateway scenario's settings: the 30-day cap
YEAR_9999 = 253_402_300_799_000

#: how long a replica may take to see what a test did: seconds when idle, more on a
#: machine that runs the suite on every core with other work besides (a wait ends as soon
#: as what it waits for holds)
WITHIN_S = 20


def hostile_events(now: int) -> list[bytes]:
    """The attacker review's payloads and more: each one an `event` field no replica
    may merge."""
    cooldown = CooldownEvent(now, "throttled", "t1", FailureKind.RATE_LIMITED, 1,
                             now + 60_000, None).to_dict()
    opened = BreakerEvent(now, "broken", BreakerState.CLOSED, BreakerState.OPEN,
                          BreakerReason.THRESHOLD, 5, 60_000).to_json()
    lockout = LockoutEvent(now, "throttled", "t1", "m", FailureKind.QUOTA_EXHAUSTED, 1,
                           now + 60_000).to_dict()
    operator = OperatorEvent(now, "reset_breaker", "broken", "evil", "ok").to_dict()
    dumped = [
        {**cooldown, "t": "abc"}, {**cooldown, "provider": ["alpha"]},
        {**cooldown, "level": "x"}, {**operator, "target": 5}, {**lockout, "model": {}},
        {**cooldown, "provider": "nobody"}, {**cooldown, "connection": "nobody"},
        {**lockout, "model": "nobody"}, {**operator, "target": "nobody"},
        {**operator, "action": "rm -rf"},
        {**cooldown, "extra": 1}, {"t": now, "type": "request", "id": "x", "route": "r"},
        {**cooldown, "until": 1.5}, {**cooldown, "level": True}, {**cooldown, "kind": "x"},
        [1, 2], "text", None,
    ]
    raw = [json.dumps(d).encode() for d in dumped]
    raw += [opened.replace('"retry_after_ms":60000', f'"retry_after_ms":{n}').encode()
            for n in ("NaN", "Infinity", "-Infinity", "1e400")]
    raw += [b"\xff\xfe\x00", b"{" * 10_000, b"[" * 10_000, b"x" * 1_000_000,
            random.Random(3).randbytes(300)]
    return raw


async def test_a_hostile_writer_changes_nothing_but_the_counts(
        prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    client = redis.from_url(REDIS_URL)
    stream, state = f"{prefix}:events", f"{prefix}:state"
    now = SystemClock().now_ms()
    bad_fields = {
        b"garbage-without-pipe": b"garbage-without-pipe",
        b"breaker:healthy": b"garbage-without-pipe",  # an entity the test then writes
        b"connection:healthy/h1": b"12|{not json",
        b"lockout:throttled/t1/m": b"abc|{}",
        b"connection:broken/x1": b"1|" + b"\xff" * 10,
        b"connection:broken/x2": b"5|" + json.dumps(
            {**CooldownEvent(now, "broken", "x2", FailureKind.RATE_LIMITED, 1, now,
                             None).to_dict(), "level": "x"}).encode(),
    }
    clamped_fields = {  # of the right form, with deadlines no settings here could set
        b"connection:throttled/t1": CooldownEvent(
            now, "throttled", "t1", FailureKind.RATE_LIMITED, 1, YEAR_9999, None).to_json(),
    }
    try:
        async with running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as one, \
                running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as two, \
                httpx.AsyncClient(timeout=10) as http:
            # both follow the stream before anything is written to it (a follower that
            # starts later reads from the newest entry on, and would count fewer)
            await eventually(lambda: all(r.gateway.fleet.read_up_to is not None  # type: ignore[union-attr]
                                         for r in (one, two)), timeout_s=WITHIN_S,
                             what="both replicas following")
            # the stream: every bad entry, and two deadlines to clamp, while they follow
            events = hostile_events(now)
            for raw in events:
                await client.xadd(stream, {"replica": "evil", "event": raw})
            await client.xadd(stream, {"replica": b"\xff\xfe", "event": b"{}"})
            await client.xadd(stream, {"event": b"{}"})
            await client.xadd(stream, {"replica": "evil"})
            await client.xadd(stream, {"replica": "evil", "event": BreakerEvent(
                now, "broken", BreakerState.CLOSED, BreakerState.OPEN,
                BreakerReason.THRESHOLD, 5, 250_000_000_000_000).to_json()})
            await client.xadd(stream, {"replica": "evil", "event": LockoutEvent(
                now, "throttled", "t1", "m", FailureKind.QUOTA_EXHAUSTED, 1,
                YEAR_9999).to_json()})
            bad_entries = len(events) + 3
            # the hash: what a replica that starts or reconnects reads first
            bad_fields |= {b"hostile:%d" % i: b"1|" + raw for i, raw in enumerate(events)}
            await client.hset(state, mapping={**bad_fields, **{
                name: b"%d|%s" % (YEAR_9999, value.encode())
                for name, value in clamped_fields.items()}})
            async with running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as three:
                replicas = (one, two, three)
                links = [r.gateway.fleet for r in replicas]
                assert all(link is not None for link in links)

                def counted() -> bool:
                    return [link.rejected for link in links] == [  # type: ignore[union-attr]
                        bad_entries, bad_entries, len(bad_fields)]

                await eventually(counted, timeout_s=WITHIN_S, what="the refusals counted")
                # a force-open on one still reaches the others, within a second
                started = time.monotonic()
                reply = await http.post(f"{one.url}/api/resilience/breakers/healthy/force-open",
                                        json={"for": "5m"}, headers=AUTH)
                assert reply.status_code == 200 and reply.json()["shared"] is True

                def everywhere() -> bool:
                    return all(r.gateway.engine.breaker_snapshot("healthy").state
                               is BreakerState.OPEN for r in (two, three))

                await eventually(everywhere, timeout_s=1, poll_s=0.002,
                                 what="the force-open on the others")
                assert time.monotonic() - started < 1
                for replica in replicas:
                    reply = await http.get(f"{replica.url}/api/resilience/state",
                                           headers=AUTH)
                    assert reply.status_code == 200
                    document = reply.json()
                    assert_bounded(document)
                    health = (await http.get(f"{replica.url}/health")).json()
                    assert health["status"] == "ok" and health["fleet"]["ok"] is True
                    fleet_health = health["fleet"]
                    assert fleet_health["rejected"] == (
                        len(bad_fields) if replica is three else bad_entries)
                    assert fleet_health["last_rejection"]["at"] >= now
                # the clamped deadlines were adopted at the horizon, not beyond
                broken = two.gateway.engine.breaker_snapshot("broken")
                assert broken.state is BreakerState.OPEN
                assert broken.retry_after_ms is not None and \
                    HORIZON - 60_000 < broken.retry_after_ms <= HORIZON
                cooling = three.gateway.engine.connection_snapshot("throttled", "t1")
                assert now + HORIZON - 60_000 < cooling.cooling_until <= \
                    SystemClock().now_ms() + HORIZON
    finally:
        await client.aclose()
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
           or "Traceback" in r.getMessage()]
    assert bad == []
    warned = [r.getMessage() for r in caplog.records if r.name == "omniroute.fleet"]
    assert any("the replica is not UTF-8" in line for line in warned)
    assert any("clamped a deadline" in line for line in warned)
    # one line per reason per minute on each replica, not one per entry: two entries name
    # an unknown provider, read by the first two from the stream, by the third from the hash
    assert len([w for w in warned if "unknown provider" in w]) == 3


def assert_bounded(document: dict[str, Any]) -> None:
    """No deadline in a state document beyond what this replica's settings could set."""
    now = document["now"]
    for b in document["breakers"]:
        assert b["retry_after_ms"] is None or b["retry_after_ms"] <= HORIZON
    for c in document["connections"]:
        assert c["cooling_until"] <= now + HORIZON
    for lockout in document["lockouts"]:
        assert lockout["until"] <= now + HORIZON


async def test_the_follow_loop_that_ends_is_said_and_started_again(
        prefix: str) -> None:
    async with fleet(prefix, 2) as (engines, links):
        real = links[1]._redis.xread
        calls = 0

        async def broken_once(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise RuntimeError("a bug in the loop")
            if calls == 3:  # the restart is under way: hold it, for /health to be read
                await asyncio.sleep(0.3)
            return await real(*args, **kwargs)

        links[1]._redis.xread = broken_once
        await eventually(lambda: not links[1].health().ok, timeout_s=WITHIN_S,
                         what="the ended loop on the health")
        health = links[1].health()
        assert health.error == "the fleet follow loop ended: RuntimeError: a bug in the loop"
        await eventually(lambda: links[1].health().ok, timeout_s=WITHIN_S, what="the restart")
        engines[0].force_open("p", 600_000, actor="test")
        await eventually(lambda: engines[1].breaker_snapshot("p").state is BreakerState.OPEN,
                         timeout_s=WITHIN_S, what="the force-open after the restart")


async def test_an_entry_a_consumer_fails_on_is_counted_and_still_merged(
        prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    async with fleet(prefix, 2) as (engines, links):
        def refuse(replica: str, data: dict[str, Any]) -> None:
            raise KeyError("a consumer's bug")

        engines[0].set_enabled("p", "a", False, actor="test")  # the second one follows
        await eventually(lambda: engines[1].connection_snapshot("p", "a").disabled,
                         timeout_s=WITHIN_S, what="the second replica following")
        links[1].on_remote = refuse
        engines[0].force_open("p", 600_000, actor="test")  # a breaker and an operator event
        await eventually(lambda: links[1].rejected == 2, timeout_s=WITHIN_S, what="the failures")
        assert engines[1].breaker_snapshot("p").state is BreakerState.OPEN
        health = links[1].health()
        assert health.ok and health.last_rejection is not None
        assert health.last_rejection["reason"] == "relaying it raised KeyError"
        assert health.last_rejection["where"].startswith("stream entry ")
        engines[0].reset_breaker("p", actor="test")  # the loop goes on
        await eventually(lambda: engines[1].breaker_snapshot("p").state
                         is BreakerState.CLOSED, timeout_s=WITHIN_S, what="the reset")
    lines = [r.getMessage() for r in caplog.records if "relaying it raised" in r.getMessage()]
    assert len(lines) == 1 and "stream entry " in lines[0]  # once a minute per reason


async def test_the_write_loop_that_ends_is_said_and_loses_nothing_queued(
        prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="omniroute.fleet")
    async with fleet(prefix, 2) as (engines, links):
        real = links[0]._write_batch
        calls = 0
        release = asyncio.Event()

        async def broken_once(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug in the write")
            await release.wait()  # the loop runs again: held, for /health to be read
            return await real(*args, **kwargs)

        links[0]._write_batch = broken_once
        engines[0].force_open("p", 600_000, actor="test")  # queued, then the loop ends
        await eventually(lambda: calls == 2, timeout_s=WITHIN_S, what="the write loop again")
        fault = "the fleet write loop ended: RuntimeError: a bug in the write"
        health = links[0].health()
        assert (health.ok, health.error, health.pending) == (False, fault, 3)
        release.set()
        # the force-open was kept: it reaches the other replica once the loop runs again
        await eventually(lambda: engines[1].breaker_snapshot("p").state is BreakerState.OPEN,
                         timeout_s=WITHIN_S, what="the force-open after the restart")
        await eventually(lambda: links[0].health().ok, timeout_s=WITHIN_S, what="ok again")
    [line] = [r for r in caplog.records if r.name == "omniroute.fleet"
              and r.levelno >= logging.ERROR]
    assert line.getMessage() == (f"{fault}; running it again in 0.05 s (0 more like it in "
                                 "the last minute)")
    assert line.exc_info is not None  # a bug: its traceback
