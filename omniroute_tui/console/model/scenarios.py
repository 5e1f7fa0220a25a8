"""The shipped scenarios as the picker lists them: each name with the first sentence of
its description (what `omniroute-sim list` prints)."""

from __future__ import annotations

from functools import cache

from ...config.problems import ConfigError

__all__ = ["shipped_with_summaries"]


@cache
def shipped_with_summaries() -> tuple[tuple[str, str], ...]:
    """(name, what happens) of every shipped scenario, by name; one that does not load
    says so (the picker still lists it: choosing it says why it cannot run)."""
    from simulator.cli import first_sentence
    from simulator.scenario import SCENARIOS_DIR, load_scenario

    found: list[tuple[str, str]] = []
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):
        try:
            found.append((path.stem, first_sentence(load_scenario(path).description)))
        except ConfigError as exc:
            found.append((path.stem, f"invalid: {exc.problems[0]}"))
    return tuple(found)
