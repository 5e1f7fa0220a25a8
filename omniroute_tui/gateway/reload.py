"""Reloading the config file without a restart (docs/design.md §13): `SIGHUP` and
`POST /api/resilience/reload` both come here.

The file is read and checked whole, away from the event loop; one with any problem is
refused and the running config stays. A good one is swapped in by the router between two
decisions (`RouterConfig.reconfigure`): requests in flight finish on the plan they started
with, and what is unchanged keeps its state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, Problem, RouterConfig, load_router_config
from ..config.status import ConfigStatus
from ..engine.reload import ReloadSummary
from ..router.core import Router
from ..router.routes import Route

__all__ = ["RESTART_FIELDS", "ConfigReloader", "ReloadResult"]

log = logging.getLogger("omniroute.reload")

#: what a running gateway cannot take without a restart: the answer names those that
#: changed (the rest of the file is in force)
RESTART_FIELDS = {
    "store_path": "store.path", "store_redis": "store.redis", "store_prefix": "store.prefix",
    "store_lease_max_ms": "store.lease_max",
    "store_retention": "store.history/requests/audit/records",
    "gateway_listen": "gateway.listen", "gateway_token_file": "gateway.token_file",
    "gateway_limits": "gateway.limits", "gateway_metrics": "gateway.metrics",
    "gateway_served_by_header": "gateway.served_by_header",
}
#: the top-level sections a file may leave out only if the running config has nothing in
#: them: a file that lost `routes:` is far likelier cut or mis-merged than meant
SECTIONS = ("providers", "routes", "resilience", "store", "gateway")
#: how often a file that changed while it was read is read again, and the pause between
SETTLE_READS, SETTLE_PAUSE_S = 3, 0.05


@dataclass(frozen=True)
class RouteChanges:
    """The routes a reload added, removed and changed (targets, order, strategy,
    weights or settings)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @classmethod
    def between(cls, before: Mapping[str, Route], after: Mapping[str, Route]) -> RouteChanges:
        return cls(tuple(r for r in after if r not in before),
                   tuple(r for r in before if r not in after),
                   tuple(r for r in after if r in before and after[r] != before[r]))

    def describe(self) -> str:
        """`routes +a -b ~c`, or nothing when no route changed."""
        parts = [*(f"+{r}" for r in self.added), *(f"-{r}" for r in self.removed),
                 *(f"~{r}" for r in self.changed)]
        return f"routes {' '.join(parts)}" if parts else ""


def dropped_sections(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                     path: str) -> list[Problem]:
    """A problem for each top-level section the running config has entries in and the
    new file leaves out (an explicit empty section is taken: `routes: {}`)."""
    if before is None or after is None:
        return []
    problems = []
    for section in SECTIONS:
        had = before.get(section)
        if section not in after and had:
            count = len(had) if isinstance(had, Mapping) else 1
            problems.append(Problem(path, None, section, (
                f"left out, where the running config has {count} "
                f"entr{'y' if count == 1 else 'ies'}: a file cut short or mis-merged is "
                f"not taken (to drop them all, write `{section}: {{}}`)")))
    return problems


def load_settled(path: str, load: Callable[[str], RouterConfig],
                 also: str | None = None) -> RouterConfig:
    """`load(path)`, taken only if the file's size and modification time are the same
    after it was read and parsed as before, and those of the file of client keys it
    names (`also`: the one the running config named): a file changing under the reader
    (an editor or a deploy writing it) is read again, up to SETTLE_READS times, then
    refused. Runs in a worker thread (its pauses block nothing else)."""
    for _ in range(SETTLE_READS):
        before = _stat(path), _stat(also) if also is not None else None
        config = load(path)
        named = config.gateway_clients_file
        if named == also and (_stat(path), _stat(also) if also else None) == before:
            return config
        also = named  # (a new file of client keys: read once more, watching it)
        time.sleep(SETTLE_PAUSE_S)
    raise ConfigError([Problem(path, None, "(file)", (
        f"changed while it was read, {SETTLE_READS} times: it is being written; not "
        "taken (reload again once it is written)"))])


