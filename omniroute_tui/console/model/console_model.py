"""The console's view state, built from engine events alone (no Textual here).

`ConsoleModel` subscribes to an event bus and keeps, per entity, what the panes show.
Rows are rendered to plain strings keyed by entity, so widgets can apply keyed diffs:
only the cells whose text changed are touched.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ...config.durations import format_ms
from ...config.hidden import visible
from ...config.router_config import ProviderConfig
from ...config.words import plural
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
    FailureKind,
    SkipReason,
)
from ...engine.reload import ReloadSummary
from ...router.routes import RESUME_WHY, Route
from .panes import Pane

__all__ = [
    "BREAKER_GLYPHS",
    "COLUMNS",
    "FORCED_OPEN",
    "LIVE_CHART_S",
    "SORTS",
    "AttemptSeries",
    "ConnectionView",
    "ConsoleModel",
    "HerdChart",
    "LockoutView",
    "ProviderView",
    "RequestTrail",
    "age_text",
    "countdown_text",
    "event_age",
    "level_gauge",
    "plural",
    "sparkline",
]

HISTORY = 30  # seconds of sparkline
#: how far back the scenario pane's chart looks on real time (live, attached) or in a
#: room's run, and what a room sends a viewer of the attempts so far
LIVE_CHART_S = 600
SHARE_S = 60  # a provider's share of the attempts: over the last minute
#: an OPEN breaker that an operator forced: its own state on screen, not a tripped one
FORCED_OPEN = "FORCED OPEN"
BREAKER_GLYPHS: dict[str, str] = {
    BreakerState.CLOSED: "●", BreakerState.DEGRADED: "◐", BreakerState.OPEN: "○",
    BreakerState.HALF_OPEN: "◌", FORCED_OPEN: "⊘",
}
#: what a cooling connection waits for: backoff (its level), a quota, or the server's hint
COOLDOWN_KINDS = ("backoff", "quota", "hinted")
_LONGEST_DURATION = len("720h00m")  # format_ms of the longest deadline there is (30 days)
_AGE = len("59m59s")  # a cell's age ("12s"), shown up to an hour (older: ">1h")


def _longest(words: Iterable[str]) -> int:
    return max(len(w) for w in words)


#: each table's columns with the width its vocabulary needs (None: as wide as the names
#: and numbers it holds): a state, kind or reason is never cut, whatever rows come first
COLUMNS: dict[Pane, tuple[tuple[str, int | None], ...]] = {
    Pane.PROVIDERS: (
        ("provider", None),
        ("breaker", 2 + _longest([*BreakerState, FORCED_OPEN])),
        ("fail/thr", None), ("retry in", max(len("probe due"), _LONGEST_DURATION)),
        ("cycles", None),
        ("last error, age", _longest(FailureKind) + len(" (429) ") + _AGE),
        ("attempts", HISTORY // 3), ("share", len("100%")), ("fails", HISTORY // 3),
        # why: retry budget left, failures dedup suppressed, admission waits, skips
        ("budget, age", len("▰▰▰▰▰ 99/99 ") + _AGE), ("dedup", None), ("waits", None),
        ("skipped", _longest(SkipReason) + len(" 99999")),
    ),
    Pane.CONNECTIONS: (
        ("provider", None), ("connection", None),
        ("cooldown", 2 + _LONGEST_DURATION + 1 + _longest([*COOLDOWN_KINDS, "disabled"])),
        ("backoff", None),
        ("last error", _longest(FailureKind) + len(" (429)")),
        ("key", None),
    ),
    Pane.LOCKOUTS: (
        ("provider", None), ("connection", None), ("model", None),
        ("kind", _longest(FailureKind)), ("failures", None),
        ("remaining", _LONGEST_DURATION),
    ),
    Pane.REQUESTS: (
        ("request", None), ("route", None), ("status", None), ("attempts", None),
        ("waited", None), ("latency", None), ("why", None), ("served by", None),
    ),
    Pane.AUDIT: (("time", None), ("actor", None), ("action", None), ("target", None),
              ("result", None)),
}
#: the orders each table can be sorted in (`s` cycles them); the first is the default
SORTS: dict[Pane, tuple[str, ...]] = {
    Pane.PROVIDERS: ("config order", "failures", "state"),
    Pane.CONNECTIONS: ("config order", "cooldown left", "backoff level"),
    Pane.LOCKOUTS: ("name", "time left", "failures"),
    Pane.REQUESTS: ("newest first", "slowest", "most attempts"),
    Pane.AUDIT: ("newest first",),
}
AUDIT_ROWS = 500  # operator actions the audit pane keeps
MAX_ROUTES = 1000  # routes a state document may list (a config's own bound)
ROUTES_SHOWN = 8  # routes the overview names; the rest are counted
#: a route's name or strategy in the overview at most (an attached gateway's are not ours
#: to bound: a name of 200,000 characters took 1.4 s to paint)
ROUTE_TEXT = 40
RECENT_REQUESTS = 200  # requests the "why" view keeps, each with its steps
#: a request id's cell at most (a client's may be 128 characters); the detail has it whole
REQUEST_ID_CELL = 24
#: the layer that decided a skip, by its reason
SKIP_LAYERS = {
    SkipReason.CIRCUIT_OPEN: "breaker", SkipReason.HALF_OPEN_BUSY: "breaker",
    SkipReason.ALL_COOLING: "cooldown", SkipReason.ALL_DISABLED: "cooldown",
    SkipReason.ALL_LOCKED: "lockout", SkipReason.RETRY_BUDGET: "retry budget",
    SkipReason.UNKNOWN_TARGET: "router", SkipReason.NOT_SERVED: "router",
}
_SEVERITY = {BreakerState.OPEN: 0, BreakerState.HALF_OPEN: 1, BreakerState.DEGRADED: 2,
             BreakerState.CLOSED: 3}
SPARK = " ▁▂▃▄▅▆▇█"
EVENT_LOG_LINES = 500
ENTITY_HISTORY = 40


def sparkline(values: Iterable[int]) -> str:
    data = list(values)
    top = max(data, default=0)
    if top <= 0:
        return SPARK[0] * len(data)
    return "".join(SPARK[min(8, -(-v * 8 // top))] for v in data)


def countdown_text(ms: int) -> str:
    """Time left, in whole seconds rounded up (as format_ms): a 5 s rest reads `5s` from
    its start, as a lesson's text says, and `1s` in its last second, never `0s` or `4s`
    while 4.9 s remain."""
    return format_ms(-(-ms // 1000) * 1000)


def precise_ms(ms: int) -> str:
    """A duration to the tenth of a second under a minute (`2.9s`), as a request's steps
    need; longer ones as format_ms."""
    if ms < 1000 or ms >= 60_000:
        return format_ms(ms)
    return f"{ms / 1000:.1f}s"


def _names(kind: Pane) -> tuple[str, ...]:
    return tuple(name for name, _ in COLUMNS[kind])


def level_gauge(level: int, max_level: int, width: int = 8) -> str:
    """`▰▰▱▱▱ 2/5`: a level (backoff, tokens) as a small gauge with its number."""
    width = min(max_level, width)
    filled = round(level * width / max_level) if max_level else 0
    return "▰" * filled + "▱" * (width - filled) + f" {level}/{max_level}"


@dataclass
class _Buckets:
    """Per-second counts over the last `size` seconds (HISTORY unless told)."""

    size: int = HISTORY
    counts: deque[int] = field(init=False)
    second: int = 0

    def __post_init__(self) -> None:
        self.counts = deque([0] * self.size, maxlen=self.size)

    def add(self, t_ms: int) -> None:
        self.roll(t_ms)
        self.counts[-1] += 1

    def roll(self, t_ms: int) -> None:
        second = t_ms // 1000
        if second > self.second:
            for _ in range(min(self.size, second - self.second)):
                self.counts.append(0)
            self.second = second


@dataclass
class ProviderView:
    name: str
    auth: str
    threshold: int
    state: str = "CLOSED"
    failures: int = 0
    open_until: int | None = None
    forced: bool = False  # OPEN because an operator forced it
    forced_by: str = ""
    cycles: int = 0
    last_error: str = ""
    last_error_at: int | None = None
    attempts: _Buckets = field(default_factory=_Buckets)
    errors: _Buckets = field(default_factory=_Buckets)
    minute: _Buckets = field(default_factory=lambda: _Buckets(SHARE_S))  # for its share
    history: deque[str] = field(default_factory=lambda: deque(maxlen=ENTITY_HISTORY))
    budget_burst: float = 0.0
    budget_tokens: float | None = None  # as the last retry found it
    budget_at: int | None = None  # when the last retry found it so
    deduped: int = 0  # failures the dedup windows kept from the breaker
    waits: int = 0  # admission waits for this provider's targets
    waiting: set[str] = field(default_factory=set)  # requests waiting for it now
    skips: Counter[str] = field(default_factory=Counter)
    open_spans: deque[list[int]] = field(default_factory=lambda: deque(maxlen=500))
    probe_request: str = ""  # the request of the latest probe: its success frees keys
    carried_request: str = ""  # the latest request carried on a cooling key: the same


class AttemptSeries:
    """Attempts per second on each provider over a run, from attempt events (the last
    `keep_s` seconds: a router on real time runs for days)."""

    def __init__(self, keep_s: int = 3600, *, policy: str = "naive") -> None:
        self.keep_s = keep_s
        self.policy = policy  # whose attempts these are: a replay's comparison policy
        self.counts: dict[str, Counter[int]] = {}
        self._latest = 0

    def on_event(self, event: Event) -> None:
        if isinstance(event, AttemptEvent):
            self.add(event.provider, event.t)

    def add(self, provider: str, t_ms: int) -> None:
        second = t_ms // 1000
        self.counts.setdefault(provider, Counter())[second] += 1
        if second > self._latest + 60:  # forget the oldest, a minute at a time
            self._latest = second
            for counts in self.counts.values():
                for old in [s for s in counts if s < second - self.keep_s]:
                    del counts[old]

    def binned(self, provider: str, end_s: int, bins: int, *, since_s: int = 0
               ) -> tuple[list[float], list[float]]:
        """(seconds, attempts per second) over [since_s, end_s) in at most `bins`
        points."""
        counts = self.counts.get(provider, Counter())
        start = max(since_s, end_s - self.keep_s)
        width = max(1, -(-(end_s - start) // max(1, bins)))
        xs, ys = [], []
        for left in range(start, end_s, width):
            total = sum(counts.get(s, 0) for s in range(left, min(end_s, left + width)))
            xs.append(float(left))
            ys.append(total / width)
        return xs, ys


def load_counts(series: AttemptSeries, attempts: object, providers: Iterable[str]) -> None:
    """A room's attempts per second (`{provider: [[second, count], ...]}`) into `series`,
    each second's count as the room says it. Only `providers`, at most LIVE_CHART_S
    seconds each; anything of another shape is left out (a room's document is not ours
    to trust)."""
    if not isinstance(attempts, dict):
        return
    known = set(providers)
    for provider, pairs in attempts.items():
        if provider not in known or not isinstance(pairs, list):
            continue
        counts = series.counts.setdefault(provider, Counter())
        for pair in pairs[-LIVE_CHART_S:]:
            if (isinstance(pair, list) and len(pair) == 2
                    and all(type(n) is int and 0 <= n < 2**53 for n in pair)):
                counts[pair[0]] = pair[1]


@dataclass
class HerdChart:
    """What the scenario pane's chart draws: attempts per second on each provider, the
    naive policy's beside them on a replay, fault windows and breaker OPEN spans."""

    lines: list[tuple[str, list[float], list[float]]]  # (label, seconds, per second)
    compared: list[tuple[str, list[float], list[float]]]  # the naive policy's
    open_spans: list[tuple[str, float, float]]  # (provider, from s, to s)
    faults: list[tuple[str, float, float]]  # (name, from s, to s): begun, maybe not ended
    end_s: int
    compared_policy: str = "naive"  # whose attempts `compared` are; "": none (real time)
    start_s: int = 0


