"""The management API: auth, every operator action, audit, validation, event stream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from omniroute_tui.config.operators import OperatorTokens
from omniroute_tui.engine import BreakerState

from .gateway_helpers import ALICE, read_events, running_gateway
from .waiting import eventually

AUTH = {"authorization": f"Bearer {ALICE}"}


async def test_every_call_needs_the_token(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        for method, path in [("GET", "/api/resilience/state"),
                             ("GET", "/api/resilience/audit"),
                             ("GET", "/api/resilience/events"),
                             ("POST", "/api/resilience/breakers/healthy/reset"),
                             ("DELETE", "/api/resilience/lockouts")]:
            for headers in ({}, {"authorization": "Bearer wrong-token-xxxxxxxxxxxx"}):
                reply = await http.request(method, path, headers=headers)
                assert reply.status_code == 401, (method, path)
                assert reply.json()["error"]["type"] == "authentication_error"


async def test_operator_actions_change_state_and_are_audited(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, db=True) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH) as http:
        engine = gw.gateway.engine
        reply = await http.post("/api/resilience/breakers/healthy/force-open",
                                json={"for": "5m"})
        assert reply.status_code == 200
        assert engine.breaker_snapshot("healthy").state is BreakerState.OPEN
        assert (await http.post("/api/resilience/breakers/healthy/reset")).status_code == 200
        assert engine.breaker_snapshot("healthy").state is BreakerState.CLOSED
        await http.post("/v1/chat/completions", json={"model": "busy", "messages": []})
        assert engine.connection_snapshot("throttled", "t1").cooling_until > engine.now()
        assert (await http.post("/api/resilience/connections/throttled/t1/clear")
                ).status_code == 200
        assert engine.connection_snapshot("throttled", "t1").cooling_until <= engine.now()
        await http.post("/api/resilience/connections/broken/x2/disable")
        assert engine.connection_snapshot("broken", "x2").disabled
        await http.post("/api/resilience/connections/broken/x2/enable")
        assert not engine.connection_snapshot("broken", "x2").disabled
        from omniroute_tui.engine import BreakerAdmission, Classification, FailureKind

        engine.record("healthy", "h1", "m", BreakerAdmission(True, 0),
                      Classification(FailureKind.FORBIDDEN))
        reply = await http.request("DELETE", "/api/resilience/lockouts",
                                   json={"provider": "healthy", "model": "m"})
        assert reply.status_code == 200 and reply.json()["cleared"] == 1
        state = (await http.get("/api/resilience/state")).json()
        assert state["lockouts"] == []
        assert {c["key"] for c in state["connections"] if c["provider"] == "healthy"} == {
            "…0001"}
        audit = (await http.get("/api/resilience/audit")).json()["entries"]
        assert [(e["action"], e["target"], e["actor"]) for e in audit] == [
            ("force_open", "healthy", "alice"), ("reset_breaker", "healthy", "alice"),
            ("clear_cooldown", "throttled/t1", "alice"), ("disable", "broken/x2", "alice"),
            ("enable", "broken/x2", "alice"), ("clear_lockouts", "healthy/*/m", "alice"),
        ]
        assert "sk-" not in json.dumps(state) and "sk-" not in json.dumps(audit)


async def test_bad_bodies_get_400_with_a_reason(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH) as http:
        cases = [
            ("POST", "/api/resilience/breakers/healthy/force-open", b'{"for": "soon"}',
             400, "is not a duration"),
            ("POST", "/api/resilience/breakers/healthy/force-open", b'{"for": "0s"}',
             400, "longer than 0"),
            ("POST", "/api/resilience/breakers/healthy/force-open", b'{"until": "5m"}',
             400, "unknown field"),
            ("POST", "/api/resilience/breakers/healthy/force-open", b"{oops", 400, "JSON"),
            ("DELETE", "/api/resilience/lockouts", b"{}", 400, "say what to clear"),
            ("DELETE", "/api/resilience/lockouts", b'{"all": "yes"}', 400, "`all` must be"),
            ("DELETE", "/api/resilience/lockouts", b'{"connection": "h1"}', 400,
             "give the provider too"),
            ("DELETE", "/api/resilience/lockouts", b'{"model": 3}', 400, "must be a string"),
            ("POST", "/api/resilience/breakers/nope/reset", b"", 404, "no provider"),
            ("POST", "/api/resilience/connections/healthy/zz/clear", b"", 404, "no connection"),
            ("POST", "/api/resilience/connections/healthy/h1/explode", b"", 404,
             "unknown action"),
        ]
        for method, path, body, status, reason in cases:
            reply = await http.request(method, path, content=body)
            assert reply.status_code == status, (path, body, reply.text)
            assert reason in reply.json()["error"]["message"], (path, body, reply.text)


async def test_event_stream_delivers_events_in_order(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers=AUTH, timeout=10) as http:
        seen: list[dict[str, object]] = []

        reader = asyncio.create_task(read_events(
            http, seen, lambda seen: sum(1 for e in seen if e["type"] == "operator") == 3))
        await eventually(lambda: gw.gateway.events.subscribers == 1, what="the subscription")
        for provider in ("healthy", "broken", "throttled"):
            await http.post(f"/api/resilience/breakers/{provider}/reset")
        await asyncio.wait_for(reader, timeout=10)
        operators = [e["target"] for e in seen if e["type"] == "operator"]
        assert operators == ["healthy", "broken", "throttled"]
        times = [e["t"] for e in seen]
        assert times == sorted(times)


async def test_no_token_no_management_api(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        gw.gateway.operators = OperatorTokens()
        from omniroute_tui.gateway import GatewayServer

        server = GatewayServer(gw.gateway, "127.0.0.1", 0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url) as http:
                assert (await http.get("/api/resilience/state")).status_code == 404
                assert (await http.get("/health")).status_code == 200
        finally:
            await server.listener.stop()  # the gateway itself is the fixture's to close
