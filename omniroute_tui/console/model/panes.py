"""The console's panes, by the id of their tab (keys `0` to `7` show them)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Pane"]


class Pane(StrEnum):
    OVERVIEW = "overview"  # every layer in four lines; from 120x36 up, the dashboard
    PROVIDERS = "providers"
    CONNECTIONS = "connections"
    LOCKOUTS = "lockouts"
    EVENTS = "events"
    SCENARIO = "scenario"  # the fault timeline and the herd chart
    REQUESTS = "requests"  # each recent request and why it went where it went
    AUDIT = "audit"  # who did what and when
