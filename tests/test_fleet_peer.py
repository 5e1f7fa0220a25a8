"""The fleet peer (`omniroute_tui/fleet/`): an operator's action travels as its typed
command (a model name holding "/" survives; a force-open stays a force-open, with its
actor, on every replica), and the simulated fleet and the Redis link's encode, check and
apply path end in the same state for the same events and commands."""

from __future__ import annotations

import asyncio
import heapq
import json
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.clock import ManualClock, SystemClock
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.console.model.panes import Pane
from omniroute_tui.console.model.text import FORCED_OPEN
from omniroute_tui.engine import Classification, FailureKind
from omniroute_tui.engine.bus import EventBus
from omniroute_tui.engine.engine import ResilienceEngine
from omniroute_tui.engine.events import BreakerEvent, CooldownEvent, ResultEvent
from omniroute_tui.engine.kinds import BreakerReason, BreakerState
from omniroute_tui.fleet.commands import (
    ClearCooldown,
    ClearLockouts,
    Disable,
    Enable,
    ForceOpen,
    Reset,
    command_from_dict,
)
from omniroute_tui.fleet.entries import Known
from omniroute_tui.fleet.peer import FleetPeer, Shared
from omniroute_tui.fleet.redis_link import RedisLink
from simulator.fleet import Fleet, _ReplicaLease
from simulator.scenario import load_scenario

from .gateway_helpers import SCENARIO, TOKEN, running_gateway
from .helpers import fail
from .redis_helpers import REDIS_URL, close_fleet
from .waiting import eventually

LLAMA = "meta-llama/Llama-3.1-8B"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def test_a_command_is_json_with_its_own_fields() -> None:
    clear = ClearLockouts(7, "ops", "p", None, LLAMA)
    assert json.loads(clear.to_json()) == {"command": "clear_lockouts", "t": 7, "actor": "ops",
                                           "provider": "p", "connection": None, "model": LLAMA}
    for command in (clear, Reset(1, "o", "p"), ForceOpen(1, "o", "p", 9), Enable(1, "o", "p", "a"),
                    Disable(1, "o", "p", "a"), ClearCooldown(1, "o", "p", "a")):
        assert command_from_dict(json.loads(command.to_json())) == command


# -- two gateways on one Redis ----------------------------------------------------------------

SLASHED = SCENARIO.replace("healthy: {models: [m]", f'healthy: {{models: [m, "{LLAMA}"]')


async def test_clearing_a_model_whose_name_holds_a_slash_is_done_on_every_replica(
        prefix: str, tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SLASHED, redis=(REDIS_URL, prefix)) as one, \
            running_gateway(tmp_path, scenario=SLASHED, redis=(REDIS_URL, prefix)) as other, \
            httpx.AsyncClient(timeout=10) as http:
        engine = one.gateway.engine
        for model in ("m", LLAMA):
            engine.record("healthy", "h1", model, engine.admit("healthy"),
                          fail(FailureKind.FORBIDDEN))

        def locked(models: set[str]) -> Callable[[], bool]:
            return lambda: {lk.model for lk in other.gateway.engine.lockout_snapshots(
                "healthy")} == models

        await eventually(locked({"m", LLAMA}), timeout_s=5, what="both lockouts there")
        reply = await http.request("DELETE", f"{one.url}/api/resilience/lockouts",
                                   headers=AUTH, json={"provider": "healthy", "model": LLAMA})
        assert reply.status_code == 200 and reply.json()["cleared"] == 1
        await eventually(locked({"m"}), timeout_s=5, what="the clear on the other replica")
        assert other.gateway.fleet is not None and other.gateway.fleet.health().rejected == 0
        audit = (await http.get(f"{other.url}/api/resilience/audit", headers=AUTH)).json()
        assert [(e["action"], e["target"]) for e in audit["entries"]] == [
            ("clear_lockouts", f"healthy/*/{LLAMA}")]


