"""Anti-thundering-herd controls (docs/design.md §6): failure deduplication and the retry budget."""

from __future__ import annotations

from .kinds import DedupWindow
from .settings import DedupSettings, RetryBudgetSettings

__all__ = ["FailureDedup", "RetryBudget"]


class FailureDedup:
    """Decides whether a breaker failure counts, for one provider.

    A failure within `connection_window` of the last counted one from the same connection
    is one incident; `network` failures count once per provider per `network_window`, so a
    VPN blip seen by every connection is counted once.
    """

    def __init__(self, settings: DedupSettings) -> None:
        self.settings = settings
        self._last_by_connection: dict[str, int] = {}
        self._last_network: int | None = None

    def reconfigure(self, settings: DedupSettings, connections: frozenset[str]) -> None:
        """A reloaded config: its windows from now on; the incidents seen stay, but for
        the connections it no longer has."""
        self.settings = settings
        for gone in [c for c in self._last_by_connection if c not in connections]:
            del self._last_by_connection[gone]

    def admit(self, now: int, connection: str, window: DedupWindow) -> DedupWindow | None:
        """Count a failure that counts in `window` and return None, or return the window
        that suppressed it."""
        if window is DedupWindow.NETWORK:
            last = self._last_network
            if last is not None and now - last < self.settings.network_window_ms:
                return window
            self._last_network = now
            self._last_by_connection[connection] = now
            return None
        last = self._last_by_connection.get(connection)
        if last is not None and now - last < self.settings.connection_window_ms:
            return DedupWindow.CONNECTION
        self._last_by_connection[connection] = now
        return None


class RetryBudget:
    """A provider's token bucket for same-request retries.

    First attempts deposit `ratio` tokens (up to `burst`); each further attempt of the same
    request on the same provider spends one. Retries therefore stay below `ratio` of traffic
    once the initial burst is spent.
    """

    __slots__ = ("_burst", "_ratio", "settings", "tokens")

    def __init__(self, settings: RetryBudgetSettings) -> None:
        self.settings = settings
        self._burst = float(settings.burst)
        self._ratio = settings.ratio
        self.tokens = self._burst

    def reconfigure(self, settings: RetryBudgetSettings) -> None:
        """A reloaded config's ratio and burst; the tokens left stay, up to the new burst."""
        self.settings = settings
        self._burst = float(settings.burst)
        self._ratio = settings.ratio
        self.tokens = min(self.tokens, self._burst)

    def deposit(self) -> None:
        tokens = self.tokens + self._ratio
        self.tokens = tokens if tokens < self._burst else self._burst

    def try_spend(self) -> bool:
        # a tiny epsilon absorbs float drift from repeated fractional deposits
        if self.tokens >= 1.0 - 1e-9:
            self.tokens = max(0.0, self.tokens - 1.0)
            return True
        return False
