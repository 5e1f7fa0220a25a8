"""A fleet behind Redis Sentinel: a master, a replica and three sentinels on 127.0.0.1, two
gateways on the `redis+sentinel://` URL, traffic through both while the master is killed
with SIGKILL: every request is answered, `/health` says `degraded` until the link follows
the new master, the fleet shares again within the failover time plus a few seconds, and
what was acknowledged `"shared": true` before the kill is on the new master."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aredis

from omniroute_tui.engine import BreakerState
from omniroute_tui.fleet.redis_link import RedisLink

from .gateway_helpers import TOKEN, free_port, running_gateway
from .waiting import eventually, eventually_sync

AUTH = {"authorization": f"Bearer {TOKEN}", "x-omniroute-reason": "sentinel-test"}
SERVICE = "fleetmaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
#: sentinel's failover (down-after, the vote, the promotion) plus the link's reconnect
SHARING_AGAIN_S = DOWN_AFTER_MS / 1000 + FAILOVER_TIMEOUT_MS / 1000 + 4
NO_PERSISTENCE = ["--save", "", "--appendonly", "no"]
#: a follower reads the new master within a second of the sentinels naming it (its follow
#: loop asks them each second); one second more for a loaded machine
FOLLOWS_S = 2.0


@dataclass
class Group:
    master: int
    replica: int
    sentinels: list[int]
    processes: dict[int, subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def master_now(self) -> int | None:
        """The master's port as a sentinel says it now (None: none answers)."""
        for port in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                with redis.Redis(port=port, socket_timeout=1) as client:
                    address = client.sentinel_get_master_addr_by_name(SERVICE)
                if address:
                    return int(address[1])
        return None


def _server(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(["redis-server", *args], stdout=out, stderr=subprocess.STDOUT)


def _ready(port: int) -> bool:
    with contextlib.suppress(redis.RedisError), \
            redis.Redis(port=port, socket_timeout=1) as client:
        return bool(client.ping())
    return False


def _replicating(port: int) -> bool:
    with contextlib.suppress(redis.RedisError), \
            redis.Redis(port=port, socket_timeout=1) as client:
        info = client.info("replication")
        return info["role"] == "slave" and info.get("master_link_status") == "up"
    return False


def _all_see_each_other(group: Group) -> bool:
    """Every sentinel knows the replica and reaches the two other sentinels: a failover
    can be voted (quorum 2 of 3) and has a replica to promote; and the master streams to
    the replica, so WAIT is answered (after a sync, once the replica's first ACK came)."""
    for port in group.sentinels:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                master = client.sentinel_master(SERVICE)
                others = client.sentinel_sentinels(SERVICE)
        except redis.RedisError:
            return False
        if int(master["num-other-sentinels"]) < 2 or int(master["num-slaves"]) < 1:
            return False
        if any(other["is_sdown"] or other["is_disconnected"] for other in others):
            return False
    with redis.Redis(port=group.replica, socket_timeout=1) as client:
        if client.info("replication").get("master_link_status") != "up":
            return False
    with redis.Redis(port=group.master, socket_timeout=1) as client:
        replica = client.info("replication").get("slave0")
        return isinstance(replica, dict) and replica.get("state") == "online"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on this machine: the Sentinel test needs one")
    master, replica = free_port(), free_port()
    sentinels = [free_port() for _ in range(3)]
    # a replica's first sync starts at once, not after the 5 s Redis waits for others
    common = ["--bind", "127.0.0.1", "--dir", str(tmp_path), *NO_PERSISTENCE,
              "--repl-diskless-sync-delay", "0"]
    processes: dict[int, subprocess.Popen[bytes]] = {}
    try:
        processes[master] = _server(["--port", str(master), *common],
                                    tmp_path / "master.log")
        processes[replica] = _server(["--port", str(replica), "--replicaof", "127.0.0.1",
                                      str(master), *common], tmp_path / "replica.log")
        # the sentinels' first look at the master lists its replica (else the next is 10 s on)
        eventually_sync(lambda: _replicating(replica) or processes[replica].poll() is not None,
                        timeout_s=10, what="the replica in sync")
        # each sentinel is told of the others and of the replica, as its own config file
        # keeps them once it has met them: they need not meet first (hellos every 2 s)
        ids = {port: uuid.uuid4().hex + uuid.uuid4().hex[:8] for port in sentinels}
        for port in sentinels:
            conf = tmp_path / f"sentinel-{port}.conf"  # sentinel rewrites it: its own file
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\nsentinel myid {ids[port]}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
                f"sentinel known-replica {SERVICE} 127.0.0.1 {replica}\n"
                + "".join(f"sentinel known-sentinel {SERVICE} 127.0.0.1 {other} {ids[other]}\n"
                          for other in sentinels if other != port))
            processes[port] = _server([str(conf), "--sentinel", *NO_PERSISTENCE],
                                      tmp_path / f"sentinel-{port}.log")
        for port, proc in processes.items():
            eventually_sync(lambda port=port, proc=proc: _ready(port) or proc.poll() is not None,
                            timeout_s=10, what=f"redis-server on {port}")
            if proc.poll() is not None:
                pytest.skip(f"redis-server on {port} did not start (sentinel mode needs "
                            f"Redis >= 2.8): {proc.args}")
        built = Group(master, replica, sentinels, processes)
        eventually_sync(lambda: _all_see_each_other(built), timeout_s=20, poll_s=0.1,
                        what="the sentinels discovering each other and the replica")
        yield built
    finally:
        for proc in processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in processes.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


