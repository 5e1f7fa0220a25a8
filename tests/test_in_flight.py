"""Attempts in flight (docs/design.md §7): least_busy's count ends with every attempt,
however its request ends (answered, its task cancelled, an exception in the driver, its
client gone, a prepared attempt never taken), and the metrics show it per provider."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from omniroute_tui.drivers import AsyncDriver, Completion
from omniroute_tui.drivers.upstream import UpstreamReply
from omniroute_tui.engine import Event, FailureKind, ResponseEvent
from omniroute_tui.router import Attempt, Response, Router

from .gateway_helpers import TOKEN, running_gateway
from .helpers import OK, Recorder, alpha_beta_driver, fail
from .waiting import eventually


def in_flight(router: Router) -> dict[str, int]:
    """least_busy's count of attempts in flight, per provider that has any."""
    return {name: busy.total for name, busy in router.load.providers.items() if busy.total}


class Upstream:
    """A client for the driver whose answers the test controls: it holds each attempt
    until `release` is set, then answers 200 or raises `error`."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.release = asyncio.Event()
        self.sent = 0

    async def post(self, url: str, headers: Any, payload: bytes, *, timeout_ms: int,
                   stream: bool, now_epoch_ms: int, **stream_options: Any) -> UpstreamReply:
        self.sent += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return UpstreamReply(200, OK, {}, b"{}")


def driven(upstream: Upstream) -> tuple[Router, AsyncDriver, Recorder]:
    """The least_busy router over alpha and beta, driven through `upstream`."""
    return alpha_beta_driver(upstream, "least_busy")  # type: ignore[arg-type]


async def one_attempt_held() -> tuple[Upstream, Router, Recorder, asyncio.Task[Completion]]:
    """A request whose attempt the upstream holds, counted in flight: the upstream, the
    router, its events and the request's task."""
    upstream = Upstream()
    router, driver, rec = driven(upstream)
    task = asyncio.create_task(driver.complete({"model": "r", "messages": []}))
    await eventually(lambda: upstream.sent, what="the attempt")
    assert sum(in_flight(router).values()) == 1
    return upstream, router, rec, task


async def test_an_answered_request_gives_its_attempt_back() -> None:
    upstream, router, _, task = await one_attempt_held()
    upstream.release.set()
    assert (await task).response.status == 200
    assert in_flight(router) == {}


async def test_a_cancelled_task_gives_its_attempt_back() -> None:
    _, router, rec, task = await one_attempt_held()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert in_flight(router) == {}
    assert [r["kind"] for r in rec.of("result")] == ["cancelled"]
    assert [r["status"] for r in rec.of("response")] == [499]


async def test_an_exception_between_attempt_and_record_gives_it_back() -> None:
    # a connection that breaks while the client closes the answer: it raises out of post
    upstream = Upstream(error=ConnectionResetError("reset while closing the answer"))
    upstream.release.set()
    router, driver, rec = driven(upstream)
    for name in ("alpha", "beta"):  # both breakers HALF_OPEN: the attempt is a probe
        router.engine.force_open(name, 1000, actor="test")
    router.engine.clock.advance(1000)  # type: ignore[attr-defined]
    with pytest.raises(ConnectionResetError):
        await driver.complete({"model": "r", "messages": []})
    assert in_flight(router) == {}
    assert [r["kind"] for r in rec.of("result")] == ["cancelled"]
    attempt = rec.of("attempt")[0]
    assert attempt["probe"] is True
    assert router.engine.breaker_snapshot(attempt["provider"]).probes_in_flight == 0
    # and the next request may probe at once, instead of waiting for the lease to run out
    upstream.error = None
    assert (await driver.complete({"model": "r", "messages": []})).response.status == 200


def test_leaving_the_block_unanswered_cancels_the_routing() -> None:
    router, _, rec = driven(Upstream())
    with pytest.raises(ValueError), router.start("1", "r") as routing:
        assert isinstance(routing.next_step(), Attempt)
        raise ValueError("the driver failed")
    assert in_flight(router) == {}
    assert isinstance(routing.next_step(), Response) and routing.next_step().status == 499
    assert [r["kind"] for r in rec.of("result")] == ["cancelled"]
    with router.start("2", "r") as answered:  # an answered request is left as it is
        assert isinstance(answered.next_step(), Attempt)
        answered.record(200, OK)
    assert answered.response is not None and answered.response.status == 200


def test_cancel_ends_an_attempt_record_prepared_but_the_driver_never_took() -> None:
    router, _, rec = driven(Upstream())
    routing = router.start("1", "r")
    first = routing.next_step()
    assert isinstance(first, Attempt)
    routing.record(500, fail(FailureKind.SERVER_ERROR))  # the fallback is prepared, counted
    assert sum(in_flight(router).values()) == 1
    routing.cancel()  # before the driver asked for it
    assert in_flight(router) == {}
    attempts, results = rec.of("attempt"), rec.of("result")
    assert [a["n"] for a in attempts] == [1, 2]
    assert [(r["n"], r["kind"]) for r in results] == [(1, "server_error"), (2, "cancelled")]


SLOW = """\
name: slow
duration: 30m
resilience: {request: {timeout: 20s}}
providers:
  slowpoke: {models: [m], latency: 5ms, connections: [s1, s2]}
  sluggish: {models: [m], latency: 5ms, connections: [g1]}
routes:
  chat: {strategy: least_busy, targets: [slowpoke/m, sluggish/m]}
faults:
  - {name: slow, target: slowpoke, error: slow, latency: 10s, at: 0s, for: 30m}
  - {name: slower, target: sluggish, error: slow, latency: 10s, at: 0s, for: 30m}
"""


def gauge(text: str, provider: str) -> float:
    prefix = f'omniroute_attempts_in_flight{{provider="{provider}"}} '
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    return float(line[len(prefix):])


async def test_a_client_gone_gives_its_attempt_back_and_the_gauge_shows_it(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, scenario=SLOW) as gw:
        seen: list[Event] = []
        gw.gateway.engine.bus.subscribe(seen.append, ResponseEvent)
        router = gw.gateway.router
        auth = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            hung = asyncio.create_task(http.post(
                "/v1/chat/completions", json={"model": "chat", "messages": []}, timeout=10))
            await eventually(lambda: in_flight(router), what="the attempt")
            scraped = (await http.get("/metrics", headers=auth)).text
            assert gauge(scraped, "slowpoke") + gauge(scraped, "sluggish") == 1
            hung.cancel()  # the client hangs up
            with contextlib.suppress(asyncio.CancelledError):
                await hung
            await eventually(lambda: seen, what="the answer to a client gone")
            assert [e.status for e in seen] == [499]  # type: ignore[attr-defined]
            assert in_flight(router) == {}

            async def none_shown() -> bool:  # a scrape may be served a reading 1 s old
                scraped = (await http.get("/metrics", headers=auth)).text
                return gauge(scraped, "slowpoke") == gauge(scraped, "sluggish") == 0

            await eventually(none_shown, poll_s=0.1, what="the gauge back at 0")
