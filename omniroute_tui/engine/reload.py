"""What a config reload changed in the engine (docs/design.md §13): the summary the
reconcile returns and the `reload` event carries."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReloadSummary"]


@dataclass(frozen=True)
class ReloadSummary:
    """Providers added, removed and changed (settings, connections, keys or models), and
    the connections added to or removed from the providers that stay, as
    `provider/connection` (an added or removed provider brings or takes all of its own)."""

    providers_added: tuple[str, ...] = ()
    providers_removed: tuple[str, ...] = ()
    providers_changed: tuple[str, ...] = ()
    connections_added: tuple[str, ...] = ()
    connections_removed: tuple[str, ...] = ()

    @property
    def unchanged(self) -> bool:
        return not (self.providers_added or self.providers_removed or self.providers_changed)

    def describe(self) -> str:
        """One line: `+beta -gamma ~alpha (+2/-1 connections)`, or `no change`."""
        parts = [*(f"+{p}" for p in self.providers_added),
                 *(f"-{p}" for p in self.providers_removed),
                 *(f"~{p}" for p in self.providers_changed)]
        if self.connections_added or self.connections_removed:
            parts.append(f"(+{len(self.connections_added)}/-{len(self.connections_removed)} "
                         "connections)")
        return " ".join(parts) or "no change"
