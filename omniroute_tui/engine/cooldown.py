"""Layer 2: per-connection cooldown with exponential backoff (docs/design.md §4)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .consequences import CONSEQUENCES, Wait
from .events import CooldownEvent, DisabledEvent, EnabledEvent, Event
from .jitter import Jitter
from .kinds import FailureKind
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
        "_emit", "_jitter", "connection", "cooling_until", "disabled", "disabled_reason",
        "last_error", "last_error_at", "level", "provider", "settings",
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
            self.cooling_until = max(self.cooling_until, now + duration)
        elif self.cooling_until > now:
            if hint_ms is not None:
                self.cooling_until = max(self.cooling_until, now + hint_ms)
        else:
            duration = self._jitter.stretch(self.settings.backoff_ms(self.level))
            if hint_ms is not None:
                duration = max(hint_ms, duration)
            self.cooling_until = now + duration
            self.level = min(self.level + 1, self.settings.max_level)
        if (self.level, self.cooling_until) != before:
            self._emit(CooldownEvent(now, self.provider, self.connection, kind, self.level,
                                     self.cooling_until, hint_ms))

    def merge(self, now: int, kind: FailureKind, level: int, until: int) -> bool:
        """Another replica's cooldown of this connection: the later deadline and the
        higher level win, so a merge never shortens one (and merging twice is once)."""
        if until <= self.cooling_until and level <= self.level:
            return False
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