async def test_the_fleet_follows_its_master_across_a_failover(
        group: Group, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    prefix = f"omniroute-test-{uuid.uuid4().hex[:12]}"
    async with running_gateway(tmp_path, redis=(group.url, prefix)) as one, \
            running_gateway(tmp_path, redis=(group.url, prefix)) as two, \
            httpx.AsyncClient(timeout=10) as http:
        await eventually(lambda: all(r.gateway.fleet.health().ok  # type: ignore[union-attr]
                                     for r in (one, two)), timeout_s=10, what="both linked")
        answered = 0
        failed: list[str] = []
        statuses: dict[str, set[str]] = {one.url: set(), two.url: set()}
        stop = asyncio.Event()

        async def traffic() -> None:
            nonlocal answered
            i = 0
            while not stop.is_set():
                target = (one, two)[i % 2].url
                i += 1
                try:
                    reply = await http.post(f"{target}/v1/chat/completions",
                                            json={"model": "chat", "messages": []})
                    if reply.status_code == 200:
                        answered += 1
                    else:
                        failed.append(f"{reply.status_code} {reply.text[:200]}")
                except httpx.HTTPError as exc:
                    failed.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.005)

        async def watch_health() -> None:
            while not stop.is_set():
                for url in statuses:
                    statuses[url].add((await http.get(f"{url}/health")).json()["status"])
                await asyncio.sleep(0.05)

        switched: list[float] = []  # when a sentinel announced the new master
        announcer = aredis.Redis(port=group.sentinels[0]).pubsub()
        await announcer.subscribe("+switch-master")

        async def hear_the_switch() -> None:
            while not switched:
                if await announcer.get_message(ignore_subscribe_messages=True, timeout=0.1):
                    switched.append(time.monotonic())

        workers = [asyncio.create_task(traffic()), asyncio.create_task(watch_health()),
                   asyncio.create_task(hear_the_switch())]
        try:
            # acknowledged before the kill: a replica had it (WAIT), so the failover keeps it
            reply = await http.post(f"{one.url}/api/resilience/breakers/broken/force-open",
                                    json={"for": "7m"}, headers=AUTH)
            assert reply.status_code == 200
            acknowledged = reply.json()["shared"]
            assert statuses[one.url] <= {"ok"} and statuses[two.url] <= {"ok"}
            killed_at = time.monotonic()
            os.kill(group.processes[group.master].pid, signal.SIGKILL)
            group.processes[group.master].wait(timeout=5)
            # an action while the master is away: queued, and in force on the other
            # replica once both follow the new master
            reply = await http.post(f"{one.url}/api/resilience/breakers/throttled/force-open",
                                    json={"for": "9m"}, headers=AUTH)
            assert reply.status_code == 200 and reply.json()["shared"] is False

            def shared_again() -> bool:
                return two.gateway.engine.breaker_snapshot(
                    "throttled").state is BreakerState.OPEN

            await eventually(shared_again, timeout_s=SHARING_AGAIN_S, poll_s=0.01,
                             what="the force-open on the other replica after the failover")
            without_sharing_s = time.monotonic() - killed_at
            await eventually(lambda: all(r.gateway.fleet.health().ok  # type: ignore[union-attr]
                                         for r in (one, two)), timeout_s=5,
                             what="both links ok again")
            await asyncio.sleep(0.2)  # a few more requests and health reads after the return
            # the new master has no replica yet: an action is in force on the other, but
            # is answered as at risk
            reply = await http.post(f"{one.url}/api/resilience/breakers/throttled/force-open",
                                    json={"for": "20m"}, headers=AUTH)
            assert reply.status_code == 200 and reply.json()["shared"] is False
            await eventually(lambda: (two.gateway.engine.breaker_snapshot(
                "throttled").retry_after_ms or 0) > 15 * 60_000, timeout_s=2,
                what="the action answered as at risk, on the other replica")
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), timeout=5)
            await announcer.aclose()
        new_master = group.master_now()
        assert new_master == group.replica
        print(f"acknowledged shared before the kill: {acknowledged}; without sharing for "
              f"{without_sharing_s:.2f} s; {answered} requests answered, {len(failed)} failed")
        assert failed == []
        assert switched, "no sentinel announced a new master"
        after_switch_s = killed_at + without_sharing_s - switched[0]
        print(f"sentinel switched {switched[0] - killed_at:.2f} s after the kill; sharing "
              f"again {after_switch_s:.2f} s after the switch")
        assert after_switch_s < 1.0  # a reconnect is retried at least every 0.5 s
        # traffic ran through the failover, and none of it failed (how many requests a
        # few seconds hold depends on what else the machine runs: 16 to 200 seen)
        assert answered > 0
        assert statuses[one.url] == {"ok", "degraded"}
        assert statuses[two.url] == {"ok", "degraded"}
        health = (await http.get(f"{two.url}/health")).json()
        assert health["status"] == "ok" and health["fleet"]["error"] is None
        # what was acknowledged shared before the kill is on the new master (else it said
        # it was at risk, `shared: false`)
        client = aredis.Redis(port=new_master)
        try:
            kept = await client.hget(f"{prefix}:state", "breaker:broken")
        finally:
            await client.aclose()
        if acknowledged:
            assert kept is not None and b'"to":"OPEN"' in kept.replace(b" ", b"")
        assert two.gateway.engine.breaker_snapshot("broken").state is BreakerState.OPEN
    for record in caplog.records:
        if record.name == "omniroute.fleet":
            print(f"{record.created:.3f} {record.levelname} {record.getMessage()}")
    assert [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()] == []


