"""Persistence of the engine's state: SQLite, write-behind, restart recovery."""

from .errors import Recovery, StoreError, StoreProblem, set_aside
from .sqlite_store import AuditEntry, SqliteStore, StoreHealth

__all__ = ["AuditEntry", "Recovery", "SqliteStore", "StoreError", "StoreHealth",
           "StoreProblem", "set_aside"]
