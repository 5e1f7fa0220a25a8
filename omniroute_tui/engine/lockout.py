"""Layer 3: model lockouts keyed by (provider, connection, model) (docs/design.md §5)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .changes import Changes
from .consequences import CONSEQUENCES, Wait
from .events import Event, LockoutEvent
from .jitter import Jitter
from .kinds import FailureKind
from .settings import LockoutSettings

__all__ = ["LockoutKey", "LockoutSnapshot", "ModelLockouts"]

LockoutKey = tuple[str, str, str]


def _discard(event: Event) -> None:
    """The `emit` of a provider the config no longer has."""


@dataclass(frozen=True, slots=True)
class LockoutSnapshot:
    provider: str
    connection: str
    model: str
    kind: str | None
    failures: int
    last_failure_at: int
    until: int

    @property
    def key(self) -> LockoutKey:
        return (self.provider, self.connection, self.model)


@dataclass(slots=True)
class _Entry:
    kind: FailureKind | None
    failures: int
    last_failure_at: int
    until: int


class ModelLockouts:
    """All model lockouts of one provider; other models of a connection stay usable."""

    def __init__(
        self,
        provider: str,
        settings: LockoutSettings,
        *,
        emit: Callable[[Event], None],
        jitter: Jitter | None = None,
        changes: Changes | None = None,
    ) -> None:
        self.provider = provider
        #: counts each lockout set, merged or restored
        self._changes = changes or Changes()
        self.settings = settings
        self._emit = emit
        self._jitter = jitter or Jitter()
        #: (connection, model) -> entry; read by the pool's candidate scan, which looks a
        #: key up inline (a method call per connection was a third of the scan's cost)
        self.entries: dict[tuple[str, str], _Entry] = {}

    def reconfigure(self, settings: LockoutSettings, jitter: Jitter) -> None:
        """A reloaded config's settings, from the next failure on (deadlines stay)."""
        self.settings = settings
        self._jitter = jitter

    def forget(self, connections: frozenset[str], models: frozenset[str] | None) -> int:
        """Drop, without a word, the lockouts of connections (or models: None keeps any)
        a reloaded config no longer has; the reload's own event says what left."""
        doomed = [key for key in self.entries
                  if key[0] not in connections or (models is not None and key[1] not in models)]
        for key in doomed:
            del self.entries[key]
        return len(doomed)

    def mute(self) -> None:
        """The provider left the config: nothing more is announced."""
        self._emit = _discard

    def locked_until(self, connection: str, model: str, now: int) -> int | None:
        """The deadline of an active lockout on the key, or None."""
        entry = self.entries.get((connection, model))
        if entry is None or entry.until <= now:
            return None
        return entry.until

    def kind_of(self, connection: str, model: str) -> FailureKind | None:
        entry = self.entries.get((connection, model))
        return entry.kind if entry else None

    def record_failure(
        self, now: int, connection: str, model: str, kind: FailureKind, hint_ms: int | None
    ) -> None:
        entry = self.entries.get((connection, model))
        if entry is None or now - entry.last_failure_at > self.settings.window_ms:
            failures = 1
            until = entry.until if entry else 0
        else:
            failures = entry.failures + 1
            until = entry.until
        if hint_ms is not None:
            duration = hint_ms  # the server's word, exactly
        elif CONSEQUENCES[kind].wait is Wait.QUOTA:
            duration = self._jitter.stretch(self.settings.max_ms)
        else:
            duration = self._jitter.stretch(self.settings.duration_ms(failures))
        until = max(until, now + duration)
        self.entries[(connection, model)] = _Entry(kind, failures, now, until)
        self._changes.count += 1
        self._emit(LockoutEvent(now, self.provider, connection, model, kind, failures, until))

    def merge(self, now: int, connection: str, model: str, kind: FailureKind, failures: int,
              until: int) -> bool:
        """Another replica's lockout of the key: the later deadline and the higher count
        win. Returns whether anything changed."""
        entry = self.entries.get((connection, model))
        if entry is not None and until <= entry.until and failures <= entry.failures:
            return False
        self._changes.count += 1
        if entry is None:
            entry = self.entries[(connection, model)] = _Entry(kind, failures, now, until)
        else:
            entry.kind, entry.last_failure_at = kind, now
            entry.failures, entry.until = max(entry.failures, failures), max(entry.until, until)
        self._emit(LockoutEvent(now, self.provider, connection, model, kind, entry.failures,
                                entry.until))
        return True

    def record_success(self, now: int, connection: str, model: str) -> None:
        """Success halves the failure count; at 0 the key's history is dropped."""
        entry = self.entries.get((connection, model))
        if entry is None:
            return
        if entry.failures == 0:
            if entry.until <= now:
                del self.entries[(connection, model)]
            return
        entry.failures //= 2
        if entry.failures == 0 and entry.until <= now:
            del self.entries[(connection, model)]
        self._emit(LockoutEvent(
            t=now, provider=self.provider, connection=connection, model=model,
            kind=None, failures=entry.failures, until=entry.until,
        ))

    def clear(self, now: int, connection: str | None = None, model: str | None = None) -> int:
        """Drop lockouts matching the filter (None matches all); returns how many."""
        doomed = [
            key for key in self.entries
            if (connection is None or key[0] == connection) and (model is None or key[1] == model)
        ]
        for conn, mdl in doomed:
            entry = self.entries.pop((conn, mdl))
            self._emit(LockoutEvent(
                t=now, provider=self.provider, connection=conn, model=mdl,
                kind=None, failures=0, until=min(entry.until, now),
            ))
        return len(doomed)

    def snapshots(self) -> Iterator[LockoutSnapshot]:
        for (connection, model), entry in self.entries.items():
            yield LockoutSnapshot(
                provider=self.provider, connection=connection, model=model,
                kind=entry.kind.value if entry.kind else None, failures=entry.failures,
                last_failure_at=entry.last_failure_at, until=entry.until,
            )

    def restore(self, snapshot: LockoutSnapshot, now: int) -> None:
        """Load one persisted lockout; an expired one is dropped with its history."""
        self._changes.count += 1
        if snapshot.until <= now:
            self.entries.pop((snapshot.connection, snapshot.model), None)
            return
        self.entries[(snapshot.connection, snapshot.model)] = _Entry(
            FailureKind(snapshot.kind) if snapshot.kind else None,
            snapshot.failures, snapshot.last_failure_at, snapshot.until,
        )
