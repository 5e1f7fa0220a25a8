"""Failure kinds, breaker states and skip reasons: the vocabulary of the engine."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["BREAKER_FAILURE_KINDS", "BreakerState", "FailureKind", "SkipReason"]


class FailureKind(StrEnum):
    """The one class every failed attempt falls into (SPEC §2)."""

    NETWORK = "network"
    TIMEOUT = "timeout"
    AUTH_FAILED = "auth_failed"
    QUOTA_EXHAUSTED = "quota_exhausted"
    FORBIDDEN = "forbidden"
    MODEL_NOT_FOUND = "model_not_found"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    CLIENT_ERROR = "client_error"
    CANCELLED = "cancelled"

    @classmethod
    def answer_status(cls, status: int, kind: FailureKind | None) -> int:
        """The status to answer with after a last attempt that got `status` (0 when no
        HTTP answer came: 504 for a timeout, 502 for anything else below HTTP)."""
        if status:
            return status
        return 504 if kind == cls.TIMEOUT else 502


#: Kinds that count as breaker failures unless a per-kind override says otherwise.
BREAKER_FAILURE_KINDS = frozenset(
    {FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR, FailureKind.TIMEOUT, FailureKind.NETWORK}
)


class BreakerState(StrEnum):
    CLOSED = "CLOSED"
    DEGRADED = "DEGRADED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class SkipReason(StrEnum):
    """Why a target (or the rest of a target) was passed over without an attempt."""

    CIRCUIT_OPEN = "circuit_open"
    HALF_OPEN_BUSY = "half_open_busy"
    ALL_COOLING = "all_cooling"
    ALL_LOCKED = "all_locked"
    ALL_DISABLED = "all_disabled"
    RETRY_BUDGET = "retry_budget"
    UNKNOWN_TARGET = "unknown_target"

    @property
    def is_temporary_unavailability(self) -> bool:
        """A cooldown or a lockout: the kind of skip that makes the aggregate answer 429."""
        return self in (SkipReason.ALL_COOLING, SkipReason.ALL_LOCKED)