async def test_a_failover_with_the_old_master_alive_is_followed(
        group: Group, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`SENTINEL FAILOVER`: the old master lives on (a master still, until Sentinel demotes
    it 8 s or more later) and keeps its clients; the links ask the sentinels each second
    and follow the new master."""
    caplog.set_level(logging.INFO)
    prefix = f"omniroute-test-{uuid.uuid4().hex[:12]}"
    new_master = ("127.0.0.1", group.replica)
    async with running_gateway(tmp_path, redis=(group.url, prefix)) as one, \
            running_gateway(tmp_path, redis=(group.url, prefix)) as two, \
            httpx.AsyncClient(timeout=10) as http:
        await eventually(lambda: all(r.gateway.fleet.health().ok  # type: ignore[union-attr]
                                     for r in (one, two)), timeout_s=10, what="both linked")
        with redis.Redis(port=group.sentinels[0], socket_timeout=2) as sentinel:
            assert sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        await eventually(lambda: group.master_now() == group.replica, timeout_s=10,
                         poll_s=0.05, what="the promotion")
        # at once: the batch may go to the old master, whose WAIT no replica answers;
        # it is sent again to the new one
        reply = await http.post(f"{one.url}/api/resilience/breakers/broken/force-open",
                                json={"for": "7m"}, headers=AUTH)
        assert reply.status_code == 200
        await eventually(lambda: two.gateway.engine.breaker_snapshot(
            "broken").state is BreakerState.OPEN, timeout_s=FOLLOWS_S, what="the force-open")
        # once the writer follows the new master: the batch goes there alone, and the
        # other sees it only if its follow loop left the old master (it read the old one
        # until its demotion, 8-10 s on, whenever another of its tasks had connected to
        # the new master during the loop's blocking read: about 1 run in 3)
        await eventually(lambda: one.gateway.fleet._master_address() == new_master,
                         timeout_s=FOLLOWS_S, what="the writer on the new master")
        reply = await http.post(f"{one.url}/api/resilience/breakers/throttled/force-open",
                                json={"for": "9m"}, headers=AUTH)
        assert reply.status_code == 200
        await eventually(lambda: two.gateway.engine.breaker_snapshot(
            "throttled").state is BreakerState.OPEN, timeout_s=FOLLOWS_S,
            what="the second force-open")
        with redis.Redis(port=group.replica) as promoted:
            assert promoted.hget(f"{prefix}:state", "breaker:broken") is not None
            assert promoted.hget(f"{prefix}:state", "breaker:throttled") is not None
    assert [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()] == []


async def test_a_connection_in_use_during_a_failover_is_not_used_again(group: Group) -> None:
    """A connection in use (the follow loop's blocking read) when another connects and
    the pool learns of the new master goes back to the pool connected to the old one:
    the next command goes to the new master all the same."""
    link = RedisLink(group.url, prefix=f"omniroute-test-{uuid.uuid4().hex[:12]}")
    pool = link._redis.connection_pool
    held = await pool.get_connection()
    try:
        assert (held.host, held.port) == ("127.0.0.1", group.master)
        with redis.Redis(port=group.sentinels[0], socket_timeout=2) as sentinel:
            assert sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)

        async def named_new() -> bool:
            return tuple(await pool.get_master_address()) == ("127.0.0.1", group.replica)

        await eventually(named_new, timeout_s=10, poll_s=0.05, what="the pool naming the new")
        await pool.release(held)
        used = await pool.get_connection()
        try:
            assert (used.host, used.port) == ("127.0.0.1", group.replica)
            await used.send_command("ROLE")
            assert (await used.read_response())[0] == b"master"
        finally:
            await pool.release(used)
    finally:
        await link.close()


async def test_a_write_refused_as_readonly_goes_to_the_master_sentinel_names(
        group: Group, tmp_path: Path) -> None:
    """A connection to a demoted master (here: the replica, named once as the master)
    is refused with READONLY: dropped, the sentinels are asked again, the write lands."""
    prefix = f"omniroute-test-{uuid.uuid4().hex[:12]}"
    async with running_gateway(tmp_path, redis=(group.url, prefix)) as one, \
            running_gateway(tmp_path, redis=(group.url, prefix)) as two, \
            httpx.AsyncClient(timeout=10) as http:
        link = one.gateway.fleet
        assert link is not None and link._sentinel is not None
        await eventually(lambda: link.health().ok, timeout_s=10, what="linked")
        sentinel = link._sentinel
        real = sentinel.discover_master
        named: list[tuple[str, int]] = []

        async def stale_once(service: str) -> tuple[str, int]:
            if not named:
                named.append(("127.0.0.1", group.replica))
                return named[0]
            return await real(service)  # type: ignore[no-any-return]

        sentinel.discover_master = stale_once  # type: ignore[method-assign]
        await link._redis.connection_pool.disconnect(inuse_connections=False)
        reply = await http.post(f"{one.url}/api/resilience/breakers/broken/force-open",
                                json={"for": "7m"}, headers=AUTH)
        # `shared` says whether a replica had it within 100 ms (WAIT): on a loaded machine
        # it may not yet; that the write landed on the master is what is checked below
        assert reply.status_code == 200 and isinstance(reply.json()["shared"], bool)
        assert named == [("127.0.0.1", group.replica)]  # the refusal path ran
        # the master did not move: the other replica reads it on the master it follows
        await eventually(lambda: two.gateway.engine.breaker_snapshot(
            "broken").state is BreakerState.OPEN, timeout_s=FOLLOWS_S, what="the force-open")
        with redis.Redis(port=group.master) as master:
            assert master.hget(f"{prefix}:state", "breaker:broken") is not None
