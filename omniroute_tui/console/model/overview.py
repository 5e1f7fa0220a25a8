"""The overview pane's summary: every layer and the traffic in four lines, and the
routes' strategies in a fifth (the dashboard's header too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config.hidden import visible
from ...config.words import plural
from ...engine.kinds import BreakerState
from .text import COOLDOWN_KINDS, FORCED_OPEN

if TYPE_CHECKING:
    from .console_model import ConsoleModel

__all__ = ["ROUTE_TEXT", "lines"]

ROUTES_SHOWN = 8  # routes the overview names; the rest are counted


#: a route's name or strategy in the overview at most (an attached gateway's are not ours
#: to bound: a name of 200,000 characters took 1.4 s to paint)
ROUTE_TEXT = 40


def lines(model: ConsoleModel, now: int) -> list[str]:
    """All three layers and the traffic in four lines, and the routes' strategies in
    a fifth when the routes are known (the overview pane, and the dashboard's
    header)."""
    by_state: dict[str, list[str]] = {}
    for v in model.providers.values():
        word = FORCED_OPEN if v.forced and v.state == BreakerState.OPEN else v.state
        by_state.setdefault(word, []).append(v.name)
    order = (FORCED_OPEN, BreakerState.OPEN, BreakerState.HALF_OPEN,
             BreakerState.DEGRADED, BreakerState.CLOSED)
    parts = []
    for state in order:
        names = by_state.get(state)
        if not names:
            continue
        if state == BreakerState.CLOSED:
            parts.append(f"{len(names)} CLOSED")
        else:
            more = "…" if len(names) > 3 else ""
            parts.append(f"{len(names)} {state} ({', '.join(names[:3])}{more})")
    breakers = ", ".join(parts) or "none"
    cooling = [c for c in model.connections.values()
               if not c.disabled and c.cooling_until > now]
    kinds = {k: sum(1 for c in cooling if c.cooling_kind == k) for k in COOLDOWN_KINDS}
    why = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
    disabled = sum(1 for c in model.connections.values() if c.disabled)
    locked = [v for v in model.lockouts.values() if v.until > now]
    models = sorted({f"{v.provider}/{v.model}" for v in locked})
    rate, ok = model.rates(now)
    faults = ", ".join(f"{n} on {t}" for n, t in model.active_faults.items()) or "none"
    cooling_line = (f"{len(cooling)} of {plural(len(model.connections), 'connection')} "
                    "cooling")
    if why:
        cooling_line += f" ({why})"
    locked_line = f"{plural(len(locked), 'key')} locked"
    if models:
        more = "…" if len(models) > 3 else ""
        locked_line += f" on {plural(len(models), 'model')} ({', '.join(models[:3])}{more})"
    answered = "–" if ok is None else f"{ok * 100:.0f}%"
    lines = [
        f"breakers   {breakers}",
        f"cooldowns  {cooling_line}; {disabled} disabled",
        f"lockouts   {locked_line}",
        f"traffic    {rate:.1f} req/s, {answered} answered ok; faults: {faults}",
        *([_routes_line(model)] if model.routes else []),
    ]
    # one line each, as written: a line break in an attached gateway's name would
    # start a line of its own (`breakers   0 OPEN` under the real one)
    return [visible(line) for line in lines]


def _routes_line(model: ConsoleModel) -> str:
    """`routes     chat priority, fast weighted` (past ROUTES_SHOWN: `and 12 more`)."""
    named = [f"{_clipped(name)} {_clipped(strategy)}" for name, strategy
             in list(model.routes.items())[:ROUTES_SHOWN]]
    more = len(model.routes) - len(named)
    return "routes     " + ", ".join(named) + (f" and {more} more" if more else "")


def _clipped(text: str) -> str:
    """At most ROUTE_TEXT characters, the last of them `…` when cut."""
    return text if len(text) <= ROUTE_TEXT else text[:ROUTE_TEXT - 1] + "…"
