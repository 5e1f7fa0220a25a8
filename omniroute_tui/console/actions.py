"""The console's one action table: key bindings, the footer, the help screen and the
command palette are all generated from it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

from .model.panes import PANES, Pane

__all__ = ["ACTIONS", "PANE_KEYS", "ConsoleAction", "bindings", "command_words"]


@dataclass(frozen=True)
class ConsoleAction:
    name: str  # the app's action_<name>
    key: str
    description: str
    help: str
    show: bool = True  # in the footer
    destructive: bool = False  # needs confirmation; refused in --read-only
    key_display: str | None = None
    #: a key that opens a text box: taken before any key after it is passed on, so that
    #: the rest of a burst (a paste, keys bunched by a laggy link) lands in the box
    opens_box: bool = False
    also: str | None = None  # the same action's conventional key (F1, F10), not in the footer


#: the pane keys (one list, `PANES`) stay out of the footer: each tab's label starts with
#: its key
ACTIONS: tuple[ConsoleAction, ...] = (
    *(ConsoleAction(f"pane('{spec.pane}')", spec.key, spec.name, spec.help, show=False)
      for spec in PANES),
    ConsoleAction("filter", "slash", "Filter", "filter the rows of this pane by text",
                  key_display="/", opens_box=True),
    ConsoleAction("command", "colon", "Command", "command line: a pane's name or an action "
                  "(tab completes, enter runs, escape closes)", show=False, key_display=":",
                  opens_box=True),
    ConsoleAction("sort", "s", "Sort", "sort the rows: failures, cooldown left, level, ... "
                  "(▼ marks the column)", show=False),
    ConsoleAction("wide", "w", "Wide", "every column of the providers pane (80 columns show "
                  "the most useful; the name stays put as the rest scroll)", show=False),
    ConsoleAction("move('down')", "j", "Down", "next row (or scroll the log down)",
                  show=False),
    ConsoleAction("move('up')", "k", "Up", "previous row (or scroll the log up)", show=False),
    ConsoleAction("move('top')", "g", "Top", "first row (top of the log)", show=False),
    ConsoleAction("move('bottom')", "G", "Bottom", "last row (end of the log)", show=False),
    ConsoleAction("detail", "enter", "Detail", "transitions and errors of the selected row",
                  show=False),
    ConsoleAction("pause", "space", "Pause", "pause or resume the scenario (on real time: "
                  "freeze the display, as z)", key_display="space"),
    ConsoleAction("times", "t", "Times", "events: how long ago (12s) or clock times "
                  "(01:23.4)", show=False),
    ConsoleAction("freeze", "z", "Freeze", "freeze the display to read it (data keeps coming "
                  "in; z again catches up)", show=False),
    ConsoleAction("go_back", "escape", "Back", "clear this pane's filter, else back to the pane "
                  "before", show=False, key_display="esc"),
    ConsoleAction("faster", "plus", "Faster", "speed the scenario up", show=False,
                  key_display="+"),
    ConsoleAction("slower", "minus", "Slower", "slow the scenario down", show=False,
                  key_display="-"),
    ConsoleAction("step", "n", "Step", "advance one virtual second while paused", show=False),
    ConsoleAction("jump", "f", "Jump", "play on to the next fault's start (a lesson: its "
                  "next step) and pause there; a room's viewers follow", show=False),
    ConsoleAction("scorecard", "S", "Scorecard", "the finished run in numbers: attempts, "
                  "failures and recovery per provider and fault, engine against naive "
                  "(shown by itself at the end)", show=False),
    ConsoleAction("restart", "R", "Restart", "replay the scenario from the start",
                  show=False, destructive=True),
    ConsoleAction("pick_scenario", "p", "Pick", "replay another shipped scenario from its "
                  "start (the picker; it opens at start when none was named)", show=False),
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
    ConsoleAction("help", "question_mark", "Help", "show every key (F1 too)",
                  key_display="?", also="f1"),
    ConsoleAction("glossary", "i", "Glossary", "what the words mean: breaker states, "
                  "hinted, backoff, dedup, budget, every skip reason", show=False),
    ConsoleAction("quit", "q", "Quit", "leave the console (F10 and ctrl+c too)",
                  also="f10"),
)

#: the actions that matter most on each pane: the help screen lists them first
PANE_KEYS: dict[Pane, tuple[str, ...]] = {
    Pane.OVERVIEW: ("detail", "sort", "reset_breaker", "force_open", "filter", "times"),
    Pane.PROVIDERS: ("detail", "sort", "wide", "reset_breaker", "force_open",
                     "clear_provider_lockouts", "filter"),
    Pane.CONNECTIONS: ("detail", "sort", "clear", "toggle_enabled", "filter"),
    Pane.LOCKOUTS: ("detail", "sort", "clear", "clear_provider_lockouts", "filter"),
    Pane.EVENTS: ("filter", "times", "move('down')", "move('up')", "move('top')",
                  "move('bottom')", "freeze"),
    Pane.SCENARIO: ("pause", "faster", "slower", "step", "jump", "scorecard", "restart",
                    "pick_scenario", "detail"),
    Pane.REQUESTS: ("filter", "detail", "sort"),
    Pane.AUDIT: ("detail", "filter"),
}


def command_words() -> list[str]:
    """What the `:` command line completes and runs: every pane's name, then every
    action without parameters (its `action_` name)."""
    return [*map(str, Pane), *(a.name for a in ACTIONS
                               if "(" not in a.name and a.name != "command")]


#: shown first in the footer, so that a narrow terminal still shows how to get help and out
FOOTER_FIRST = ("help", "quit")


def bindings() -> list[Binding]:
    ordered = sorted(ACTIONS, key=lambda a: a.name not in FOOTER_FIRST)
    made: list[Binding] = []
    for a in ordered:
        binding_id = a.name.split("(")[0] + ("-" + a.name.split("'")[1] if "'" in a.name else "")
        made.append(Binding(a.key, a.name, a.description, show=a.show,
                            key_display=a.key_display, tooltip=a.help, priority=a.opens_box,
                            id=binding_id))
        if a.also is not None:
            made.append(Binding(a.also, a.name, a.description, show=False,
                                id=f"{binding_id}-{a.also}"))
    return made + [Binding("ctrl+c", "quit", "Quit", show=False, priority=True,
                           id="quit-ctrl-c")]