async def test_a_force_open_is_forced_with_its_actor_everywhere_until_a_reset(
        prefix: str, tmp_path: Path) -> None:
    async with running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as one, \
            running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as other, \
            httpx.AsyncClient(timeout=10) as http:
        reply = await http.post(f"{one.url}/api/resilience/breakers/healthy/force-open",
                                json={"for": "5m"},
                                headers={**AUTH, "x-omniroute-reason": "alice"})
        assert reply.status_code == 200

        async def breaker(url: str) -> dict[str, Any]:
            state = (await http.get(f"{url}/api/resilience/state", headers=AUTH)).json()
            return next(b for b in state["breakers"] if b["provider"] == "healthy")

        here = await breaker(one.url)
        assert here["forced_by"] == "operator (alice)" and here["forced_until"] is not None

        async def forced_there() -> bool:
            there = await breaker(other.url)
            return bool(there["forced_until"] == here["forced_until"]
                        and there["forced_by"] == "operator (alice)" and there["state"] == "OPEN")

        await eventually(forced_there, timeout_s=5, what="the force-open on the other replica")
        console = ConsoleModel(other.gateway.providers, SystemClock().now_ms)
        console.load_state_document(
            (await http.get(f"{other.url}/api/resilience/state", headers=AUTH)).json())
        row = console.provider_rows(SystemClock().now_ms())["healthy"]
        _, pairs, _ = console.detail(Pane.PROVIDERS, "healthy", SystemClock().now_ms())
        assert row[1].endswith(FORCED_OPEN) and ("forced by", "operator (alice)") in pairs

        # a replica that did not hear it probes, and its probe closes its breaker: heard,
        # neither ends the force-open
        client = redis.from_url(REDIS_URL)
        now = SystemClock().now_ms()
        late: list[Any] = [
            BreakerEvent(now, "healthy", BreakerState.OPEN, BreakerState.HALF_OPEN,
                         BreakerReason.RESET_TIMEOUT, 3, None),
            ResultEvent(now, "x", 1, "healthy", "h1", "m", 200, None, 5),
            BreakerEvent(now, "healthy", BreakerState.HALF_OPEN, BreakerState.CLOSED,
                         BreakerReason.PROBE_SUCCEEDED, 0, None),
            CooldownEvent(now, "healthy", "h1", FailureKind.RATE_LIMITED, 1, now + 9_000, None)]
        try:
            for event in late:
                await client.xadd(f"{prefix}:events",
                                  {"replica": "late", "event": event.to_json()})
        finally:
            await client.aclose()
        for running in (one, other):
            await eventually(  # the last of them has been applied there
                lambda r=running: r.gateway.engine.connection_snapshot(  # type: ignore[misc]
                    "healthy", "h1").cooling_until == now + 9_000,
                timeout_s=5, what="the late replica's events")
            assert (await breaker(running.url))["forced_until"] == here["forced_until"]
        # a reset anywhere ends it everywhere
        reply = await http.post(f"{other.url}/api/resilience/breakers/healthy/reset",
                                headers=AUTH)
        assert reply.status_code == 200

        async def reset_here() -> bool:
            mine = await breaker(one.url)
            return bool(mine["state"] == "CLOSED" and mine["forced_until"] is None
                        and mine["forced_by"] is None)

        await eventually(reset_here, timeout_s=5, what="the reset on the first replica")


async def test_a_replica_that_starts_later_reads_the_force_open_and_its_actor(
        prefix: str) -> None:
    engines = [_replica(), _replica()]
    links = [RedisLink(REDIS_URL, prefix=prefix, replica=f"r{i}") for i in range(2)]
    await links[0].attach(engines[0])
    try:
        engines[0].force_open("p", 600_000, actor="bob")
        assert await links[0].sync(timeout_s=5)
        await links[1].attach(engines[1])  # reads the whole state first
        expected = engines[0].breaker_snapshot("p").forced_until
        await eventually(lambda: (engines[1].breaker_snapshot("p").forced_until,
                                  engines[1].breaker_snapshot("p").forced_by)
                         == (expected, "bob"), timeout_s=5, what="the force-open, read")
    finally:
        for link in links:
            await link.close()


def _replica() -> ResilienceEngine:
    from omniroute_tui.engine import ProviderSpec, default_settings

    return ResilienceEngine([ProviderSpec("p", ("a", "b"), default_settings())], SystemClock())


# -- the simulated fleet and the link's path: one protocol --------------------------------------

FLEET = load_scenario("fleet.yaml", text=f"""\
name: peers
duration: 1m
replicas: 3
shared_state: true
propagation: 50ms
providers:
  p: {{models: [m, "{LLAMA}"], connections: [a, b]}}
  q: {{models: [m], connections: [x]}}
routes:
  chat: {{targets: [p/m, q/m]}}
traffic: [{{route: chat, rate: 1/s}}]
""")
KINDS = (None, FailureKind.RATE_LIMITED, FailureKind.FORBIDDEN, FailureKind.SERVER_ERROR,
         FailureKind.QUOTA_EXHAUSTED, FailureKind.AUTH_FAILED)
