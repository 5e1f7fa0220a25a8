"""Resilience settings (docs/design.md §8): typed, frozen, with the per-auth defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from .consequences import BREAKER_FAILURE_KINDS
from .kinds import FailureKind

__all__ = [
    "STREAM_IDLE_MS",
    "AdmissionSettings",
    "AuthKind",
    "BreakerKindOverride",
    "BreakerSettings",
    "CooldownSettings",
    "DedupSettings",
    "LockoutSettings",
    "RequestSettings",
    "ResilienceSettings",
    "RetryBudgetSettings",
    "default_settings",
]

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
#: `request.stream_idle`'s default (docs/design.md §8 says why)
STREAM_IDLE_MS = 30 * SECOND


class AuthKind(StrEnum):
    APIKEY = "apikey"
    OAUTH = "oauth"


@dataclass(frozen=True)
class BreakerKindOverride:
    """Per-kind breaker behaviour (`breaker.kinds.<kind>`); None keeps the default."""

    counts: bool | None = None
    immediate_open: bool | None = None
    reset_timeout_ms: int | None = None


@dataclass(frozen=True)
class BreakerSettings:
    failure_threshold: int
    degraded_threshold: int
    reset_timeout_ms: int
    failure_window_ms: int
    half_open_probes: int
    escalate_after: int
    max_multiplier: int
    #: the floor under an OPEN window taken from a retry hint (hinted recovery, §3)
    min_reset_ms: int = SECOND
    kinds: Mapping[FailureKind, BreakerKindOverride] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def counts(self, kind: FailureKind) -> bool:
        """Whether an attempt of `kind` is a breaker failure."""
        override = self.kinds.get(kind)
        if override is not None:
            if override.counts is not None:
                return override.counts
            if override.immediate_open:
                return True
        return kind in BREAKER_FAILURE_KINDS

    def opens_immediately(self, kind: FailureKind) -> bool:
        override = self.kinds.get(kind)
        return bool(override and override.immediate_open)

    def base_reset_ms(self, kind: FailureKind | None) -> int:
        override = self.kinds.get(kind) if kind is not None else None
        if override is not None and override.reset_timeout_ms is not None:
            return override.reset_timeout_ms
        return self.reset_timeout_ms

    def effective_reset_ms(self, cycles: int, kind: FailureKind | None = None) -> int:
        """The OPEN duration after `cycles` consecutive failed probes (escalation, §3)."""
        base = self.base_reset_ms(kind)
        if cycles <= self.escalate_after:
            return base
        exponent = cycles - self.escalate_after
        # cap the exponent so the power never grows without bound
        factor = min(1 << min(exponent, 62), self.max_multiplier)
        return base * factor

    def open_window_ms(self, cycles: int, kind: FailureKind | None, hint_ms: int | None) -> int:
        """How long an OPEN lasts: the escalated reset, or, when the failure that opened it
        said when to come back, that hint honoured up to the breaker's longest window:
        `min(max(hint, min_reset), reset_timeout * max_multiplier)` (§3)."""
        if hint_ms is None:
            return self.effective_reset_ms(cycles, kind)
        longest = self.base_reset_ms(kind) * self.max_multiplier
        return min(max(hint_ms, self.min_reset_ms), longest)


@dataclass(frozen=True)
class CooldownSettings:
    base_ms: int
    max_level: int
    max_ms: int
    quota_ms: int

    def backoff_ms(self, level: int) -> int:
        """`min(base * 2^level, max)` for a connection at `level`."""
        return min(self.base_ms << min(level, 62), self.max_ms)


@dataclass(frozen=True)
class LockoutSettings:
    base_ms: int
    max_ms: int
    max_steps: int
    window_ms: int

    def duration_ms(self, failures: int) -> int:
        """`min(base * 2^(n-1), max)` with the exponent capped at `max_steps`."""
        exponent = min(max(failures - 1, 0), self.max_steps, 62)
        return min(self.base_ms << exponent, self.max_ms)


@dataclass(frozen=True)
class DedupSettings:
    connection_window_ms: int
    network_window_ms: int


@dataclass(frozen=True)
class RetryBudgetSettings:
    ratio: float
    burst: int


@dataclass(frozen=True)
class AdmissionSettings:
    max_wait_ms: int
    margin_ms: int


@dataclass(frozen=True)
class RequestSettings:
    """`timeout_ms` bounds an attempt up to its answer (a stream's: its first event);
    `stream_idle_ms` the gap between two events of a stream once it is relayed;
    `first_token_ms` (0: off) the time from the attempt's start to a stream's first
    content, which is held back until then (docs/design.md §7, §8)."""

    max_attempts: int
    timeout_ms: int
    stream_idle_ms: int = STREAM_IDLE_MS
    first_token_ms: int = 0


@dataclass(frozen=True)
class ResilienceSettings:
    breaker: BreakerSettings
    cooldown: CooldownSettings
    lockout: LockoutSettings
    dedup: DedupSettings
    retry_budget: RetryBudgetSettings
    admission: AdmissionSettings
    request: RequestSettings
    jitter: float = 0.0


def default_settings(auth: AuthKind = AuthKind.APIKEY) -> ResilienceSettings:
    """The defaults of docs/design.md §8 for a provider authenticated with `auth`."""
    oauth = auth is AuthKind.OAUTH
    return ResilienceSettings(
        breaker=BreakerSettings(
            failure_threshold=3 if oauth else 5,
            degraded_threshold=2 if oauth else 3,
            reset_timeout_ms=(10 if oauth else 5) * SECOND,
            failure_window_ms=(15 if oauth else 30) * MINUTE,
            half_open_probes=1,
            escalate_after=6,
            max_multiplier=6,
        ),
        cooldown=CooldownSettings(
            base_ms=(5 if oauth else 3) * SECOND,
            max_level=8 if oauth else 5,
            max_ms=20 * MINUTE,
            quota_ms=HOUR,
        ),
        lockout=LockoutSettings(
            base_ms=2 * MINUTE, max_ms=30 * MINUTE, max_steps=10, window_ms=30 * MINUTE
        ),
        dedup=DedupSettings(connection_window_ms=5 * SECOND, network_window_ms=10 * SECOND),
        retry_budget=RetryBudgetSettings(ratio=0.2, burst=10),
        admission=AdmissionSettings(max_wait_ms=5 * SECOND, margin_ms=50),
        request=RequestSettings(max_attempts=5, timeout_ms=60 * SECOND),
        jitter=0.0,
    )
