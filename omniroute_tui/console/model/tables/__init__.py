"""The table panes, one module each: its columns (with the width its words need), the
orders `s` cycles, its rows rendered to cells by key, their order, and a row's detail.
A pane's table changes in its module alone (docs/development.md, "Adding a column")."""

from __future__ import annotations

from types import ModuleType

from ..panes import Pane
from . import audit, connections, lockouts, providers, requests

__all__ = ["TABLES"]

#: each table pane's module
TABLES: dict[Pane, ModuleType] = {
    Pane.PROVIDERS: providers, Pane.CONNECTIONS: connections, Pane.LOCKOUTS: lockouts,
    Pane.REQUESTS: requests, Pane.AUDIT: audit,
}
