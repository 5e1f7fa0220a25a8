"""The resilience engine: the three layers and the anti-herd controls behind one facade.

Plain synchronous code; time comes only from the injected clock and every state change
is announced on the event bus. Drivers (async httpx, the simulator, the console) and the
router call into this; nothing here performs I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from ..clock import Clock
from ..fleet.commands import (
    ClearCooldown,
    ClearLockouts,
    Disable,
    Enable,
    FleetCommand,
    ForceOpen,
    Reset,
)
from .breaker import BreakerAdmission, BreakerSnapshot, ProviderBreaker
from .bus import EventBus
from .capacity import Capacity
from .changes import Changes
from .classify import Classification
from .consequences import CONSEQUENCES, BreakerEffect, Layer
from .cooldown import ConnectionSnapshot
from .events import (
    BreakerEvent,
    CooldownEvent,
    DedupEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
    OperatorEvent,
    ResultEvent,
)
from .herd import FailureDedup, RetryBudget
from .jitter import Jitter
from .kinds import BreakerReason, BreakerState, CooldownReason, DedupWindow, FailureKind
from .lockout import LockoutSnapshot, ModelLockouts
from .pool import ConnectionPool, Unavailable
from .reload import ReloadSummary
from .retry_hints import MAX_HINT_MS
from .settings import BreakerSettings, ResilienceSettings

__all__ = [
    "MERGED_CLASSES", "EngineSnapshot", "ProviderLayers", "ProviderSpec", "ReloadSummary",
    "ResilienceEngine", "UnknownTarget",
]

# enum members bound once: attribute access on an Enum class is slow on the hot path
_COOLDOWN, _LOCKOUT, _DISABLE = Layer.COOLDOWN, Layer.LOCKOUT, Layer.DISABLE
_FAILURE, _NO_EFFECT = BreakerEffect.FAILURE, BreakerEffect.NONE
_CLOSED, _HALF_OPEN = BreakerState.CLOSED, BreakerState.HALF_OPEN
_CANCELLED, _CARRIER_SERVED = FailureKind.CANCELLED, CooldownReason.CARRIER_SERVED
_FOREVER = 1 << 62  # later than any clock time

#: what one replica of a fleet tells the others: the event types `ResilienceEngine.merge`
#: applies, and the operator's audit record (for the fleet's one audit log; the action
#: itself travels as its command, `merge_command`, and merging its audit changes nothing)
MERGED_CLASSES: tuple[type[Event], ...] = (
    BreakerEvent, CooldownEvent, LockoutEvent, DisabledEvent, EnabledEvent, ResultEvent,
    OperatorEvent)



def _exact_duration(ms: int) -> str:
    """`ms` in the largest unit that says it exactly (300000 is `5m`, 90500 `90500ms`):
    an audit line neither rounds what an operator asked for nor makes them count zeros."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"

class UnknownTarget(KeyError):
    """An operator or caller named a provider or connection the engine does not have."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown target"


@dataclass(frozen=True)
class ProviderSpec:
    """What the engine needs to know about one provider."""

    name: str
    connections: tuple[str, ...]
    settings: ResilienceSettings
    per_model_quota: bool = False
    weights: tuple[int, ...] | None = None  # round-robin weights, one per connection
    #: a fingerprint of each connection's key, in order (empty: not known); a reload
    #: tells a new key by it (a new credential is enabled again after an auth failure)
    credentials: tuple[str, ...] = ()
    #: attempts in flight at most on the provider (0: no cap), on each connection (one
    #: per connection, 0: no cap; empty: none capped), and requests waiting for a slot
    #: (docs/design.md §6)
    max_in_flight: int = 0
    connection_caps: tuple[int, ...] = ()
    max_queued: int = 0

    def capacity_args(self) -> tuple[tuple[str, ...], int, dict[str, int], int]:
        """The arguments of the provider's `Capacity`."""
        limits = {c: cap for c, cap in zip(self.connections, self.connection_caps,
                                           strict=False) if cap}
        return self.connections, self.max_in_flight, limits, self.max_queued

    def credential_of(self) -> dict[str, str]:
        """Each connection's key fingerprint (empty: not known)."""
        return dict(zip(self.connections, self.credentials, strict=False))


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's whole persistent state, as plain values."""

    breakers: tuple[BreakerSnapshot, ...]
    connections: tuple[ConnectionSnapshot, ...]
    lockouts: tuple[LockoutSnapshot, ...]