MODELS = ("m", LLAMA)


class _Queue:
    """Virtual time: callbacks in (time, arrival) order, the clock set to each one's time."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.heap: list[tuple[int, int, Callable[[], None]]] = []
        self.seq = 0

    def schedule(self, at: int, job: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, job))

    def run(self) -> None:
        while self.heap:
            at, _, job = heapq.heappop(self.heap)
            self.clock.set(max(self.clock.now_ms(), at))
            job()


def _simulated(clock: ManualClock, queue: _Queue) -> list[ResilienceEngine]:
    fleet = Fleet(FLEET, clock, EventBus(), shared=True, schedule=queue.schedule)
    return [router.engine for router in fleet.replicas]


def _linked(clock: ManualClock, queue: _Queue) -> list[ResilienceEngine]:
    """The same replicas, each item encoded as the link writes it to the stream and read
    back by the link's own check and apply path (`RedisLink._apply`), without Redis."""
    engines = [FLEET.config.build(clock, bus=EventBus(), seed=FLEET.seed + i).engine
               for i in range(FLEET.replicas)]
    links = [RedisLink(REDIS_URL, prefix="unused", replica=f"r{i}") for i in range(len(engines))]
    leases: dict[str, tuple[int, int]] = {}

    def wire(source: int, item: Shared) -> None:
        fields = {b"replica": f"r{source}".encode(), b"event": item.to_json().encode()}
        for index, link in enumerate(links):
            if index != source:
                queue.schedule(item.t + FLEET.propagation_ms,
                               partial(link._apply, f"{item.t}-{source}", fields))

    for index, (engine, link) in enumerate(zip(engines, links, strict=True)):
        lease = _ReplicaLease(leases, index)
        link._known = Known.of(engine)
        link.peer = lease.peer = FleetPeer(engine, send=partial(wire, index), lease=lease,
                                           handover_ms=FLEET.propagation_ms)
    return engines


def _do(engine: ResilienceEngine, step: tuple[Any, ...]) -> None:
    what, *args = step
    if what == "attempt":
        provider, connection, model, kind = args
        admission = engine.admit(provider)
        if admission.allowed:
            engine.record(provider, connection, model, admission, Classification(kind, 20_000))
    elif what == "force_open":
        engine.force_open(args[0], args[1], actor="ops/1")
    elif what == "reset":
        engine.reset_breaker(args[0], actor="ops")
    elif what == "clear_cooldown":
        engine.clear_cooldown(args[0], args[1], actor="ops")
    elif what == "enable":
        engine.set_enabled(args[0], args[1], args[2], actor="ops")
    else:
        engine.clear_lockouts(*args, actor="ops")


_CONNECTION = st.sampled_from((("p", "a"), ("p", "b"), ("q", "x")))
_STEP = st.one_of(
    st.tuples(st.just("attempt"), _CONNECTION, st.sampled_from(MODELS),
              st.sampled_from(KINDS)).map(  # a model its provider serves, as the router asks
        lambda s: (s[0], *s[1], s[2] if s[1][0] == "p" else "m", s[3])),
    st.tuples(st.just("force_open"), st.sampled_from("pq"), st.integers(1, 90_000)),
    st.tuples(st.just("reset"), st.sampled_from("pq")),
    _CONNECTION.map(lambda c: ("clear_cooldown", *c)),
    st.tuples(_CONNECTION, st.booleans()).map(lambda s: ("enable", *s[0], s[1])),
    st.sampled_from(((None, None, None), ("p", None, None), ("p", "a", LLAMA),
                     (None, None, LLAMA), ("q", "x", "m"))).map(lambda s: ("clear", *s)),
)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 60_000), st.integers(0, 2), _STEP), max_size=30))
def test_the_simulated_fleet_and_the_link_path_end_in_the_same_states(
        steps: list[tuple[int, int, tuple[Any, ...]]]) -> None:
    """The same events and operator commands on the same replicas at the same times, told
    to the others 50 ms later: in process (the simulated fleet) or as the Redis link's
    stream entries, checked and applied by its reader: every replica ends in one state."""
    ends = []
    for build in (_simulated, _linked):
        clock = ManualClock()
        queue = _Queue(clock)
        engines = build(clock, queue)
        for t, where, step in sorted(steps, key=lambda s: s[0]):
            queue.schedule(t, partial(_do, engines[where], step))
        queue.run()
        clock.set(clock.now_ms() + 1)
        ends.append([e.snapshot() for e in engines])
    assert ends[0] == ends[1]


