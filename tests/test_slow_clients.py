"""Slow clients cannot starve the others: during a trickle attack of 600 connections from
one address (each reopened at once when it is cut or refused), honest clients on other
127.0.0.x addresses are served, on the gateway's chat API, its management API and a room.
The attack and the honest clients are bench/slow_clients.py's."""

from __future__ import annotations

import importlib
import resource
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import yaml

from omniroute_tui.config.limits import GatewayLimits
from omniroute_tui.console.model.backends import SimulationBackend
from omniroute_tui.console.room import RoomServer
from simulator.scenario import load_scenario, resolve_scenario

from .gateway_helpers import SCENARIO, TOKEN, running_gateway
from .waiting import eventually

BENCH = Path(__file__).parents[1] / "bench"
ATTACKERS = 600
LIMITS = GatewayLimits()
#: what is measured is who gets a connection, not how fast: on a loaded machine (the
#: suite on every core) a request may wait on the attack's refusals past the usual 3 s
PATIENT = SCENARIO.replace("timeout: 3s", "timeout: 60s")


@pytest.fixture(scope="module")
def slow_clients() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("slow_clients")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(autouse=True)
def _enough_files() -> None:
    """Both ends of 600 connections and the honest ones: 1,024 open files are too few."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _under_attack(slow_clients: ModuleType, url: str, call: object
                        ) -> tuple[dict[str, int], dict[str, int]]:
    """The honest clients' outcomes (16 clients, 12 requests each) once the attack holds
    its connections, and the attack's counts."""
    outcomes, attack = await slow_clients.attacked(url, call, attackers=ATTACKERS,
                                                   clients=16, requests=12, timeout_s=60)
    return dict(outcomes), dict(attack.counts)


async def test_a_trickle_attack_leaves_the_gateway_and_its_api_to_honest_clients(
        tmp_path: Path, slow_clients: ModuleType) -> None:
    async with running_gateway(tmp_path, limits=LIMITS, scenario=PATIENT) as gw:
        outcomes, counts = await _under_attack(slow_clients, gw.url,
                                               slow_clients.chat_and_state(TOKEN))
        served = outcomes.get("200", 0) / sum(outcomes.values())
        assert served >= 0.99, outcomes
        assert counts["refused"] > 0, counts  # past 256 from its address, at once
        admissions = gw.server.server.config.http.admissions
        await eventually(lambda: admissions.total == 0 and not admissions.per_client,
                         what="every connection uncounted once closed")


async def test_a_trickle_attack_leaves_a_room_to_its_viewers(slow_clients: ModuleType
                                                             ) -> None:
    scenario = load_scenario(resolve_scenario("demo"))
    replay = SimulationBackend(scenario, paused=True)
    room = RoomServer("127.0.0.1", 0, token=TOKEN, limits=LIMITS)
    room.follow(replay)
    await room.start()

    async def view(http: httpx.AsyncClient, n: int) -> httpx.Response:
        return await http.get("/api/resilience/state",
                              headers={"authorization": f"Bearer {TOKEN}"})

    try:
        outcomes, _ = await _under_attack(slow_clients, room.url, view)
    finally:
        await room.stop()
    assert outcomes.get("200", 0) / sum(outcomes.values()) >= 0.99, outcomes


def test_a_room_takes_the_limits_of_its_config(tmp_path: Path) -> None:
    from omniroute_tui.console.cli import _parser, build_app

    from .test_sim_config import split

    config, scenario = split("demo", tmp_path)
    data = yaml.safe_load(config.read_text())
    data["gateway"] = {"limits": {"max_connections_per_client": 3, "head_timeout": "2s"}}
    config.write_text(yaml.safe_dump(data))
    args = _parser().parse_args(["--scenario", str(scenario), "--config", str(config),
                                 "--serve-room", "127.0.0.1:0"])
    app = build_app(args)
    limits = app.room.server.config.http.limits  # type: ignore[attr-defined]
    assert (limits.max_connections_per_client, limits.head_timeout_s) == (3, 2.0)
