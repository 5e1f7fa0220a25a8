"""The config the router runs, and how its last reload went (docs/design.md §1)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConfigStatus"]


@dataclass
class ConfigStatus:
    """Which config the router runs and how its last reload went (docs/design.md)."""
    path: str | None
    version: str          # sha256 of the file's bytes, first 12 hex digits
    loaded_at_ms: int     # epoch ms of the load in force
    reloads: int = 0      # successful reloads since start
    failures: int = 0     # refused reloads since start
    last_reload_ok: bool = True
    last_error: str | None = None
    last_attempt_ms: int | None = None
