"""Failure kinds, breaker states and reasons, skip reasons: the vocabulary of the engine."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["BreakerReason", "BreakerState", "CooldownReason", "DedupWindow", "FailureKind",
           "SkipReason", "StreamCut"]


class FailureKind(StrEnum):
    """The one class every failed attempt falls into (docs/design.md §2)."""

    NETWORK = "network"
    TIMEOUT = "timeout"
    AUTH_FAILED = "auth_failed"
    QUOTA_EXHAUSTED = "quota_exhausted"
    FORBIDDEN = "forbidden"
    MODEL_NOT_FOUND = "model_not_found"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    CLIENT_ERROR = "client_error"
    #: the prompt is longer than the model's context: another model may take it
    CONTEXT_LENGTH = "context_length"
    CANCELLED = "cancelled"
    #: a stream that broke after its answer had started (docs/design.md §2, §7): reset,
    #: an upstream error event, a malformed event, no `[DONE]`, a stall; `StreamCut` says
    STREAM_CUT = "stream_cut"

    @classmethod
    def answer_status(cls, status: int, kind: FailureKind | None) -> int:
        """The status to answer with after a last attempt that got `status` (0 when no
        HTTP answer came: 504 for a timeout, 502 for anything else below HTTP)."""
        if status:
            return status
        return 504 if kind == cls.TIMEOUT else 502


class BreakerState(StrEnum):
    CLOSED = "CLOSED"
    DEGRADED = "DEGRADED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class BreakerReason(StrEnum):
    """Why a breaker changed state (the `reason` of a breaker event)."""

    THRESHOLD = "threshold"  # failures reached the threshold: OPEN
    FAILURES = "failures"  # failures reached the degraded threshold: DEGRADED
    RECOVERED = "recovered"  # successes brought the count down
    WINDOW_EXPIRED = "window_expired"  # the last counted failure aged out of the window
    RESET_TIMEOUT = "reset_timeout"  # the OPEN window ended: HALF_OPEN
    PROBE_SUCCEEDED = "probe_succeeded"
    PROBE_FAILED = "probe_failed"
    OPERATOR_RESET = "operator_reset"
    OPERATOR_FORCE_OPEN = "operator_force_open"
    FLEET_OPEN = "fleet_open"  # another replica of the fleet opened it
    FLEET_CLOSED = "fleet_closed"  # another replica closed it
    # a kind configured to open the breaker at once (`breaker.kinds.<kind>.immediate_open`)
    IMMEDIATE_NETWORK = "immediate_network"
    IMMEDIATE_TIMEOUT = "immediate_timeout"
    IMMEDIATE_AUTH_FAILED = "immediate_auth_failed"
    IMMEDIATE_QUOTA_EXHAUSTED = "immediate_quota_exhausted"
    IMMEDIATE_FORBIDDEN = "immediate_forbidden"
    IMMEDIATE_MODEL_NOT_FOUND = "immediate_model_not_found"
    IMMEDIATE_RATE_LIMITED = "immediate_rate_limited"
    IMMEDIATE_SERVER_ERROR = "immediate_server_error"
    IMMEDIATE_CLIENT_ERROR = "immediate_client_error"
    IMMEDIATE_CONTEXT_LENGTH = "immediate_context_length"
    IMMEDIATE_CANCELLED = "immediate_cancelled"
    IMMEDIATE_STREAM_CUT = "immediate_stream_cut"

    @classmethod
    def immediate(cls, kind: FailureKind) -> BreakerReason:
        """The reason for a breaker that `kind` opened at once."""
        return cls(f"immediate_{kind.value}")


class StreamCut(StrEnum):
    """What went wrong with a streamed answer (the `reason` of its result event).

    All but `first_token` end a `stream_cut`; `first_token` is the reason of a `timeout`:
    the stream's first content did not come within `request.first_token`, and nothing had
    been sent to the client (docs/design.md §7).
    """

    RESET = "reset"  # the connection broke mid-body: reset, closed, a chunked body cut short
    UPSTREAM_ERROR = "upstream_error"  # the upstream sent an error event
    BAD_EVENT = "bad_event"  # an event that is not SSE, not a JSON object, or too long
    NO_DONE = "no_done"  # the body ended without `data: [DONE]`
    IDLE = "idle"  # nothing came for `request.stream_idle`
    FIRST_TOKEN = "first_token"  # no content within `request.first_token` (a `timeout`)


class CooldownReason(StrEnum):
    """Why a cooldown was lifted, when the `cooldown` event says (docs/design.md §3)."""

    PROBE_FREED = "probe_freed"  # the breaker's probe succeeded: the backoff was the provider's
    #: a request carried on a cooling key was served (§4): the same, without a probe
    CARRIER_SERVED = "carrier_served"


class DedupWindow(StrEnum):
    """The deduplication window that keeps a failure from counting twice (§6)."""

    CONNECTION = "connection"  # once per connection per `dedup.connection_window`
    NETWORK = "network"  # once per provider per `dedup.network_window`


class SkipReason(StrEnum):
    """Why a target (or the rest of a target) was passed over without an attempt."""

    CIRCUIT_OPEN = "circuit_open"
    HALF_OPEN_BUSY = "half_open_busy"
    ALL_COOLING = "all_cooling"
    ALL_LOCKED = "all_locked"
    ALL_DISABLED = "all_disabled"
    RETRY_BUDGET = "retry_budget"
    UNKNOWN_TARGET = "unknown_target"
    #: the target's API family does not serve the request's endpoint, or its request cannot
    #: be translated to it (docs/design.md §14)
    NOT_SERVED = "not_served"
    #: not a skip: the route waits for its target's short Retry-After, or one quick retry
    #: after a 5xx, before it falls back to another model (`fallback_wait`, §7)
    FALLBACK_WAIT = "fallback_wait"
    #: the provider, or every key it could use, has `max_in_flight` attempts in flight
    #: (docs/design.md §6); as a wait's reason: the request waits in the queue for a slot
    AT_CAPACITY = "at_capacity"

    @property
    def is_temporary_unavailability(self) -> bool:
        """A cooldown, a lockout or a full provider: the kind of skip that makes the
        aggregate answer 429."""
        return self in (SkipReason.ALL_COOLING, SkipReason.ALL_LOCKED, SkipReason.AT_CAPACITY)
