"""The console's panes, by the id of their tab, and the one list the tabs, the pane keys,
help and the command palette are made from (`PANES`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["PANES", "Pane", "PaneSpec"]


class Pane(StrEnum):
    OVERVIEW = "overview"  # every layer in four lines; from 120x36 up, the dashboard
    PROVIDERS = "providers"
    CONNECTIONS = "connections"
    LOCKOUTS = "lockouts"
    EVENTS = "events"
    SCENARIO = "scenario"  # the fault timeline and the herd chart
    REQUESTS = "requests"  # each recent request and why it went where it went
    AUDIT = "audit"  # who did what and when


@dataclass(frozen=True)
class PaneSpec:
    """A pane as the screens name it: the key that shows it, its tab's word (short: eight
    tabs fit 80 columns), its name in the palette, what help says it shows, and its
    table's title (the tab's word unless said)."""

    pane: Pane
    key: str
    tab: str
    name: str
    help: str
    title: str = ""

    @property
    def label(self) -> str:
        """The tab's label: its key, then its word."""
        return f"{self.key} {self.tab}"

    @property
    def table_title(self) -> str:
        return self.title or self.tab


PANES: tuple[PaneSpec, ...] = (
    PaneSpec(Pane.OVERVIEW, "0", "Overview", "Overview",
             "every layer at a glance (a dashboard from 120x36 up)"),
    PaneSpec(Pane.PROVIDERS, "1", "Providers", "Providers", "show the providers pane"),
    PaneSpec(Pane.CONNECTIONS, "2", "Conns", "Connections", "show the connections pane"),
    PaneSpec(Pane.LOCKOUTS, "3", "Locks", "Locks", "show the model lockouts pane"),
    PaneSpec(Pane.EVENTS, "4", "Events", "Events", "show the events log"),
    PaneSpec(Pane.SCENARIO, "5", "Faults", "Faults",
             "the scenario: fault timeline, herd chart, lesson (enter)"),
    PaneSpec(Pane.REQUESTS, "6", "Reqs", "Requests",
             "recent requests: enter says why one went where", title="Requests"),
    PaneSpec(Pane.AUDIT, "7", "Audit", "Audit", "who did what and when (operator actions)"),
)
