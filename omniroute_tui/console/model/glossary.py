"""What the words on the console's screens mean: the glossary screen (`i`) lists these, and
a test holds it to the engine's own vocabulary (every breaker state, cooldown kind and skip
reason is here)."""

from __future__ import annotations

from ...engine.kinds import BreakerState, SkipReason

__all__ = ["GLOSSARY"]

_STATES = {
    BreakerState.CLOSED: "the provider's breaker lets traffic through; failures are counted",
    BreakerState.DEGRADED: "traffic still flows, but failures are piling up: a warning "
                           "before OPEN",
    BreakerState.OPEN: "no traffic to the provider until its window ends (retry in)",
    BreakerState.HALF_OPEN: "the window has ended: one probe request at a time decides "
                            "whether the provider is back (CLOSED) or not (OPEN again)",
}
_SKIPS = {
    SkipReason.CIRCUIT_OPEN: "passed over: the provider's breaker is OPEN",
    SkipReason.HALF_OPEN_BUSY: "passed over: the breaker is HALF_OPEN and its probe is "
                               "already out",
    SkipReason.ALL_COOLING: "passed over: every key of the provider cools down",
    SkipReason.ALL_LOCKED: "passed over: every key is locked out for this model",
    SkipReason.ALL_DISABLED: "passed over: every key is disabled by an operator",
    SkipReason.RETRY_BUDGET: "passed over: the provider's retry budget is spent, so no "
                             "more retries go to it for now",
    SkipReason.UNKNOWN_TARGET: "passed over: the route names a provider or model the config "
                               "does not have",
    SkipReason.NOT_SERVED: "passed over: the target's API cannot serve this kind of "
                           "request (or cannot take its translation)",
    SkipReason.FALLBACK_WAIT: "not a skip: the route waits for its target's short "
                              "Retry-After, or retries a 5xx once, before falling back",
    SkipReason.AT_CAPACITY: "passed over: the provider, or every key it could use, has its "
                            "max_in_flight attempts in flight; as a wait, the request "
                            "waited in the queue for a slot",
}

#: (term, meaning), in the order the screen lists them
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("breaker", "a provider's circuit breaker: it stops traffic to a provider that keeps "
                "failing, then lets a probe find out when it is back"),
    *((f"  {state}", meaning) for state, meaning in _STATES.items()),
    ("FORCED", "an operator forced the breaker OPEN (o) until the time shown"),
    ("fail/thr", "failures counted in the breaker's window / the count that opens it"),
    ("cycles", "how many times the breaker has opened in a row: each open lasts longer"),
    ("probe", "the one request a HALF_OPEN breaker lets through to test the provider"),
    ("cooldown", "a key (connection) rests after a failure and takes no traffic until "
                 "then; how long, and why:"),
    ("  backoff", "the key's own exponential backoff: each failure in a row doubles the "
                  "rest, up to the top of the ladder"),
    ("  hinted", "the provider said how long to wait (Retry-After or a rate-limit header) "
                 "and the key waits that long"),
    ("  quota", "the key's quota is spent: it rests until the quota resets"),
    ("backoff level", "how far up the backoff ladder the key is: 0 is fresh"),
    ("lockout", "a key locked out for one model only (that model's quota or access), free "
                "for the others"),
    ("disabled", "an operator took the key out of rotation (e); it stays out until enabled"),
    ("dedup", "failures the engine did not count again: the same failure of the same key "
              "seen by several requests at once counts once"),
    ("budget", "the retry budget: retries a provider may take, as tokens that refill with "
               "successes, so a failing provider is not hammered by retries"),
    ("waits", "requests that waited for a target to come back (admission waits) instead "
              "of failing at once"),
    ("age", "how long ago it happened (12s, 3m)"),
    ("amplification", "attempts sent upstream per request: 1.0 is one attempt each"),
    ("skipped", "why targets were passed over without an attempt, by reason:"),
    *((f"  {reason}", meaning) for reason, meaning in _SKIPS.items()),
    ("naive", "the comparison policy: every request tries every key at once, no breaker, "
              "no cooldown, no dedup (what resilience saves you from)"),
)
