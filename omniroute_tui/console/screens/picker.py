"""The scenario picker: every shipped scenario with what happens in it; enter replays the
one chosen, from its start (`p`, `:pick_scenario`, and at start when none was named)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from ..model.scenarios import shipped_with_summaries
from .modals import GuardedScreen

__all__ = ["ScenarioPicker"]


_NAME_WIDTH = max((len(name) for name, _ in shipped_with_summaries()), default=10)


def _row(name: str, summary: str) -> Table:
    """A scenario's line: its name, then what happens, wrapped in its own column."""
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(width=_NAME_WIDTH, no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text(name, style="bold"), Text(summary))
    return grid


class ScenarioPicker(GuardedScreen[str | None]):
    """Dismissed with the chosen scenario's name, or None (escape: the run goes on). A
    choice replaces the run: it counts once the list has been shown for its guard time
    (`p` and Enter in one burst, a paste, replayed nothing)."""

    BINDINGS = [
        Binding("escape,q", "dismiss(None)", "Close", id="picker-close"),
        Binding("j", "cursor('down')", "Down", show=False, id="picker-down"),
        Binding("k", "cursor('up')", "Up", show=False, id="picker-up"),
    ]
    AUTO_FOCUS = "#scenarios"

    def __init__(self, current: str | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`current`: the scenario running, highlighted first."""
        super().__init__(clock=clock)
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Replay a scenario", id="title")
            yield OptionList(*[Option(_row(name, summary), id=name)
                               for name, summary in shipped_with_summaries()],
                             id="scenarios")
            yield Label("↑↓ j k choose · enter replays it from the start · escape closes",
                        id="hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        if self.current is not None:
            try:
                options.highlighted = options.get_option_index(self.current)
            except LookupError:
                options.highlighted = 0
        else:
            options.highlighted = 0

    def action_cursor(self, where: str) -> None:
        options = self.query_one(OptionList)
        if where == "down":
            options.action_cursor_down()
        else:
            options.action_cursor_up()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if self.settled("Enter"):
            self.dismiss(event.option.id)

