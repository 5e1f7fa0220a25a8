"""What the console keeps of each entity and each request, as events leave it (no
Textual here): the state the panes' modules render."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from ...engine.events import AttemptEvent, Event, ResultEvent

__all__ = ["ENTITY_HISTORY", "HISTORY", "LIVE_CHART_S", "SHARE_S", "AttemptSeries",
           "Buckets", "ConnectionView", "HerdChart", "LockoutView", "ProviderView",
           "RequestTrail", "load_counts"]

HISTORY = 30  # seconds of sparkline
#: how far back the scenario pane's chart looks on real time (live, attached) or in a
#: room's run, and what a room sends a viewer of the attempts so far
LIVE_CHART_S = 600
SHARE_S = 60  # a provider's share of the attempts: over the last minute
ENTITY_HISTORY = 40


@dataclass
class Buckets:
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


@dataclass(frozen=True)
class Failure:
    """A failed result: its kind, the status the upstream answered and, for a stream, why
    it ended (a gateway's state document says the kind alone)."""

    kind: str
    status: int | None = None
    reason: str | None = None

    @classmethod
    def of(cls, event: ResultEvent) -> Failure:
        return cls(str(event.kind), event.status, event.reason)

    @cached_property
    def text(self) -> str:
        """As a cell says it: `rate_limited (429)`, with a stream's reason (written once:
        a table of 500 keys shows each one's at every paint)."""
        text = f"{self.kind} ({self.status})" if self.status else self.kind
        return text if self.reason is None else f"{text}: {self.reason}"


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
    last_error: Failure | None = None
    last_error_at: int | None = None
    attempts: Buckets = field(default_factory=Buckets)
    errors: Buckets = field(default_factory=Buckets)
    minute: Buckets = field(default_factory=lambda: Buckets(SHARE_S))  # for its share
    history: deque[Event] = field(default_factory=lambda: deque(maxlen=ENTITY_HISTORY))
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
    """One recent request and the events of its routing, in order (the "why" view writes
    them out as steps: `request_steps`)."""

    id: str
    route: str
    started: int
    events: list[Event] = field(default_factory=list)
    status: int | None = None
    attempts: int = 0
    waited_ms: int = 0
    latency_ms: int | None = None
    served_by: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (provider, reason)


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
    last_error: Failure | None = None
    history: deque[Event] = field(default_factory=lambda: deque(maxlen=ENTITY_HISTORY))


@dataclass
class LockoutView:
    provider: str
    connection: str
    model: str
    kind: str
    failures: int
    until: int
    history: deque[Event] = field(default_factory=lambda: deque(maxlen=ENTITY_HISTORY))
