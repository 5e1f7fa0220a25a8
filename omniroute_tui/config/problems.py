"""Problems found in a file, each with the file, the line and the field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .hidden import visible

__all__ = ["ConfigError", "Path", "Problem", "format_field"]

Path = tuple[str | int, ...]


def format_field(path: Path) -> str:
    """`("providers", "a", "connections", 0)` → `providers.a.connections[0]`, with
    a key's hidden characters escaped (`routes.r\\x1b`): errors print the field."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{visible(part)}" if out else visible(part)
    return out or "(top level)"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str
    reason: str

    def __str__(self) -> str:
        """One line that prints as it reads: a file name or reason quoting a hidden
        character shows its escape."""
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return visible(f"{where}: {self.field}: {self.reason}")


class ConfigError(Exception):
    """A file was refused; carries every problem found, each with its place."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        count = len(self.problems)
        head = "1 problem" if count == 1 else f"{count} problems"
        return f"{head}:\n" + "\n".join(f"  {p}" for p in self.problems)
