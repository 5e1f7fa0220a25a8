"""The console's one action table: key bindings, the footer, the help screen and the
command palette are all generated from it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

from .model.panes import Pane

__all__ = ["ACTIONS", "ConsoleAction", "bindings"]


@dataclass(frozen=True)
class ConsoleAction:
    name: str  # the app's action_<name>
    key: str
    description: str
    help: str
    show: bool = True  # in the footer
    destructive: bool = False  # needs confirmation; refused in --read-only
    key_display: str | None = None


ACTIONS: tuple[ConsoleAction, ...] = (
    ConsoleAction(f"pane('{Pane.OVERVIEW}')", "0", "Overview",
                  "every layer at a glance (a dashboard from 120x36 up)"),
    ConsoleAction(f"pane('{Pane.PROVIDERS}')", "1", "Providers", "show the providers pane"),
    ConsoleAction(f"pane('{Pane.CONNECTIONS}')", "2", "Conns", "show the connections pane"),
    ConsoleAction(f"pane('{Pane.LOCKOUTS}')", "3", "Locks", "show the model lockouts pane"),
    ConsoleAction(f"pane('{Pane.EVENTS}')", "4", "Events", "show the events log"),
    ConsoleAction(f"pane('{Pane.SCENARIO}')", "5", "Faults",
                  "the scenario: fault timeline, herd chart, lesson (enter)"),
    ConsoleAction(f"pane('{Pane.REQUESTS}')", "6", "Requests",
                  "recent requests: enter says why one went where",
                  show=False),
    ConsoleAction(f"pane('{Pane.AUDIT}')", "7", "Audit", "who did what and when (operator actions)",
                  show=False),
    ConsoleAction("filter", "slash", "Filter", "filter the rows of this pane by text",
                  key_display="/"),
    ConsoleAction("sort", "s", "Sort", "sort the rows: failures, cooldown left, level, ...",
                  show=False),
    ConsoleAction("move('down')", "j", "Down", "next row (or scroll the log down)",
                  show=False),
    ConsoleAction("move('up')", "k", "Up", "previous row (or scroll the log up)", show=False),
    ConsoleAction("move('top')", "g", "Top", "first row (top of the log)", show=False),
    ConsoleAction("move('bottom')", "G", "Bottom", "last row (end of the log)", show=False),
    ConsoleAction("detail", "enter", "Detail", "transitions and errors of the selected row",
                  show=False),
    ConsoleAction("pause", "space", "Pause", "pause or resume the scenario",
                  key_display="space"),
    ConsoleAction("faster", "plus", "Faster", "speed the scenario up", show=False,
                  key_display="+"),
    ConsoleAction("slower", "minus", "Slower", "slow the scenario down", show=False,
                  key_display="-"),
    ConsoleAction("step", "n", "Step", "advance one virtual second while paused", show=False),
    ConsoleAction("restart", "R", "Restart", "replay the scenario from the start",
                  show=False, destructive=True),
    ConsoleAction("reset_breaker", "r", "Reset", "reset the selected provider's breaker",
                  destructive=True),
    ConsoleAction("force_open", "o", "Force open", "isolate the selected provider for 5 min",
                  show=False, destructive=True),
    ConsoleAction("clear", "c", "Clear", "clear the selected cooldown or lockout",
                  destructive=True),
    ConsoleAction("clear_provider_lockouts", "C", "Clear all",
                  "clear every lockout of the selected provider", show=False,
                  destructive=True),
    ConsoleAction("toggle_enabled", "e", "En/disable",
                  "enable or disable the selected connection", show=False, destructive=True),
    ConsoleAction("help", "question_mark", "Help", "show every key", key_display="?"),
    ConsoleAction("quit", "q", "Quit", "leave the console"),
)


#: shown first in the footer, so that a narrow terminal still shows how to get help and out
FOOTER_FIRST = ("help", "quit")


def bindings() -> list[Binding]:
    ordered = sorted(ACTIONS, key=lambda a: a.name not in FOOTER_FIRST)
    return [
        Binding(a.key, a.name, a.description, show=a.show, key_display=a.key_display,
                tooltip=a.help, id=a.name.split("(")[0] + (
                    "-" + a.name.split("'")[1] if "'" in a.name else ""))
        for a in ordered
    ]
