"""Operator roles: named management tokens (`gateway.operators`) with the role `read` or
`operate`; the audit's actor is the token's name, a header adds a reason and never the
identity; a reload rotates the tokens; a console attached with a read token is
read-only and says so."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import unicodedata
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.clock import SystemClock
from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.config.operators import MAX_REASON_CHARS, Operator, Role, token_digest
from omniroute_tui.gateway import Gateway, GatewayServer

from .console_helpers import settle
from .gateway_helpers import ALICE, GRAFANA, TOKEN, free_port, running_gateway
from .test_console_attach import attach_args
from .test_gateway_reload import config_text, served

ACTIONS = [("POST", "/api/resilience/breakers/healthy/reset", None),
           ("POST", "/api/resilience/breakers/healthy/force-open", {"for": "1m"}),
           ("POST", "/api/resilience/connections/broken/x1/disable", None),
           ("POST", "/api/resilience/connections/throttled/t1/clear", None),
           ("DELETE", "/api/resilience/lockouts", {"all": True}),
           ("POST", "/api/resilience/reload", None)]
READS = ["/api/resilience/state", "/api/resilience/audit", "/api/resilience/history",
         "/metrics"]
NEW_ALICE = "alice-rotated-token-0123456789"


def _operators(**roles: tuple[str, str]) -> dict[str, dict[str, str]]:
    return {name: {"role": role, "token_sha256": token_digest(token)}
            for name, (role, token) in roles.items()}


@given(st.text(max_size=400) | st.binary(max_size=400).map(lambda b: b.decode("latin-1")))
def test_a_reason_never_changes_who_acts_nor_hides_anything(reason: str) -> None:
    actor = Operator("alice", Role.OPERATE).acting(reason)
    assert actor == "alice" or (actor.startswith("alice (") and actor.endswith(")"))
    said = actor[len("alice ("):-1]
    assert len(said) <= MAX_REASON_CHARS and said == said.strip() and "  " not in said
    assert all(c == " " or unicodedata.category(c)[0] not in "CZ" for c in said)


def test_the_config_names_each_token_by_its_digest() -> None:
    text = config_text("http://x/v1", extra={"gateway": {"operators": _operators(
        alice=("operate", ALICE), grafana=("read", GRAFANA))}})
    operators = load_router_config("router.yaml", text=text).gateway_operators
    assert operators.identify(f"Bearer {ALICE}") == Operator("alice", Role.OPERATE)
    assert operators.identify(f"Bearer {GRAFANA}") == Operator("grafana", Role.READ)
    for header in (None, "", f"Basic {ALICE}", f"Bearer {ALICE}x", "Bearer ",
                   f"Bearer {token_digest(ALICE)}"):  # the digest is not the token
        assert operators.identify(header) is None
    assert ALICE not in text and GRAFANA not in text


@pytest.mark.parametrize(("operators", "said"), [
    ({"alice": {"role": "admin", "token_sha256": "0" * 64}}, "expected read or operate"),
    ({"alice": {"role": ["operate"], "token_sha256": "0" * 64}}, "expected read or operate"),
    ({"alice": {"role": "read", "token_sha256": ALICE}}, "never the token itself"),
    ({"alice": {"role": "read"}}, "token_sha256"),
    ({"alice": {"role": "read", "token_sha256": "0" * 64, "token": ALICE}}, "token"),
    ({"al ice": {"role": "read", "token_sha256": "0" * 64}}, "an operator's name"),
    ({"operator": {"role": "read", "token_sha256": "0" * 64}}, "the single token's"),
    ({"-x": {"role": "read", "token_sha256": "0" * 64}}, "an operator's name"),
    ({"a": {"role": "read", "token_sha256": "1" * 64},
      "b": {"role": "operate", "token_sha256": "1" * 64}}, "the same token as 'a'"),
    (["alice"], "mapping"),
])
def test_a_bad_operator_is_refused_naming_it(operators: object, said: str) -> None:
    text = config_text("http://x/v1", extra={"gateway": {"operators": operators}})
    with pytest.raises(ConfigError) as caught:
        load_router_config("router.yaml", text=text)
    assert said in str(caught.value) and "gateway.operators" in str(caught.value)


async def test_a_read_token_reads_and_may_not_act(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        auth = {"authorization": f"Bearer {GRAFANA}"}
        for path in READS:
            assert (await http.get(path, headers=auth)).status_code == 200, path
        state = (await http.get("/api/resilience/state", headers=auth)).json()
        assert state["caller"] == {"name": "grafana", "role": "read"}
        before = gw.gateway.engine.snapshot()
        for method, path, body in ACTIONS:
            reply = await http.request(method, path, json=body, headers=auth)
            assert reply.status_code == 403, (path, reply.text)
            error = reply.json()["error"]
            assert error["type"] == "permission_error" and "'grafana' may only read" in \
                error["message"]
        assert gw.gateway.engine.snapshot() == before
        assert (await http.get("/api/resilience/audit", headers=auth)).json() == {
            "entries": []}
        # the same calls with an operate token are carried out
        reply = await http.post("/api/resilience/breakers/healthy/reset",
                                headers={"authorization": f"Bearer {ALICE}"})
        assert reply.status_code == 200


async def test_the_audit_names_the_token_and_a_header_adds_only_a_reason(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        disable = "/api/resilience/connections/broken/x1/disable"
        await http.post(disable, headers={"authorization": f"Bearer {ALICE}",
                                          "x-omniroute-operator": "mallory"})
        await http.post(disable, headers={"authorization": f"Bearer {ALICE}",
                                          "x-omniroute-reason": "key leaked, INC-42"})
        hidden = ("bob\u0085\u202e\t" + "x" * 300).encode()  # control and format characters
        await http.post(disable, headers={"authorization": f"Bearer {ALICE}",
                                          "x-omniroute-reason": hidden})
        await http.post(disable, headers={"authorization": f"Bearer {TOKEN}",
                                          "x-omniroute-reason": "\u200b".encode()})
        audit = (await http.get("/api/resilience/audit",
                                headers={"authorization": f"Bearer {GRAFANA}"})).json()
        actors = [e["actor"] for e in audit["entries"]]
        assert actors == ["alice", "alice (key leaked, INC-42)",
                          f"alice ({('bob ' + 'x' * 300)[:120]})", "operator"]


async def test_a_reload_rotates_the_tokens(tmp_path: Path) -> None:
    def text(**roles: tuple[str, str]) -> str:
        return config_text("http://x/v1", extra={"gateway": {"operators": _operators(
            **roles)}})

    async with served(tmp_path, text(alice=("operate", ALICE), grafana=("read", GRAFANA))
                      ) as gw, httpx.AsyncClient(base_url=gw.url) as http:
        async def status(token: str, path: str = "/api/resilience/state") -> int:
            reply = await http.post(path, headers={"authorization": f"Bearer {token}"}) \
                if path.endswith("reset") else \
                await http.get(path, headers={"authorization": f"Bearer {token}"})
            return reply.status_code

        reset = "/api/resilience/breakers/p0/reset"
        assert (await status(ALICE, reset), await status(GRAFANA, reset)) == (200, 403)
        # alice's token rotated, grafana promoted, a new reader
        gw.path.write_text(text(alice=("operate", NEW_ALICE), grafana=("operate", GRAFANA),
                                carol=("read", "carol-token-0123456789abcdef")))
        reply = await http.post("/api/resilience/reload",
                                headers={"authorization": f"Bearer {ALICE}"})
        assert reply.status_code == 200 and reply.json()["restart_needed"] == []
        assert await status(ALICE) == 401
        assert (await status(NEW_ALICE, reset), await status(GRAFANA, reset)) == (200, 200)
        assert await status("carol-token-0123456789abcdef", reset) == 403
        assert await status(TOKEN, reset) == 200  # the single token stays until a restart
        audit = (await http.get("/api/resilience/audit",
                                headers={"authorization": f"Bearer {TOKEN}"})).json()
        assert [(e["actor"], e["action"]) for e in audit["entries"]] == [
            ("alice", "reset_breaker"), ("alice", "reload"), ("alice", "reset_breaker"),
            ("grafana", "reset_breaker"), ("operator", "reset_breaker")]


async def test_a_console_attached_with_a_read_token_is_read_only_and_says_so(
        tmp_path: Path) -> None:
    from omniroute_tui.console.cli import build_app
    from omniroute_tui.console.model.attach import fetch_state

    async with running_gateway(tmp_path) as gw:
        token_file = tmp_path / "token"
        for token, read_only in ((GRAFANA, True), (ALICE, False)):
            token_file.write_text(token)
            state = await asyncio.to_thread(fetch_state, gw.url, token)
            app = build_app(attach_args(gw.url, token_file), attach_state=state)
            async with app.run_test() as pilot:  # type: ignore[attr-defined]
                await settle(pilot, lambda a=app: a.backend.connected)  # type: ignore[misc]
                assert app.read_only is read_only  # type: ignore[attr-defined]
                app.refresh_view()  # type: ignore[attr-defined]
                status = str(app.query_one("#status").render())  # type: ignore[attr-defined]
                assert ("READ-ONLY (grafana: read token) │" in status) is read_only
                if read_only:
                    assert any("the token of 'grafana' may only read" in n.message
                               for n in app._notifications)  # type: ignore[attr-defined]
                    await pilot.press("1", "r")  # reset the selected breaker: refused
                    await pilot.pause()
                    assert "read-only console (grafana: read token)" in list(
                        app._notifications)[-1].message  # type: ignore[attr-defined]
        async with httpx.AsyncClient(base_url=gw.url) as http:
            audit = (await http.get("/api/resilience/audit",
                                    headers={"authorization": f"Bearer {TOKEN}"})).json()
        assert audit == {"entries": []}  # the read-only console did nothing


def test_a_gateway_with_named_operators_only_serves_the_api_and_says_so(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(config_text("http://127.0.0.1:9/v1", extra={"gateway": {
        "operators": _operators(alice=("operate", ALICE), grafana=("read", GRAFANA))}}))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "omniroute_tui.gateway", "--config", str(path), "--listen",
         f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "OMNIROUTE_TOKEN": ""})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until it listens, or it died
        assert line.startswith(f"omniroute-gateway on http://127.0.0.1:{port} with the "
                               "management API (2 named operator(s)); "), line
        state = httpx.get(f"http://127.0.0.1:{port}/api/resilience/state",
                          headers={"authorization": f"Bearer {GRAFANA}"}, timeout=10)
        assert state.status_code == 200 and state.json()["caller"]["name"] == "grafana"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


async def test_a_reload_reads_the_single_tokens_file_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(config_text("http://127.0.0.1:9/v1"))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    config = load_router_config(path)
    gateway = Gateway(config.build(SystemClock()), config.providers, token=TOKEN,
                      config=config, token_file=str(token_file))
    server = GatewayServer(gateway, "127.0.0.1", 0)
    await server.start()
    rotated = "rotated-single-token-0123456789"
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            async def reload(token: str) -> int:
                return (await http.post("/api/resilience/reload", headers={
                    "authorization": f"Bearer {token}"})).status_code

            async def reads(token: str) -> int:
                return (await http.get("/api/resilience/state", headers={
                    "authorization": f"Bearer {token}"})).status_code

            token_file.write_text(rotated)
            assert await reload(TOKEN) == 200
            assert (await reads(TOKEN), await reads(rotated)) == (401, 200)
            token_file.write_text("too-short")  # not usable: the one in force stays
            assert await reload(rotated) == 200
            assert await reads(rotated) == 200
            assert any("the management token was not rotated" in r.getMessage()
                       and "shorter than 16" in r.getMessage() for r in caplog.records)
    finally:
        await server.stop()


async def test_an_attached_console_follows_its_tokens_role_across_a_reload(
        tmp_path: Path) -> None:
    from omniroute_tui.console.cli import build_app
    from omniroute_tui.console.model.attach import fetch_state

    def text(role: str) -> str:
        return config_text("http://127.0.0.1:9/v1", extra={"gateway": {
            "operators": _operators(alice=("operate", ALICE), grafana=(role, GRAFANA))}})

    async with served(tmp_path, text("read")) as gw:
        token_file = tmp_path / "token"
        token_file.write_text(GRAFANA)
        state = await asyncio.to_thread(fetch_state, gw.url, GRAFANA)
        app = build_app(attach_args(gw.url, token_file), attach_state=state)
        async with app.run_test() as pilot:  # type: ignore[attr-defined]
            await settle(pilot, lambda: app.backend.connected)  # type: ignore[attr-defined]
            assert app.read_only  # type: ignore[attr-defined]
            gw.path.write_text(text("operate"))
            async with httpx.AsyncClient(base_url=gw.url) as http:
                reply = await http.post("/api/resilience/reload",
                                        headers={"authorization": f"Bearer {ALICE}"})
            assert reply.status_code == 200
            await settle(pilot, lambda: not app.read_only)  # type: ignore[attr-defined]
            app.refresh_view()  # type: ignore[attr-defined]
            assert "READ-ONLY" not in str(app.query_one("#status").render())  # type: ignore[attr-defined]


async def test_a_console_serving_its_router_takes_the_configs_operators(
        tmp_path: Path) -> None:
    import argparse

    from omniroute_tui.console.cli import build_app

    config = tmp_path / "router.yaml"
    config.write_text(config_text("http://127.0.0.1:9/v1", extra={"gateway": {
        "operators": _operators(grafana=("read", GRAFANA))}}))
    args = argparse.Namespace(
        attach=None, token_file=None, scenario=None, config=config, live=False, db=None,
        db_recover="ask", speed=2.0, read_only=False, operator="dave", web=False,
        listen="127.0.0.1:0")
    app = build_app(args)
    async with app.run_test() as pilot:  # type: ignore[attr-defined]
        await settle(pilot, lambda: app.gateway_server is not None)  # type: ignore[attr-defined]
        url = app.gateway_server.url  # type: ignore[attr-defined]
        async with httpx.AsyncClient(base_url=url) as http:
            auth = {"authorization": f"Bearer {GRAFANA}"}
            state = await http.get("/api/resilience/state", headers=auth)
            assert state.json()["caller"] == {"name": "grafana", "role": "read"}
            reset = await http.post("/api/resilience/breakers/p0/reset", headers=auth)
            assert reset.status_code == 403
