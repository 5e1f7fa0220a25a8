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
from .model.row_keys import ConnectionKey, LockoutKey, key_text
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
            if (connection := self._connection()) is not None:
                return f"Clear the cooldown of {key_text(connection)}?"
            if (lockout := self._lockout()) is not None:
                return f"Clear the lockout of {key_text(lockout)}?"
            self.app.notify("select a connection or a lockout to clear", severity="warning")
            return None
        if action == "toggle_enabled":
            connection = self._connection()
            if connection is None:
                self.app.notify("select a connection to enable or disable", severity="warning")
                return None
            disabled = self.app.model.connections[connection].disabled
            return f"{'Enable' if disabled else 'Disable'} {key_text(connection)}?"
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
        if key is None or kind not in TARGETS:
            return None
        return key if isinstance(key, str) else key[0]

    def _connection(self) -> ConnectionKey | None:
        """The selected row's connection, on the connections pane."""
        pane, key = self.app.selected()
        if pane != Pane.CONNECTIONS or not isinstance(key, tuple):
            return None
        return key[0], key[1]

    def _lockout(self) -> LockoutKey | None:
        """The selected row's lockout, on the lockouts pane."""
        pane, key = self.app.selected()
        if pane != Pane.LOCKOUTS or not isinstance(key, tuple):
            return None
        return key[0], key[1], key[2]

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
        op = self.app.backend.operator
        if (connection := self._connection()) is not None:
            provider, conn = connection
            self.operate("clearing the cooldown of", key_text(connection),
                          lambda: op.clear_cooldown(provider, conn, actor=self.app.operator))
        elif (lockout := self._lockout()) is not None:
            provider, conn, model = lockout
            self.operate("clearing the lockout of", key_text(lockout),
                          lambda: op.clear_lockouts(provider, conn, model,
                                                    actor=self.app.operator))

    def clear_provider_lockouts(self) -> None:
        if provider := self.selected_provider():
            op = self.app.backend.operator
            self.operate("clearing the lockouts of", provider,
                          lambda: op.clear_lockouts(provider, actor=self.app.operator))

    def toggle_enabled(self) -> None:
        connection = self._connection()
        if connection is None:
            return
        provider, conn = connection
        disabled = self.app.model.connections[connection].disabled
        op = self.app.backend.operator
        self.operate("enabling" if disabled else "disabling", key_text(connection),
                      lambda: op.set_enabled(provider, conn, disabled, actor=self.app.operator))
