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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, Problem, RouterConfig, load_router_config
from ..config.status import ConfigStatus
from ..engine.reload import ReloadSummary
from ..router.core import Router

__all__ = ["RESTART_FIELDS", "ConfigReloader", "ReloadResult"]

log = logging.getLogger("omniroute.reload")

#: what a running gateway cannot take without a restart: the answer names those that
#: changed (the rest of the file is in force)
RESTART_FIELDS = {
    "store_path": "store.path", "store_redis": "store.redis", "store_prefix": "store.prefix",
    "store_lease_max_ms": "store.lease_max", "store_retention": "store.history/requests/audit",
    "gateway_listen": "gateway.listen", "gateway_token_file": "gateway.token_file",
    "gateway_limits": "gateway.limits", "gateway_metrics": "gateway.metrics",
    "gateway_served_by_header": "gateway.served_by_header",
}


@dataclass(frozen=True)
class ReloadResult:
    """How one reload went: the summary of a good file, or every problem of a bad one."""

    ok: bool
    version: str  # the version in force after it
    summary: ReloadSummary | None = None
    problems: tuple[Problem, ...] = ()
    restart_needed: tuple[str, ...] = ()
    elapsed_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": self.ok, "version": self.version}
        if self.summary is not None:
            body["summary"] = {
                "providers_added": list(self.summary.providers_added),
                "providers_removed": list(self.summary.providers_removed),
                "providers_changed": list(self.summary.providers_changed),
                "connections_added": list(self.summary.connections_added),
                "connections_removed": list(self.summary.connections_removed)}
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
                config = await asyncio.to_thread(self._load, self.path)
            except ConfigError as exc:
                return self._refused(actor, exc.problems, started)
            except Exception as exc:  # a bug in reading: the running config stays all the same
                log.exception("reading the config %s again failed", self.path)
                return self._refused(actor, (Problem(self.path, None, "(file)",
                                                     f"could not be read: {exc}"),), started)
            summary = config.reconfigure(self.router, previous=self.config)
            restart = tuple(label for name, label in RESTART_FIELDS.items()
                            if getattr(config, name) != getattr(self.config, name))
            self.config = config
            self._on_swap(config)
            status.version, status.loaded_at_ms = config.version, epoch_ms()
            status.reloads += 1
            status.last_reload_ok, status.last_error = True, None
            elapsed = (asyncio.get_running_loop().time() - started) * 1000
            self.router.engine.audit("reload", self.path, actor=actor,
                                     result=f"ok {config.version}: {summary.describe()}")
            log.info("config %s reloaded (version %s, %.0f ms): %s%s", self.path,
                     config.version, elapsed, summary.describe(),
                     f"; needs a restart to take {', '.join(restart)}" if restart else "")
            return ReloadResult(True, config.version, summary, restart_needed=restart,
                                elapsed_ms=elapsed)

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
