"""What each failure kind does, in one table that the engine and the router read.

Everything a classified outcome changes is decided here: which layer it marks (a
connection's cooldown, a model's lockout, a disabled key), what it means for the
provider's breaker, which deduplication window it counts in, whether it waits out a
quota or backs off, and where the request goes next. docs/design.md §2 prints this table;
§3 to §7 say what each layer then does with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from .kinds import DedupWindow, FailureKind

__all__ = [
    "BREAKER_FAILURE_KINDS", "CONSEQUENCES", "BreakerEffect", "Consequence", "Layer", "Then",
    "Wait",
]


class Layer(StrEnum):
    """What a failure marks on the connection (or the connection's model) it happened on."""

    COOLDOWN = "cooldown"  # the connection is not selected until its cooldown ends
    LOCKOUT = "lockout"  # the (connection, model) pair is not selected until it ends
    DISABLE = "disable"  # the connection is disabled until an operator enables it
    NONE = "none"


class BreakerEffect(StrEnum):
    """What an outcome tells the provider's breaker."""

    FAILURE = "failure"  # a breaker failure, once it passes deduplication
    SUCCESS = "success"  # the provider answered (a 404 or a 400 is an answer)
    NONE = "none"  # no word about the provider: the client gave up


class Wait(StrEnum):
    """How long the layer's mark lasts when the upstream gave no hint."""

    BACKOFF = "backoff"  # escalating: cooldown.base * 2^level, lockout.base * 2^(n-1)
    QUOTA = "quota"  # a spent quota: cooldown.quota (level unchanged) or lockout.max


class Then(StrEnum):
    """Where the request goes after the attempt."""

    NEXT_TARGET = "next_target"  # the provider is in trouble: leave it
    NEXT_CONNECTION = "next_connection"  # this key or model is: try the provider's next key
    RESPOND = "respond"  # back to the client as it is, no fallback


@dataclass(frozen=True, slots=True)
class Consequence:
    """What one failure kind does (`quota_layer`: on a `per_model_quota` provider)."""

    layer: Layer
    quota_layer: Layer
    breaker: BreakerEffect
    dedup: DedupWindow
    wait: Wait
    #: whether an admission wait may wait the mark out (§6; a missing model never returns)
    awaited: bool
    then: Then


_K, _L, _E, _D, _W, _T = FailureKind, Layer, BreakerEffect, DedupWindow, Wait, Then
_ROWS: tuple[tuple[FailureKind, Layer, Layer, BreakerEffect, DedupWindow, Wait, bool, Then],
             ...] = (
    # kind              layer        per_model_quota breaker  dedup in        wait     awaited
    #   then
    (_K.NETWORK,         _L.COOLDOWN, _L.COOLDOWN, _E.FAILURE, _D.NETWORK,    _W.BACKOFF, True,
     _T.NEXT_TARGET),
    (_K.TIMEOUT,         _L.COOLDOWN, _L.COOLDOWN, _E.FAILURE, _D.CONNECTION, _W.BACKOFF, True,
     _T.NEXT_TARGET),
    (_K.AUTH_FAILED,     _L.DISABLE,  _L.DISABLE,  _E.SUCCESS, _D.CONNECTION, _W.BACKOFF, False,
     _T.NEXT_CONNECTION),
    (_K.QUOTA_EXHAUSTED, _L.COOLDOWN, _L.LOCKOUT,  _E.SUCCESS, _D.CONNECTION, _W.QUOTA,   True,
     _T.NEXT_CONNECTION),
    (_K.FORBIDDEN,       _L.LOCKOUT,  _L.LOCKOUT,  _E.SUCCESS, _D.CONNECTION, _W.BACKOFF, True,
     _T.NEXT_CONNECTION),
    (_K.MODEL_NOT_FOUND, _L.LOCKOUT,  _L.LOCKOUT,  _E.SUCCESS, _D.CONNECTION, _W.BACKOFF, False,
     _T.NEXT_CONNECTION),
    (_K.RATE_LIMITED,    _L.COOLDOWN, _L.LOCKOUT,  _E.FAILURE, _D.CONNECTION, _W.BACKOFF, True,
     _T.NEXT_CONNECTION),
    (_K.SERVER_ERROR,    _L.COOLDOWN, _L.COOLDOWN, _E.FAILURE, _D.CONNECTION, _W.BACKOFF, True,
     _T.NEXT_TARGET),
    (_K.CLIENT_ERROR,    _L.NONE,     _L.NONE,     _E.SUCCESS, _D.CONNECTION, _W.BACKOFF, False,
     _T.RESPOND),
    (_K.CONTEXT_LENGTH,  _L.NONE,     _L.NONE,     _E.SUCCESS, _D.CONNECTION, _W.BACKOFF, False,
     _T.NEXT_TARGET),
    (_K.CANCELLED,       _L.NONE,     _L.NONE,     _E.NONE,    _D.CONNECTION, _W.BACKOFF, False,
     _T.RESPOND),
    (_K.STREAM_CUT,      _L.COOLDOWN, _L.COOLDOWN, _E.FAILURE, _D.CONNECTION, _W.BACKOFF, True,
     _T.NEXT_TARGET),
)
#: every failure kind's consequences (a per-kind breaker override in the settings can
#: still make a kind count, or open the breaker at once: `BreakerSettings.counts`)
CONSEQUENCES: Mapping[FailureKind, Consequence] = MappingProxyType(
    {kind: Consequence(layer, quota_layer, breaker, dedup, wait, awaited, then)
     for kind, layer, quota_layer, breaker, dedup, wait, awaited, then in _ROWS})
assert set(CONSEQUENCES) == set(FailureKind), "every kind has its row"
#: kinds that count as breaker failures unless a per-kind override says otherwise
BREAKER_FAILURE_KINDS = frozenset(
    kind for kind, row in CONSEQUENCES.items() if row.breaker is BreakerEffect.FAILURE)
