"""Command palette entries: every action of the table, and jumps to any entity."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .actions import ACTIONS
from .model.panes import Pane

if TYPE_CHECKING:
    from .app import ConsoleApp

__all__ = ["ConsoleCommands"]


class ConsoleCommands(Provider):
    def _entries(self) -> list[tuple[str, str, object]]:
        app: ConsoleApp = self.app  # type: ignore[assignment]
        # each entry with its key, so that the palette teaches the keys
        entries: list[tuple[str, str, object]] = [
            (f"{a.description} ({a.key_display or a.key})", a.help,
             partial(app.run_action, a.name))
            for a in ACTIONS
            if not (app.read_only and a.destructive)
        ]
        model = app.model
        for name in model.providers:
            entries.append((f"Jump to provider {name}", "providers pane",
                            partial(app.jump, Pane.PROVIDERS, name)))
        for provider, conn in model.connections:
            entries.append((f"Jump to connection {provider}/{conn}", "connections pane",
                            partial(app.jump, Pane.CONNECTIONS, (provider, conn))))
        for provider, conn, mdl in model.lockouts:
            entries.append((f"Jump to lockout {provider}/{conn}/{mdl}", "lockouts pane",
                            partial(app.jump, Pane.LOCKOUTS, (provider, conn, mdl))))
        return entries

    async def discover(self) -> Hits:
        for title, help_text, callback in self._entries():
            if not title.startswith("Jump"):
                yield DiscoveryHit(title, callback, help=help_text)  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback,  # type: ignore[arg-type]
                          help=help_text)
