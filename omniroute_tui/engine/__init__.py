"""The sans-IO resilience engine: breakers, cooldowns, lockouts and anti-herd controls."""

from .breaker import BreakerAdmission, BreakerSnapshot, ProviderBreaker
from .bus import EventBus
from .classify import Classification, TransportFailure, classify, classify_transport
from .cooldown import ConnectionCooldown, ConnectionSnapshot
from .engine import EngineSnapshot, ProviderSpec, ResilienceEngine, UnknownTarget
from .events import (
    AttemptEvent,
    BreakerEvent,
    BudgetEvent,
    CooldownEvent,
    DedupEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    FaultEvent,
    LockoutEvent,
    OperatorEvent,
    ReloadEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from .kinds import BreakerState, FailureKind, SkipReason, StreamCut
from .lockout import LockoutSnapshot, ModelLockouts
from .reload import ReloadSummary
from .retry_hints import retry_hint_ms
from .settings import AuthKind, ResilienceSettings, default_settings

__all__ = [
    "AttemptEvent",
    "AuthKind",
    "BreakerAdmission",
    "BreakerEvent",
    "BreakerSnapshot",
    "BreakerState",
    "BudgetEvent",
    "Classification",
    "ConnectionCooldown",
    "ConnectionSnapshot",
    "CooldownEvent",
    "DedupEvent",
    "DisabledEvent",
    "EnabledEvent",
    "EngineSnapshot",
    "Event",
    "EventBus",
    "FailureKind",
    "FaultEvent",
    "LockoutEvent",
    "LockoutSnapshot",
    "ModelLockouts",
    "OperatorEvent",
    "ProviderBreaker",
    "ProviderSpec",
    "ReloadEvent",
    "ReloadSummary",
    "RequestEvent",
    "ResilienceEngine",
    "ResilienceSettings",
    "ResponseEvent",
    "ResultEvent",
    "SkipEvent",
    "SkipReason",
    "StreamCut",
    "TransportFailure",
    "UnknownTarget",
    "WaitEvent",
    "classify",
    "classify_transport",
    "default_settings",
    "retry_hint_ms",
]
