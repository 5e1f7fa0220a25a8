"""The providers pane: a row a provider, its breaker and why it routes as it does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....engine.kinds import BreakerState, FailureKind, SkipReason
from ..history_lines import history_line
from ..text import (
    AGE_WIDTH,
    BREAKER_GLYPHS,
    FORCED_OPEN,
    LONGEST_DURATION,
    age_text,
    countdown_text,
    level_gauge,
    longest,
    sparkline,
)
from ..views import HISTORY, ProviderView

if TYPE_CHECKING:
    from ..console_model import ConsoleModel

__all__ = ["COLUMNS", "SORTS", "detail", "order", "rows"]

COLUMNS: tuple[tuple[str, int | None], ...] = (
    ("provider", None),
    ("breaker", 2 + longest([*BreakerState, FORCED_OPEN])),
    ("fail/thr", None), ("retry in", max(len("probe due"), LONGEST_DURATION)),
    ("cycles", None),
    ("last error, age", longest(FailureKind) + len(" (429) ") + AGE_WIDTH),
    ("attempts", HISTORY // 3), ("share", len("100%")), ("fails", HISTORY // 3),
    # why: retry budget left, failures dedup suppressed, admission waits, skips
    ("budget, age", len("▰▰▰▰▰ 99/99 ") + AGE_WIDTH), ("dedup", None), ("waits", None),
    ("skipped", longest(SkipReason) + len(" 99999")),
)
NAMES = tuple(name for name, _ in COLUMNS)
SORTS = ("config order", "failures", "state")
_SEVERITY = {BreakerState.OPEN: 0, BreakerState.HALF_OPEN: 1, BreakerState.DEGRADED: 2,
             BreakerState.CLOSED: 3}


def rows(model: ConsoleModel, now: int) -> dict[str, tuple[str, ...]]:
    rows: dict[str, tuple[str, ...]] = {}
    for v in model.providers.values():
        v.minute.roll(now)
    total = sum(sum(v.minute.counts) for v in model.providers.values())
    for name, v in model.providers.items():
        v.attempts.roll(now)
        v.errors.roll(now)
        share = f"{round(100 * sum(v.minute.counts) / total)}%" if total else "–"
        if v.open_until is not None:
            left = v.open_until - now
            retry = countdown_text(left) if left > 0 else "probe due"
        else:
            retry = "–"
        state = v.state
        if v.forced and v.state == BreakerState.OPEN:
            state = FORCED_OPEN  # by whom: the detail says
        # an OPEN breaker counts nothing new: a count past the threshold is the
        # failures that were in flight when it tripped (the detail has it whole)
        failures = min(v.failures, v.threshold) if v.state == BreakerState.OPEN \
            else v.failures
        error = "–" if v.last_error is None \
            else f"{v.last_error.text} {age_text(now, v.last_error_at)}"
        rows[name] = (
            name, f"{BREAKER_GLYPHS.get(state, '?')} {state}",
            f"{failures}/{v.threshold}", retry, str(v.cycles), error,
            sparkline(v.attempts.counts)[-10:], share, sparkline(v.errors.counts)[-10:],
            *_why(v, now),
        )
    return rows


def _why(v: ProviderView, now: int) -> tuple[str, str, str, str]:
    """Budget, dedup, waits and skips of a provider, as its row shows them (the
    budget as the last retry found it, with how long ago)."""
    if v.budget_tokens is None:
        budget = "full"
    elif v.budget_burst <= 0:  # attached: the gateway's state does not say its burst
        budget = f"{v.budget_tokens:g} left {age_text(now, v.budget_at)}"
    else:
        budget = (f"{level_gauge(int(v.budget_tokens), int(v.budget_burst), width=5)} "
                  f"{age_text(now, v.budget_at)}")
    waits = f"{v.waits}, {len(v.waiting)} now" if v.waiting else str(v.waits)
    top = v.skips.most_common(1)
    skipped = f"{top[0][0]} {top[0][1]}" if top else "–"
    return budget, str(v.deduped), waits, skipped


def order(model: ConsoleModel, sort: str, now: int) -> list[str]:
    views = list(model.providers.values())
    if sort == "failures":
        views.sort(key=lambda v: -v.failures)
    else:
        views.sort(key=lambda v: _SEVERITY.get(BreakerState(v.state), 4))
    return [v.name for v in views]


def detail(model: ConsoleModel, key: str, now: int
           ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    """The row's fields without its sparklines, the budget in tokens, the failures
    uncut, who forced it open, the requests waiting and every skip reason's count."""
    view = model.providers.get(key)
    if view is None:
        return None
    pairs = list(zip(NAMES, rows(model, now)[key], strict=True))
    pairs = [p for p in pairs if p[0] not in ("attempts", "fails", "skipped")]
    tokens = ("full" if view.budget_tokens is None
              else f"{view.budget_tokens:g} tokens" if view.budget_burst <= 0
              else f"{view.budget_tokens:g} of {view.budget_burst:g} tokens")
    pairs[pairs.index(next(p for p in pairs if p[0] == "budget, age"))] = (
        "budget", tokens if view.budget_at is None
        else f"{tokens}, {age_text(now, view.budget_at)} ago")
    pairs[2] = ("fail/thr", f"{view.failures}/{view.threshold}")
    if view.forced and view.state == BreakerState.OPEN:
        pairs.append(("forced by", view.forced_by or "an operator"))
    if view.waiting:
        pairs.append(("waiting now", ", ".join(sorted(view.waiting)[:6])))
    for reason, count in view.skips.most_common():
        pairs.append((f"skipped: {reason}", str(count)))
    return key, pairs, [history_line(e) for e in view.history]
