"""The `:` command line (as k9s has it): a pane's name or an action, completed as typed."""

from __future__ import annotations

from collections.abc import Sequence

from textual.binding import Binding
from textual.suggester import SuggestFromList
from textual.widgets import Input

__all__ = ["CommandLine"]


class CommandLine(Input):
    """An input that suggests the first word of `words` its text starts; `tab` takes the
    suggestion (where there is none, tab is tab)."""

    BINDINGS = [Binding("tab", "complete", "Complete", show=False, id="command-complete")]

    def __init__(self, words: Sequence[str], *, id: str, disabled: bool = False) -> None:
        super().__init__(placeholder="a pane or an action: tab completes, enter runs, escape "
                         "closes", suggester=SuggestFromList(words, case_sensitive=False),
                         id=id, disabled=disabled)
        self.words = tuple(words)

    def action_complete(self) -> None:
        matches = [w for w in self.words if w.startswith(self.value.lower())]
        if not self.value or not matches:
            self.app.action_focus_next()
            return
        self.value = matches[0]
        self.cursor_position = len(self.value)