class _VirtualTimeLink(RedisLink):
    """The Redis link with the simulated fleet's probe lease: a lease in Redis lives in the
    server's time (`PX`), which a run in virtual time cannot move, so here the lease is the
    in-process one and everything else (the batch script, the stream, the reader's checks,
    the merges) is the link's own, on a real Redis. The lease in Redis has its own tests
    (tests/test_fleet_gateways.py kills its holder)."""

    lease: _ReplicaLease

    def ask(self, provider: str, lease_ms: int, now: int) -> None:
        self.lease.ask(provider, lease_ms, now)

    def hand_over(self, provider: str, keep_ms: int, now: int) -> None:
        self.lease.hand_over(provider, keep_ms, now)


async def _on_redis(steps: list[tuple[int, int, tuple[Any, ...]]]) -> list[Any]:
    """The steps on three engines linked through a real Redis: after each step the clock
    moves on by the propagation delay and the run waits until the others have read every
    entry on the stream, as the simulated fleet delivers each item before the next step."""
    prefix = f"omniroute-test-{uuid.uuid4().hex[:8]}"  # one per example
    clock = ManualClock()
    routers = [FLEET.config.build(clock, bus=EventBus(), seed=FLEET.seed + i)
               for i in range(FLEET.replicas)]
    links = [_VirtualTimeLink(REDIS_URL, prefix=prefix, replica=f"r{i}")
             for i in range(FLEET.replicas)]
    client = redis.from_url(REDIS_URL)
    leases: dict[str, tuple[int, int]] = {}
    try:
        for index, (router, link) in enumerate(zip(routers, links, strict=True)):
            await link.attach(router.engine, router.models)
            link.lease = _ReplicaLease(leases, index)
            link.lease.peer = link.peer
        await eventually(lambda: all(link.read_up_to is not None for link in links),
                         timeout_s=5, what="every replica following")
        for t, where, step in steps:
            clock.set(t)
            _do(routers[where].engine, step)
            clock.set(t + FLEET.propagation_ms)
            assert await links[where].sync(timeout_s=5), "the step's changes reached Redis"
            newest = await client.xrevrange(f"{prefix}:events", count=1)
            if newest:
                last = _entry_id(newest[0][0].decode())
                await eventually(lambda last=last: all(  # type: ignore[misc]
                    _entry_id(link.read_up_to or "0-0") >= last for link in links),
                    timeout_s=5, what="every replica read the stream")
        clock.set(clock.now_ms() + 1)
        assert all(link.health().rejected == 0 for link in links)
        return [router.engine.snapshot() for router in routers]
    finally:
        await close_fleet(links, client, prefix)


def _entry_id(text: str) -> tuple[int, int]:
    ms, seq = text.split("-")
    return int(ms), int(seq)


def _redis_answers() -> str | None:
    import redis as blocking

    try:
        blocking.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except blocking.RedisError as exc:
        return f"no Redis answers at {REDIS_URL}: {exc}"
    return None


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(100, 20_000), st.integers(0, 2), _STEP), max_size=25))
def test_the_simulated_fleet_and_a_fleet_on_a_real_redis_end_in_the_same_states(
        gaps: list[tuple[int, int, tuple[Any, ...]]]) -> None:
    """The same events and operator commands on the same replicas at the same times, each
    step after the last one's changes have reached every replica: in process, and through
    a real Redis with the link's writer and reader: every replica ends in one state."""
    if (skip := _redis_answers()) is not None:
        pytest.skip(skip)
    steps, t = [], 0
    for gap, where, step in gaps:  # a gap above the propagation delay: heard before the next
        t += gap
        steps.append((t, where, step))
    clock = ManualClock()
    queue = _Queue(clock)
    engines = _simulated(clock, queue)
    for t, where, step in steps:
        queue.schedule(t, partial(_do, engines[where], step))
    queue.run()
    clock.set(clock.now_ms() + 1)
    assert asyncio.run(_on_redis(steps)) == [e.snapshot() for e in engines]