def _stat(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None  # the reader says what is wrong with it
    return found.st_size, found.st_mtime_ns


@dataclass(frozen=True)
class ReloadResult:
    """How one reload went: the summary of a good file, or every problem of a bad one."""

    ok: bool
    version: str  # the version in force after it
    summary: ReloadSummary | None = None
    problems: tuple[Problem, ...] = ()
    restart_needed: tuple[str, ...] = ()
    elapsed_ms: float = 0.0
    routes: RouteChanges = RouteChanges()

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": self.ok, "version": self.version}
        if self.summary is not None:
            body["summary"] = {
                "providers_added": list(self.summary.providers_added),
                "providers_removed": list(self.summary.providers_removed),
                "providers_changed": list(self.summary.providers_changed),
                "connections_added": list(self.summary.connections_added),
                "connections_removed": list(self.summary.connections_removed),
                "routes_added": list(self.routes.added),
                "routes_removed": list(self.routes.removed),
                "routes_changed": list(self.routes.changed)}
            body["restart_needed"] = list(self.restart_needed)
        if self.problems:
            body["problems"] = [{"file": p.file, "line": p.line, "field": p.field,
                                 "reason": p.reason, "text": str(p)} for p in self.problems]
        return body


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


class ConfigReloader:
    """Re-reads one config file into one router; reloads run one at a time."""

    def __init__(self, router: Router, config: RouterConfig, *,
                 on_swap: Callable[[RouterConfig], None],
                 load: Callable[[str], RouterConfig] = load_router_config) -> None:
        self.router = router
        self.config = config
        self.path = config.source
        self._on_swap = on_swap
        self._load = load
        self._lock = asyncio.Lock()
        self.status = ConfigStatus(self.path, config.version, epoch_ms())

    async def reload(self, actor: str) -> ReloadResult:
        """Read the file again and take it if it is good; audited with `actor`."""
        async with self._lock:
            started = asyncio.get_running_loop().time()
            status = self.status
            status.last_attempt_ms = epoch_ms()
            try:
                config = await asyncio.to_thread(load_settled, self.path, self._load,
                                                 self.config.gateway_clients_file)
            except ConfigError as exc:
                return self._refused(actor, exc.problems, started)
            except Exception as exc:  # a bug in reading: the running config stays all the same
                log.exception("reading the config %s again failed", self.path)
                return self._refused(actor, (Problem(self.path, None, "(file)",
                                                     f"could not be read: {exc}"),), started)
            dropped = dropped_sections(self.config.raw, config.raw, self.path)
            if self.config.gateway_clients and not config.gateway_clients:
                dropped.append(Problem(self.path, None, "gateway.clients", (
                    f"client keys are on ({len(self.config.gateway_clients.tenants)} "
                    "tenants) and this file turns them off: anyone who reaches the port "
                    "could send; restart the gateway with it to mean that")))
            if dropped:
                return self._refused(actor, tuple(dropped), started)
            routes = RouteChanges.between(self.config.routes, config.routes)
            summary = config.reconfigure(self.router, previous=self.config)
            restart = tuple(label for name, label in RESTART_FIELDS.items()
                            if getattr(config, name) != getattr(self.config, name))
            clients_changed = config.gateway_clients != self.config.gateway_clients
            self.config = config
            self._on_swap(config)
            status.version, status.loaded_at_ms = config.version, epoch_ms()
            status.reloads += 1
            status.last_reload_ok, status.last_error = True, None
            elapsed = (asyncio.get_running_loop().time() - started) * 1000
            described = summary.describe()
            for change in (routes.describe(),
                           f"client keys: {len(config.gateway_clients.tenants)} tenant(s)"
                           if clients_changed else ""):
                if change:
                    described = (change if described == "no change"
                                 else f"{described}; {change}")
            self.router.engine.audit("reload", self.path, actor=actor,
                                     result=f"ok {config.version}: {described}")
            log.info("config %s reloaded (version %s, %.0f ms): %s%s", self.path,
                     config.version, elapsed, described,
                     f"; needs a restart to take {', '.join(restart)}" if restart else "")
            return ReloadResult(True, config.version, summary, restart_needed=restart,
                                elapsed_ms=elapsed, routes=routes)

    def _refused(self, actor: str, problems: tuple[Problem, ...], started: float
                 ) -> ReloadResult:
        status = self.status
        status.failures += 1
        status.last_reload_ok = False
        head = "1 problem" if len(problems) == 1 else f"{len(problems)} problems"
        status.last_error = f"{head}: {problems[0]}" if problems else head
        self.router.engine.audit("reload", self.path, actor=actor,
                                 result=f"refused: {head}; {status.version} stays")
        log.error("config %s refused, version %s stays: %s: %s", self.path, status.version,
                  head, "; ".join(str(p) for p in problems))
        elapsed = (asyncio.get_running_loop().time() - started) * 1000
        return ReloadResult(False, status.version, problems=problems, elapsed_ms=elapsed)
