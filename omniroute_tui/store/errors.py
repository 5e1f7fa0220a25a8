"""Store problems a user can act on, and the way out of a bad file."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path

__all__ = ["Recovery", "StoreError", "StoreProblem", "set_aside"]


class StoreProblem(StrEnum):
    LOCKED = "locked"
    CORRUPT = "corrupt"
    UNREADABLE = "unreadable"
    FOREIGN = "foreign"  # another program's SQLite file: never modified, never set aside
    NEWER = "newer"  # written by a newer release


class Recovery(StrEnum):
    """What to do with a bad database file."""

    FAIL = "fail"  # refuse with a clear message (the default)
    SET_ASIDE = "set-aside"  # rename the bad file and start with an empty store


class StoreError(Exception):
    """The database file cannot be used; `str()` says why and what to do."""

    def __init__(self, problem: StoreProblem, path: Path, detail: str) -> None:
        self.problem = problem
        self.path = path
        self.detail = detail
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.problem is StoreProblem.LOCKED:
            advice = ("another router is using it; stop that one, or give this one its own "
                      "--db file")
        elif self.problem is StoreProblem.CORRUPT:
            advice = ("start again with --db-recover set-aside to keep the bad file beside it "
                      "and begin with an empty store")
        elif self.problem is StoreProblem.FOREIGN:
            advice = "give --db a file of its own (a new path is created empty)"
        elif self.problem is StoreProblem.NEWER:
            advice = "run the newer release, or give --db a file of its own"
        else:
            advice = "check the path and its permissions"
        return f"state database {self.path}: {self.detail}; {advice}"


def set_aside(path: Path) -> Path:
    """Rename a bad database (and its WAL files) out of the way; returns the new name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target
