"""Modal screens: confirmation, help, and an entity's detail."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from ...config.hidden import visible
from ..actions import ACTIONS, PANE_KEYS, ConsoleAction
from ..model.glossary import GLOSSARY
from ..model.panes import Pane
from ..widgets.scrollbars import whole_cell_scrollbars

__all__ = ["CONFIRM_GUARD_S", "HINT", "ConfirmScreen", "DetailScreen", "GuardedScreen",
           "HelpScreen"]

Answer = TypeVar("Answer")

#: the detail's keys, on its bottom border
HINT = "j k scroll · escape closes"
#: a dialog's Yes counts only once the dialog has been on screen this long (seconds): keys
#: that arrive together with the one that opened it (a paste, keys bunched by a laggy SSH
#: link) are not answers
CONFIRM_GUARD_S = 0.5


def _key_table(rows: Sequence[tuple[str | None, str]], *, words: bool = False) -> Group:
    """Help's rows as a two-column grid: a description too long for the line wraps under
    itself, not under the keys. Cells are plain text (no markup). `words`: the first
    column holds terms, not keys: left-aligned and as wide as the longest."""
    parts: list[Text | Table] = []
    grid: Table | None = None
    for key, what in rows:
        if key is None:  # a heading or a blank line ends the grid above it
            grid = None
            parts.append(Text(what))
            continue
        if grid is None:
            grid = Table.grid(padding=(0, 0, 0, 2))
            if words:
                grid.add_column(width=max(len(k) for k, _ in rows if k), no_wrap=True)
            else:
                grid.add_column(justify="right", width=7, no_wrap=True)
            grid.add_column(ratio=1)
            parts.append(grid)
        grid.add_row(Text(key), Text(what))
    return Group(*parts)


def field_lines(fields: Sequence[tuple[str, str]]) -> str:
    """A detail's fields, one a line, the names right-aligned to the longest (a fixed
    width pushed `skipped: circuit_open` and its value out of line)."""
    width = max((len(name) for name, _ in fields), default=0)
    return "\n".join(f"{name:>{width}}  {value}" for name, value in fields)


class GuardedScreen(ModalScreen[Answer]):
    """A dialog whose answer that changes something counts only once it has been painted
    and shown for CONFIRM_GUARD_S on `clock` (monotonic seconds): a key that came in the
    same burst as the one that opened it is not an answer."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.shown_at: float | None = None  # when it was first painted

    def on_mount(self) -> None:
        self.call_after_refresh(self._painted)

    def _painted(self) -> None:
        self.shown_at = self.clock()

    def settled(self, what: str) -> bool:
        """Whether the dialog has been shown long enough for `what` to count; if not,
        says so ("Yes ignored: ...")."""
        if self.shown_at is not None and self.clock() - self.shown_at >= CONFIRM_GUARD_S:
            return True
        self.notify(f"{what} ignored: it came before this dialog had been shown for "
                    f"{CONFIRM_GUARD_S:g} s; press it again", severity="warning", timeout=4)
        return False


