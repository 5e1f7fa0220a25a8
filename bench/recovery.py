"""How soon traffic returns to a provider after it recovers, when it gave no retry hint.

Two variants of shipped scenarios, replayed in virtual time under the resilient policy:
`provider-outage` with a 30 s outage (503s, no Retry-After) and `429-storm` with a 45 s
storm whose 429s carry no Retry-After. For each it prints the seconds from the fault's
end to the first success on the provider (`ttr_ms`), the probes the provider saw and the
most attempts it saw in one OPEN window (docs/design.md §3, §8).

    .venv/bin/python bench/recovery.py
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from simulator.scenario import SCENARIOS_DIR, load_scenario
from simulator.virtual import run_virtual

#: (name, shipped scenario, [(text, replaced by)], the fault's name, the provider)
VARIANTS = (
    ("outage-30s-unhinted", "provider-outage",
     [("for: 3m}", "for: 30s}"), ("duration: 6m", "duration: 3m")], "outage", "alpha"),
    ("storm-45s-unhinted", "429-storm",
     [("retry_after: 10s, ", ""), ("for: 4m}", "for: 45s}"), ("duration: 5m", "duration: 3m")],
     "storm", "alpha"),
)


def variant_text(shipped: str, edits: list[tuple[str, str]]) -> str:
    """The shipped scenario's file with each edit made (each must apply exactly once)."""
    text = (SCENARIOS_DIR / f"{shipped}.yaml").read_text()
    for old, new in edits:
        if text.count(old) != 1:
            raise SystemExit(f"{shipped}.yaml: {old!r} is not there exactly once")
        text = text.replace(old, new)
    return text


def measure() -> dict[str, dict[str, Any]]:
    figures = {}
    for name, shipped, edits, fault, provider in VARIANTS:
        scenario = load_scenario(f"{name}.yaml", text=variant_text(shipped, edits))
        metrics = run_virtual(scenario, "resilient")
        stats = metrics["providers"][provider]
        figures[name] = {
            "ttr_ms": metrics["faults"][fault]["ttr_ms"],
            "probes": stats["probes"],
            "breaker_opens": stats["breaker_opens"],
            "max_attempts_per_open": stats["max_attempts_per_open"],
            "success_rate": metrics["success_rate"],
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = measure()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{'variant':<22} {'back after':>10} {'probes':>7} {'opens':>6} "
          f"{'max/OPEN':>9} {'success':>8}")
    for name, f in figures.items():
        back = "-" if f["ttr_ms"] is None else f"{f['ttr_ms'] / 1000:.1f} s"
        print(f"{name:<22} {back:>10} {f['probes']:>7} {f['breaker_opens']:>6} "
              f"{f['max_attempts_per_open']:>9} {f['success_rate']:>8}")


if __name__ == "__main__":
    main()
