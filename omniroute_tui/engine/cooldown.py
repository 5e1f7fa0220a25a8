"""Layer 2: per-connection cooldown with exponential backoff (docs/design.md §4)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .consequences import CONSEQUENCES, Wait
from .events import CooldownEvent, DisabledEvent, EnabledEvent, Event
from .jitter import Jitter
from .kinds import CooldownReason, FailureKind
from .settings import CooldownSettings

__all__ = ["ConnectionCooldown", "ConnectionSnapshot"]


def _discard(event: Event) -> None:
    """The `emit` of a connection the config no longer has."""


@dataclass(frozen=True, slots=True)
class ConnectionSnapshot:
    provider: str
    connection: str
    level: int
    cooling_until: int
    disabled: bool
    disabled_reason: str | None
    last_error: str | None
    last_error_at: int | None

    def cooling(self, now: int) -> bool:
        return self.cooling_until > now


class ConnectionCooldown:
    """One connection's health: backoff level, cooldown deadline and disabled flag."""

    __slots__ = (
        "_emit", "_jitter", "backoff", "connection", "cooling_until", "disabled",
        "disabled_reason", "last_error", "last_error_at", "level", "provider", "settings",
    )

    def __init__(
        self,
        provider: str,
        connection: str,
        settings: CooldownSettings,
        *,
        emit: Callable[[Event], None],
        jitter: Jitter | None = None,
    ) -> None:
        self.provider = provider
        self.connection = connection
        self.settings = settings
        self._emit = emit
        self._jitter = jitter or Jitter()
        self.level = 0
        self.cooling_until = 0
        self.disabled = False
        self.disabled_reason: str | None = None
        self.last_error: FailureKind | None = None
        self.last_error_at: int | None = None
        #: the deadline is our own backoff's (no hint, no quota): the breaker's probe may
        #: use the key, and its success frees it (docs/design.md §3). False after a
        #: restart: the store does not say, and a server's word must not be cut short.
        self.backoff = False

    def reconfigure(self, settings: CooldownSettings, jitter: Jitter) -> None:
        """A reloaded config's settings, from the next failure on: the level and the
        deadline already set stay (a reload never shortens a cooldown)."""
        self.settings = settings
        self._jitter = jitter

    def mute(self) -> None:
        """The connection left the config: a request in flight on it announces nothing."""
        self._emit = _discard

    def available(self, now: int) -> bool:
        """Selectable now: enabled and not cooling (the deadline is checked lazily here)."""
        return not self.disabled and self.cooling_until <= now

    def record_failure(self, now: int, kind: FailureKind, hint_ms: int | None) -> None:
        """Apply a cooldown-causing failure; never shortens an active cooldown."""
        self.last_error = kind
        self.last_error_at = now
        before = (self.level, self.cooling_until)
        if CONSEQUENCES[kind].wait is Wait.QUOTA:
            # quota: the hint or the quota cooldown, level unchanged; a longer quota wait
            # extends an active cooldown since it is news about a longer outage
            duration = hint_ms if hint_ms is not None else self._jitter.stretch(
                self.settings.quota_ms
            )
            if now + duration > self.cooling_until:
                self.cooling_until = now + duration
                self.backoff = False
        elif self.cooling_until > now:
            if hint_ms is not None and now + hint_ms > self.cooling_until:
                self.cooling_until = now + hint_ms  # the server's word: no longer backoff
                self.backoff = False
        else:
            duration = self._jitter.stretch(self.settings.backoff_ms(self.level))
            if hint_ms is not None:
                duration = max(hint_ms, duration)
            self.cooling_until = now + duration
            self.level = min(self.level + 1, self.settings.max_level)
            self.backoff = hint_ms is None
        if (self.level, self.cooling_until) != before:
            self._emit(CooldownEvent(now, self.provider, self.connection, kind, self.level,
                                     self.cooling_until, hint_ms))

    def merge(self, now: int, kind: FailureKind, level: int, until: int,
              hint_ms: int | None = None) -> bool:
        """Another replica's cooldown of this connection: the later deadline and the
        higher level win, so a merge never shortens one (and merging twice is once)."""
        if until <= self.cooling_until and level <= self.level:
            return False
        if until > self.cooling_until:  # the deadline is now the other replica's
            self.backoff = hint_ms is None and CONSEQUENCES[kind].wait is not Wait.QUOTA
        self.cooling_until = max(self.cooling_until, until)
        self.level = max(self.level, level)
        self.last_error, self.last_error_at = kind, now
        self._emit(CooldownEvent(now, self.provider, self.connection, kind, self.level,
                                 self.cooling_until, None))
        return True

    def record_success(self, now: int) -> None:
        """The connection served: backoff level back to 0, last error cleared."""
        self.last_error = None
        self.last_error_at = None
        if self.level:
            self.level = 0
            self._emit(CooldownEvent(
                t=now, provider=self.provider, connection=self.connection, kind=None,
                level=0, until=self.cooling_until, hint_ms=None,
            ))

    def probe_freeable(self, now: int) -> bool:
        """What a successful probe frees: a backoff cooldown, or the level one left."""
        return self.backoff and (self.level > 0 or self.cooling_until > now)

    def free(self, now: int, reason: CooldownReason = CooldownReason.PROBE_FREED) -> bool:
        """The breaker's probe succeeded: this backoff was the provider's failing, not the
        key's, so the cooldown ends and its level goes back to 0 (docs/design.md §3).
        Disabled flags stay; False when there was nothing to free."""
        if not self.probe_freeable(now):
            return False
        self.level = 0
        self.cooling_until = min(self.cooling_until, now)
        self.backoff = False
        self.last_error = self.last_error_at = None
        self._emit(CooldownEvent(now, self.provider, self.connection, None, 0,
                                 self.cooling_until, None, reason))
        return True

    def clear(self, now: int) -> bool:
        """Operator clear: cooldown lifted and level reset; False when there was nothing."""
        if self.level == 0 and self.cooling_until <= now:
            return False
        self.level = 0
        self.cooling_until = min(self.cooling_until, now)
        self._emit(CooldownEvent(
            t=now, provider=self.provider, connection=self.connection, kind=None,
            level=0, until=self.cooling_until, hint_ms=None,
        ))
        return True

    def disable(self, now: int, reason: str) -> bool:
        if self.disabled:
            return False
        self.disabled = True
        self.disabled_reason = reason
        self._emit(DisabledEvent(
            t=now, provider=self.provider, connection=self.connection, reason=reason
        ))
        return True

    def enable(self, now: int, reason: str) -> bool:
        if not self.disabled:
            return False
        self.disabled = False
        self.disabled_reason = None
        if self.last_error is FailureKind.AUTH_FAILED:
            self.last_error = None
        self._emit(EnabledEvent(
            t=now, provider=self.provider, connection=self.connection, reason=reason
        ))
        return True

    def snapshot(self) -> ConnectionSnapshot:
        return ConnectionSnapshot(
            provider=self.provider,
            connection=self.connection,
            level=self.level,
            cooling_until=self.cooling_until,
            disabled=self.disabled,
            disabled_reason=self.disabled_reason,
            last_error=self.last_error.value if self.last_error else None,
            last_error_at=self.last_error_at,
        )

    def restore(self, snapshot: ConnectionSnapshot, now: int) -> None:
        """Load persisted state; an expired cooldown comes back cleared: level 0 and its
        last error forgotten (docs/design.md §10), as a success would have left it. The
        error that disabled a connection (auth_failed) stays with it until it is enabled."""
        self.disabled = snapshot.disabled
        self.disabled_reason = snapshot.disabled_reason
        self.backoff = False
        last_error = FailureKind(snapshot.last_error) if snapshot.last_error else None
        if snapshot.cooling_until > now or (
                snapshot.disabled and last_error is FailureKind.AUTH_FAILED):
            self.last_error, self.last_error_at = last_error, snapshot.last_error_at
        else:
            self.last_error = self.last_error_at = None
        if snapshot.cooling_until > now:
            self.level = min(max(snapshot.level, 0), self.settings.max_level)
            self.cooling_until = snapshot.cooling_until
        else:
            self.level = 0
            self.cooling_until = 0
