"""Operator actions: asked first (No focused), refused read-only, carried out through the
backend's operator interface in a worker, and a failure says what, on what and why. The
app gates its `run_action` with `DESTRUCTIVE` and holds one `OperatorControls`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..config.durations import format_ms
from ..engine.engine import UnknownTarget
from .actions import ACTIONS
from .model.panes import Pane
from .painting import TARGETS

if TYPE_CHECKING:
    from .app import ConsoleApp

__all__ = ["DESTRUCTIVE", "FORCE_OPEN_MS", "OperatorControls"]

FORCE_OPEN_MS = 5 * 60_000
#: the actions that change engine state: asked first, refused read-only
DESTRUCTIVE = frozenset(a.name for a in ACTIONS if a.destructive)


class OperatorControls:
    """What the keys that change engine state do, on the selected row's provider or
    connection of `app`."""

    def __init__(self, app: ConsoleApp) -> None:
        self.app = app

    def refuse(self) -> None:
        why = f" ({self.app.read_only_why})" if self.app.read_only_why else ""
        self.app.notify(f"read-only console{why}: operator actions are disabled",
                        title="refused", severity="warning")

    def question(self, action: str) -> str | None:
        """What the dialog asks before `action` on the selected row; None: nothing to
        ask it of (said to the user)."""
        pane, key = self.app.selected()
        provider = self.selected_provider()
        if action == "restart":
            return "Replay the scenario from the start?"
        if provider is None:
            self.app.notify("select a provider, connection or lockout first", severity="warning")
            return None
        if action == "reset_breaker":
            return f"Reset the breaker of {provider} to CLOSED?"
        if action == "force_open":
            return f"Force the breaker of {provider} OPEN for {format_ms(FORCE_OPEN_MS)}?"
        if action == "clear_provider_lockouts":
            return f"Clear every model lockout of {provider}?"
        if action == "clear":
            if pane == Pane.CONNECTIONS:
                return f"Clear the cooldown of {key}?"
            if pane == Pane.LOCKOUTS:
                return f"Clear the lockout of {key}?"
            self.app.notify("select a connection or a lockout to clear", severity="warning")
            return None
        if action == "toggle_enabled":
            if pane != Pane.CONNECTIONS or key is None:
                self.app.notify("select a connection to enable or disable", severity="warning")
                return None
            conn = self.app.model.connections[tuple(key.split("/", 1))]  # type: ignore[index]
            return f"{'Enable' if conn.disabled else 'Disable'} {key}?"
        return None

    def operate(self, what: str, target: str, do: Callable[[], Awaitable[None]]) -> None:
        """Carry out an operator action in a worker (on an attached console it is an HTTP
        call); a failure names the action, its target and the reason."""
        self.app.run_worker(self._carry_out(what, target, do), group="operator")

    async def _carry_out(self, what: str, target: str,
                         do: Callable[[], Awaitable[None]]) -> None:
        try:
            await do()
        except (UnknownTarget, ValueError, OSError) as exc:
            self.app.notify(f"{what} {target} failed: {exc}", title="action failed",
                        severity="error", timeout=10)
            return
        self.app.refresh_view()

    def selected_provider(self) -> str | None:
        """The provider of the selected row, whichever pane it is in."""
        kind, key = self.app.selected()
        return key.split("/", 1)[0] if key and kind in TARGETS else None

    def reset_breaker(self) -> None:
        if provider := self.selected_provider():
            op = self.app.backend.operator
            self.operate("reset of the breaker of", provider,
                          lambda: op.reset_breaker(provider, actor=self.app.operator))

    def force_open(self) -> None:
        if provider := self.selected_provider():
            op = self.app.backend.operator
            self.operate("force-open of", provider,
                          lambda: op.force_open(provider, FORCE_OPEN_MS, actor=self.app.operator))

    def clear(self) -> None:
        pane, key = self.app.selected()
        if key is None:
            return
        op = self.app.backend.operator
        if pane == Pane.CONNECTIONS:
            provider, conn = key.split("/", 1)
            self.operate("clearing the cooldown of", key,
                          lambda: op.clear_cooldown(provider, conn, actor=self.app.operator))
        elif pane == Pane.LOCKOUTS:
            provider, conn, model = key.split("/", 2)
            self.operate("clearing the lockout of", key,
                          lambda: op.clear_lockouts(provider, conn, model,
                                                    actor=self.app.operator))

    def clear_provider_lockouts(self) -> None:
        if provider := self.selected_provider():
            op = self.app.backend.operator
            self.operate("clearing the lockouts of", provider,
                          lambda: op.clear_lockouts(provider, actor=self.app.operator))

    def toggle_enabled(self) -> None:
        pane, key = self.app.selected()
        if pane != Pane.CONNECTIONS or key is None:
            return
        provider, conn = key.split("/", 1)
        disabled = self.app.model.connections[(provider, conn)].disabled
        op = self.app.backend.operator
        self.operate("enabling" if disabled else "disabling", key,
                      lambda: op.set_enabled(provider, conn, disabled, actor=self.app.operator))
