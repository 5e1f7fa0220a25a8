"""A finished replay in numbers, the engine beside the policy it was compared with: what
`omniroute-sim run` reports, on the console's screen (`S`, and by itself when a replay
ends). Plain text from the two runs' reports (docs/design.md §11)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["scorecard"]

Report = Mapping[str, Any]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _ms(value: int | float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.1f}s" if value >= 1000 else f"{value:.0f}ms"


def _per_request(report: Report) -> str:
    amplification = report.get("amplification")
    return "" if amplification is None else f" ({amplification:.2f} a request)"


def scorecard(name: str, engine: Report, compared: Report, policy: str
              ) -> tuple[str, list[tuple[str, str]], list[str]]:
    """The scorecard's title, its fields (engine · compared policy) and its lines: each
    provider's attempts, failures and time OPEN, then each fault's attempts during it and
    how long after its end the provider answered again."""
    def pair(key: str, show: Any = str) -> str:
        return f"{show(engine.get(key))} · {show(compared.get(key))}"

    fields = [
        ("", f"engine · {policy}"),
        ("requests", pair("requests", lambda v: f"{v:,}")),
        ("served", pair("success_rate", _pct)),
        ("attempts", f"{engine['attempts']:,}{_per_request(engine)} · "
                     f"{compared['attempts']:,}{_per_request(compared)}"),
        ("p99 latency", pair("p99_ms", _ms)),
        ("breaker opens", pair("breaker_opens")),
    ]
    lines = ["per provider: attempts, failures (by kind), time OPEN"]
    theirs = compared.get("providers", {})
    for provider, mine in engine.get("providers", {}).items():
        other = theirs.get(provider, {})
        lines.append(f"  {provider}: engine {_provider(mine)}")
        if other:
            lines.append(f"  {' ' * len(provider)}  {policy} {_provider(other)}")
    faults = engine.get("faults", {})
    if faults:
        lines += ["", "per fault: attempts while on, back after its end"]
        for fault, mine in faults.items():
            other = compared.get("faults", {}).get(fault, {})
            lines.append(f"  {fault}: engine {mine['attempts']:,} attempts, back "
                         f"{_back(mine.get('ttr_ms'))} · {policy} "
                         f"{other.get('attempts', 0):,} attempts, back "
                         f"{_back(other.get('ttr_ms'))}")
    return f"scorecard: {name}", fields, lines


def _provider(stats: Mapping[str, Any]) -> str:
    failures = stats.get("failures", {})
    failed = sum(failures.values())
    kinds = ", ".join(f"{kind} {count:,}" for kind, count in failures.items())
    opened = stats.get("breaker_opens", 0)
    open_for = f", OPEN {opened}× for {_ms(stats.get('open_ms', 0))}" if opened else ""
    return (f"{stats.get('attempts', 0):,} attempts, {failed:,} failed"
            f"{f' ({kinds})' if kinds else ''}{open_for}")


def _back(ttr_ms: int | None) -> str:
    return "never (in this run)" if ttr_ms is None else _ms(ttr_ms)
