"""`omniroute-sim serve`: the scenario's fakes over HTTP, plus a router config for them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape

from omniroute_tui.apis import ApiFamily
from omniroute_tui.clock import ElapsedClock
from omniroute_tui.engine.events import FaultEvent

from .http_fakes import FakeServer, fake_api_keys, start_fakes, stop_fakes
from .scenario import Scenario

__all__ = ["router_config_for", "serve_command"]


def router_config_for(scenario: Scenario, servers: list[FakeServer]) -> dict[str, Any]:
    """The scenario's router config aimed at the fakes: its providers with the fakes' URLs
    and keys, every other section (routes, resilience, store, gateway) as written."""
    raw = scenario.config.raw or {}
    keys = fake_api_keys(scenario)
    urls = {s.provider: s.base_url for s in servers}
    providers: dict[str, Any] = {}
    for name, provider in scenario.providers.items():
        raw_provider = (raw.get("providers") or {}).get(name) or {}
        entry: dict[str, Any] = {
            "auth": provider.auth.value,
            "per_model_quota": provider.per_model_quota,
            "base_url": urls[name],
            **({"api": provider.api.family.value}
               if provider.api.family is not ApiFamily.OPENAI else {}),
            **({"models": list(provider.models)} if provider.models else {}),
            **({"embedding_models": list(provider.embedding_models)}
               if provider.embedding_models else {}),
            "connections": [
                {"id": c.id, "api_key": keys[name][c.id],
                 **({"weight": c.weight} if c.weight != 1 else {}),
                 **({"max_in_flight": c.max_in_flight} if c.max_in_flight else {})}
                for c in provider.connections
            ],
        }
        if isinstance(raw_provider, dict):
            for key in ("resilience", "api_version", "deployments", "anthropic_version",
                        "max_in_flight", "max_queued"):
                if key in raw_provider:  # as written: the family's own settings too
                    entry[key] = raw_provider[key]
        providers[name] = entry
    # every other section of the file as it was, in its place: store, gateway, resilience
    config: dict[str, Any] = {"providers": providers, "routes": {}}
    config.update({key: body for key, body in raw.items() if key != "providers"})
    config["providers"] = providers
    return config


async def _serve(scenario: Scenario, length_ms: int, config_out: Path,
                 console: Console) -> None:
    clock = ElapsedClock()
    servers = await start_fakes(scenario, clock)
    clock.restart()  # the faults' timeline starts once every fake is listening
    try:
        # written beside and renamed: whoever waits for the file never reads half of it
        partial = config_out.with_name(config_out.name + ".partial")
        partial.write_text(
            "# written by omniroute-sim serve: the fakes of "
            f"{scenario.name}; it holds fake keys only\n"
            + yaml.safe_dump(router_config_for(scenario, servers), sort_keys=False)
        )
        partial.replace(config_out)
        for server in servers:
            console.print(f"[bold]{server.provider:12}[/] {server.base_url}")
        console.print(f"router config: {escape(str(config_out))}   (Ctrl-C to stop; stops "
                      f"by itself after {length_ms / 1000:g} s)")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        for at, fault, phase in scenario.fault_edges(length_ms):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0, at - clock.now_ms()) / 1000)
            if stop.is_set():
                break
            event = FaultEvent(clock.now_ms(), fault.name, phase, str(fault.target))
            console.print(f"{event.t / 1000:8.1f}s  fault {escape(fault.name)} {phase} "
                          f"({fault.target})")
        if not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0, length_ms - clock.now_ms()) / 1000)
    finally:
        await stop_fakes(servers)


def serve_command(scenario: Scenario, length_ms: int, config_out: Path,
                  console: Console) -> int:
    asyncio.run(_serve(scenario, length_ms, config_out, console))
    console.print("fakes stopped")
    return 0