class ProviderLayers:
    """One provider's breaker, connection pool, lockouts, dedup and retry budget.

    The routing core holds these for the duration of a decision instead of looking the
    provider up for every question it asks.
    """

    __slots__ = ("_bus", "_changes", "_gone", "_on_failure", "breaker", "budget",
                 "capacity", "carried_until", "dedup", "first_token_ms", "last_failure_at",
                 "lockouts", "name", "pool", "spec", "stream_idle_ms", "timeout_ms")

    def __init__(self, spec: ProviderSpec, bus: EventBus, rng: random.Random,
                 changes: Changes) -> None:
        settings = spec.settings
        jitter = Jitter(settings.jitter, rng)
        self._bus = bus
        self._changes = changes
        self.spec = spec
        self.name = spec.name
        self.timeout_ms = settings.request.timeout_ms
        self.stream_idle_ms = settings.request.stream_idle_ms
        self.first_token_ms = settings.request.first_token_ms
        self.breaker = ProviderBreaker(
            spec.name, settings.breaker, probe_lease_ms=settings.request.timeout_ms,
            emit=bus.emit, jitter=jitter, changes=changes,
        )
        self.pool = ConnectionPool(spec.name, spec.connections, settings.cooldown,
                                   emit=bus.emit, jitter=jitter, changes=changes)
        self.lockouts = ModelLockouts(spec.name, settings.lockout, emit=bus.emit, jitter=jitter,
                                      changes=changes)
        self.dedup = FailureDedup(settings.dedup)
        self.budget = RetryBudget(settings.retry_budget)
        #: the caps on attempts in flight and the queue for a slot; None when uncapped
        capacity = Capacity(*spec.capacity_args(), self._usable)
        self.capacity: Capacity | None = capacity if capacity.capped else None
        #: when an attempt here last failed (any kind but `cancelled`), and until when the
        #: slot of the one request that may ride a cooling key is taken (a lease of
        #: `request.timeout`, as a probe's: a driver that never reports cannot keep it):
        #: the carrier rule's state (docs/design.md §4)
        self.last_failure_at: int | None = None
        self.carried_until = 0
        #: connections a reload removed: a request in flight on one reports to nothing
        self._gone: frozenset[str] = frozenset()
        self._on_failure = self._consequences()

    def _consequences(self) -> dict[FailureKind, tuple[Layer, BreakerEffect, DedupWindow]]:
        """The consequences table, read for this provider once: the layer each kind marks
        (per_model_quota decides for quotas and rate limits) and what the breaker hears
        (its per-kind overrides applied)."""
        spec = self.spec
        return {
            kind: (row.quota_layer if spec.per_model_quota else row.layer,
                   _breaker_effect(spec.settings.breaker, kind, row.breaker), row.dedup)
            for kind, row in CONSEQUENCES.items()
        }

    def reconfigure(self, spec: ProviderSpec, rng: random.Random, now: int
                    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Take a reloaded config's spec of this provider: its settings apply from each
        layer's next transition, every deadline already set stays, the connections it
        keeps keep their whole state, and one whose key changed loses an auth disable (a
        new key is a new credential). Returns the connections added and removed."""
        old = self.spec
        settings = spec.settings
        jitter = Jitter(settings.jitter, rng)
        self.spec = spec
        self.timeout_ms = settings.request.timeout_ms
        self.stream_idle_ms = settings.request.stream_idle_ms
        self.first_token_ms = settings.request.first_token_ms
        self.breaker.reconfigure(settings.breaker, probe_lease_ms=settings.request.timeout_ms,
                                 jitter=jitter)
        staying = frozenset(spec.connections)
        kept = {c.connection: c for c in self.pool.cooldowns if c.connection in staying}
        removed = tuple(c for c in old.connections if c not in kept)
        added = tuple(c for c in spec.connections if c not in kept)
        for cooldown in kept.values():
            cooldown.reconfigure(settings.cooldown, jitter)
        if spec.connections != old.connections:
            for name in removed:
                self.pool.get(name).mute()
            pool = ConnectionPool(spec.name, spec.connections, settings.cooldown,
                                  emit=self._bus.emit, jitter=jitter, changes=self._changes)
            for cooldown in kept.values():
                pool.adopt(cooldown, now)
            self.pool = pool
        self._gone = (self._gone | frozenset(removed)) - staying
        was, now_keys = old.credential_of(), spec.credential_of()
        for name in kept:
            pos = self.pool.position[name]
            cooldown = self.pool.cooldowns[pos]
            if (was.get(name) != now_keys.get(name) and cooldown.disabled
                    and cooldown.disabled_reason == "auth_failed"):
                self.pool.set_enabled(pos, now, True, "new key")
        self.lockouts.reconfigure(settings.lockout, jitter)
        self.lockouts.forget(staying, None)
        self.dedup.reconfigure(settings.dedup, staying)
        self.budget.reconfigure(settings.retry_budget)
        args = spec.capacity_args()
        if self.capacity is not None:  # what is in flight stays counted
            self.capacity.reconfigure(*args)
            self.capacity.fill(now)  # to the waiters, any slot the new caps open
            if not self.capacity.capped:
                self.capacity = None
        elif args[1] or args[2]:  # counts the attempts that start from now on
            self.capacity = Capacity(*args, self._usable)
        self._on_failure = self._consequences()
        return added, removed

    def _usable(self, connection: str, now: int) -> bool:
        """Whether a key can take a request now: still configured, enabled, not cooling
        (a capacity's test before it hands a slot on it)."""
        pool = self.pool
        position = pool.position.get(connection)
        if position is None:
            return False
        cooldown = pool.cooldowns[position]
        return not cooldown.disabled and cooldown.cooling_until <= now

    def retire(self) -> None:
        """The provider left the config: requests in flight finish on it, unannounced."""
        self.breaker.mute()
        self.lockouts.mute()
        for cooldown in self.pool.cooldowns:
            cooldown.mute()
        self._bus = EventBus()

    def unavailable(self, now: int, model: str) -> Unavailable:
        return self.pool.unavailable(now, model, self.lockouts)

    def could_serve(self, now: int, model: str) -> bool:
        """Whether a request could be attempted here now, claiming nothing: the breaker
        could admit (a HALF_OPEN one with a probe slot free counts: the probe decides)
        and a connection is neither cooling nor locked for `model`. What a route
        strategy asks of each target once before it orders them (docs/design.md §7).

        The usual case, a quiet breaker and more ready keys than locks of any model, is
        read off the layers without the two calls it stands for
        (`ProviderBreaker.could_admit`, `ConnectionPool.has_candidate`)."""
        breaker = self.breaker
        if breaker._state is not _CLOSED or breaker._failures:
            if not breaker.could_admit(now):
                return False
            if breaker._state is _HALF_OPEN:
                return True
        pool = self.pool
        cooling = pool._cooling
        if (len(pool._ready) > len(self.lockouts.entries)
                and not (cooling and cooling[0][0] <= now)):
            return True
        return pool.has_candidate(now, model, self.lockouts)

    def carrier(self, now: int, model: str, tried: Collection[str]) -> tuple[str, int] | None:
        """The cooling key that carries a request, and until when it cools, when the
        provider has no key ready for it: the breaker admits traffic, no other request
        rides one, a breaker window has passed since the last failure here, and every key
        the request could still use cools for backoff (docs/design.md §4). None otherwise."""
        if now < self.carried_until or not self.breaker.admits_traffic(now):
            return None
        last = self.last_failure_at
        if last is not None and now - last < self.breaker.window_ms():
            return None
        return self.pool.carrier_key(now, model, self.lockouts, tried)

    def record(self, now: int, connection: str, model: str, admission: BreakerAdmission,
               outcome: Classification, carried: bool = False) -> None:
        """Apply one attempt's classified outcome to every layer (table of docs/design.md §2);
        `carried`: the attempt rode a cooling key (§4)."""
        if carried:
            self.carried_until = 0
        kind = outcome.kind
        if kind is not None and kind is not _CANCELLED:
            self.last_failure_at = now
        pos = self.pool.position.get(connection)
        if pos is None:
            if connection in self._gone:  # a reload removed it while the attempt ran
                self.breaker.release(admission)
                return
            raise UnknownTarget(f"provider {self.name!r} has no connection {connection!r}")
        breaker = self.breaker
        if kind is None:
            if breaker.record_success(now, admission):
                self.pool.free_backoff(now)  # the probe closed it: the keys are free (§3)
            elif carried:  # a request carried on a cooling key was served: the same (§4)
                self.pool.free_backoff(now, _CARRIER_SERVED)
            cooldown = self.pool.cooldowns[pos]
            if cooldown.level or cooldown.last_error is not None:
                cooldown.record_success(now)
            if (connection, model) in self.lockouts.entries:
                self.lockouts.record_success(now, connection, model)
            return
        layer, effect, window = self._on_failure[kind]
        if effect is _NO_EFFECT:
            breaker.record_cancelled(admission)
            return
        hint = outcome.hint_ms
        if layer is _COOLDOWN:
            self.pool.record_failure(pos, now, kind, hint)
        elif layer is _LOCKOUT:
            self.lockouts.record_failure(now, connection, model, kind, hint)
        elif layer is _DISABLE:
            self.pool.disable_for_auth(pos, now)
        if effect is _FAILURE:
            suppressed = None if admission.probe else self.dedup.admit(now, connection, window)
            if suppressed is None:
                breaker.record_failure(now, kind, admission, hint)
            elif self._bus.wants(DedupEvent):
                self._bus.emit(DedupEvent(now, self.name, connection, kind, suppressed))
        elif breaker.record_success(now, admission):
            # the provider answered: for the breaker, that is a success (§3), and a
            # probe's success frees the provider's backoff keys
            self.pool.free_backoff(now)
        elif carried:  # so does a carried request's answer (§4)
            self.pool.free_backoff(now, _CARRIER_SERVED)


#: what `refused_targets` asks of a target: its position, its layers, their breaker and
#: lockouts (a provider's layers keep both for their lifetime) and the target's model
Ask = tuple[int, "ProviderLayers", ProviderBreaker, ModelLockouts, str]


def ask_of(i: int, layers: ProviderLayers, model: str) -> Ask:
    return (i, layers, layers.breaker, layers.lockouts, model)


def refused_targets(asks: Sequence[Ask], now: int) -> list[int] | None:
    """The positions of the targets that could not serve now
    (`ProviderLayers.could_serve`), None when every one could: what a route strategy asks
    of its targets, once each, before it orders them (docs/design.md §7). The usual
    target, a quiet breaker and more ready keys than locks of any model, is read here
    without a call."""
    refused = None
    for i, layers, breaker, lockouts, model in asks:
        pool = layers.pool
        cooling = pool._cooling
        if (breaker._state is _CLOSED and not breaker._failures
                and len(pool._ready) > len(lockouts.entries)
                and not (cooling and cooling[0][0] <= now)):
            continue
        if not layers.could_serve(now, model):
            if refused is None:
                refused = [i]
            else:
                refused.append(i)
    return refused


def quiet_until(asks: Sequence[Ask], now: int) -> int | None:
    """Until when every target stays quiet while nothing changes (`Changes`): its
    breaker CLOSED without failures, more ready keys than lockouts of any model, no
    key's cooling ended (the earliest end among them is the answer); None when one is
    not quiet now. It only reads: nothing is refreshed, so it changes no decision."""
    until = _FOREVER
    for _, layers, breaker, lockouts, _ in asks:
        pool = layers.pool
        if (breaker._state is not _CLOSED or breaker._failures
                or len(pool._ready) <= len(lockouts.entries)):
            return None
        cooling = pool._cooling
        if cooling:
            ends = cooling[0][0]
            if ends <= now:
                return None
            if ends < until:
                until = ends
    return until


def _breaker_effect(settings: BreakerSettings, kind: FailureKind,
                    effect: BreakerEffect) -> BreakerEffect:
    """What `kind` tells a breaker with these settings: a per-kind override can make it
    count (or open at once); a cancelled attempt never tells it anything."""
    if effect is BreakerEffect.NONE:
        return effect
    return BreakerEffect.FAILURE if settings.counts(kind) else BreakerEffect.SUCCESS


class ResilienceEngine:
    """Breakers, cooldowns, lockouts, dedup and retry budgets for a set of providers."""

    def __init__(
        self,
        providers: Iterable[ProviderSpec],
        clock: Clock,
        *,
        bus: EventBus | None = None,
        seed: int = 0,
    ) -> None:
        self.clock = clock
        self.bus = bus or EventBus()
        self._rng = random.Random(seed)
        self._providers: dict[str, ProviderLayers] = {}
        self._command_listeners: list[Callable[[FleetCommand], None]] = []
        self._probe_gate: Callable[[str, int], bool] | None = None
        #: what the layers count of their changes that can stop a provider from serving
        self.changes = Changes()
        for spec in providers:
            self._providers[spec.name] = ProviderLayers(spec, self.bus, self._rng, self.changes)

    # -- lookup ------------------------------------------------------------------------

    def now(self) -> int:
        return self.clock.now_ms()

    def providers(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def spec(self, provider: str) -> ProviderSpec:
        return self._state(provider).spec

    def _state(self, provider: str) -> ProviderLayers:
        try:
            return self._providers[provider]
        except KeyError:
            raise UnknownTarget(f"no provider named {provider!r}") from None

    def _pool_entry(self, provider: str, connection: str) -> tuple[ProviderLayers, int]:
        state = self._state(provider)
        pos = state.pool.position.get(connection)
        if pos is None:
            raise UnknownTarget(f"provider {provider!r} has no connection {connection!r}")
        return state, pos

    # -- routing hooks -----------------------------------------------------------------

    def layers(self, provider: str) -> ProviderLayers:
        """The provider's layers, for the routing core's hot path."""
        return self._state(provider)

    def admit(self, provider: str) -> BreakerAdmission:
        return self._state(provider).breaker.admit(self.now())

    def candidates(self, provider: str, model: str, start: int = 0) -> Iterator[str]:
        state = self._state(provider)
        return state.pool.candidates(self.now(), model, state.lockouts, start)

    def record(
        self,
        provider: str,
        connection: str,
        model: str,
        admission: BreakerAdmission,
        outcome: Classification,
    ) -> None:
        """Apply one attempt's classified outcome to every layer (table of docs/design.md §2)."""
        self._state(provider).record(self.now(), connection, model, admission, outcome)

    # -- a fleet: what other replicas saw -------------------------------------------------

    def merge(self, event: Event) -> bool:
        """Apply a state change another replica announced (`event` is its event, `t` when
        it happened there), by rules that keep the spec's guarantees fleet-wide: deadlines
        only extend, a breaker another replica opened is OPEN here until the same
        deadline, one closed by a successful probe closes here and frees this replica's
        backoff keys as the probe did there (a lifted cooldown heard on its own is not
        applied: it says nothing of the failures seen here), and a failure seen there
        counts here as it would have there (through this replica's dedup windows, so one
        incident counts once). An operator's action arrives as its command
        (`merge_command`). Changes here are announced as this engine's own events.
        Returns whether anything changed; anything else is ignored."""
        now = self.now()
        if isinstance(event, BreakerEvent):
            state = self._providers.get(event.provider)
            if state is None:
                return False
            if event.to is BreakerState.OPEN and event.retry_after_ms is not None:
                return state.breaker.adopt_open(now, event.t + event.retry_after_ms)
            if event.to is BreakerState.CLOSED and event.from_ is BreakerState.HALF_OPEN:
                if not state.breaker.adopt_close(now):
                    return False
                if event.reason is BreakerReason.PROBE_SUCCEEDED:
                    state.pool.free_backoff(now)  # the probe freed the keys there: here too
                return True
            return False
        if isinstance(event, CooldownEvent):
            state = self._providers.get(event.provider)
            pos = None if state is None else state.pool.position.get(event.connection)
            if state is None or pos is None or event.kind is None:
                return False
            return state.pool.merge(pos, now, event.kind, event.level, event.until,
                                    event.hint_ms)
        if isinstance(event, LockoutEvent):
            state = self._providers.get(event.provider)
            if (state is None or event.kind is None
                    or event.connection not in state.pool.position):
                return False
            return state.lockouts.merge(now, event.connection, event.model, event.kind,
                                        event.failures, event.until)
        if isinstance(event, DisabledEvent | EnabledEvent):
            state = self._providers.get(event.provider)
            pos = None if state is None else state.pool.position.get(event.connection)
            if state is None or pos is None:
                return False
            return state.pool.set_enabled(pos, now, isinstance(event, EnabledEvent),
                                          event.reason)
        if isinstance(event, ResultEvent) and event.kind is not None:
            state = self._providers.get(event.provider)
            if (state is None or not state.breaker.settings.counts(event.kind)
                    or not state.breaker.admits_traffic(now)  # OPEN: its own event says so
                    or state.dedup.admit(event.t, event.connection,
                                         CONSEQUENCES[event.kind].dedup) is not None):
                return False
            state.breaker.record_failure(now, event.kind, state.breaker.ordinary(), None)
            return True
        return False

    def merge_command(self, command: FleetCommand) -> bool:
        """Another replica's operator action, done here too (not audited again: it was,
        where the operator acted). Returns whether anything changed; a target this
        engine does not have changes nothing."""
        now = self.now()
        provider = command.provider_named
        if isinstance(command, ClearLockouts):
            if provider is not None and provider not in self._providers:
                return False
            return self._clear_lockouts(now, command) > 0
        state = None if provider is None else self._providers.get(provider)
        if state is None:
            return False
        if isinstance(command, Reset):
            state.breaker.reset(now)
            return True
        if isinstance(command, ForceOpen):
            if command.until <= now:
                return False
            state.breaker.force_open(now, command.until - now, command.actor)
            return True
        pos = state.pool.position.get(getattr(command, "connection", ""))
        if pos is None:
            return False
        if isinstance(command, ClearCooldown):
            return state.pool.clear(pos, now)
        if isinstance(command, Enable | Disable):
            return state.pool.set_enabled(pos, now, isinstance(command, Enable),
                                          f"operator {command.actor}")
        return False

    def subscribe_commands(self, listener: Callable[[FleetCommand], None]) -> None:
        """Told of every operator action done here, as its command, before it is done (so
        it goes out ahead of the state changes it causes); a merged one is not told."""
        self._command_listeners.append(listener)

    def set_probe_gate(self, gate: Callable[[str, int], bool] | None) -> None:
        """In a fleet: asked (provider, now) before any HALF_OPEN probe slot is claimed,
        the fleet's probe lease (docs/design.md §10); None: no fleet."""
        self._probe_gate = gate
        for name, state in self._providers.items():
            state.breaker.set_probe_gate(None if gate is None else partial(gate, name))

    # -- a reloaded config ------------------------------------------------------------------

    def reconfigure(self, providers: Iterable[ProviderSpec], *,
                    models: Mapping[str, frozenset[str] | None] | None = None) -> ReloadSummary:
        """Take a reloaded config's providers, between two decisions (docs/design.md §13):
        an unchanged provider keeps its whole state (the same objects), a changed one
        keeps it for what stays (`ProviderLayers.reconfigure`), a removed one is dropped
        (requests in flight on it finish unannounced), an added one starts fresh.
        `models`: each provider's declared models; lockouts of others are dropped.
        The caller announces the reload (`Router.reconfigure`)."""
        now = self.now()
        specs = {spec.name: spec for spec in providers}
        removed = tuple(name for name in self._providers if name not in specs)
        added, changed, conns_added, conns_removed = [], [], [], []
        for name in removed:
            self._providers[name].retire()
        layered: dict[str, ProviderLayers] = {}
        for name, spec in specs.items():
            state = self._providers.get(name)
            if state is None:
                state = ProviderLayers(spec, self.bus, self._rng, self.changes)
                if self._probe_gate is not None:
                    state.breaker.set_probe_gate(partial(self._probe_gate, name))
                added.append(name)
            elif state.spec != spec:
                plus, minus = state.reconfigure(spec, self._rng, now)
                changed.append(name)
                conns_added += [f"{name}/{c}" for c in plus]
                conns_removed += [f"{name}/{c}" for c in minus]
            declared = (models or {}).get(name)
            if declared is not None:
                state.lockouts.forget(frozenset(spec.connections), declared)
            layered[name] = state
        self._providers = layered
        self.changes.count += 1  # a layer replaced or a provider added: ask again
        return ReloadSummary(tuple(added), removed, tuple(changed), tuple(conns_added),
                             tuple(conns_removed))

    def _announce(self, command: FleetCommand) -> None:
        for listener in self._command_listeners:
            listener(command)

    def _clear_lockouts(self, now: int, command: ClearLockouts) -> int:
        names = (command.provider,) if command.provider is not None else tuple(self._providers)
        return sum(self._state(name).lockouts.clear(now, command.connection, command.model)
                   for name in names)

    # -- operator actions --------------------------------------------------------------

    def _audit(self, action: str, target: str, actor: str, result: str) -> None:
        self.bus.emit(OperatorEvent(
            t=self.now(), action=action, target=target, actor=actor, result=result
        ))

    def audit(self, action: str, target: str, *, actor: str, result: str) -> None:
        """An operator's action done outside the engine (a config reload), in the audit
        log with the engine's own: announced as an `operator` event."""
        self._audit(action, target, actor, result)

    def reset_breaker(self, provider: str, *, actor: str) -> None:
        state = self._state(provider)
        self._announce(Reset(self.now(), actor, provider))
        state.breaker.reset(self.now())
        self._audit("reset_breaker", provider, actor, "ok")

    def force_open(self, provider: str, duration_ms: int, *, actor: str) -> None:
        if not 0 < duration_ms <= MAX_HINT_MS:
            raise ValueError("force-open needs a duration above 0 and at most 30 days")
        state, now = self._state(provider), self.now()
        self._announce(ForceOpen(now, actor, provider, now + duration_ms))
        state.breaker.force_open(now, duration_ms, actor)
        self._audit("force_open", provider, actor, f"open for {_exact_duration(duration_ms)}")

    def clear_cooldown(self, provider: str, connection: str, *, actor: str) -> bool:
        state, pos = self._pool_entry(provider, connection)
        self._announce(ClearCooldown(self.now(), actor, provider, connection))
        changed = state.pool.clear(pos, self.now())
        self._audit("clear_cooldown", f"{provider}/{connection}", actor,
                    "ok" if changed else "nothing to clear")
        return changed

    def set_enabled(self, provider: str, connection: str, enabled: bool, *, actor: str) -> bool:
        state, pos = self._pool_entry(provider, connection)
        self._announce((Enable if enabled else Disable)(self.now(), actor, provider, connection))
        changed = state.pool.set_enabled(pos, self.now(), enabled, f"operator {actor}")
        self._audit("enable" if enabled else "disable", f"{provider}/{connection}", actor,
                    "ok" if changed else "unchanged")
        return changed

    def clear_lockouts(
        self,
        provider: str | None = None,
        connection: str | None = None,
        model: str | None = None,
        *,
        actor: str,
    ) -> int:
        """Clear one key, one model on all connections, one provider, or all (None = any)."""
        if connection is not None and provider is None:
            raise ValueError("a connection is named within a provider: give the provider too")
        if provider is not None:
            self._state(provider)
            if connection is not None:
                self._pool_entry(provider, connection)
        now = self.now()
        command = ClearLockouts(now, actor, provider, connection, model)
        self._announce(command)
        cleared = self._clear_lockouts(now, command)
        target = "/".join(part or "*" for part in (provider, connection, model))
        self._audit("clear_lockouts", target, actor, f"cleared {cleared}")
        return cleared

    # -- state for views and the store -------------------------------------------------

    def breaker_snapshot(self, provider: str) -> BreakerSnapshot:
        return self._state(provider).breaker.snapshot(self.now())

    def breaker_state(self, provider: str) -> BreakerState:
        """The provider's breaker state, as its snapshot says it, without the snapshot."""
        return self._state(provider).breaker.recorded_state

    def connection_snapshot(self, provider: str, connection: str) -> ConnectionSnapshot:
        state, pos = self._pool_entry(provider, connection)
        return state.pool.cooldowns[pos].snapshot()

    def lockout_snapshots(self, provider: str) -> tuple[LockoutSnapshot, ...]:
        return tuple(self._state(provider).lockouts.snapshots())

    def retry_budget_tokens(self, provider: str) -> float:
        """The tokens the provider's retry budget holds now (docs/design.md §6)."""
        return self._state(provider).budget.tokens

    def in_flight(self, provider: str) -> tuple[int, int] | None:
        """Attempts in flight on a capped provider (slots reserved for waiters included)
        and requests waiting for a slot; None when the provider has no cap (§6)."""
        capacity = self._state(provider).capacity
        return None if capacity is None else (capacity.in_flight, len(capacity.waiters))

    def snapshot(self) -> EngineSnapshot:
        now = self.now()
        states = self._providers.values()
        return EngineSnapshot(
            breakers=tuple(s.breaker.snapshot(now) for s in states),
            connections=tuple(c.snapshot() for s in states for c in s.pool.cooldowns),
            lockouts=tuple(lk for s in states for lk in s.lockouts.snapshots()),
        )

    def restore(self, snapshot: EngineSnapshot) -> None:
        """Load persisted state: expired cooldowns and lockouts come back cleared.

        Entries for providers or connections no longer configured are ignored.
        """
        now = self.now()
        for breaker in snapshot.breakers:
            if breaker.provider in self._providers:
                self._providers[breaker.provider].breaker.restore(breaker)
        for conn in snapshot.connections:
            state = self._providers.get(conn.provider)
            if state is None or conn.connection not in state.pool.position:
                continue
            state.pool.restore(conn, now)
        for lockout in snapshot.lockouts:
            state = self._providers.get(lockout.provider)
            if state is not None and lockout.connection in state.pool.position:
                state.lockouts.restore(lockout, now)
