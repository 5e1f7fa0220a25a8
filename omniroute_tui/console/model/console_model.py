"""The console's view state, built from engine events alone (no Textual here).

`ConsoleModel` subscribes to an event bus and keeps, per entity, what the panes show
(`views`). Each pane's module renders it: the tables' rows as plain strings keyed by
entity (`tables`, so widgets apply keyed diffs: only the cells whose text changed are
touched), the overview's lines (`overview`), the charts (`charts`); the events log's
lines are `event_lines`'. What a gateway or a room says of the state comes in through
`documents` (docs/development.md, "The console's model").
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping

from ...config.router_config import ProviderConfig
from ...engine.events import (
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
from ...engine.kinds import (
    BreakerReason,
    BreakerState,
    CooldownReason,
)
from ...router.routes import Route
from . import charts, documents, overview
from .event_lines import LogEntry, logged
from .panes import Pane
from .row_keys import ConnectionKey, LockoutKey, RowKey
from .tables import TABLES, audit, connections, lockouts, providers, requests
from .text import (
    cooldown_kind,
)
from .views import (
    LIVE_CHART_S,
    AttemptSeries,
    ConnectionView,
    Failure,
    HerdChart,
    LockoutView,
    ProviderView,
    RequestTrail,
)

__all__ = ["COLUMNS", "RECENT_REQUESTS", "SORTS", "ConsoleModel"]


#: each table's columns with the width its vocabulary needs (None: as wide as the names
#: and numbers it holds), and the orders `s` cycles (the first is the default): each
#: pane's module says its own (`tables`)
COLUMNS: dict[Pane, tuple[tuple[str, int | None], ...]] = {
    pane: table.COLUMNS for pane, table in TABLES.items()}
SORTS: dict[Pane, tuple[str, ...]] = {pane: table.SORTS for pane, table in TABLES.items()}
AUDIT_ROWS = 500  # operator actions the audit pane keeps
RECENT_REQUESTS = 200  # requests the "why" view keeps, each with its steps
EVENT_LOG_LINES = 500


class ConsoleModel:
    """Everything the panes show, updated by `on_event`; `now()` gives the data's clock."""

    def __init__(self, providers: Mapping[str, ProviderConfig], now: Callable[[], int],
                 *, routes: Mapping[str, Route] | None = None) -> None:
        self.now = now
        #: each route's strategy, for the overview: the config's, or the state's when
        #: attached (read again after a reload)
        self.routes: dict[str, str] = {name: route.strategy.value
                                       for name, route in (routes or {}).items()}
        self.providers: dict[str, ProviderView] = {}
        self.connections: dict[tuple[str, str], ConnectionView] = {}
        self.lockouts: dict[tuple[str, str, str], LockoutView] = {}
        self.requests: OrderedDict[str, RequestTrail] = OrderedDict()
        self.series = AttemptSeries()
        #: operator actions, oldest first: (t, actor, action, target, result)
        self.audit: deque[tuple[int, str, str, str, str]] = deque(maxlen=AUDIT_ROWS)
        for name, config in providers.items():
            self.providers[name] = ProviderView(
                name, config.auth.value, config.settings.breaker.failure_threshold,
                budget_burst=float(config.settings.retry_budget.burst))
            for conn in config.connections:
                masked = conn.api_key.masked if conn.api_key is not None else "(none)"
                self.connections[(name, conn.id)] = ConnectionView(
                    name, conn.id, masked, config.settings.cooldown.max_level)
        self.events: deque[LogEntry] = deque(maxlen=EVENT_LOG_LINES)
        self.event_serial = 0  # grows with every logged event, for "what is new" checks
        self.log_epoch = 0  # grows when the log starts again (a room's new run)
        self.active_faults: dict[str, str] = {}
        self.last_event_at: int | None = None
        self._requests: deque[int] = deque()
        self._responses: deque[tuple[int, bool]] = deque()
        self.total_requests = 0
        self._handlers: dict[type[Event], Callable[[object], None]] = {
            RequestEvent: self._request, AttemptEvent: self._attempt,
            ResultEvent: self._result, ResponseEvent: self._response,
            BreakerEvent: self._breaker, CooldownEvent: self._cooldown,
            DisabledEvent: self._enabled_changed, EnabledEvent: self._enabled_changed,
            LockoutEvent: self._lockout, FaultEvent: self._fault,
            OperatorEvent: self._operator, SkipEvent: self._skip, BudgetEvent: self._budget,
            WaitEvent: self._wait, DedupEvent: self._dedup, ReloadEvent: self._reload,
        }

    # -- consuming events ---------------------------------------------------------------

    def on_event(self, event: Event, replica: str | None = None) -> None:
        """`replica`: in a fleet, the one that emitted it (its events log line says)."""
        self.last_event_at = event.t
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)
        if logged(event):
            self.events.append(LogEntry(event.t, event.TYPE, event, replica))
            self.event_serial += 1

    def note(self, t: int, text: str) -> None:
        """A line of the console's own in the events log (an attached console's link going
        down and coming back): the log shows where its record has a gap."""
        self.events.append(LogEntry(t, "console", text))
        self.event_serial += 1

    def new_run(self, t: int, text: str) -> None:
        """The run this model follows started again (a room's trainer replayed it from
        the start): what the old run left goes, its names stay, and the events log starts
        afresh with `text` as its first line. Load the new run's state after this."""
        for name, v in self.providers.items():
            self.providers[name] = ProviderView(v.name, v.auth, v.threshold,
                                                budget_burst=v.budget_burst)
        for key, c in self.connections.items():
            self.connections[key] = ConnectionView(c.provider, c.connection, c.masked_key,
                                                   c.max_level)
        self.lockouts.clear()
        self.requests.clear()
        self.series = AttemptSeries(self.series.keep_s)
        self.audit.clear()
        self.active_faults.clear()
        self._requests.clear()
        self._responses.clear()
        self.total_requests = 0
        self.last_event_at = None
        self.events.clear()
        self.log_epoch += 1
        self.note(t, text)

    def _request(self, event: object) -> None:
        assert isinstance(event, RequestEvent)
        self.total_requests += 1
        self._requests.append(event.t)
        trail = self.requests[event.id] = RequestTrail(event.id, event.route, event.t)
        trail.events.append(event)
        if len(self.requests) > RECENT_REQUESTS:
            self.requests.popitem(last=False)

    def _kept(self, request: str, event: Event) -> RequestTrail | None:
        """`event` is a step of `request`: kept with its trail, if the trail is kept."""
        trail = self.requests.get(request)
        if trail is not None:
            trail.events.append(event)
        return trail

    def _attempt(self, event: object) -> None:
        assert isinstance(event, AttemptEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.attempts.add(event.t)
            view.minute.add(event.t)
            if event.probe:
                view.probe_request = event.request
            elif event.cooling_until is not None:
                view.carried_request = event.request
        self.series.add(event.provider, event.t)
        trail = self._kept(event.request, event)
        if trail is not None:
            trail.attempts = event.n

    def _skip(self, event: object) -> None:
        assert isinstance(event, SkipEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.skips[event.reason] += 1
        trail = self._kept(event.request, event)
        if trail is not None:
            trail.skipped.append((event.provider, event.reason))

    def _budget(self, event: object) -> None:
        assert isinstance(event, BudgetEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.budget_tokens, view.budget_at = event.tokens, event.t
        self._kept(event.request, event)

    def _wait(self, event: object) -> None:
        assert isinstance(event, WaitEvent)
        view = self.providers.get(event.target.split("/", 1)[0])
        if view is not None:
            if event.phase == "start":
                view.waits += 1
                view.waiting.add(event.request)
            else:
                view.waiting.discard(event.request)
        self._kept(event.request, event)

    def _dedup(self, event: object) -> None:
        assert isinstance(event, DedupEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.deduped += 1

    def _result(self, event: object) -> None:
        assert isinstance(event, ResultEvent)
        view = self.providers.get(event.provider)
        conn = self.connections.get((event.provider, event.connection))
        self._kept(event.request, event)
        if event.kind is None:
            if conn is not None:
                conn.last_error = None
            return
        failure = Failure.of(event)
        if view is not None:
            view.errors.add(event.t)
            view.last_error, view.last_error_at = failure, event.t
        if conn is not None:
            conn.last_error = failure
            conn.history.append(event)

    def _response(self, event: object) -> None:
        assert isinstance(event, ResponseEvent)
        self._responses.append((event.t, 200 <= event.status < 300))
        trail = self._kept(event.request, event)
        if trail is not None:
            trail.status, trail.attempts = event.status, event.attempts
            trail.waited_ms, trail.latency_ms = event.waited_ms, event.latency_ms
            trail.served_by = event.served_by

    def _breaker(self, event: object) -> None:
        assert isinstance(event, BreakerEvent)
        view = self.providers.get(event.provider)
        if view is None:
            return
        if event.to is BreakerState.OPEN and event.from_ is not BreakerState.OPEN:
            view.open_spans.append([event.t, -1])  # -1: still open
        elif event.from_ is BreakerState.OPEN and event.to is not BreakerState.OPEN \
                and view.open_spans:
            view.open_spans[-1][1] = event.t
        view.state = event.to
        view.failures = event.failures
        view.forced = event.reason is BreakerReason.OPERATOR_FORCE_OPEN
        if not view.forced:
            view.forced_by = ""
        if event.to is BreakerState.OPEN:
            view.open_until = event.t + (event.retry_after_ms or 0)
            if event.reason is BreakerReason.PROBE_FAILED:
                view.cycles += 1
        else:
            view.open_until = None
            if event.to is BreakerState.CLOSED:
                view.cycles = 0
        view.history.append(event)

    def _cooldown(self, event: object) -> None:
        assert isinstance(event, CooldownEvent)
        conn = self.connections.get((event.provider, event.connection))
        if conn is None:
            return
        conn.level = event.level
        conn.cooling_until = event.until
        conn.history.append(event)
        if event.reason is not None:
            view = self.providers.get(event.provider)
            probe = event.reason is CooldownReason.PROBE_FREED
            request = view and (view.probe_request if probe else view.carried_request)
            if request:
                self._kept(request, event)
        elif event.kind is not None:
            conn.cooling_kind = cooldown_kind(event.kind, event.hint_ms)

    def _enabled_changed(self, event: object) -> None:
        assert isinstance(event, DisabledEvent | EnabledEvent)
        conn = self.connections.get((event.provider, event.connection))
        if conn is not None:
            conn.disabled = isinstance(event, DisabledEvent)
            conn.history.append(event)

    def _lockout(self, event: object) -> None:
        assert isinstance(event, LockoutEvent)
        key = (event.provider, event.connection, event.model)
        view = self.lockouts.get(key)
        if event.kind is None and event.until <= event.t:
            if view is not None:
                del self.lockouts[key]
            return
        if view is None:
            view = self.lockouts[key] = LockoutView(
                event.provider, event.connection, event.model, event.kind or "", 0, 0)
        view.failures = event.failures
        view.until = event.until
        if event.kind is not None:
            view.kind = event.kind
        view.history.append(event)

    def _operator(self, event: object) -> None:
        assert isinstance(event, OperatorEvent)
        self.audit.append((event.t, event.actor, event.action, event.target, event.result))
        view = self.providers.get(event.target)
        if event.action == "force_open" and view is not None and view.forced:
            view.forced_by = event.actor  # the audit follows the breaker's own event

    def _reload(self, event: object) -> None:
        """A reloaded config: what it removed leaves the panes (what it added shows once
        it has state to show, or at the next attach)."""
        assert isinstance(event, ReloadEvent)
        gone = set(event.providers_removed)
        gone_connections = set(event.connections_removed)
        for name in gone:
            self.providers.pop(name, None)
        for key in [k for k in self.connections
                    if k[0] in gone or f"{k[0]}/{k[1]}" in gone_connections]:
            del self.connections[key]
        for lock in [k for k in self.lockouts
                     if k[0] in gone or f"{k[0]}/{k[1]}" in gone_connections]:
            del self.lockouts[lock]

    def _fault(self, event: object) -> None:
        assert isinstance(event, FaultEvent)
        if event.phase == "start":
            self.active_faults[event.name] = event.target
        else:
            self.active_faults.pop(event.name, None)


    # -- what a gateway or a room says: `documents` ----------------------------------------

    def backfill(self, events: Iterable[Event], audit: Iterable[Mapping[str, object]]
                 ) -> None:
        documents.backfill(self, events, audit)

    def load_state_document(self, state: Mapping[str, object]) -> None:
        documents.load_state_document(self, state)

    # -- reading ------------------------------------------------------------------------

    def expire(self, now: int) -> None:
        """Forget lockouts that have run out (nothing announces an expiry: it is lazy)."""
        for key in [k for k, v in self.lockouts.items() if v.until <= now]:
            del self.lockouts[key]

    def rates(self, now: int, window_ms: int = 10_000) -> tuple[float, float | None]:
        """Requests per second and the success share over the last `window_ms`."""
        while self._requests and self._requests[0] <= now - window_ms:
            self._requests.popleft()
        while self._responses and self._responses[0][0] <= now - window_ms:
            self._responses.popleft()
        rate = len(self._requests) * 1000 / window_ms
        if not self._responses:
            return rate, None
        ok = sum(1 for _, good in self._responses if good)
        return rate, ok / len(self._responses)

    def counts(self, now: int) -> tuple[int, int, int]:
        """Open breakers, cooling connections, locked models."""
        open_breakers = sum(1 for v in self.providers.values() if v.state == BreakerState.OPEN)
        cooling = sum(1 for c in self.connections.values()
                      if not c.disabled and c.cooling_until > now)
        locked = sum(1 for v in self.lockouts.values() if v.until > now)
        return open_breakers, cooling, locked


    # -- the overview and the charts: their modules (`overview`, `charts`) -------------------

    def overview_lines(self, now: int) -> list[str]:
        return overview.lines(self, now)

    def live_chart(self, now: int, bins: int, window_s: int = LIVE_CHART_S, *,
                   run_clock: bool = False, compared: AttemptSeries | None = None,
                   faults: Iterable[tuple[str, int, int]] = ()) -> HerdChart:
        return charts.live_chart(self, now, bins, window_s, run_clock=run_clock,
                                 compared=compared, faults=faults)

    def herd_chart(self, now: int, bins: int, *, compared: AttemptSeries | None = None,
                   faults: Iterable[tuple[str, int, int]] = ()) -> HerdChart:
        return charts.herd_chart(self, now, bins, compared=compared, faults=faults)

    # -- the tables: each pane's module renders its rows (`tables`) ------------------------

    def provider_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        return providers.rows(self, now)

    def connection_rows(self, now: int) -> dict[ConnectionKey, tuple[str, ...]]:
        return connections.rows(self, now)

    def lockout_rows(self, now: int) -> dict[LockoutKey, tuple[str, ...]]:
        return lockouts.rows(self, now)

    def request_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        return requests.rows(self, now)

    def audit_rows(self, now: int) -> dict[audit.AuditKey, tuple[str, ...]]:
        return audit.rows(self, now)

    def rows(self, kind: Pane, now: int) -> dict[RowKey, tuple[str, ...]]:
        """The rows of a table pane, by key, in their own order."""
        found: dict[RowKey, tuple[str, ...]] = TABLES[kind].rows(self, now)
        return found

    def detail(self, kind: Pane, key: RowKey, now: int
               ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
        """What the detail view of a row shows: a title, the row's fields (with the
        breakdowns that do not fit a row) and its history, oldest first."""
        table = TABLES.get(kind)
        return None if table is None else table.detail(self, key, now)

    def order(self, pane: Pane, sort: str, now: int) -> list[RowKey] | None:
        """Row keys of `pane` in the order `sort` (one of SORTS[pane]) puts them; None for
        the rows' own order. Ties keep that order (the sorts are stable)."""
        if sort == SORTS[pane][0]:
            return None
        found: list[RowKey] = TABLES[pane].order(self, sort, now)
        return found
