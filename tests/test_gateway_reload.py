"""Reloading a running gateway's config: the endpoint, SIGHUP on the real process, the
store, limits and hostile input."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import load_router_config
from omniroute_tui.engine.classify import Classification
from omniroute_tui.engine.kinds import FailureKind
from omniroute_tui.gateway import Gateway, GatewayServer
from omniroute_tui.store import SqliteStore

from .gateway_helpers import TOKEN, free_port
from .waiting import eventually

AUTH = {"authorization": f"Bearer {TOKEN}", "x-omniroute-reason": "ops-ana"}


@dataclass
class Upstream:
    """An OpenAI-compatible upstream that counts what reaches it and can hold answers."""

    url: str = ""
    count: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def completions(request: Request) -> Response:
            self.count += 1
            body = await request.json()
            await self.release.wait()
            return JSONResponse({"id": "c", "object": "chat.completion", "created": 0,
                                 "model": body["model"], "choices": [{
                                     "index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "ok"}}]})

        return Starlette(routes=[Route("/v1/chat/completions", completions,
                                       methods=["POST"])])


@contextlib.asynccontextmanager
async def upstream() -> AsyncIterator[Upstream]:
    fake = Upstream()
    fake.release.set()
    server = uvicorn.Server(uvicorn.Config(fake.app(), host="127.0.0.1", port=0,
                                           log_level="critical", lifespan="off"))
    task = asyncio.create_task(server.serve())
    await eventually(lambda: server.started, what="the fake upstream")
    fake.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1"
    try:
        yield fake
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def config_text(url: str, *, providers: int = 1, connections: int = 2,
                extra: dict[str, Any] | None = None) -> str:
    data: dict[str, Any] = {"providers": {
        f"p{n}": {"base_url": url, "models": ["m"], "connections": [
            {"id": f"c{i}", "api_key": f"sk-test-key-{n}-{i:05d}"} for i in range(connections)]}
        for n in range(providers)}}
    data["routes"] = {"chat": {"targets": [f"p{n}/m" for n in range(providers)]}}
    data.update(extra or {})
    return yaml.safe_dump(data)


@dataclass
class Served:
    url: str
    gateway: Gateway
    path: Path


@contextlib.asynccontextmanager
async def served(tmp_path: Path, text: str, *, db: bool = False) -> AsyncIterator[Served]:
    path = tmp_path / "router.yaml"
    path.write_text(text)
    config = load_router_config(path)
    router = config.build(SystemClock())
    store = None
    if db:
        store = await SqliteStore.open(tmp_path / "state.db")
        await store.attach(router.engine)
    gateway = Gateway(router, config.providers, token=TOKEN, store=store, config=config)
    server = GatewayServer(gateway, "127.0.0.1", 0)
    await server.start()
    try:
        yield Served(server.url, gateway, path)
    finally:
        await server.stop()
        if store is not None:
            await store.close()


def version_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


async def test_a_reload_swaps_the_config_and_says_its_version(tmp_path: Path) -> None:
    async with upstream() as fake, served(tmp_path, config_text("http://x/v1")) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        health = (await client.get("/health")).json()
        assert health["config"]["version"] == version_of(gw.path.read_text())
        loaded = health["config"]["loaded_at_ms"]
        new_text = config_text(fake.url, providers=2)
        gw.path.write_text(new_text)
        answer = await client.post("/api/resilience/reload", headers=AUTH)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["ok"] and body["version"] == version_of(new_text)
        assert body["summary"] == {
            "providers_added": ["p1"], "providers_removed": [],
            "providers_changed": ["p0"], "connections_added": [],
            "connections_removed": [], "routes_added": [], "routes_removed": [],
            "routes_changed": ["chat"]}
        assert body["restart_needed"] == []
        health = (await client.get("/health")).json()
        assert health["config"]["version"] == version_of(new_text)
        assert health["config"]["loaded_at_ms"] >= loaded
        assert health["config"]["reloads"] == 1
        state = (await client.get("/api/resilience/state", headers=AUTH)).json()
        assert state["config"]["version"] == version_of(new_text)
        assert state["config"]["path"] == str(gw.path)
        assert [b["provider"] for b in state["breakers"]] == ["p0", "p1"]
        # the new base_url is the one requests go to now
        chat = await client.post("/v1/chat/completions", json={
            "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
        assert chat.status_code == 200 and fake.count == 1
        audit = (await client.get("/api/resilience/audit", headers=AUTH)).json()
        entry = audit["entries"][-1]
        assert (entry["actor"], entry["action"], entry["target"]) == (
            "operator (ops-ana)", "reload", str(gw.path))
        assert entry["result"].startswith(f"ok {version_of(new_text)}: +p1 ~p0")
        # what only a restart can take is named; the rest is in force
        limits = yaml.safe_load(new_text) | {
            "gateway": {"limits": {"max_body_bytes": 1024}, "listen": "127.0.0.1:9"}}
        gw.path.write_text(yaml.safe_dump(limits))
        answer = await client.post("/api/resilience/reload", headers=AUTH)
        assert answer.json()["restart_needed"] == ["gateway.listen", "gateway.limits"]
        assert answer.json()["summary"]["providers_changed"] == []


async def test_a_bad_file_is_refused_whole_with_every_problem(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with upstream() as fake, served(tmp_path, config_text(fake.url)) as gw:
        good = gw.path.read_text()
        gw.gateway.engine.record("p0", "c0", "m", gw.gateway.engine.admit("p0"),
                                 Classification(FailureKind.RATE_LIMITED))
        before = gw.gateway.engine.snapshot()
        gw.path.write_text(good.replace("- p0/m", "- nowhere/m").replace("id: c1", "id: c 1"))
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
            answer = await client.post("/api/resilience/reload", headers=AUTH)
            assert answer.status_code == 422
            body = answer.json()
            assert body["ok"] is False and body["version"] == version_of(good)
            assert body["error"]["code"] == "config_refused"
            problems = {(p["field"], p["line"]) for p in body["problems"]}
            text = gw.path.read_text().splitlines()
            line_of = {key: 1 + next(i for i, line in enumerate(text) if key in line)
                       for key in ("c 1", "nowhere/m")}
            assert problems == {("providers.p0.connections[1].id", line_of["c 1"]),
                                ("routes.chat.targets[0]", line_of["nowhere/m"])}
            assert all(p["file"] == str(gw.path) for p in body["problems"])
            refused = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(refused) == 1
            assert "connections[1].id" in refused[0].getMessage()
            assert "routes.chat.targets[0]" in refused[0].getMessage()
            assert gw.gateway.engine.snapshot() == before
            health = (await client.get("/health")).json()
            assert health["config"]["version"] == version_of(good)
            assert health["config"]["failures"] == 1
            assert health["config"]["last_reload_ok"] is False
            chat = await client.post("/v1/chat/completions", json={
                "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
            assert chat.status_code == 200  # the old config keeps serving
            audit = (await client.get("/api/resilience/audit", headers=AUTH)).json()
            assert audit["entries"][-1]["result"] == (
                f"refused: 2 problems; {version_of(good)} stays")


@pytest.mark.parametrize(("body", "status"), [
    (b"", 200), (b"{}", 200), (b"  {}  ", 200),
    (b"[]", 400), (b'{"path": "/etc/passwd"}', 400), (b"null", 400), (b'"reload"', 400),
    (b"{", 400), (b"\xff\xfe", 400), (b'{"a":' * 50 + b"1" + b"}" * 50, 400),
    (b"{" + b'"k": 1,' * 4000 + b'"z": 0}', 413),
], ids=lambda value: f"{len(value):,} bytes" if isinstance(value, bytes) and len(value) > 40
   else None)  # not the 28,000 bytes themselves
async def test_reload_bodies_other_than_none_or_empty_are_refused(
        tmp_path: Path, body: bytes, status: int) -> None:
    async with served(tmp_path, config_text("http://x/v1")) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        answer = await client.post("/api/resilience/reload", content=body, headers=AUTH)
        assert answer.status_code == status, answer.text
        assert gw.gateway.reloader is not None
        assert gw.gateway.reloader.status.reloads == (1 if status == 200 else 0)
        if status != 200:
            assert answer.json()["error"]["message"]
        unauthorized = await client.post("/api/resilience/reload")
        assert unauthorized.status_code == 401


@pytest.mark.parametrize(("providers", "connections", "limit"), [
    (1, 10_000, "more than 1,000 connections: at most 1,000 connections per provider"),
    (11, 1_000, "more than 10,000 connections: at most 10,000 connections in all"),
])
async def test_a_config_grown_past_the_limits_is_refused_naming_them(
        tmp_path: Path, providers: int, connections: int, limit: str) -> None:
    async with served(tmp_path, config_text("http://x/v1")) as gw:
        before = gw.gateway.engine.snapshot()
        gw.path.write_text(config_text("http://x/v1", providers=providers,
                                       connections=connections))
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as client:
            answer = await client.post("/api/resilience/reload", headers=AUTH)
        assert answer.status_code == 422
        reasons = [p["reason"] for p in answer.json()["problems"]]
        assert reasons == [limit]
        assert gw.gateway.engine.snapshot() == before
        assert gw.gateway.engine.providers() == ("p0",)


async def test_fifty_requests_in_flight_through_a_reload_are_all_answered_once(
        tmp_path: Path) -> None:
    async with upstream() as fake, served(tmp_path, config_text(fake.url, connections=5)) as gw:
        fake.release.clear()
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        limits = httpx.Limits(max_connections=60)
        async with httpx.AsyncClient(base_url=gw.url, timeout=30, limits=limits) as client:
            calls = [asyncio.create_task(client.post("/v1/chat/completions", json=body))
                     for _ in range(50)]
            await eventually(lambda: fake.count == 50, what="50 requests at the upstream")
            # reload: a provider added, a connection of the busy one removed, its settings
            data = yaml.safe_load(config_text(fake.url, providers=2, connections=5))
            data["providers"]["p0"]["connections"].pop(0)
            data["providers"]["p0"]["resilience"] = {"cooldown": {"base": "9s"}}
            gw.path.write_text(yaml.safe_dump(data))
            answer = await client.post("/api/resilience/reload", headers=AUTH)
            assert answer.status_code == 200, answer.text
            assert answer.json()["summary"]["connections_removed"] == ["p0/c0"]
            fake.release.set()
            replies = await asyncio.gather(*calls)
        assert [r.status_code for r in replies] == [200] * 50
        assert fake.count == 50  # none was sent again
        served_by = {r.headers["x-omniroute-served-by"] for r in replies}
        assert served_by <= {f"p0/c{i}/m" for i in range(5)}


async def test_the_store_forgets_what_a_reload_removed(tmp_path: Path) -> None:
    data = yaml.safe_load(config_text("http://x/v1", providers=2, connections=3))
    async with served(tmp_path, yaml.safe_dump(data), db=True) as gw:
        engine = gw.gateway.engine
        for provider, connection in (("p0", "c0"), ("p0", "c2"), ("p1", "c1")):
            engine.record(provider, connection, "m", engine.admit(provider),
                          Classification(FailureKind.RATE_LIMITED))
        store = gw.gateway.store
        assert store is not None
        assert await store.flush()
        rows = await store.load()
        assert {(c.provider, c.connection) for c in rows.connections if c.level} == {
            ("p0", "c0"), ("p0", "c2"), ("p1", "c1")}
        del data["providers"]["p1"]
        data["routes"]["chat"]["targets"] = ["p0/m"]
        data["providers"]["p0"]["connections"].pop(0)
        gw.path.write_text(yaml.safe_dump(data))
        assert gw.gateway.reloader is not None
        result = await gw.gateway.reloader.reload("tester")
        assert result.ok
        await eventually(store.flush)
        rows = await store.load()
        assert {b.provider for b in rows.breakers} == {"p0"}
        assert {(c.provider, c.connection) for c in rows.connections} == {
            ("p0", "c1"), ("p0", "c2")}
        assert next(c for c in rows.connections if c.connection == "c2").level == 1
        history = await store.state_changes(10)
        assert history[-2]["type"] == "reload" and history[-2]["providers_removed"] == ["p1"]
        assert history[-1]["type"] == "operator" and history[-1]["action"] == "reload"


async def test_sighup_with_a_file_mid_write_is_refused_and_the_old_config_serves(
        tmp_path: Path) -> None:
    async with upstream() as fake:
        path = tmp_path / "router.yaml"
        good = config_text(fake.url)
        path.write_text(good)
        port = free_port()
        log = tmp_path / "gateway.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "omniroute_tui.gateway", "--config", str(path),
                 "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "OMNIROUTE_TOKEN": TOKEN})
        url = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                async def up() -> bool:
                    with contextlib.suppress(httpx.HTTPError):
                        return (await client.get("/health")).status_code == 200
                    return False

                await eventually(up, timeout_s=30, what="the gateway")
                grown = config_text(fake.url, providers=3)
                path.write_text(grown[: grown.index("p1:") + 20])  # cut mid-write
                proc.send_signal(signal.SIGHUP)

                async def refused() -> bool:
                    health = (await client.get("/health")).json()
                    return bool(health["config"]["failures"] == 1)

                await eventually(refused, what="the reload refused")
                health = (await client.get("/health")).json()
                assert health["config"]["version"] == version_of(good)
                assert list(health["providers"]) == ["p0"]
                chat = await client.post("/v1/chat/completions", json={
                    "model": "chat", "messages": [{"role": "user", "content": "hi"}]})
                assert chat.status_code == 200 and fake.count == 1
                audit = (await client.get("/api/resilience/audit", headers=AUTH)).json()
                assert audit["entries"][-1]["actor"] == "SIGHUP"
                # the write completes: the next SIGHUP takes it
                path.write_text(grown)
                proc.send_signal(signal.SIGHUP)

                async def taken() -> bool:
                    health = (await client.get("/health")).json()
                    return bool(health["config"]["version"] == version_of(grown))

                await eventually(taken, what="the reload taken")
                assert list((await client.get("/health")).json()["providers"]) == [
                    "p0", "p1", "p2"]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        text = log.read_text()
        assert "Traceback" not in text
        lines = [line for line in text.splitlines() if "refused" in line]
        assert len(lines) == 1 and f"{path}:" in lines[0] and "providers.p1" in lines[0]
        assert proc.returncode == 0


async def test_an_attached_console_shows_the_reload_in_its_events_and_audit(
        tmp_path: Path) -> None:
    from omniroute_tui.console.cli import build_app
    from omniroute_tui.console.model.attach import fetch_state

    from .console_helpers import settle
    from .test_console_attach import attach_args

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with upstream() as fake, served(tmp_path, config_text(fake.url, providers=2)) as gw:
        state = await asyncio.to_thread(fetch_state, gw.url, TOKEN)
        app = build_app(attach_args(gw.url, token_file), attach_state=state)
        async with app.run_test() as pilot, httpx.AsyncClient(base_url=gw.url,
                                                               timeout=10) as http:
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            model = app.model  # type: ignore[attr-defined]
            assert "p1" in model.providers
            text = config_text(fake.url, providers=1)
            gw.path.write_text(text)
            answer = await http.post("/api/resilience/reload", headers=AUTH)
            assert answer.status_code == 200
            await settle(pilot, lambda: any(e.kind == "reload" for e in model.events))
            line = next(e.line for e in model.events if e.kind == "reload")
            assert line == f"reload: config {version_of(text)}, -p1"
            await settle(pilot, lambda: any(row[2] == "reload" for row in model.audit))
            _, actor, action, target, result = model.audit[-1]
            assert (actor, action, target) == ("operator (ops-ana)", "reload", str(gw.path))
            assert result == f"ok {version_of(text)}: -p1; routes ~chat"
            assert "p1" not in model.providers
            assert ("p1", "c0") not in model.connections


async def test_metrics_follow_a_reload_and_say_when_one_is_refused(tmp_path: Path) -> None:
    """After a reload the scrape has the added provider and not the removed one, the
    config's new version, and the reloads counted; a refused one sets the gauge the
    `OmniRouteConfigReloadFailed` alert reads to 0, and a good one sets it back."""
    from .metrics_helpers import parse, series, value

    async with served(tmp_path, config_text("http://x/v1", providers=2)) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        async def scrape() -> Any:
            answer = await client.get("/metrics", headers=AUTH)
            assert answer.status_code == 200, answer.text
            return parse(answer.content)

        before = await scrape()
        assert {s["provider"] for s in series(before, "omniroute_breaker_forced_open")} == {
            "p0", "p1"}
        grown = yaml.safe_load(config_text("http://x/v1", providers=3))
        del grown["providers"]["p1"]
        grown["routes"]["chat"]["targets"] = ["p0/m", "p2/m"]
        gw.path.write_text(yaml.safe_dump(grown))
        assert (await client.post("/api/resilience/reload", headers=AUTH)).status_code == 200
        after = await scrape()
        assert {s["provider"] for s in series(after, "omniroute_breaker_forced_open")} == {
            "p0", "p2"}
        assert {s["connection"] for s in series(after, "omniroute_connection_disabled")
                if s["provider"] == "p2"} == {"c0", "c1"}
        assert series(after, "omniroute_config_info") == [
            {"version": version_of(gw.path.read_text())}]
        assert value(after, "omniroute_config_reloads_total", result="ok") == 1
        assert value(after, "omniroute_config_last_reload_success") == 1

        gw.path.write_text("providers: [\n")  # caught mid-write
        assert (await client.post("/api/resilience/reload", headers=AUTH)).status_code == 422
        refused = await scrape()
        assert value(refused, "omniroute_config_last_reload_success") == 0
        assert value(refused, "omniroute_config_reloads_total", result="refused") == 1
        assert series(refused, "omniroute_config_info") == series(after, "omniroute_config_info")

        gw.path.write_text(yaml.safe_dump(grown))
        assert (await client.post("/api/resilience/reload", headers=AUTH)).status_code == 200
        assert value(await scrape(), "omniroute_config_last_reload_success") == 1