class ConfirmScreen(GuardedScreen[bool]):
    """Asks before a destructive action; `y` confirms, `n` or escape cancels. **No** has
    the focus, so a stray Enter cancels. Yes (the key or the button) counts only once the
    dialog has been shown for its guard time (GuardedScreen)."""

    AUTO_FOCUS = "#no"

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes"),
        Binding("n", "answer(False)", "No", id="confirm-no"),
        Binding("escape", "answer(False)", "Cancel", id="confirm-cancel"),
    ]

    def __init__(self, question: str, *, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        super().__init__(clock=clock)
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        if answer and not self.settled("Yes"):
            return
        self.dismiss(answer)


class HelpScreen(ModalScreen[None]):
    """Every key of the console, from the action table; it scrolls where it does not fit."""

    BINDINGS = [
        Binding("escape,question_mark,q,f1", "dismiss", "Close", id="help-close"),
        Binding("j", "scroll('down')", "Down", show=False, id="help-down"),
        Binding("k", "scroll('up')", "Up", show=False, id="help-up"),
    ]
    AUTO_FOCUS = "#keys-scroll"

    def __init__(self, pane: Pane = Pane.PROVIDERS, *, read_only: bool = False,
                 lesson: Sequence[tuple[str, str]] = ()) -> None:
        """`lesson`: the keys a running lesson adds, (key, what it does), listed first."""
        super().__init__()
        self.pane = pane
        self.read_only = read_only
        self.lesson = tuple(lesson)

    def _row(self, a: ConsoleAction) -> tuple[str, str]:
        asks = ("  (refused: read-only)" if self.read_only else "  (asks first)"
                ) if a.destructive else ""
        return a.key_display or a.key, f"{a.help}{asks}"

    @property
    def rows(self) -> list[tuple[str | None, str]]:
        """What help lists, in order: (key, what it does), or (None, a heading or a blank
        line). A running lesson's keys first, then this pane's, then every other key."""
        first = PANE_KEYS.get(self.pane, ())
        mine = [a for name in first for a in ACTIONS if a.name == name]
        lesson: list[tuple[str | None, str]] = [
            (None, "In this lesson:"), *self.lesson, (None, "")] if self.lesson else []
        return [*lesson, (None, f"On this pane ({self.pane}):"), *map(self._row, mine),
                (None, ""), (None, "Everywhere:"),
                *(self._row(a) for a in ACTIONS if a.name not in first),
                ("←↑↓→", "move the cursor; → and ← scroll a wide table's columns"),
                ("tab", "the next table of the dashboard (shift+tab: the one before)"),
                ("ctrl+p", "command palette: every action, jump to any entity")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Keys", id="title")
            with VerticalScroll(id="keys-scroll"):
                yield Static(_key_table(self.rows), id="keys")
            yield Label("↑↓ j k scroll · escape closes", id="hint")

    def on_mount(self) -> None:
        whole_cell_scrollbars(self.query_one("#keys-scroll", VerticalScroll))

    def action_scroll(self, where: str) -> None:
        scroll = self.query_one("#keys-scroll", VerticalScroll)
        if where == "down":
            scroll.scroll_down()
        else:
            scroll.scroll_up()


class GlossaryScreen(HelpScreen):
    """What the words on the screens mean (`model.glossary`): laid out, scrolled and closed
    as the keys are."""

    BINDINGS = [
        Binding("escape,i,q", "dismiss", "Close", id="glossary-close"),
        Binding("j", "scroll('down')", "Down", show=False, id="glossary-down"),
        Binding("k", "scroll('up')", "Up", show=False, id="glossary-up"),
    ]

    @property
    def rows(self) -> list[tuple[str | None, str]]:
        return list(GLOSSARY)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("What the words mean", id="title")
            with VerticalScroll(id="keys-scroll"):
                yield Static(_key_table(self.rows, words=True), id="keys")
            yield Label("↑↓ j k scroll · escape closes", id="hint")


class DetailScreen(ModalScreen[None]):
    """An entity's current row, transition history and recent errors; `j`/`k` scroll."""

    BINDINGS = [
        Binding("escape,enter,q", "dismiss", "Close", id="detail-close"),
        Binding("j,down", "scroll('down')", "Down", show=False, id="detail-down"),
        Binding("k,up", "scroll('up')", "Up", show=False, id="detail-up"),
    ]

    def __init__(self, title: str, current: Iterable[tuple[str, str]],
                 history: Iterable[str]) -> None:
        super().__init__()  # names shown with hidden characters escaped, like the tables'
        self.heading = visible(title)
        self.current = [(k, visible(v)) for k, v in current]
        self.history = [visible(line) for line in history]

    def compose(self) -> ComposeResult:
        # the keys are on the dialog's bottom border: however long the fields, never cut
        with Vertical(id="dialog") as dialog:
            dialog.border_subtitle = HINT
            yield Label(self.heading, id="title", markup=False)
            yield Static(field_lines(self.current), id="current", markup=False)
            with VerticalScroll(id="history"):
                yield Static("\n".join(self.history[-40:]) or "no transitions yet",
                             markup=False)

    def on_mount(self) -> None:
        whole_cell_scrollbars(self.query_one("#history", VerticalScroll))

    def action_scroll(self, where: str) -> None:
        history = self.query_one("#history", VerticalScroll)
        if where == "down":
            history.scroll_down(animate=False)
        else:
            history.scroll_up(animate=False)
