"""The chaos simulator: scenario files, fake providers, virtual-time replay, reports."""

from .scenario import Scenario, load_scenario

__all__ = ["Scenario", "load_scenario"]
