"""Operator actions: asked first (No focused), refused read-only, carried out through the
backend's operator interface in a worker, and a failure says what, on what and why."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from textual.actions import ActionParseResult
from textual.dom import DOMNode

from ..config.durations import format_ms
from ..engine.engine import UnknownTarget
from .actions import ACTIONS
from .model.panes import Pane
from .painting import TARGETS, PaneView
from .screens.modals import ConfirmScreen

__all__ = ["FORCE_OPEN_MS", "OperatorActions"]

FORCE_OPEN_MS = 5 * 60_000
_DESTRUCTIVE = {a.name for a in ACTIONS if a.destructive}


class OperatorActions(PaneView):
    """The keys that change engine state, on the selected row's provider or connection."""

    operator: str
    clock: Callable[[], float]  # monotonic seconds, for the dialogs' guard time

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only: the operator actions are out of the footer (their keys still
        reach `run_action`, which says why they are refused)."""
        if self.read_only and action in _DESTRUCTIVE:
            return False
        return super().check_action(action, parameters)

    def _refuse(self) -> None:
        why = f" ({self.read_only_why})" if self.read_only_why else ""
        self.notify(f"read-only console{why}: operator actions are disabled",
                    title="refused", severity="warning")

    async def run_action(
        self, action: str | ActionParseResult, default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Destructive actions are refused in read-only mode and confirmed otherwise."""
        if isinstance(action, str) and action in _DESTRUCTIVE:
            if self.read_only:
                self._refuse()
                return True
            question = self._question(action)
            if question is None:
                return True

            def confirmed(answer: bool | None) -> None:
                if answer:
                    self.call_later(super(OperatorActions, self).run_action, action)

            self.push_screen(ConfirmScreen(question, clock=self.clock), confirmed)
            return True
        return await super().run_action(action, default_namespace, namespaces)

    def _question(self, action: str) -> str | None:
        pane, key = self._selected()
        provider = self._selected_provider()
        if action == "restart":
            return "Replay the scenario from the start?"
        if provider is None:
            self.notify("select a provider, connection or lockout first", severity="warning")
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
            self.notify("select a connection or a lockout to clear", severity="warning")
            return None
        if action == "toggle_enabled":
            if pane != Pane.CONNECTIONS or key is None:
                self.notify("select a connection to enable or disable", severity="warning")
                return None
            conn = self.model.connections[tuple(key.split("/", 1))]  # type: ignore[index]
            return f"{'Enable' if conn.disabled else 'Disable'} {key}?"
        return None

    def _operate(self, what: str, target: str, do: Callable[[], Awaitable[None]]) -> None:
        """Carry out an operator action in a worker (on an attached console it is an HTTP
        call); a failure names the action, its target and the reason."""
        self.run_worker(self._carry_out(what, target, do), group="operator")

    async def _carry_out(self, what: str, target: str,
                         do: Callable[[], Awaitable[None]]) -> None:
        try:
            await do()
        except (UnknownTarget, ValueError, OSError) as exc:
            self.notify(f"{what} {target} failed: {exc}", title="action failed",
                        severity="error", timeout=10)
            return
        self.refresh_view()

    def _selected_provider(self) -> str | None:
        """The provider of the selected row, whichever pane it is in."""
        kind, key = self._selected()
        return key.split("/", 1)[0] if key and kind in TARGETS else None

    def action_reset_breaker(self) -> None:
        if provider := self._selected_provider():
            op = self.backend.operator
            self._operate("reset of the breaker of", provider,
                          lambda: op.reset_breaker(provider, actor=self.operator))

    def action_force_open(self) -> None:
        if provider := self._selected_provider():
            op = self.backend.operator
            self._operate("force-open of", provider,
                          lambda: op.force_open(provider, FORCE_OPEN_MS, actor=self.operator))

    def action_clear(self) -> None:
        pane, key = self._selected()
        if key is None:
            return
        op = self.backend.operator
        if pane == Pane.CONNECTIONS:
            provider, conn = key.split("/", 1)
            self._operate("clearing the cooldown of", key,
                          lambda: op.clear_cooldown(provider, conn, actor=self.operator))
        elif pane == Pane.LOCKOUTS:
            provider, conn, model = key.split("/", 2)
            self._operate("clearing the lockout of", key,
                          lambda: op.clear_lockouts(provider, conn, model,
                                                    actor=self.operator))

    def action_clear_provider_lockouts(self) -> None:
        if provider := self._selected_provider():
            op = self.backend.operator
            self._operate("clearing the lockouts of", provider,
                          lambda: op.clear_lockouts(provider, actor=self.operator))

    def action_toggle_enabled(self) -> None:
        pane, key = self._selected()
        if pane != Pane.CONNECTIONS or key is None:
            return
        provider, conn = key.split("/", 1)
        disabled = self.model.connections[(provider, conn)].disabled
        op = self.backend.operator
        self._operate("enabling" if disabled else "disabling", key,
                      lambda: op.set_enabled(provider, conn, disabled, actor=self.operator))
