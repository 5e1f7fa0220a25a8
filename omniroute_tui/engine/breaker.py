"""Layer 1: the provider circuit breaker (docs/design.md §3).

No timers: every read first refreshes lazily (OPEN → HALF_OPEN once the reset has passed,
expired probe leases returned, failures older than the window forgotten).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .changes import Changes
from .events import BreakerEvent, Event
from .jitter import Jitter
from .kinds import BreakerReason, BreakerState, FailureKind, SkipReason
from .settings import BreakerSettings
from .values import value

__all__ = ["BreakerAdmission", "BreakerSnapshot", "ProbeGate", "ProviderBreaker"]

#: asked with `now` before a HALF_OPEN probe slot is claimed: may this replica probe?
ProbeGate = Callable[[int], bool]

# enum members bound once: attribute access on an Enum class is slow on the hot path
_CLOSED, _DEGRADED = BreakerState.CLOSED, BreakerState.DEGRADED
_OPEN, _HALF_OPEN = BreakerState.OPEN, BreakerState.HALF_OPEN
_OPEN_STATES = (_OPEN, _HALF_OPEN)


def _discard(event: Event) -> None:
    """The `emit` of a part the config no longer has."""


@value
class BreakerAdmission:
    """The breaker's answer to "may this request try the provider now?".

    `epoch` is the number of times the breaker had opened when the attempt was admitted;
    results carry it back so that stale outcomes can be recognised. `probe_token` is set
    when the admission claimed a HALF_OPEN probe slot.
    """

    allowed: bool
    epoch: int
    probe_token: int | None = None
    skip: SkipReason | None = None
    retry_after_ms: int | None = None

    @property
    def probe(self) -> bool:
        return self.probe_token is not None


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """Everything needed to show or restore a breaker."""

    provider: str
    state: BreakerState
    failures: int
    last_failure_at: int | None
    opened_at: int | None
    open_for_ms: int
    cycles: int
    epoch: int
    forced_until: int | None
    probes_in_flight: int
    retry_after_ms: int | None
    forced_by: str | None = None  # who forced it open (None: not forced, or not known)


class ProviderBreaker:
    """One provider's breaker. Time comes in as `now` (ms) on every call."""

    def __init__(
        self,
        provider: str,
        settings: BreakerSettings,
        *,
        probe_lease_ms: int,
        emit: Callable[[Event], None],
        jitter: Jitter | None = None,
        probe_gate: ProbeGate | None = None,
        changes: Changes | None = None,
    ) -> None:
        self.provider = provider
        #: counts each step away from CLOSED with no failures (a failure, a transition)
        self._changes = changes or Changes()
        self.settings = settings
        self._probe_lease_ms = probe_lease_ms
        self._emit = emit
        self._jitter = jitter or Jitter()
        self._state = _CLOSED
        self._failures = 0
        self._last_failure_at: int | None = None
        self._opened_at: int | None = None
        self._open_for_ms = 0
        self._cycles = 0
        self._epoch = 0
        self._forced_until: int | None = None
        self._forced_by: str | None = None
        self._free_slots = 0
        self._leases: dict[int, int] = {}  # probe token -> lease expiry
        self._next_token = 1
        self._admitted = BreakerAdmission(True, 0)
        self._probe_gate = probe_gate

    def set_probe_gate(self, gate: ProbeGate | None) -> None:
        """In a fleet, asked (with `now`) before a HALF_OPEN probe slot is claimed: the
        fleet-wide lease, one probe per reset window for every replica (None: no fleet)."""
        self._probe_gate = gate

    # -- reading -----------------------------------------------------------------------

    def state(self, now: int) -> BreakerState:
        self._refresh(now)
        return self._state

    def retry_after_ms(self, now: int) -> int | None:
        """How long until the breaker could admit traffic again; None when it admits now."""
        self._refresh(now)
        if self._state is _OPEN:
            assert self._opened_at is not None
            return max(0, self._opened_at + self._open_for_ms - now)
        if self._state is _HALF_OPEN and self._free_slots == 0:
            return max(0, min(self._leases.values()) - now) if self._leases else None
        return None

    def could_admit(self, now: int) -> bool:
        """Whether `admit()` could let an attempt through now (an ordinary one, or a probe
        while a slot is free), without claiming anything: what a route strategy asks of
        every target before it orders them."""
        if self._state is not _CLOSED or self._failures:
            self._refresh(now)
        state = self._state
        if state is _CLOSED or state is _DEGRADED:
            return True
        return state is _HALF_OPEN and self._free_slots > 0

    def window_ms(self) -> int:
        """The current unhinted OPEN window: the reset timeout for this cycle (§3), the
        wait a provider with every key cooling is given between attempts (§4)."""
        return self.settings.effective_reset_ms(self._cycles)

    def admits_traffic(self, now: int) -> bool:
        """True when ordinary (non-probe) attempts may go to the provider."""
        return self.state(now) in (_CLOSED, _DEGRADED)

    @property
    def recorded_state(self) -> BreakerState:
        """The state as last moved: what `snapshot` says, no lazy transition applied."""
        return self._state

    def snapshot(self, now: int) -> BreakerSnapshot:
        retry_after = self.retry_after_ms(now)
        return BreakerSnapshot(
            provider=self.provider,
            state=self._state,
            failures=self._failures,
            last_failure_at=self._last_failure_at,
            opened_at=self._opened_at,
            open_for_ms=self._open_for_ms,
            cycles=self._cycles,
            epoch=self._epoch,
            forced_until=self._forced_until,
            probes_in_flight=len(self._leases),
            retry_after_ms=retry_after,
            forced_by=self._forced_by,
        )

    # -- admission ---------------------------------------------------------------------

    def admit(self, now: int) -> BreakerAdmission:
        """Admit an attempt, claiming a probe slot when HALF_OPEN."""
        if self._state is not _CLOSED or self._failures:  # else nothing can have expired
            self._refresh(now)
        if self._state is _OPEN:
            return BreakerAdmission(
                False, self._epoch, skip=SkipReason.CIRCUIT_OPEN,
                retry_after_ms=self.retry_after_ms(now),
            )
        if self._state is _HALF_OPEN:
            if self._free_slots == 0 or (self._probe_gate is not None
                                         and not self._probe_gate(now)):
                return BreakerAdmission(
                    False, self._epoch, skip=SkipReason.HALF_OPEN_BUSY,
                    retry_after_ms=self.retry_after_ms(now),
                )
            self._free_slots -= 1
            token = self._next_token
            self._next_token += 1
            self._leases[token] = now + self._probe_lease_ms
            return BreakerAdmission(True, self._epoch, probe_token=token)
        admitted = self._admitted
        if admitted.epoch != self._epoch:  # one value per epoch: admissions are immutable
            admitted = self._admitted = BreakerAdmission(True, self._epoch)
        return admitted

    def release(self, admission: BreakerAdmission) -> None:
        """Give back a probe slot that was claimed but not used (or whose outcome is moot)."""
        token = admission.probe_token
        if token is not None and self._leases.pop(token, None) is not None:
            self._free_slots += 1

    # -- outcomes ----------------------------------------------------------------------

    def record_success(self, now: int, admission: BreakerAdmission) -> bool:
        """Any answer that is not a breaker failure: the provider is serving. Returns
        whether it was the probe that closed the breaker."""
        if self._state is _CLOSED and not self._failures:
            return False  # the common case: nothing to recover
        if not self._accepts(now, admission):
            return False
        if self._state is _HALF_OPEN:
            self._close(now, BreakerReason.PROBE_SUCCEEDED)
            return True
        self._failures = max(0, self._failures - 1)
        self._settle(now, BreakerReason.RECOVERED)
        return False

    def record_failure(self, now: int, kind: FailureKind, admission: BreakerAdmission,
                       hint_ms: int | None = None) -> None:
        """A breaker failure that passed deduplication; `hint_ms` is its retry hint."""
        if not self._accepts(now, admission):
            return
        self._failures += 1
        self._changes.count += 1
        self._last_failure_at = now
        if self._state is _HALF_OPEN:
            self._cycles += 1
            self._open(now, BreakerReason.PROBE_FAILED, kind, hint_ms=hint_ms)
        elif self.settings.opens_immediately(kind):
            self._open(now, BreakerReason.immediate(kind), kind, hint_ms=hint_ms)
        elif self._failures >= self.settings.failure_threshold:
            self._open(now, BreakerReason.THRESHOLD, kind, hint_ms=hint_ms)
        else:
            self._settle(now, BreakerReason.FAILURES)

    def _accepts(self, now: int, admission: BreakerAdmission) -> bool:
        """Whether an outcome may change the breaker now (docs/design.md §3).

        Not when it is stale (admitted before the breaker last opened) nor while OPEN;
        while HALF_OPEN only a probe's outcome counts, and its slot is taken back.
        """
        self._refresh(now)
        if self._is_stale(admission):
            self.release(admission)
            return False
        if self._state is _HALF_OPEN:
            if not admission.probe:
                return False
            self._leases.pop(admission.probe_token or 0, None)
            return True
        return self._state is not _OPEN

    def record_cancelled(self, admission: BreakerAdmission) -> None:
        """An outcome that never arrived: neither success nor failure; the slot goes back."""
        self.release(admission)

    # -- operator ----------------------------------------------------------------------

    def reset(self, now: int) -> None:
        """Operator reset: CLOSED with all counters zeroed."""
        self._refresh(now)
        self._cycles = 0
        self._forced_until = self._forced_by = None
        self._close(now, BreakerReason.OPERATOR_RESET)

    def force_open(self, now: int, duration_ms: int, actor: str | None = None) -> None:
        """Operator isolation: OPEN until now + duration, ignoring probes until then
        (`actor`: who said so, shown wherever the breaker is)."""
        self._refresh(now)
        self._forced_until = now + duration_ms
        self._forced_by = actor
        # announced even when already OPEN: the window changed (and the store must know)
        self._open(now, BreakerReason.OPERATOR_FORCE_OPEN, None, duration_ms=duration_ms,
                   announce=True)

    def ordinary(self) -> BreakerAdmission:
        """The admission of an ordinary (non-probe) attempt now, for a failure another
        replica saw: it counts as one seen here would."""
        return BreakerAdmission(True, self._epoch)

    def adopt_open(self, now: int, until: int) -> bool:
        """Another replica opened the breaker until `until`: be OPEN until then too (never
        shortening an OPEN window of one's own). Returns whether anything changed."""
        self._refresh(now)
        if until <= now or (self._state is _OPEN and self._opened_at is not None
                            and self._opened_at + self._open_for_ms >= until):
            return False
        self._open(now, BreakerReason.FLEET_OPEN, None, duration_ms=until - now, announce=True)
        return True

    def adopt_close(self, now: int) -> bool:
        """Another replica's probe succeeded: close an OPEN or HALF_OPEN breaker (a
        forced-open one stays: its operator said until when)."""
        self._refresh(now)
        if self._state not in _OPEN_STATES or self._forced_until is not None:
            return False
        self._close(now, BreakerReason.FLEET_CLOSED)
        return True

    def reconfigure(self, settings: BreakerSettings, *, probe_lease_ms: int,
                    jitter: Jitter) -> None:
        """A reloaded config's settings, read from the next transition on: the state, its
        counters and every deadline already set (the OPEN window, a force-open, probe
        leases) stay as they are, so a reload never shortens one (docs/design.md §13)."""
        self.settings = settings
        self._probe_lease_ms = probe_lease_ms
        self._jitter = jitter

    def mute(self) -> None:
        """The provider left the config: what it still does for requests in flight is
        announced nowhere."""
        self._emit = _discard
        self._probe_gate = None

    def restore(self, snapshot: BreakerSnapshot) -> None:
        """Load persisted state; probe leases do not survive a restart."""
        self._changes.count += 1
        self._state = snapshot.state
        self._failures = snapshot.failures
        self._last_failure_at = snapshot.last_failure_at
        self._opened_at = snapshot.opened_at
        self._open_for_ms = snapshot.open_for_ms
        self._cycles = snapshot.cycles
        self._epoch = snapshot.epoch
        self._forced_until = snapshot.forced_until
        self._forced_by = snapshot.forced_by if snapshot.forced_until is not None else None
        self._leases.clear()
        self._free_slots = (
            self.settings.half_open_probes if self._state is _HALF_OPEN else 0
        )

    # -- internals ---------------------------------------------------------------------

    def _is_stale(self, admission: BreakerAdmission) -> bool:
        return admission.epoch < self._epoch and self._state in _OPEN_STATES

    def _refresh(self, now: int) -> None:
        state = self._state
        if state is _OPEN:
            assert self._opened_at is not None
            if now - self._opened_at >= self._open_for_ms:
                self._forced_until = self._forced_by = None
                self._leases.clear()
                self._free_slots = self.settings.half_open_probes
                self._transition(now, _HALF_OPEN, BreakerReason.RESET_TIMEOUT)
        elif state is _HALF_OPEN:
            if self._leases:
                for token, expiry in tuple(self._leases.items()):
                    if now >= expiry:
                        del self._leases[token]
                        self._free_slots += 1
        elif (
            self._failures
            and self._last_failure_at is not None
            and now - self._last_failure_at > self.settings.failure_window_ms
        ):
            self._failures = 0
            self._settle(now, BreakerReason.WINDOW_EXPIRED)

    def _settle(self, now: int, reason: BreakerReason) -> None:
        """Recompute CLOSED/DEGRADED from the failure count."""
        target = (
            _DEGRADED
            if self._failures >= self.settings.degraded_threshold
            else _CLOSED
        )
        if target is not self._state:
            self._transition(now, target, reason)

    def _open(
        self, now: int, reason: BreakerReason, kind: FailureKind | None, *,
        duration_ms: int | None = None,
        hint_ms: int | None = None, announce: bool = False,
    ) -> None:
        self._epoch += 1
        self._opened_at = now
        if duration_ms is None:
            duration_ms = self._jitter.stretch(
                self.settings.open_window_ms(self._cycles, kind, hint_ms))
        self._open_for_ms = duration_ms
        self._leases.clear()
        self._free_slots = 0
        self._transition(now, _OPEN, reason, force=announce)

    def _close(self, now: int, reason: BreakerReason) -> None:
        self._failures = 0
        self._cycles = 0
        self._last_failure_at = None
        self._opened_at = None
        self._open_for_ms = 0
        self._leases.clear()
        self._free_slots = 0
        self._transition(now, _CLOSED, reason, force=True)

    def _transition(self, now: int, to: BreakerState, reason: BreakerReason, *,
                    force: bool = False) -> None:
        before = self._state
        self._state = to
        if before is to and not force:
            return
        self._changes.count += 1
        retry_after = None
        if to is _OPEN:
            retry_after = self._open_for_ms
        self._emit(BreakerEvent(now, self.provider, before, to, reason, self._failures,
                                retry_after))
