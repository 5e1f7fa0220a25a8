"""`GET /metrics` off the request path (gateway/scrapes.py): scrapes that come together
share one rendering, a rendering is served again only within a second and while no state
has changed, and a rendering lets the event loop run between its steps."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import (
    BreakerAdmission,
    Classification,
    FailureKind,
    ProviderSpec,
    ResilienceEngine,
)
from omniroute_tui.engine.events import ResultEvent
from omniroute_tui.gateway.scrapes import REUSE_MS, Scrapes
from omniroute_tui.metrics import build_registry
from omniroute_tui.metrics.text_format import STEP_SAMPLES, render_steps
from omniroute_tui.router import Route, Router, Target

from .helpers import settings
from .metrics_helpers import parse, series, value

T0 = 1_000_000


def scraped(connections: int = 3
            ) -> tuple[Scrapes, CollectorRegistry, ResilienceEngine, WallClock]:
    clock = WallClock(T0)
    names = tuple(f"k{i}" for i in range(connections))
    engine = ResilienceEngine([ProviderSpec("p", names, settings())], clock)
    router = Router(engine, {"chat": Route("chat", (Target("p", "m"),))},
                    models={"p": frozenset({"m"})})
    registry = build_registry(router, clock=clock)
    return Scrapes(registry, clock, engine.bus), registry, engine, clock


def answered(engine: ResilienceEngine, clock: ManualClock) -> None:
    engine.bus.emit(ResultEvent(clock.now_ms(), "r", 1, "p", "k0", "m", 200, None, 5))


def requests(body: bytes) -> float:
    samples = parse(body)
    return sum(value(samples, "omniroute_upstream_attempts_total", **labels)
               for labels in series(samples, "omniroute_upstream_attempts_total"))


def cooling(body: bytes, connection: str | None = "k0") -> float:
    """Whether `connection` cools, whatever for (None: how many connections cool)."""
    samples = parse(body)
    return sum(value(samples, "omniroute_connection_cooling", **labels)
               for labels in series(samples, "omniroute_connection_cooling")
               if connection is None or labels["connection"] == connection)


class WallClock(ManualClock):
    """A system clock, which an operator or NTP can set back."""

    def set_back(self, ms: int) -> None:
        self._now -= ms


async def test_fifty_scrapes_that_come_together_share_one_rendering() -> None:
    scrapes, _registry, _engine, _clock = scraped()
    bodies = await asyncio.gather(*(scrapes.body() for _ in range(50)))
    assert scrapes.renderings == 1
    assert len(set(bodies)) == 1 and bodies[0].startswith(b"# HELP")


async def test_counters_are_at_most_a_second_behind_and_state_never() -> None:
    scrapes, _registry, engine, clock = scraped()
    assert requests(await scrapes.body()) == 0
    answered(engine, clock)
    clock.advance(REUSE_MS - 1)
    assert requests(await scrapes.body()) == 0  # the reading of 999 ms ago, served again
    assert scrapes.renderings == 1
    clock.advance(1)
    assert requests(await scrapes.body()) == 1
    assert scrapes.renderings == 2
    # a cooldown is a change of state: the next scrape shows it, however soon
    engine.record("p", "k0", "m", BreakerAdmission(True, 0),
                  Classification(FailureKind.RATE_LIMITED, 30_000))
    assert cooling(await scrapes.body()) == 1
    assert scrapes.renderings == 3


async def test_a_clock_that_goes_back_does_not_keep_a_reading() -> None:
    scrapes, _registry, engine, clock = scraped()
    await scrapes.body()
    answered(engine, clock)
    clock.set_back(60_000)
    assert requests(await scrapes.body()) == 1
    assert scrapes.renderings == 2


async def test_a_rendering_lets_the_loop_run_and_reads_one_moment() -> None:
    """3 x 1,000 connections: the rendering pauses many times; what runs in its pauses
    (here: requests answered) is not in it, and it is generate_latest's bytes of the
    moment it began."""
    scrapes, registry, engine, clock = scraped(connections=1_000)
    expected = generate_latest(registry)
    ran = 0

    async def traffic() -> None:
        nonlocal ran
        while True:
            answered(engine, clock)
            ran += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(traffic())
    try:
        body = await scrapes.body()
    finally:
        other.cancel()
    assert body == expected
    assert ran > 4_000 // STEP_SAMPLES  # at least one pause per step of the largest family


async def test_a_scrape_cut_off_mid_rendering_leaves_no_stale_reading() -> None:
    scrapes, _registry, engine, clock = scraped(connections=1_000)
    await scrapes.body()
    engine.record("p", "k0", "m", BreakerAdmission(True, 0),
                  Classification(FailureKind.RATE_LIMITED, 30_000))
    cut = asyncio.create_task(scrapes.body())
    for _ in range(3):
        await asyncio.sleep(0)  # into the rendering
    cut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cut
    assert cooling(await scrapes.body()) == 1


async def test_in_a_storm_the_scrapes_waiting_share_one_new_rendering() -> None:
    """Keys go cooling all the time (a 429 storm): no reading stays fresh, yet the scrapes
    that arrive during a rendering share the next one, each served a reading begun after
    it arrived, instead of one rendering each."""
    scrapes, _registry, engine, clock = scraped(connections=1_000)
    storm = iter(range(1_000))

    async def keys_cooling() -> None:
        for i in storm:
            engine.record("p", f"k{i}", "m", BreakerAdmission(True, 0),
                          Classification(FailureKind.RATE_LIMITED, 30_000))
            await asyncio.sleep(0)

    cooler = asyncio.create_task(keys_cooling())
    try:
        first = asyncio.create_task(scrapes.body())
        await asyncio.sleep(0)  # the first rendering has begun
        later = [asyncio.create_task(scrapes.body()) for _ in range(10)]
        before = cooling(await first, None)
        bodies = await asyncio.gather(*later)
    finally:
        cooler.cancel()
    assert len(set(bodies)) == 1
    assert cooling(bodies[0], None) > before
    assert scrapes.renderings == 2


def test_render_steps_pause_within_a_large_family() -> None:
    scrapes, registry, _engine, _clock = scraped(connections=1_000)
    out: list[str] = []
    steps = sum(1 for _ in render_steps(registry, out))
    families = len(list(registry.collect()))
    assert steps >= families + 4_000 // STEP_SAMPLES  # 4,000 cooling samples alone
    assert "".join(out).encode() == generate_latest(registry)