@dataclass
class RequestTrail:
    """One recent request and every step of its routing, each with the layer that
    decided it (the "why" view)."""

    id: str
    route: str
    started: int
    steps: list[tuple[int, str, str]] = field(default_factory=list)  # (t, layer, what)
    status: int | None = None
    attempts: int = 0
    waited_ms: int = 0
    latency_ms: int | None = None
    served_by: str | None = None
    skipped: list[str] = field(default_factory=list)


@dataclass
class ConnectionView:
    provider: str
    connection: str
    masked_key: str
    max_level: int
    level: int = 0
    cooling_until: int = 0
    cooling_kind: str = "backoff"  # one of COOLDOWN_KINDS
    disabled: bool = False
    last_error: str = ""
    history: deque[str] = field(default_factory=lambda: deque(maxlen=ENTITY_HISTORY))


@dataclass
class LockoutView:
    provider: str
    connection: str
    model: str
    kind: str
    failures: int
    until: int
    history: deque[str] = field(default_factory=lambda: deque(maxlen=ENTITY_HISTORY))


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
        self.events: deque[tuple[int, str, str]] = deque(maxlen=EVENT_LOG_LINES)
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
        line = describe(event)
        if line is not None:
            if replica is not None:
                line = f"{replica} · {line}"

            self.events.append((event.t, event.TYPE, line))
            self.event_serial += 1

    def note(self, t: int, text: str) -> None:
        """A line of the console's own in the events log (an attached console's link going
        down and coming back): the log shows where its record has a gap."""
        self.events.append((t, "console", text))
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
        trail.steps.append((event.t, "router", f"request for {event.route}" + (
            f" from tenant {event.tenant}" if event.tenant else "")))
        if len(self.requests) > RECENT_REQUESTS:
            self.requests.popitem(last=False)

    def _step(self, request: str, t: int, layer: str, what: str) -> RequestTrail | None:
        trail = self.requests.get(request)
        if trail is not None:
            trail.steps.append((t, layer, what))
        return trail

    def _attempt(self, event: object) -> None:
        assert isinstance(event, AttemptEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.attempts.add(event.t)
            view.minute.add(event.t)
        self.series.add(event.provider, event.t)
        probe = " as the breaker's probe" if event.probe else ""
        if event.probe and view is not None:
            view.probe_request = event.request
        if event.cooling_until is None:
            pass
        elif event.probe:
            probe += (f", on a key cooling for backoff until {clock_text(event.cooling_until)}"
                      " (every key was cooling: the probe tests the provider, not the key)")
        else:
            if view is not None:
                view.carried_request = event.request
            probe += (f", carried on a key cooling for backoff until "
                      f"{clock_text(event.cooling_until)} (every key it could use was cooling "
                      "and a breaker window had passed since the provider's last failure)")
        if event.why is not None:  # an ordering strategy's reason, or a resume's
            self._step(event.request, event.t,
                       "resume" if event.why.startswith(RESUME_WHY) else "strategy", event.why)
        trail = self._step(event.request, event.t, "router", f"attempt {event.n} on "
                           f"{event.provider}/{event.connection}/{event.model}{probe}")
        if trail is not None:
            trail.attempts = event.n

    def _skip(self, event: object) -> None:
        assert isinstance(event, SkipEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.skips[event.reason] += 1
        back = (f", back in {precise_ms(event.retry_after_ms)}"
                if event.retry_after_ms is not None else "")
        trail = self._step(event.request, event.t, SKIP_LAYERS.get(event.reason, "router"),
                           f"skipped {event.provider}/{event.model}: {event.reason}{back}")
        if trail is not None:
            trail.skipped.append(f"{event.provider} ({event.reason})")

    def _budget(self, event: object) -> None:
        assert isinstance(event, BudgetEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.budget_tokens, view.budget_at = event.tokens, event.t
        what = (f"a retry on {event.provider} spent a token ({event.tokens:g} left)"
                if event.spent else f"no token left for a retry on {event.provider}")
        self._step(event.request, event.t, "retry budget", what)

    def _wait(self, event: object) -> None:
        assert isinstance(event, WaitEvent)
        view = self.providers.get(event.target.split("/", 1)[0])
        if event.phase == "start":
            if view is not None:
                view.waits += 1
                view.waiting.add(event.request)
            what = (f"waits {precise_ms(event.delay_ms)} for {event.target} "
                    f"({event.reason})")
            if event.reason is SkipReason.FALLBACK_WAIT:
                what = (f"waits {precise_ms(event.delay_ms)} to try {event.target} again "
                        "before falling back to another model (fallback_wait)")
        else:
            if view is not None:
                view.waiting.discard(event.request)
            what = f"routes again after waiting {precise_ms(event.delay_ms)}"
        self._step(event.request, event.t, "admission", what)

    def _dedup(self, event: object) -> None:
        assert isinstance(event, DedupEvent)
        view = self.providers.get(event.provider)
        if view is not None:
            view.deduped += 1

    def _result(self, event: object) -> None:
        assert isinstance(event, ResultEvent)
        view = self.providers.get(event.provider)
        conn = self.connections.get((event.provider, event.connection))
        took = precise_ms(event.latency_ms)
        streamed = _streamed(event)
        if event.kind is None:
            self._step(event.request, event.t, "upstream",
                       f"answered {event.status} in {took}{streamed}")
            if conn is not None:
                conn.last_error = ""
            return
        text = f"{event.kind} ({event.status})" if event.status else event.kind
        if event.reason is not None:
            text = f"{text}: {event.reason}"
        self._step(event.request, event.t, "upstream", f"failed: {text} after {took}{streamed}")
        if view is not None:
            view.errors.add(event.t)
            view.last_error, view.last_error_at = text, event.t
        if conn is not None:
            conn.last_error = text
            conn.history.append(f"{clock_text(event.t)} {text} on {event.model}")

    def _response(self, event: object) -> None:
        assert isinstance(event, ResponseEvent)
        self._responses.append((event.t, 200 <= event.status < 300))
        served = f" from {event.served_by}" if event.served_by else ""
        trail = self._step(event.request, event.t, "router",
                           f"answered the client {event.status}{served} after "
                           f"{precise_ms(event.latency_ms)}")
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
        view.history.append(f"{clock_text(event.t)} {event.from_} → {event.to} "
                            f"({event.reason}, {event.failures} failures)")

    def _cooldown(self, event: object) -> None:
        assert isinstance(event, CooldownEvent)
        conn = self.connections.get((event.provider, event.connection))
        if conn is None:
            return
        conn.level = event.level
        conn.cooling_until = event.until
        if event.reason is not None:
            conn.history.append(f"{clock_text(event.t)} {_lifted(event)}")
            view = self.providers.get(event.provider)
            probe = event.reason is CooldownReason.PROBE_FREED
            request = view and (view.probe_request if probe else view.carried_request)
            if request:
                self._step(request, event.t, "cooldown",
                           f"the {'probe' if probe else 'carried request'}'s success freed "
                           f"{event.provider}/{event.connection} "
                           "(its backoff was the provider's failing)")
        elif event.kind is None:
            conn.history.append(f"{clock_text(event.t)} {_lifted(event)}")
        else:
            conn.cooling_kind = cooldown_kind(event.kind, event.hint_ms)
            hint = f", server said {format_ms(event.hint_ms)}" if event.hint_ms else ""
            conn.history.append(
                f"{clock_text(event.t)} cooling {format_ms(max(0, event.until - event.t))} "
                f"at level {event.level} ({event.kind}{hint})")

    def _enabled_changed(self, event: object) -> None:
        assert isinstance(event, DisabledEvent | EnabledEvent)
        conn = self.connections.get((event.provider, event.connection))
        if conn is not None:
            conn.disabled = isinstance(event, DisabledEvent)
            conn.history.append(f"{clock_text(event.t)} {event.TYPE}: {event.reason}")

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
        view.history.append(f"{clock_text(event.t)} {event.kind or 'decay'}: "
                            f"{event.failures} failures, until {clock_text(event.until)}")

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

    def backfill(self, events: Iterable[Event], audit: Iterable[Mapping[str, object]]
                 ) -> None:
        """What a gateway remembers from before this console attached (or while it was
        away): its recent state changes, then the operator actions older than those.
        Events the console has seen already are skipped; load the state after this."""
        since = self.last_event_at
        for event in events:
            if since is None or event.t > since:
                self.on_event(event)
        known = set(self.audit)
        older = []
        for entry in audit:
            t, words = entry.get("t"), [entry.get(k) for k in
                                        ("actor", "action", "target", "result")]
            texts = [w for w in words if isinstance(w, str)]
            if isinstance(t, int) and len(texts) == 4:
                row = (t, texts[0], texts[1], texts[2], texts[3])
                if row not in known:
                    older.append(row)
        if older:
            merged = sorted([*older, *self.audit], key=lambda r: r[0])
            self.audit.clear()
            self.audit.extend(merged)

    def load_state_document(self, state: Mapping[str, object]) -> None:
        """Take over whole state in the management API's shape (`omniroute_tui.state_document`):
        a gateway's when attaching, the engine's own after a restore."""
        breakers = state.get("breakers", [])
        connections = state.get("connections", [])
        lockouts = state.get("lockouts", [])
        assert isinstance(breakers, list) and isinstance(connections, list)
        assert isinstance(lockouts, list)
        for b in breakers:
            view = self.providers.get(b["provider"])
            if view is None:
                view = self.providers[b["provider"]] = ProviderView(b["provider"], "?",
                                                                   b["threshold"])
            view.state, view.failures, view.cycles = b["state"], b["failures"], b["cycles"]
            opened = b["state"] == BreakerState.OPEN and b["opened_at"] is not None
            view.open_until = b["opened_at"] + b["open_for_ms"] if opened else None
            forced = opened and b.get("forced_until") is not None
            # the state says who (any replica of a fleet), else the history, if any
            who = b.get("forced_by") or (view.forced_by if view.forced else "")
            view.forced = forced
            view.forced_by = (str(who) or "an operator") if forced else ""
        for c in connections:
            key = (c["provider"], c["connection"])
            cview = self.connections.get(key)
            if cview is None:
                cview = self.connections[key] = ConnectionView(
                    c["provider"], c["connection"], c["key"] or "(none)", c["max_level"])
            cview.level, cview.cooling_until = c["level"], c["cooling_until"]
            cview.disabled, cview.last_error = c["disabled"], c["last_error"] or ""
        self.lockouts.clear()
        for lk in lockouts:
            key3 = (lk["provider"], lk["connection"], lk["model"])
            self.lockouts[key3] = LockoutView(*key3, lk["kind"] or "", lk["failures"],
                                              lk["until"])
        self._load_routes(state.get("routes"))
        self._load_attempts(state.get("attempts"))

    def _load_routes(self, routes: object) -> None:
        """The routes of a state document (a gateway's, a room's): the whole set in
        force, each name with its strategy; a document without them (an older gateway)
        leaves the routes known as they are. At most MAX_ROUTES; an entry of another
        shape is left out."""
        if not isinstance(routes, list):
            return
        self.routes = {route["name"]: route["strategy"] for route in routes[:MAX_ROUTES]
                       if isinstance(route, dict) and isinstance(route.get("name"), str)
                       and isinstance(route.get("strategy"), str)}

    def _load_attempts(self, attempts: object) -> None:
        """A room's attempts per second so far: they stand for what this model counted
        of those seconds (`load_counts`)."""
        load_counts(self.series, attempts, self.providers)

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

    def provider_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        rows: dict[str, tuple[str, ...]] = {}
        for v in self.providers.values():
            v.minute.roll(now)
        total = sum(sum(v.minute.counts) for v in self.providers.values())
        for name, v in self.providers.items():
            v.attempts.roll(now)
            v.errors.roll(now)
            share = f"{round(100 * sum(v.minute.counts) / total)}%" if total else "–"
            if v.open_until is not None:
                left = v.open_until - now
                retry = countdown_text(left) if left > 0 else "probe due"
            else:
                retry = "–"
            state = v.state
            if v.forced and v.state == BreakerState.OPEN:
                state = FORCED_OPEN  # by whom: the detail says
            # an OPEN breaker counts nothing new: a count past the threshold is the
            # failures that were in flight when it tripped (the detail has it whole)
            failures = min(v.failures, v.threshold) if v.state == BreakerState.OPEN \
                else v.failures
            error = f"{v.last_error} {age_text(now, v.last_error_at)}" if v.last_error \
                else "–"
            rows[name] = (
                name, f"{BREAKER_GLYPHS.get(state, '?')} {state}",
                f"{failures}/{v.threshold}", retry, str(v.cycles), error,
                sparkline(v.attempts.counts)[-10:], share, sparkline(v.errors.counts)[-10:],
                *self._why(v, now),
            )
        return rows

    @staticmethod
    def _why(v: ProviderView, now: int) -> tuple[str, str, str, str]:
        """Budget, dedup, waits and skips of a provider, as its row shows them (the
        budget as the last retry found it, with how long ago)."""
        if v.budget_tokens is None:
            budget = "full"
        elif v.budget_burst <= 0:  # attached: the gateway's state does not say its burst
            budget = f"{v.budget_tokens:g} left {age_text(now, v.budget_at)}"
        else:
            budget = (f"{level_gauge(int(v.budget_tokens), int(v.budget_burst), width=5)} "
                      f"{age_text(now, v.budget_at)}")
        waits = f"{v.waits}, {len(v.waiting)} now" if v.waiting else str(v.waits)
        top = v.skips.most_common(1)
        skipped = f"{top[0][0]} {top[0][1]}" if top else "–"
        return budget, str(v.deduped), waits, skipped

    def live_chart(self, now: int, bins: int, window_s: int = LIVE_CHART_S, *,
                   run_clock: bool = False, compared: AttemptSeries | None = None,
                   faults: Iterable[tuple[str, int, int]] = ()) -> HerdChart:
        """Attempts per second on each provider over the last `window_s` seconds: on
        real time (a router, an attached gateway) x in seconds before now; on a run's
        clock (a room's replay) in the run's seconds, from its start while it is younger
        than the window, with the trainer's compared policy and fault lines when the room
        sends them."""
        end_s = max(1, -(-now // 1000))
        since = max(0, end_s - window_s) if run_clock else end_s - window_s
        shift = 0 if run_clock else end_s  # real time: x counts back from now
        lines = []
        for name in self.providers:
            xs, ys = self.series.binned(name, end_s, bins, since_s=since)
            lines.append((name, [x - shift for x in xs], ys))
        spans = [(name, start / 1000 - shift, (now if until < 0 else until) / 1000 - shift)
                 for name, v in self.providers.items() for start, until in v.open_spans
                 if until < 0 or until / 1000 > since]
        spans = [(name, max(a, since - shift), b) for name, a, b in spans]
        other = [] if compared is None else [
            (f"{name} {compared.policy}",
             *compared.binned(name, end_s, bins, since_s=since)) for name in self.providers]
        windows = [(name, at / 1000 - shift, until / 1000 - shift) for name, at, until in faults
                   if at <= now and until / 1000 > since]
        return HerdChart(lines, other, spans, windows, end_s - shift,
                         "" if compared is None else compared.policy, start_s=since - shift)

    def herd_chart(self, now: int, bins: int, *, compared: AttemptSeries | None = None,
                   faults: Iterable[tuple[str, int, int]] = ()) -> HerdChart:
        """The scenario pane's chart up to `now`, in at most `bins` points a line."""
        end_s = max(1, -(-now // 1000))
        lines = [(name, *self.series.binned(name, end_s, bins)) for name in self.providers]
        other = [] if compared is None else [
            (f"{name} {compared.policy}", *compared.binned(name, end_s, bins))
            for name in self.providers]
        spans = [(name, start / 1000, (now if until < 0 else until) / 1000)
                 for name, v in self.providers.items() for start, until in v.open_spans]
        windows = [(name, at / 1000, until / 1000) for name, at, until in faults if at <= now]
        return HerdChart(lines, other, spans, windows, end_s,
                         "naive" if compared is None else compared.policy)

    def audit_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        """Who did what and when, newest first."""
        rows: dict[str, tuple[str, ...]] = {}
        for t, actor, action, target, result in reversed(self.audit):
            key = f"{t}:{actor}:{action}:{target}:{result}"
            rows.setdefault(key, (clock_text(t), actor, action, target, result))
        return rows

    def request_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        """The recent requests, newest first."""
        rows: dict[str, tuple[str, ...]] = {}
        for trail in reversed(self.requests.values()):
            why = ", ".join(trail.skipped[:2]) + ("…" if len(trail.skipped) > 2 else "")
            if trail.waited_ms:
                why = f"{why}; waited" if why else "waited"
            shown = trail.id if len(trail.id) <= REQUEST_ID_CELL else (
                trail.id[:REQUEST_ID_CELL - 1] + "…")
            rows[trail.id] = (
                shown, trail.route, "…" if trail.status is None else str(trail.status),
                str(trail.attempts), format_ms(trail.waited_ms) if trail.waited_ms else "–",
                "…" if trail.latency_ms is None else format_ms(trail.latency_ms),
                why or "–", trail.served_by or "–",
            )
        return rows

    def detail(self, kind: Pane, key: str, now: int
               ) -> tuple[str, list[tuple[str, str]], list[str]] | None:
        """What the detail view of a row shows: a title, the row's fields (with the
        breakdowns that do not fit a row) and its history, oldest first."""
        if kind == Pane.AUDIT:
            row = self.audit_rows(now).get(key)
            if row is None:
                return None
            return f"{row[1]}: {row[2]} {row[3]}", list(zip(_names(Pane.AUDIT), row,
                                                            strict=True)), []
        if kind == Pane.REQUESTS:
            trail = self.requests.get(key)
            if trail is None:
                return None
            cells = self.request_rows(now)[key]
            steps = [f"{clock_text(t)}  {layer:>12}  {what}" for t, layer, what in trail.steps]
            return f"request {key}", list(zip(_names(Pane.REQUESTS), cells, strict=True)), steps
        if kind == Pane.PROVIDERS:
            view = self.providers.get(key)
            if view is None:
                return None
            pairs = list(zip(_names(Pane.PROVIDERS), self.provider_rows(now)[key], strict=True))
            pairs = [p for p in pairs if p[0] not in ("attempts", "fails", "skipped")]
            tokens = ("full" if view.budget_tokens is None
                      else f"{view.budget_tokens:g} tokens" if view.budget_burst <= 0
                      else f"{view.budget_tokens:g} of {view.budget_burst:g} tokens")
            pairs[pairs.index(next(p for p in pairs if p[0] == "budget, age"))] = (
                "budget", tokens if view.budget_at is None
                else f"{tokens}, {age_text(now, view.budget_at)} ago")
            pairs[2] = ("fail/thr", f"{view.failures}/{view.threshold}")
            if view.forced and view.state == BreakerState.OPEN:
                pairs.append(("forced by", view.forced_by or "an operator"))
            if view.waiting:
                pairs.append(("waiting now", ", ".join(sorted(view.waiting)[:6])))
            for reason, count in view.skips.most_common():
                pairs.append((f"skipped: {reason}", str(count)))
            return key, pairs, list(view.history)
        if kind == Pane.CONNECTIONS:
            provider, conn = key.split("/", 1)
            cview = self.connections.get((provider, conn))
            if cview is None:
                return None
            row = self.connection_rows(now)[key]
            return key, list(zip(_names(Pane.CONNECTIONS), row, strict=True)), list(cview.history)
        parts = key.split("/", 2)
        lockout = self.lockouts.get((parts[0], parts[1], parts[2]))
        found = self.lockout_rows(now).get(key)
        if lockout is None or found is None:
            return None
        return key, list(zip(_names(Pane.LOCKOUTS), found, strict=True)), list(lockout.history)

    def connection_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        rows: dict[str, tuple[str, ...]] = {}
        for (provider, conn), v in self.connections.items():
            if v.disabled:
                state = "✗ disabled"
            elif v.cooling_until > now:
                state = f"◷ {countdown_text(v.cooling_until - now)} {v.cooling_kind}"
            else:
                state = "✓ ready"
            rows[f"{provider}/{conn}"] = (
                provider, conn, state, level_gauge(v.level, v.max_level),
                v.last_error or "–", v.masked_key,
            )
        return rows

    def lockout_rows(self, now: int) -> dict[str, tuple[str, ...]]:
        rows: dict[str, tuple[str, ...]] = {}
        for (provider, conn, model), v in sorted(self.lockouts.items()):
            if v.until <= now:
                continue
            rows[f"{provider}/{conn}/{model}"] = (
                provider, conn, model, v.kind, str(v.failures), countdown_text(v.until - now))
        return rows


    def overview_lines(self, now: int) -> list[str]:
        """All three layers and the traffic in four lines, and the routes' strategies in
        a fifth when the routes are known (the overview pane, and the dashboard's
        header)."""
        by_state: dict[str, list[str]] = {}
        for v in self.providers.values():
            word = FORCED_OPEN if v.forced and v.state == BreakerState.OPEN else v.state
            by_state.setdefault(word, []).append(v.name)
        order = (FORCED_OPEN, BreakerState.OPEN, BreakerState.HALF_OPEN,
                 BreakerState.DEGRADED, BreakerState.CLOSED)
        parts = []
        for state in order:
            names = by_state.get(state)
            if not names:
                continue
            if state == BreakerState.CLOSED:
                parts.append(f"{len(names)} CLOSED")
            else:
                more = "…" if len(names) > 3 else ""
                parts.append(f"{len(names)} {state} ({', '.join(names[:3])}{more})")
        breakers = ", ".join(parts) or "none"
        cooling = [c for c in self.connections.values()
                   if not c.disabled and c.cooling_until > now]
        kinds = {k: sum(1 for c in cooling if c.cooling_kind == k) for k in COOLDOWN_KINDS}
        why = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
        disabled = sum(1 for c in self.connections.values() if c.disabled)
        locked = [v for v in self.lockouts.values() if v.until > now]
        models = sorted({f"{v.provider}/{v.model}" for v in locked})
        rate, ok = self.rates(now)
        faults = ", ".join(f"{n} on {t}" for n, t in self.active_faults.items()) or "none"
        cooling_line = (f"{len(cooling)} of {plural(len(self.connections), 'connection')} "
                        "cooling")
        if why:
            cooling_line += f" ({why})"
        locked_line = f"{plural(len(locked), 'key')} locked"
        if models:
            more = "…" if len(models) > 3 else ""
            locked_line += f" on {plural(len(models), 'model')} ({', '.join(models[:3])}{more})"
        answered = "–" if ok is None else f"{ok * 100:.0f}%"
        lines = [
            f"breakers   {breakers}",
            f"cooldowns  {cooling_line}; {disabled} disabled",
            f"lockouts   {locked_line}",
            f"traffic    {rate:.1f} req/s, {answered} answered ok; faults: {faults}",
            *([self._routes_line()] if self.routes else []),
        ]
        # one line each, as written: a line break in an attached gateway's name would
        # start a line of its own (`breakers   0 OPEN` under the real one)
        return [visible(line) for line in lines]

    def _routes_line(self) -> str:
        """`routes     chat priority, fast weighted` (past ROUTES_SHOWN: `and 12 more`)."""
        named = [f"{_clipped(name)} {_clipped(strategy)}" for name, strategy
                 in list(self.routes.items())[:ROUTES_SHOWN]]
        more = len(self.routes) - len(named)
        return "routes     " + ", ".join(named) + (f" and {more} more" if more else "")

    def order(self, pane: Pane, sort: str, now: int) -> list[str] | None:
        """Row keys of `pane` in the order `sort` (one of SORTS[pane]) puts them; None for
        the rows' own order. Ties keep that order (the sorts are stable)."""
        if sort == SORTS[pane][0]:
            return None
        if pane == Pane.PROVIDERS:
            views = list(self.providers.values())
            if sort == "failures":
                views.sort(key=lambda v: -v.failures)
            else:
                views.sort(key=lambda v: _SEVERITY.get(BreakerState(v.state), 4))
            return [v.name for v in views]
        if pane == Pane.CONNECTIONS:
            conns = list(self.connections.values())
            if sort == "cooldown left":
                conns.sort(key=lambda c: -max(0, c.cooling_until - now))
            else:
                conns.sort(key=lambda c: -c.level)
            return [f"{c.provider}/{c.connection}" for c in conns]
        if pane == Pane.REQUESTS:
            trails = list(reversed(self.requests.values()))
            if sort == "slowest":
                trails.sort(key=lambda r: -(r.latency_ms or 0))
            else:
                trails.sort(key=lambda r: -r.attempts)
            return [r.id for r in trails]
        locks = sorted(self.lockouts.values(),
                       key=lambda lk: -lk.until if sort == "time left" else -lk.failures)
        return [f"{lk.provider}/{lk.connection}/{lk.model}" for lk in locks]


def age_text(now: int, then: int | None) -> str:
    """How long ago, compactly (`12s`, `4m05s`; `>1h` past an hour) for a cell."""
    if then is None:
        return ""
    ago = max(0, now - then)
    return ">1h" if ago >= 3_600_000 else format_ms(ago)


def event_age(ms: int) -> str:
    """An event line's age in whole seconds (`<1s`, `12s`, `4m05s`, `3h20m`, `12d`): at
    most six characters, whatever the gap (a gateway's history goes back days)."""
    if ms < 1000:
        return "<1s"
    if ms >= 100 * 3_600_000:
        return f"{ms // 86_400_000}d"
    return format_ms(ms)


def clock_text(t_ms: int) -> str:
    """Scenario time as `mm:ss.s`, or epoch milliseconds as wall-clock `HH:MM:SS`."""
    if t_ms >= 10**12:
        import time

        return time.strftime("%H:%M:%S", time.localtime(t_ms / 1000))
    seconds, ms = divmod(t_ms, 1000)
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes:02d}:{seconds:02d}.{ms // 100}"


def cooldown_kind(kind: str, hint_ms: int | None) -> str:
    """What a cooldown waits for, in COOLDOWN_KINDS' words."""
    if kind == FailureKind.QUOTA_EXHAUSTED:
        return "quota"
    return "hinted" if hint_ms is not None else "backoff"


def _lifted(event: CooldownEvent) -> str:
    """A cooldown event without a kind: lifted, or only its backoff level reset (a success
    elsewhere while a quota wait goes on is not a lift), or freed by a probe."""
    if event.reason is CooldownReason.PROBE_FREED:
        return f"freed by the breaker's successful probe (backoff), level {event.level}"
    if event.reason is CooldownReason.CARRIER_SERVED:
        return f"freed by a carried request's success (backoff), level {event.level}"
    if event.until > event.t:
        return (f"backoff level reset to {event.level}, still cooling until "
                f"{clock_text(event.until)}")
    return f"lifted, level {event.level}"


def describe(event: Event) -> str | None:
    """One human line for the events pane; None for the per-request noise."""
    if isinstance(event, BreakerEvent):
        return (f"breaker {event.provider}: {event.from_} → {event.to} ({event.reason}, "
                f"{event.failures} failures)")
    if isinstance(event, CooldownEvent):
        if event.kind is None:
            return f"cooldown {event.provider}/{event.connection}: {_lifted(event)}"
        return (f"cooldown {event.provider}/{event.connection}: {event.kind}, level "
                f"{event.level}, until {clock_text(event.until)}")
    if isinstance(event, LockoutEvent):
        target = f"{event.provider}/{event.connection}/{event.model}"
        if event.kind is None:
            return f"lockout {target}: {event.failures} failures left"
        return f"lockout {target}: {event.kind}, until {clock_text(event.until)}"
    if isinstance(event, DisabledEvent | EnabledEvent):
        return f"{event.TYPE} {event.provider}/{event.connection}: {event.reason}"
    if isinstance(event, DedupEvent):
        return (f"dedup {event.provider}/{event.connection}: {event.kind} inside the "
                f"{event.window} window")
    if isinstance(event, OperatorEvent):
        return f"operator {event.actor}: {event.action} {event.target} → {event.result}"
    if isinstance(event, FaultEvent):
        return f"fault {event.name} {event.phase} on {event.target}"
    if isinstance(event, ReloadEvent):
        summary = ReloadSummary(event.providers_added, event.providers_removed,
                                event.providers_changed, event.connections_added,
                                event.connections_removed)
        return f"reload: config {event.version}, {summary.describe()}"
    if isinstance(event, SkipEvent):
        return None
    if isinstance(event, AttemptEvent) and event.cooling_until is not None:
        return (f"{'probe' if event.probe else 'carried'} {event.provider}/{event.connection}/"
                f"{event.model} on a key cooling for backoff until "
                f"{clock_text(event.cooling_until)} (every key was cooling) for {event.request}")
    if isinstance(event, ResultEvent) and event.kind is not None:
        reason = f" {event.reason}" if event.reason is not None else ""
        return (f"failure {event.provider}/{event.connection}/{event.model}: {event.kind}"
                f"{reason} ({event.status}) for {event.request}{_streamed(event)}")
    return None


def _streamed(event: ResultEvent) -> str:
    """What a streamed answer relayed before it ended, for its step in the why view and
    its line in the events pane."""
    if event.relayed_bytes is None:
        return ""
    return f", streamed {event.relayed_chunks} chunk(s), {event.relayed_bytes:,} bytes"


def _clipped(text: str) -> str:
    """At most ROUTE_TEXT characters, the last of them `…` when cut."""
    return text if len(text) <= ROUTE_TEXT else text[:ROUTE_TEXT - 1] + "…"
