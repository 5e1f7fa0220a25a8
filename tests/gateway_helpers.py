"""A gateway on 127.0.0.1 in front of scenario fakes, started and stopped by the tests."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import uvicorn
import yaml

from omniroute_tui.clock import Clock, SystemClock
from omniroute_tui.config import MetricsAccess, load_router_config
from omniroute_tui.config.limits import GatewayLimits, StoreRetention
from omniroute_tui.config.operators import Operator, OperatorTokens, Role, token_digest
from omniroute_tui.gateway import Gateway, GatewayServer
from omniroute_tui.store import SqliteStore
from omniroute_tui.tracing import tracing_from_env
from simulator.http_fakes import start_fakes, stop_fakes
from simulator.scenario import load_scenario
from simulator.serve import router_config_for

from .waiting import eventually

TOKEN = "test-token-0123456789abcdef"  # the single token: `operator`, role operate
#: named tokens (`gateway.operators`): alice operates, grafana reads
ALICE = "alice-token-0123456789abcdef"
GRAFANA = "grafana-token-0123456789abcd"
OPERATORS = OperatorTokens(MappingProxyType({
    token_digest(ALICE): Operator("alice", Role.OPERATE),
    token_digest(GRAFANA): Operator("grafana", Role.READ)}))

SCENARIO = """\
name: gateway
duration: 30m
resilience: {request: {timeout: 3s}}
providers:
  healthy: {models: [m], latency: 5ms, connections: [{id: h1, api_key: sk-healthy-key-0001}]}
  broken: {models: [m], latency: 5ms, connections: [x1, x2]}
  throttled: {models: [m], latency: 5ms, connections: [t1]}
routes:
  chat: {targets: [healthy/m]}
  fallback: {targets: [broken/m, healthy/m]}
  busy: {targets: [throttled/m]}
faults:
  - {name: broken, target: broken, error: 503, at: 0s, for: 30m}
  - {name: throttled, target: throttled, error: 429, retry_after: 30s, at: 0s, for: 30m}
"""


@dataclass
class Running:
    url: str
    gateway: Gateway
    config_text: str
    server: GatewayServer


@asynccontextmanager
async def running_gateway(tmp_path: Path, *, db: bool = False, scenario: str = SCENARIO,
                          limits: GatewayLimits | None = None, busy_timeout_ms: int = 2000,
                          redis: tuple[str, str] | None = None,
                          retention: StoreRetention | None = None,
                          metrics: MetricsAccess = MetricsAccess.TOKEN, port: int = 0,
                          fakes_clock: Clock | None = None,
                          gateway_section: str = "") -> AsyncIterator[Running]:
    """A gateway on its own fakes; `redis` (URL, key prefix) makes it a fleet replica;
    `port` is its port on 127.0.0.1 (0: any free one); `fakes_clock` is the scenario's
    time for the fakes' faults (by default, the time since they started);
    `gateway_section` is a `gateway:` line added to the router config."""
    loaded = load_scenario("gateway.yaml", text=scenario)
    fakes = await start_fakes(loaded, fakes_clock)
    store = link = None
    server = None
    try:
        text = yaml.safe_dump(router_config_for(loaded, fakes)) + gateway_section
        config = load_router_config("router.yaml", text=text)
        router = config.build(SystemClock())
        if db:
            store = await SqliteStore.open(tmp_path / "state.db",
                                           busy_timeout_ms=busy_timeout_ms,
                                           retention=retention)
            await store.attach(router.engine)
        if redis is not None:
            from omniroute_tui.fleet.redis_link import RedisLink

            link = RedisLink(redis[0], prefix=redis[1])
            await link.attach(router.engine, router.models)
        gateway = Gateway(router, config.providers, token=TOKEN, store=store, limits=limits,
                          fleet=link, metrics=metrics, operators=OPERATORS,
                          served_by_header=config.gateway_served_by_header,
                          clients=config.gateway_clients)
        server = GatewayServer(gateway, "127.0.0.1", port)
        await server.start()
        yield Running(server.url, gateway, text, server)
    finally:
        if server is not None:
            await server.stop()
        if store is not None:
            await store.close()
        if link is not None:
            await link.close()
        # the gateway is stopped: an answer a fake still owes it (a slow fault's, to an
        # attempt cancelled) is not waited for, up to 5 s
        for fake in fakes:
            fake.server.force_exit = True
        await stop_fakes(fakes)


@asynccontextmanager
async def gateway_for(config_text: str, *, traced: bool = False) -> AsyncIterator[Running]:
    """A gateway on 127.0.0.1 for a router config's text (its upstreams are the test's);
    `traced`: with tracing as the process's `OTEL_*` variables configure it."""
    config = load_router_config("router.yaml", text=config_text)
    router = config.build(SystemClock())
    tracing = None
    if traced:
        tracing = tracing_from_env(os.environ, router.engine, replica="test-replica")
        assert tracing is not None, "tracing asked for, and the variables do not turn it on"
    gateway = Gateway(router, config.providers, token=TOKEN, tracing=tracing)
    server = GatewayServer(gateway, "127.0.0.1", 0)
    await server.start()
    try:
        yield Running(server.url, gateway, config_text, server)
    finally:
        await server.stop()
        if tracing is not None:
            await tracing.aclose()


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """An ASGI app served on 127.0.0.1 for the test's length; yields its `/v1` base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                           log_level="critical", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started, what="the fake upstream")
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def read_events(http: httpx.AsyncClient, into: list[dict[str, object]],
                      until: Callable[[list[dict[str, object]]], bool]) -> None:
    """Read the gateway's event stream into `into`, an event at a time, until `until(into)`
    holds."""
    async with http.stream("GET", "/api/resilience/events") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                into.append(json.loads(line[6:]))
                if until(into):
                    return


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for servers started in a process)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
