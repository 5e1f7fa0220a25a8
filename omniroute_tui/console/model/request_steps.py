"""A request's "why" in words: each event the model kept of it, as the step it was, with
the layer that decided it. The model keeps the events; this is the only place they are
written out (the requests pane's detail, a record read back from a gateway)."""

from __future__ import annotations

from collections.abc import Iterable

from ...engine.events import (
    AttemptEvent,
    BudgetEvent,
    CooldownEvent,
    Event,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from ...engine.kinds import CooldownReason, SkipReason
from ...router.routes import RESUME_WHY
from .event_lines import streamed
from .text import clock_text, precise_ms

__all__ = ["SKIP_LAYERS", "request_steps"]

#: the layer that decided a skip, by its reason
SKIP_LAYERS = {
    SkipReason.CIRCUIT_OPEN: "breaker", SkipReason.HALF_OPEN_BUSY: "breaker",
    SkipReason.ALL_COOLING: "cooldown", SkipReason.ALL_DISABLED: "cooldown",
    SkipReason.ALL_LOCKED: "lockout", SkipReason.RETRY_BUDGET: "retry budget",
    SkipReason.UNKNOWN_TARGET: "router", SkipReason.NOT_SERVED: "router",
}


def request_steps(events: Iterable[Event]) -> list[tuple[int, str, str]]:
    """(time, layer, what) of each step, in the order the events came."""
    steps: list[tuple[int, str, str]] = []
    for event in events:
        steps.extend(_steps(event))
    return steps


def _steps(event: Event) -> list[tuple[int, str, str]]:
    t = event.t
    if isinstance(event, RequestEvent):
        tenant = f" from tenant {event.tenant}" if event.tenant else ""
        return [(t, "router", f"request for {event.route}{tenant}")]
    if isinstance(event, AttemptEvent):
        return _attempt(event)
    if isinstance(event, SkipEvent):
        back = (f", back in {precise_ms(event.retry_after_ms)}"
                if event.retry_after_ms is not None else "")
        return [(t, SKIP_LAYERS.get(event.reason, "router"),
                 f"skipped {event.provider}/{event.model}: {event.reason}{back}")]
    if isinstance(event, BudgetEvent):
        return [(t, "retry budget",
                 f"a retry on {event.provider} spent a token ({event.tokens:g} left)"
                 if event.spent else f"no token left for a retry on {event.provider}")]
    if isinstance(event, WaitEvent):
        return [(t, "admission", _wait(event))]
    if isinstance(event, ResultEvent):
        took, relayed = precise_ms(event.latency_ms), streamed(event)
        if event.kind is None:
            return [(t, "upstream", f"answered {event.status} in {took}{relayed}")]
        text = f"{event.kind} ({event.status})" if event.status else event.kind
        if event.reason is not None:
            text = f"{text}: {event.reason}"
        return [(t, "upstream", f"failed: {text} after {took}{relayed}")]
    if isinstance(event, ResponseEvent):
        served = f" from {event.served_by}" if event.served_by else ""
        return [(t, "router", f"answered the client {event.status}{served} after "
                              f"{precise_ms(event.latency_ms)}")]
    if isinstance(event, CooldownEvent):
        probe = event.reason is CooldownReason.PROBE_FREED
        return [(t, "cooldown", f"the {'probe' if probe else 'carried request'}'s success "
                                f"freed {event.provider}/{event.connection} "
                                "(its backoff was the provider's failing)")]
    return []


def _attempt(event: AttemptEvent) -> list[tuple[int, str, str]]:
    probe = " as the breaker's probe" if event.probe else ""
    if event.cooling_until is None:
        pass
    elif event.probe:
        probe += (f", on a key cooling for backoff until {clock_text(event.cooling_until)}"
                  " (every key was cooling: the probe tests the provider, not the key)")
    else:
        probe += (f", carried on a key cooling for backoff until "
                  f"{clock_text(event.cooling_until)} (every key it could use was cooling "
                  "and a breaker window had passed since the provider's last failure)")
    steps = []
    if event.why is not None:  # an ordering strategy's reason, or a resume's
        steps.append((event.t, "resume" if event.why.startswith(RESUME_WHY) else "strategy",
                      event.why))
    steps.append((event.t, "router", f"attempt {event.n} on "
                                     f"{event.provider}/{event.connection}/{event.model}{probe}"))
    return steps


def _wait(event: WaitEvent) -> str:
    if event.phase != "start":
        return f"routes again after waiting {precise_ms(event.delay_ms)}"
    if event.reason is SkipReason.FALLBACK_WAIT:
        return (f"waits {precise_ms(event.delay_ms)} to try {event.target} again "
                "before falling back to another model (fallback_wait)")
    return f"waits {precise_ms(event.delay_ms)} for {event.target} ({event.reason})"
