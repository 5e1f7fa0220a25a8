"""Replicas whose clocks disagree with each other by two minutes keep one fleet-wide set
of deadlines (docs/fleet.md, "Clocks"): every time goes to Redis in Redis' time (`TIME`)
and comes back in the reader's, so a force-open or a cooldown lasts what was asked on
every replica, within a second."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from omniroute_tui.clock import SystemClock
from omniroute_tui.engine import (
    BreakerState,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
    default_settings,
)
from omniroute_tui.fleet.redis_link import RedisLink

from .helpers import ADMIT, fail
from .redis_helpers import REDIS_URL
from .waiting import eventually


class Skewed:
    """The system clock, `skew_ms` off."""

    def __init__(self, skew_ms: int) -> None:
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return SystemClock().now_ms() + self.skew_ms


@asynccontextmanager
async def skewed_fleet(prefix: str, skews: tuple[int, ...]
                       ) -> AsyncIterator[list[tuple[ResilienceEngine, Skewed, RedisLink]]]:
    replicas = []
    for i, skew in enumerate(skews):
        clock = Skewed(skew)
        engine = ResilienceEngine([ProviderSpec("p", ("a", "b"), default_settings())], clock)
        link = RedisLink(REDIS_URL, prefix=prefix, replica=f"r{i}", clock=clock.now_ms)
        await link.attach(engine)
        replicas.append((engine, clock, link))
    try:
        await eventually(lambda: all(link.read_up_to is not None for *_, link in replicas),
                         timeout_s=5, what="every replica following")
        yield replicas
    finally:
        for *_, link in replicas:
            await link.close()


async def test_a_force_open_and_a_cooldown_last_what_was_asked_on_skewed_replicas(
        prefix: str) -> None:
    async with skewed_fleet(prefix, (60_000, -60_000, 0)) as replicas:
        (ahead, ahead_clock, ahead_link), (behind, behind_clock, behind_link), \
            (exact, _, _) = replicas
        assert abs(ahead_link.offset_ms + 60_000) < 1_000  # Redis is a minute behind it
        assert abs(behind_link.offset_ms - 60_000) < 1_000

        ahead.force_open("p", 120_000, actor="ops")  # two minutes, by a clock a minute ahead

        def forced_everywhere() -> bool:
            return all(engine.breaker_snapshot("p").state is BreakerState.OPEN
                       for engine, *_ in replicas)

        await eventually(forced_everywhere, timeout_s=5, what="the force-open on every replica")
        for engine, clock, _ in replicas:
            left = engine.breaker_snapshot("p").retry_after_ms
            assert left is not None and abs(left - 120_000) < 1_000, (clock.skew_ms, left)

        # a cooldown the replica a minute behind set, for a server's 30 s
        behind.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 30_000))

        def cooling_everywhere() -> bool:
            return all(engine.connection_snapshot("p", "a").cooling_until > clock.now_ms()
                       for engine, clock, _ in replicas)

        await eventually(cooling_everywhere, timeout_s=5, what="the cooldown everywhere")
        for engine, clock, _ in replicas:
            left = engine.connection_snapshot("p", "a").cooling_until - clock.now_ms()
            assert abs(left - 30_000) < 1_000, (clock.skew_ms, left)
        assert all(link.health().ok and link.rejected == 0 for *_, link in replicas)


async def test_clocks_within_the_dead_band_move_nothing(prefix: str) -> None:
    async with skewed_fleet(prefix, (200, 0)) as replicas:
        (first, _, first_link), (second, _, _) = replicas
        assert first_link.offset_ms == 0  # 200 ms: taken as Redis' own clock
        first.record("p", "a", "m", ADMIT, fail(FailureKind.RATE_LIMITED, 30_000))
        until = first.connection_snapshot("p", "a").cooling_until
        await eventually(lambda: second.connection_snapshot("p", "a").cooling_until == until,
                         timeout_s=5, what="the very same deadline on the other replica")
