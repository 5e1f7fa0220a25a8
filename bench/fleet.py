"""A fleet on one Redis: how fast a state change on one replica reaches another, what the
link costs a routing decision, and how many Redis commands a routed request causes.

Needs a Redis (default redis://127.0.0.1:6379/0; it uses, then deletes, its own keys).
- propagation: a cooldown recorded on one replica, until the other replica's engine has
  applied it (its own event), p50 and p99 over the samples;
- the decision (start, attempt, record of its success, answer) with the link attached
  against the same engine without it, CPU time, in the same process (goal <= 1.1x: the
  decision never waits on Redis), twice: against an engine nobody listens to (the link is
  then the only reason its events are built at all), and against an engine wired as the
  gateway wires it (its event stream for attached consoles listens to every event), which
  is what a replica pays;
- Redis commands per routed request on the success path of a healthy provider (goal 0),
  from the server's own command count over many decisions, less the follower's reads.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis.asyncio as redis

from omniroute_tui.clock import SystemClock
from omniroute_tui.engine import (
    Classification,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.engine.events import CooldownEvent, Event
from omniroute_tui.fleet.redis_link import RedisLink
from omniroute_tui.gateway.events_stream import EventBroadcaster
from omniroute_tui.router import Route, Router, Target

sys.path.insert(0, str(Path(__file__).parent.parent))  # the checkout: tests/redis_helpers.py
from tests.redis_helpers import close_fleet

OK = Classification(None)
CONNECTIONS = tuple(f"k{i}" for i in range(200))


def engine() -> ResilienceEngine:
    """Provider `p` is routed to; `q` takes the cooldowns whose propagation is timed."""
    return ResilienceEngine([ProviderSpec(name, CONNECTIONS, default_settings())
                             for name in ("p", "q")], SystemClock())


def decide(router: Router, n: int) -> float:
    """CPU seconds for `n` whole decisions answered by their first attempt."""
    started = time.process_time()
    for i in range(n):
        routing = router.start(f"d{i}", "r")
        routing.next_step()
        routing.record(200, OK)
        routing.next_step()
    return time.process_time() - started


async def commands(client: redis.Redis) -> int:
    info = await client.info("stats")
    return int(info["total_commands_processed"])


async def main(url: str, samples: int, decisions: int) -> None:
    prefix = f"omniroute-bench-{uuid.uuid4().hex[:8]}"
    client = redis.from_url(url)
    one, other = engine(), engine()
    links = [RedisLink(url, prefix=prefix, replica="one"),
             RedisLink(url, prefix=prefix, replica="other")]
    await links[0].attach(one)
    await links[1].attach(other)
    arrived: dict[str, float] = {}

    def seen(event: Event) -> None:
        if isinstance(event, CooldownEvent) and event.kind is not None:
            arrived.setdefault(event.connection, time.perf_counter())

    other.bus.subscribe(seen, CooldownEvent)
    try:
        await asyncio.sleep(0.3)  # both followers are reading
        delays = []
        for i in range(samples):
            conn = CONNECTIONS[i % len(CONNECTIONS)]
            arrived.pop(conn, None)
            sent = time.perf_counter()
            one.record("q", conn, "m", one.admit("q"),
                       Classification(FailureKind.QUOTA_EXHAUSTED, 3_600_000 + i))
            while conn not in arrived and time.perf_counter() - sent < 5:
                await asyncio.sleep(0)
            delays.append((arrived.get(conn, float("inf")) - sent) * 1000)
        delays.sort()
        print(f"propagation, {samples} cooldowns from one replica to another: "
              f"p50 {statistics.median(delays):.2f} ms, "
              f"p99 {delays[min(len(delays) - 1, int(0.99 * len(delays)))]:.2f} ms")

        route = {"r": Route("r", (Target("p", "m"),))}
        bare = engine()
        wired, wired_linked = engine(), engine()
        for wired_engine in (wired, wired_linked):
            EventBroadcaster(wired_engine.bus)  # subscribes itself, as in the gateway
        links.append(RedisLink(url, prefix=prefix, replica="wired"))
        await links[-1].attach(wired_linked)
        routers = {name: Router(e, route) for name, e in (
            ("linked", other), ("bare", bare), ("wired", wired), ("wired+link", wired_linked))}
        pairs: dict[str, list[float]] = {name: [] for name in routers}
        for _ in range(20):  # interleaved, so the machine's noise hits all alike
            for name, router in routers.items():
                pairs[name].append(decide(router, decisions // 20))
            await asyncio.sleep(0)  # let the link's tasks run, as they would
        per = {name: statistics.median(cpu) / (decisions // 20) * 1e6
               for name, cpu in pairs.items()}
        for linked_name, plain_name, what in (
                ("linked", "bare", "an engine nobody listens to"),
                ("wired+link", "wired", "an engine wired as the gateway wires it")):
            ratio = statistics.median(
                a / b for a, b in zip(pairs[linked_name], pairs[plain_name], strict=True))
            print(f"decision with the Redis link: {per[linked_name]:.2f} µs CPU against "
                  f"{per[plain_name]:.2f} µs, {ratio:.2f}x {what}")
        linked = routers["linked"]

        await asyncio.sleep(1.2)
        before, wall = await commands(client), time.perf_counter()
        decide(linked, decisions)
        await asyncio.sleep(0.5)
        after, wall = await commands(client), time.perf_counter() - wall
        background = len(links) * wall + 2  # each follower's XREAD BLOCK of 1 s, two INFO
        print(f"Redis commands per routed request (success path): "
              f"{max(0.0, after - before - background) / decisions:.4f} "
              f"({after - before} in all over {decisions:,} requests and {wall:.1f} s)")
    finally:
        await close_fleet(links, client, prefix)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--decisions", type=int, default=20_000)
    args = parser.parse_args()
    asyncio.run(main(args.redis, args.samples, args.decisions))
