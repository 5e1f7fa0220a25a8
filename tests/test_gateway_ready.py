"""`GET /ready`: a gateway to send traffic to has its config loaded, its store open and,
in a fleet, its link to Redis up; `/health` stays 200 while routing works at all."""

from __future__ import annotations

from pathlib import Path

import httpx

from .gateway_helpers import running_gateway
from .redis_helpers import REDIS_URL
from .waiting import eventually


async def test_ready_with_its_config_and_store_and_not_once_the_store_is_closed(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True) as gw, httpx.AsyncClient(
            base_url=gw.url) as http:
        reply = await http.get("/ready")  # no token asked, as for /health
        assert reply.status_code == 200 and "retry-after" not in reply.headers
        assert reply.json() == {"ready": True, "checks": {
            "config": {"ok": True, "version": None}, "store": {"ok": True}}}
        assert gw.gateway.store is not None
        await gw.gateway.store.close()
        reply = await http.get("/ready")
        assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
        assert reply.json()["checks"]["store"] == {"ok": False}
        assert (await http.get("/health")).status_code == 200


async def test_a_replica_is_ready_while_its_fleet_link_is_up(tmp_path: Path,
                                                             prefix: str) -> None:
    async with running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as gw, httpx.AsyncClient(
            base_url=gw.url) as http:
        async def ready() -> bool:
            return (await http.get("/ready")).status_code == 200

        await eventually(ready, timeout_s=10, what="the link up")
        assert (await http.get("/ready")).json()["checks"]["fleet"] == {"ok": True,
                                                                        "error": None}


async def test_a_replica_without_its_redis_is_not_ready(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, redis=("redis://127.0.0.1:1/0", "nobody")) as gw, \
            httpx.AsyncClient(base_url=gw.url) as http:
        async def refused() -> bool:
            return (await http.get("/ready")).status_code == 503

        await eventually(refused, timeout_s=10, what="the link down on /ready")
        reply = await http.get("/ready")
        assert reply.headers["retry-after"] == "5"
        fleet = reply.json()["checks"]["fleet"]
        assert fleet["ok"] is False and fleet["error"]
        assert reply.json()["checks"]["config"]["ok"] is True
        # routing goes on from its own state: /health says degraded, still 200
        health = await http.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "degraded"


async def test_ready_names_the_config_in_force() -> None:
    from omniroute_tui.clock import SystemClock
    from omniroute_tui.config import load_router_config
    from omniroute_tui.gateway import Gateway

    config = load_router_config("router.yaml", text=(
        "providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
        "connections: [c]}\n"))
    gateway = Gateway(config.build(SystemClock()), config.providers, token=None,
                      config=config)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(gateway.asgi()),
                                 base_url="http://gw") as http:
        reply = await http.get("/ready")
    await gateway.aclose()
    assert reply.status_code == 200
    assert reply.json()["checks"] == {"config": {"ok": True, "version": config.version}}
    assert len(config.version) == 12
