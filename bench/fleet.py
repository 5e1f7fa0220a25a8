"""A fleet on one Redis: how fast a state change on one replica reaches another, what the
link costs a routing decision, and how many Redis commands a routed request causes.

Needs a Redis (default redis://127.0.0.1:6379/0; it uses, then deletes, its own keys).
- propagation: a cooldown recorded on one replica, until the other replica's engine has
  applied it (its own event), p50 and p99 over the samples;
- the decision (start, attempt, record of its success, answer) with the link attached
  against the same engine without it, CPU time, in the same process (goal <= 1.1x: the
  decision never waits on Redis);
- Redis commands per routed request on the success path of a healthy provider (goal 0),
  from the server's own command count over many decisions, less the follower's reads.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

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
from omniroute_tui.router import Route, Router, Target

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
        linked, plain = Router(other, route), Router(engine(), route)
        pairs = []
        for _ in range(20):  # interleaved, so the machine's noise hits both alike
            pairs.append((decide(linked, decisions // 20), decide(plain, decisions // 20)))
            await asyncio.sleep(0)  # let the link's tasks run, as they would
        ratio = statistics.median(a / b for a, b in pairs)
        per = statistics.median(a for a, _ in pairs) / (decisions // 20) * 1e6
        print(f"decision with the Redis link: {per:.2f} µs CPU, {ratio:.2f}x the same engine "
              "without it")

        await asyncio.sleep(1.2)
        before, wall = await commands(client), time.perf_counter()
        decide(linked, decisions)
        await asyncio.sleep(0.5)
        after, wall = await commands(client), time.perf_counter() - wall
        background = 2 * wall + 2  # each follower's XREAD BLOCK of 1 s, and the two INFO
        print(f"Redis commands per routed request (success path): "
              f"{max(0.0, after - before - background) / decisions:.4f} "
              f"({after - before} in all over {decisions:,} requests and {wall:.1f} s)")
    finally:
        for link in links:
            await link.close()
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--decisions", type=int, default=20_000)
    args = parser.parse_args()
    asyncio.run(main(args.redis, args.samples, args.decisions))
