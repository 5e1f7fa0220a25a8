"""Scenario files (docs/design.md §11): the router config plus latency, traffic, faults and expects.

Every problem is reported with the file, the line and the field; nothing here raises a
traceback at a user.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from pathlib import Path as FsPath
from statistics import NormalDist
from typing import Any

from omniroute_tui.config.durations import format_ms, parse_rate_per_s
from omniroute_tui.config.hidden import DESCRIPTION_KEEPS, hidden_reason
from omniroute_tui.config.overrides import parse_overrides, validate_settings
from omniroute_tui.config.prescan import check_counts
from omniroute_tui.config.problems import ConfigError, Path, Problem
from omniroute_tui.config.readers import (
    read_duration,
    read_int,
    read_mapping,
    read_name,
    read_number,
    read_str,
    reject_unknown,
)
from omniroute_tui.config.router_config import (
    ProviderConfig,
    RouterConfig,
    load_router_config,
    parse_providers,
    parse_routes,
)
from omniroute_tui.config.yaml_source import Source, load_source
from omniroute_tui.engine.settings import default_settings
from omniroute_tui.router.routes import Strategy

from .rate_limits import RateLimits, read_limits

__all__ = [
    "POLICIES",
    "STREAM_FAULTS",
    "AlertExpect",
    "Expect",
    "Fault",
    "FaultAction",
    "FaultTarget",
    "Latency",
    "Policy",
    "Scenario",
    "StreamSpec",
    "Traffic",
    "load_scenario",
]

class Policy(StrEnum):
    """What a scenario's traffic is routed by, compared on the same seed (docs/design.md §11)."""

    RESILIENT = "resilient"  # the engine
    NAIVE = "naive"  # no shared state: each failure retried at once up to 3 times, then on
    BACKOFF = "backoff"  # per-request exponential backoff with full jitter, 3 retries
    NO_DEDUP = "no-dedup"  # the engine with both dedup windows 0
    ISOLATED = "isolated"  # a fleet's replicas, each on its own state


POLICIES = tuple(Policy)
#: a fleet: at most this many replicas, and state changes reach the others this late at most
MAX_REPLICAS = 16
MAX_PROPAGATION_MS = 60_000
#: the most requests one policy run may simulate: about a minute and a half of CPU at
#: 25,000 simulated requests a second (the shipped hour-long scenario makes 180,000)
MAX_SIMULATED_REQUESTS = 2_000_000

TOP_FIELDS = ("name", "description", "seed", "duration", "clock", "resilience", "providers",
              "routes", "traffic", "faults", "expect", "replicas", "shared_state", "propagation",
              "latency", "limits", "strategies")
#: what a router config (`--config`) brings instead of the scenario
ROUTER_FIELDS = ("providers", "routes", "resilience")
RUN_METRICS = frozenset({
    "requests", "successes", "success_rate", "attempts", "amplification", "p50_ms", "p95_ms",
    "p99_ms", "dedup_suppressed", "breaker_opens", "open_ms", "max_attempts_per_open",
    "wall_s", "sim_rps",
})
PROVIDER_METRICS = frozenset({"attempts", "probes", "successes", "failures", "breaker_opens",
                              "open_ms", "max_attempts_per_open"})
FAULT_METRICS = frozenset({"attempts", "attempts_per_s", "ttr_ms", "burst_after"})
_CHECK = re.compile(r"^ *(<=|>=|==|<|>) *(-?[0-9]+(?:\.[0-9]+)?) *$")  # ASCII digits, as durations
_Z99 = 2.3263478740408408  # the 99th percentile of the standard normal


_QUANTILES = 4096


@dataclass(frozen=True)
class Latency:
    """A provider's response time: fixed, or log-normal through its p50 and p99.

    Sampling picks one of 4,096 precomputed quantiles with one uniform draw: the same
    distribution to within a quantile step, at a fraction of the cost of a normal draw.
    """

    p50_ms: int
    p99_ms: int

    def sample(self, rng: random.Random) -> int:
        if self.p99_ms <= self.p50_ms:
            return self.p50_ms
        return self._table[int(rng.random() * _QUANTILES)]

    @cached_property
    def _table(self) -> tuple[int, ...]:
        sigma = math.log(self.p99_ms / self.p50_ms) / _Z99
        normal = NormalDist()
        return tuple(
            max(1, round(self.p50_ms * math.exp(sigma * normal.inv_cdf((i + 0.5) / _QUANTILES))))
            for i in range(_QUANTILES)
        )


#: a provider's response time when the scenario gives none
DEFAULT_LATENCY = Latency(100, 100)


class FaultAction(StrEnum):
    STATUS = "status"
    RESET = "reset"
    REFUSED = "refused"
    TIMEOUT = "timeout"
    SLOW = "slow"
    QUOTA = "quota"
    # stream faults: a streamed answer that starts, then breaks (docs/simulator.md)
    STREAM_CUT = "stream_cut"
    STREAM_STALL = "stream_stall"
    BAD_CHUNK = "bad_chunk"
    NO_DONE = "no_done"
    FIRST_TOKEN = "first_token"


#: the faults that act on streamed answers only, each a field of a fault of its own name
STREAM_FAULTS = frozenset({FaultAction.STREAM_CUT, FaultAction.STREAM_STALL,
                           FaultAction.BAD_CHUNK, FaultAction.NO_DONE,
                           FaultAction.FIRST_TOKEN})
#: the most tokens a streamed answer may have, and a stream fault may count
MAX_TOKENS = 100_000
#: a streamed answer's tokens and their rate unless the traffic says (docs/simulator.md)
DEFAULT_TOKENS = 60
DEFAULT_TOKEN_RATE = 50.0


@dataclass(frozen=True)
class StreamSpec:
    """A streamed request (`stream:` in traffic): the fakes answer it with `tokens`
    content chunks, the first `interval_ms` after the headers, each next one
    `interval_ms` after the one before."""

    tokens: int = DEFAULT_TOKENS
    interval_ms: int = round(1000 / DEFAULT_TOKEN_RATE)


@dataclass(frozen=True)
class FaultTarget:
    """`*`, `provider`, `provider/connection`, `provider/*/model`, `provider/conn/model`."""

    provider: str | None = None
    connection: str | None = None
    model: str | None = None

    def matches(self, provider: str, connection: str | None, model: str | None) -> bool:
        return (
            (self.provider is None or self.provider == provider)
            and (self.connection is None or self.connection == connection)
            and (self.model is None or self.model == model)
        )

    def __str__(self) -> str:
        if self.provider is None:
            return "*"
        parts = [self.provider, self.connection or "*", self.model or "*"]
        while len(parts) > 1 and parts[-1] == "*":
            parts.pop()
        return "/".join(parts)


@dataclass(frozen=True)
class Fault:
    name: str
    at_ms: int
    until_ms: int
    target: FaultTarget
    action: FaultAction
    status: int | None = None
    retry_after_ms: int | None = None
    body: str | None = None
    rate: float = 1.0
    latency_ms: int = 0
    line: int | None = None
    #: a stream fault's token count (`after_tokens`), and what it holds back: a stall's
    #: length, or how long after the headers the first token comes (`first_token`)
    after_tokens: int = 0
    hold_ms: int = 0

    def active(self, t: int) -> bool:
        return self.at_ms <= t < self.until_ms


@dataclass(frozen=True)
class Traffic:
    """One traffic item; `arrivals()` yields its request times in ms."""

    route: str
    from_ms: int
    to_ms: int
    rate_per_s: float | None = None
    every_ms: int | None = None
    at_ms: tuple[int, ...] | None = None
    #: the requests ask for an SSE stream: the fakes' answer, token by token
    stream: StreamSpec | None = None
    #: requests at each time of `at_ms` (a burst: clients that all ask at once)
    count: int = 1

    def expected_requests(self, duration_ms: int) -> float:
        """About how many requests this item makes in a run of `duration_ms`."""
        span = max(0, min(self.to_ms, duration_ms) - self.from_ms)
        if self.at_ms is not None:
            return len(self.at_ms) * self.count
        if self.every_ms is not None:
            return math.ceil(span / self.every_ms)
        return (self.rate_per_s or 0.0) * span / 1000

    def arrivals(self, rng: random.Random) -> Iterator[int]:
        if self.at_ms is not None:
            for t in sorted(self.at_ms):
                for _ in range(self.count):
                    yield t
        elif self.every_ms is not None:
            t = self.from_ms
            while t < self.to_ms:
                yield t
                t += self.every_ms
        elif self.rate_per_s is not None:
            mean_gap_ms = 1000.0 / self.rate_per_s
            at = float(self.from_ms)
            while True:
                at += rng.expovariate(1.0) * mean_gap_ms
                if at >= self.to_ms:
                    return
                yield int(at)


@dataclass(frozen=True)
class Expect:
    metric: str
    op: str
    value: float
    policy: Policy = Policy.RESILIENT
    during: str | None = None
    provider: str | None = None
    line: int | None = None
    #: the run with every route on this strategy (`strategies:`), not the routes as written
    strategy: str | None = None

    def holds(self, observed: float | None) -> bool:
        if observed is None:
            return False
        return {
            "<": observed < self.value, "<=": observed <= self.value,
            ">": observed > self.value, ">=": observed >= self.value,
            "==": observed == self.value,
        }[self.op]

    @property
    def bound(self) -> str:
        """`<= 1.3`, `== 0`: the check as written."""
        value = int(self.value) if self.value.is_integer() else self.value
        return f"{self.op} {value}"

    @property
    def label(self) -> str:
        """The expectation without its policy: `attempts_per_s during storm <= 1`."""
        scope = "".join([
            f" during {self.during}" if self.during else "",
            f" on {self.provider}" if self.provider else "",
        ])
        return f"{self.metric}{scope} {self.bound}"

    @property
    def column(self) -> str:
        """The run it speaks of: its strategy's, or its policy's."""
        return self.strategy or self.policy

    def __str__(self) -> str:
        return f"{self.label} ({self.column})"


@dataclass(frozen=True)
class AlertExpect:
    """When an alert rule fires over the resilient run (`omniroute-sim run --alerts`):
    within `fires_within` of the fault's start (of the run's, without `during`), never (in
    the fault's window, with `during`), or quiet again within `resolves_within` of the
    fault's end."""

    alert: str
    during: str | None = None
    fires_within_ms: int | None = None
    resolves_within_ms: int | None = None
    never: bool = False
    line: int | None = None
    policy: Policy = Policy.RESILIENT
    strategy: None = None  # alerts are evaluated over the routes as written

    @property
    def column(self) -> str:
        return self.policy

    def holds(self, observed: float | None) -> bool:
        if observed is None:
            return False
        if self.never:
            return observed == 0
        bound = self.fires_within_ms if self.fires_within_ms is not None \
            else self.resolves_within_ms
        assert bound is not None
        return observed * 1000 <= bound

    @property
    def bound(self) -> str:
        """`fires within 2m`, `never fires`: the expectation as written."""
        if self.never:
            return "never fires"
        if self.fires_within_ms is not None:
            return f"fires within {format_ms(self.fires_within_ms)}"
        assert self.resolves_within_ms is not None
        return f"resolves within {format_ms(self.resolves_within_ms)}"

    @property
    def label(self) -> str:
        """`OmniRouteBreakerOpen fires within 2m of storm`."""
        if self.during is None:
            scope = "" if self.never else " of the start"
        else:
            scope = f" during {self.during}" if self.never else \
                f" of {self.during}{' ending' if self.resolves_within_ms is not None else ''}"
        return f"{self.alert} {self.bound}{scope}"

    def observed(self, value: float | None) -> str:
        """What the run showed, in words: `fired after 75 s`, `fired at 3 evaluations`."""
        if value is None:
            return "never fired" if self.resolves_within_ms is None else "never resolved"
        if self.never:
            return "never fired" if value == 0 else f"fired at {value:g} evaluation(s)"
        verb = "fired" if self.fires_within_ms is not None else "resolved"
        return f"{verb} after {value:g} s"

    def __str__(self) -> str:
        return f"{self.label} ({self.policy})"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    duration_ms: int
    config: RouterConfig
    latencies: Mapping[str, Latency]
    traffic: tuple[Traffic, ...]
    faults: tuple[Fault, ...]
    expect: tuple[Expect | AlertExpect, ...]
    live: bool = False
    source: str = "<memory>"
    #: a fleet of routers (the traffic spread over them in turn); its replicas share
    #: their state (through a model of the shared store's merge rules, each change reaching
    #: the others `propagation_ms` later) or keep their own
    replicas: int = 1
    shared_state: bool = True
    propagation_ms: int = 50
    #: the fakes' rate limits per key, (provider, connection) -> limits (`limits:`)
    limits: Mapping[tuple[str, str], RateLimits] = field(default_factory=dict)
    #: the strategies the resilient policy is also run under, every route set to each
    strategies: tuple[str, ...] = ()

    @property
    def policies(self) -> tuple[Policy, ...]:
        """The policies `--policy all` runs: `isolated` only for a fleet, where it is the
        same replicas without the shared state (or, when `shared_state` is false, where
        `resilient` is that already, it is not run twice)."""
        fleet = self.replicas > 1 and self.shared_state
        return tuple(p for p in POLICIES if p is not Policy.ISOLATED or fleet)

    @property
    def providers(self) -> Mapping[str, ProviderConfig]:
        return self.config.providers

    def fault_edges(self, end_ms: int) -> list[tuple[int, Fault, str]]:
        """Every fault's start and end up to `end_ms`, in time order (file order, start
        before end, at the same instant): the one timeline every runner follows."""
        edges = [(t, fault, phase) for fault in self.faults
                 for t, phase in ((fault.at_ms, "start"), (fault.until_ms, "end"))
                 if t <= end_ms]
        return sorted(edges, key=lambda edge: edge[0])

    def arrivals(self, index: int) -> Iterator[int]:
        """The request times of traffic item `index`, from its own seeded generator, so
        every policy and every mode sees the same arrivals."""
        return self.traffic[index].arrivals(random.Random(self.seed * 1_000_003 + index))


def _read_latency(src: Source, value: Any, path: Path) -> Latency | None:
    if isinstance(value, dict):
        reject_unknown(src, value, path, ("p50", "p99"))
        p50 = read_duration(src, value.get("p50"), path + ("p50",), positive=True)
        p99 = read_duration(src, value.get("p99", value.get("p50")), path + ("p99",),
                            positive=True)
        if p50 is None or p99 is None:
            return None
        if p99 < p50:
            src.problem(path + ("p99",), "p99 is below p50")
            return None
        return Latency(p50, p99)
    ms = read_duration(src, value, path)
    return None if ms is None else Latency(ms, ms)


def _read_target(
    src: Source, value: Any, path: Path, providers: Mapping[str, ProviderConfig], origin: str
) -> FaultTarget | None:
    text = read_str(src, value, path)
    if text is None:
        return None
    if text.strip() == "*":
        return FaultTarget()
    parts = text.strip().split("/", 2)  # the model last: it may hold a `/` (org/llm)
    if any(not p for p in parts):
        src.problem(path, f"expected *, provider, provider/connection, provider/*/model or "
                          f"provider/connection/model, got {text!r}")
        return None
    provider = providers.get(parts[0])
    if provider is None:
        src.problem(path, f"unknown provider {parts[0]!r}{origin} "
                          f"(providers: {', '.join(providers)})")
        return None
    connection = parts[1] if len(parts) > 1 and parts[1] != "*" else None
    model = parts[2] if len(parts) > 2 else None
    connections = [c.id for c in provider.connections]
    if connection is not None and connection not in connections:
        src.problem(path, f"provider {parts[0]!r}{origin} has no connection {connection!r} "
                          f"(connections: {', '.join(connections)})")
        return None
    if model is not None and model not in provider.all_models:
        src.problem(path, f"provider {parts[0]!r}{origin} has no model {model!r} "
                          f"(models: {', '.join(provider.all_models)})")
        return None
    return FaultTarget(parts[0], connection, model)


def _read_fault(
    src: Source, value: Any, path: Path, providers: Mapping[str, ProviderConfig], end_ms: int,
    origin: str,
) -> Fault | None:
    body = read_mapping(src, value, path)
    if body is None:
        return None
    reject_unknown(src, body, path, ("name", "at", "for", "until", "target", "error",
                                     "retry_after", "body", "rate", "latency",
                                     *sorted(STREAM_FAULTS)))
    name = read_name(src, body.get("name"), path + ("name",))
    at = read_duration(src, body.get("at", 0), path + ("at",))
    target = _read_target(src, body.get("target"), path + ("target",), providers, origin)
    until: int | None = end_ms
    if "for" in body and "until" in body:
        src.problem(path + ("until",), "give either `for` or `until`, not both")
    elif "for" in body:
        length = read_duration(src, body["for"], path + ("for",), positive=True)
        until = None if length is None or at is None else at + length
    elif "until" in body:
        until = read_duration(src, body["until"], path + ("until",))
        if until is not None and at is not None and until <= at:
            src.problem(path + ("until",), "the fault must end after it starts")
            until = None
    streamed = [key for key in sorted(STREAM_FAULTS) if key in body]
    after_tokens = hold = 0
    if streamed:
        action, status = None, None
        if len(streamed) + ("error" in body) != 1:
            src.problem(path, "give exactly one of error, " + ", ".join(sorted(STREAM_FAULTS)))
        else:
            action = FaultAction(streamed[0])
            read = _read_stream_fault(src, action, body[action], path + (action.value,))
            if read is None:
                action = None
            else:
                after_tokens, hold = read
            for key in ("retry_after", "body", "latency"):
                if key in body:
                    src.problem(path + (key,), f"{action or streamed[0]} breaks a streamed "
                                               "answer: it has no " + key)
    else:
        action, status = _read_error(src, body.get("error"), path + ("error",))
    retry_after = (read_duration(src, body["retry_after"], path + ("retry_after",))
                   if "retry_after" in body else None)
    rate = (read_number(src, body["rate"], path + ("rate",), minimum=0.0, maximum=1.0)
            if "rate" in body else 1.0)
    if rate is not None and rate <= 0:
        src.problem(path + ("rate",), "a fault rate must be above 0 (it is a probability)")
    latency = (read_duration(src, body["latency"], path + ("latency",))
               if "latency" in body else 0)
    if action is FaultAction.SLOW and not latency:
        src.problem(path + ("latency",), "a slow fault needs the latency it adds")
    fault_body = body.get("body")
    if fault_body is not None and not isinstance(fault_body, str | dict):
        src.problem(path + ("body",), "expected a string or a JSON-like mapping")
    if None in (name, at, target, until, action, rate, latency):
        return None
    assert name is not None and at is not None and target is not None and until is not None
    assert action is not None and rate is not None and latency is not None
    import json

    text_body = json.dumps(fault_body) if isinstance(fault_body, dict) else fault_body
    return Fault(name, at, until, target, action, status, retry_after, text_body, rate, latency,
                 src.line(path), after_tokens, hold)


def _read_stream_fault(src: Source, action: FaultAction, value: Any, path: Path
                       ) -> tuple[int, int] | None:
    """A stream fault's field: `(after_tokens, hold_ms)` (docs/simulator.md, `faults`)."""
    if action is FaultAction.NO_DONE:
        if value is not True:
            src.problem(path, f"expected true, got {value!r}"[:120])
            return None
        return 0, 0
    if action is FaultAction.FIRST_TOKEN:
        hold = read_duration(src, value, path, positive=True)
        return None if hold is None else (0, hold)
    body = read_mapping(src, value, path)
    if body is None:
        return None
    stall = action is FaultAction.STREAM_STALL
    reject_unknown(src, body, path, ("after_tokens", "for") if stall else ("after_tokens",))
    if "after_tokens" not in body:
        src.problem(path + ("after_tokens",), "missing: how many tokens come before it")
        return None
    # a stall before the first token is a late first token: `first_token`
    after = read_int(src, body["after_tokens"], path + ("after_tokens",),
                     minimum=1 if stall else 0)
    if after is not None and after > MAX_TOKENS:
        src.problem(path + ("after_tokens",), f"at most {MAX_TOKENS:,} tokens, got {after:,}")
        after = None
    hold = 0
    if stall:
        if "for" not in body:
            src.problem(path + ("for",), "missing: how long the stream stalls, like 40s")
            return None
        hold = read_duration(src, body["for"], path + ("for",), positive=True)
    return None if after is None or hold is None else (after, hold)


def _read_error(src: Source, value: Any, path: Path) -> tuple[FaultAction | None, int | None]:
    if isinstance(value, int) and not isinstance(value, bool):
        if 400 <= value <= 599:
            return FaultAction.STATUS, value
        src.problem(path, f"an HTTP error status is 400-599, got {value}")
        return None, None
    if isinstance(value, str):
        if value.isdigit():
            return _read_error(src, int(value), path)
        try:
            action = FaultAction(value)
        except ValueError:
            action = None
        if action is not None and action is not FaultAction.STATUS:
            return action, None
    src.problem(path, f"expected an HTTP status or one of reset, refused, timeout, slow, "
                      f"quota; got {value!r}")
    return None, None


def _read_traffic(
    src: Source, value: Any, path: Path, routes: set[str], providers: Mapping[str, Any],
    duration_ms: int, origin: str,
) -> Traffic | None:
    body = read_mapping(src, value, path)
    if body is None:
        return None
    reject_unknown(src, body, path, ("route", "rate", "every", "at", "count", "from", "to",
                                     "stream"))
    stream = _read_stream(src, body.get("stream", False), path + ("stream",))
    route = read_str(src, body.get("route"), path + ("route",))
    if route is not None and route not in routes:
        provider, _, model = route.partition("/")
        if provider not in providers or model not in providers[provider].all_models:
            src.problem(path + ("route",), f"unknown route {route!r}{origin} (routes: "
                                           f"{', '.join(sorted(routes)) or 'none'})")
            route = None
    start = read_duration(src, body.get("from", 0), path + ("from",))
    end = read_duration(src, body.get("to", duration_ms), path + ("to",))
    if start is not None and end is not None and end <= start and "at" not in body:
        src.problem(path + ("to",), "`to` must be after `from`")
        return None
    forms = [key for key in ("rate", "every", "at") if key in body]
    if len(forms) != 1:
        src.problem(path, "give exactly one of rate (20/s), every (500ms) or at ([0s, 1s])")
        return None
    if route is None or start is None or end is None:
        return None
    form = forms[0]
    if "count" in body and form != "at":
        src.problem(path + ("count",), "count is the requests at each time of `at` (a "
                                       "burst): give at, or drop count")
        return None
    if form == "rate":
        try:
            rate = parse_rate_per_s(body["rate"])
        except ValueError as exc:
            src.problem(path + ("rate",), str(exc))
            return None
        return Traffic(route, start, end, rate_per_s=rate, stream=stream)
    if form == "every":
        every = read_duration(src, body["every"], path + ("every",), positive=True)
        return None if every is None else Traffic(route, start, end, every_ms=every,
                                                  stream=stream)
    times = body["at"]
    if not isinstance(times, list) or not times:
        src.problem(path + ("at",), "expected a non-empty list of times like [0s, 1.5s]")
        return None
    parsed = [read_duration(src, t, path + ("at", i)) for i, t in enumerate(times)]
    count = read_int(src, body.get("count", 1), path + ("count",), minimum=1)
    if any(t is None for t in parsed) or count is None:
        return None
    return Traffic(route, start, end, at_ms=tuple(t for t in parsed if t is not None),
                   stream=stream, count=count)


def _read_stream(src: Source, value: Any, path: Path) -> StreamSpec | None:
    """`stream: true`, `false`, or `{tokens: 60, rate: 50/s}` (the answer's tokens)."""
    if isinstance(value, bool):
        return StreamSpec() if value else None
    body = read_mapping(src, value, path)
    if body is None:
        return None
    reject_unknown(src, body, path, ("tokens", "rate"))
    tokens = read_int(src, body.get("tokens", DEFAULT_TOKENS), path + ("tokens",), minimum=1)
    if tokens is not None and tokens > MAX_TOKENS:
        src.problem(path + ("tokens",), f"at most {MAX_TOKENS:,} tokens, got {tokens:,}")
        tokens = None
    interval: int | None = round(1000 / DEFAULT_TOKEN_RATE)
    if "rate" in body:
        try:
            rate = parse_rate_per_s(body["rate"])
        except ValueError as exc:
            src.problem(path + ("rate",), str(exc))
            rate = None
        if rate is not None and not 0.01 <= rate <= 1000:
            src.problem(path + ("rate",), f"from 0.01/s to 1000/s tokens, got {rate:g}/s")
            rate = None
        interval = None if rate is None else round(1000 / rate)
    if tokens is None or interval is None:
        return None
    return StreamSpec(tokens, interval)


_ALERT_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")


def _read_alert_expect(src: Source, body: dict[str, Any], path: Path, faults: set[str]
                       ) -> AlertExpect | None:
    """`{alert, fires_within | resolves_within | never: true, during}` (docs/alerts.md)."""
    reject_unknown(src, body, path, ("alert", "during", "fires_within", "resolves_within",
                                     "never", "policy"))
    alert = read_str(src, body.get("alert"), path + ("alert",))
    ok = alert is not None
    if alert is not None and not _ALERT_NAME.match(alert):
        src.problem(path + ("alert",), f"not an alert rule's name: {alert!r}")
        ok = False
    if body.get("policy", "resilient") != "resilient":
        src.problem(path + ("policy",), "alerts are evaluated over the resilient run only")
        ok = False
    during = body.get("during")
    if during is not None and during not in faults:
        src.problem(path + ("during",), f"no fault named {during!r}")
        ok = False
    forms = [key for key in ("fires_within", "resolves_within", "never") if key in body]
    if len(forms) != 1:
        src.problem(path, "give exactly one of fires_within (2m), resolves_within (1m) or "
                          "never: true")
        return None
    within: dict[str, int | None] = {"fires_within": None, "resolves_within": None}
    if forms[0] == "never":
        if body["never"] is not True:
            src.problem(path + ("never",), f"expected true, got {body['never']!r}")
            ok = False
    else:
        within[forms[0]] = read_duration(src, body[forms[0]], path + (forms[0],))
        ok = ok and within[forms[0]] is not None
        if forms[0] == "resolves_within" and during is None:
            src.problem(path + ("during",), "resolves_within needs the fault it counts from")
            ok = False
    if not ok or alert is None:
        return None
    return AlertExpect(alert, during, within["fires_within"], within["resolves_within"],
                       forms[0] == "never", src.line(path))


def _read_expect(
    src: Source, value: Any, path: Path, faults: set[str], providers: Mapping[str, Any],
    origin: str, strategies: tuple[str, ...] | None,
) -> Expect | AlertExpect | None:
    """One `expect:` entry; `strategies` None: the scenario's could not be read (said so),
    and an entry's strategy is not checked against them."""
    body = read_mapping(src, value, path)
    if body is None:
        return None
    if "alert" in body:
        return _read_alert_expect(src, body, path, faults)
    reject_unknown(src, body, path, ("metric", "check", "policy", "during", "provider",
                                     "strategy"))
    metric = read_str(src, body.get("metric"), path + ("metric",))
    check = read_str(src, body.get("check"), path + ("check",))
    policy = body.get("policy", "resilient")
    during, provider = body.get("during"), body.get("provider")
    ok = metric is not None and check is not None
    if policy not in POLICIES:
        src.problem(path + ("policy",), f"expected one of {', '.join(POLICIES)}, got {policy!r}")
        ok = False
    if during is not None and during not in faults:
        src.problem(path + ("during",), f"no fault named {during!r}")
        ok = False
    strategy = body.get("strategy")
    if strategy is not None and strategies is not None and strategy not in strategies:
        src.problem(path + ("strategy",), f"{strategy!r} is not one of the scenario's "
                    f"strategies ({', '.join(strategies) or 'it names none: strategies: '})"
                    [:300])
        ok = False
    elif strategy is not None and policy != Policy.RESILIENT:
        src.problem(path + ("policy",), "the strategies are run under the resilient policy")
        ok = False
    if provider is not None and provider not in providers:
        src.problem(path + ("provider",), f"unknown provider {provider!r}{origin} "
                                          f"(providers: {', '.join(providers)})")
        ok = False
    if metric is not None:
        allowed = (FAULT_METRICS if during else PROVIDER_METRICS if provider else RUN_METRICS)
        base = metric.split(".", 1)[0]
        if base not in allowed or ("." in metric and base != "failures"):
            scope = "a fault" if during else "a provider" if provider else "a run"
            src.problem(path + ("metric",), f"{metric!r} is not a metric of {scope}; "
                                            f"expected one of {', '.join(sorted(allowed))}")
            ok = False
    match = _CHECK.match(check) if check is not None else None
    if check is not None and match is None:
        src.problem(path + ("check",), f"expected an operator and a number like \"<= 1.3\", "
                                       f"got {check!r}")
        ok = False
    if not ok or match is None or metric is None:
        return None
    return Expect(metric, match.group(1), float(match.group(2)), Policy(policy), during,
                  provider, src.line(path), strategy)


#: the scenarios that ship with the package (`omniroute-sim list`)
SCENARIOS_DIR = FsPath(__file__).parent / "scenarios"


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))


def resolve_scenario(name: str) -> FsPath:
    """A scenario file's path, or the shipped scenario of that name (`429-storm`).

    Raises ConfigError naming the shipped scenarios when `name` is neither.
    """
    path = FsPath(name)
    if path.exists():
        return path
    shipped = SCENARIOS_DIR / f"{name}.yaml"
    if shipped.exists():
        return shipped
    raise ConfigError([Problem(name, None, "(file)", "no such file, and no shipped scenario "
                               f"of that name (shipped: {', '.join(shipped_scenarios())})")])


def load_scenario(
    path: str | FsPath, *, text: str | None = None, config: str | FsPath | None = None,
) -> Scenario:
    """Load and validate a scenario; raises ConfigError listing every problem.

    With `config` (a router config file) the providers, connections, routes and resilience
    settings come from that config, its keys unread; the scenario brings the traffic, the
    faults, the expectations and optional latency profiles.
    """
    router = None if config is None else load_router_config(config, read_keys=False)
    src = load_source(path, text=text, precheck=check_counts)
    data = src.data
    reject_unknown(src, data, (), TOP_FIELDS)
    name = read_name(src, data.get("name", FsPath(str(path)).stem), ("name",)) or "scenario"
    description = data.get("description", "")
    if not isinstance(description, str):
        src.problem(("description",), "expected text")
        description = ""
    elif reason := hidden_reason(description, "the description", DESCRIPTION_KEEPS):
        src.problem(("description",), reason)
    seed = read_int(src, data.get("seed", 0), ("seed",)) or 0
    duration = read_duration(src, data.get("duration"), ("duration",), positive=True) \
        if "duration" in data else None
    if duration is None:
        if "duration" not in data:
            src.problem(("duration",), "missing: how long the scenario runs, like 5m")
        duration = 1
    clock = data.get("clock", "virtual")
    if clock not in ("virtual", "live"):
        src.problem(("clock",), f"expected virtual or live, got {clock!r}")
    replicas = read_int(src, data.get("replicas", 1), ("replicas",))
    if replicas is not None and not 1 <= replicas <= MAX_REPLICAS:
        src.problem(("replicas",), f"expected 1 to {MAX_REPLICAS} routers, got {replicas}")
    shared = data.get("shared_state", True)
    if not isinstance(shared, bool):
        src.problem(("shared_state",), f"expected true or false, got {shared!r}")
    propagation = read_duration(src, data.get("propagation", 50), ("propagation",))
    if propagation is not None and propagation > MAX_PROPAGATION_MS:
        src.problem(("propagation",), "at most 60s: a change that takes longer is lost")
    if clock == "live" and (replicas or 1) > 1:
        src.problem(("replicas",), "a fleet runs in virtual time only")
    profiles: dict[str, Latency] = {}
    if router is None:
        router = _own_router(src, data)
        origin = ""
        for key in ("latency", "limits"):
            if key in data:
                src.problem((key,), f"a self-contained scenario gives each provider's {key} "
                                    "in its providers section")
        limits = _key_limits(router.providers)
    else:
        for key in ROUTER_FIELDS:
            if key in data:
                src.problem((key,), f"the {key} come from {router.source} (--config): a "
                                    "scenario run against a router config has no "
                                    f"`{key}` of its own")
        origin = f" in {router.source}"
        if "latency" in data:
            profiles = _read_latencies(src, data["latency"], router.providers, origin)
        limits = _read_key_limits(src, data.get("limits", {}), router.providers, origin)
    providers, routes = router.providers, router.routes
    traffic = _items(src, data, "traffic", lambda v, p: _read_traffic(
        src, v, p, set(routes), providers, duration, origin))
    faults = _items(src, data, "faults", lambda v, p: _read_fault(
        src, v, p, providers, duration, origin))
    _check_volume(src, traffic, duration)
    fault_names = _fault_names(src, data.get("faults"))
    problems = len(src.problems)
    strategies = read_strategies(src, data["strategies"], ("strategies",)) \
        if "strategies" in data else ()
    readable = strategies if len(src.problems) == problems else None  # not blamed twice
    expect = _items(src, data, "expect", lambda v, p: _read_expect(
        src, v, p, fault_names, providers, origin, readable))
    src.raise_if_problems()
    latencies = {
        name: profiles.get(name) or provider.extra.get("latency") or DEFAULT_LATENCY
        for name, provider in providers.items()
    }
    return Scenario(
        name=name, description=description.strip(), seed=seed, duration_ms=duration,
        config=router, latencies=latencies, traffic=tuple(traffic), faults=tuple(faults),
        expect=tuple(expect), live=clock == "live", source=src.name,
        replicas=replicas or 1, shared_state=shared is not False,
        propagation_ms=50 if propagation is None else propagation,
        limits=limits, strategies=strategies,
    )


#: the most strategies one scenario is run under, side by side
MAX_STRATEGIES = 8


def strategy_names() -> tuple[str, ...]:
    """The strategies by name (plain strings: argparse shows its choices by `repr`)."""
    return tuple(s.value for s in Strategy)


def read_strategies(src: Source, value: Any, path: Path) -> tuple[str, ...]:
    """`strategies: [priority, headroom]`: known names, each once."""
    if not isinstance(value, list) or not value:
        src.problem(path, "expected a non-empty list of strategies, like [priority, headroom]")
        return ()
    if len(value) > MAX_STRATEGIES:
        src.problem(path, f"{len(value):,} strategies: at most {MAX_STRATEGIES} side by side")
        return ()
    names: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or item not in strategy_names():
            shown = repr(item)[:60]
            src.problem(path + (index,), f"expected one of {', '.join(strategy_names())}, "
                                         f"got {shown}")
        elif item in names:
            src.problem(path + (index,), f"{item} is listed twice")
        else:
            names.append(item)
    return tuple(names)


def with_strategy(scenario: Scenario, strategy: str) -> Scenario:
    """`scenario` with every route on `strategy` (its targets and weights as written)."""
    routes = {name: replace(route, strategy=Strategy(strategy))
              for name, route in scenario.config.routes.items()}
    return replace(scenario, config=replace(scenario.config, routes=routes))


def _key_limits(providers: Mapping[str, ProviderConfig]) -> dict[tuple[str, str], RateLimits]:
    """Each key's limits: its own `limits:`, else its provider's."""
    limits: dict[tuple[str, str], RateLimits] = {}
    for name, provider in providers.items():
        for connection in provider.connections:
            own = connection.extra.get("limits") or provider.extra.get("limits")
            if own is not None:
                limits[(name, connection.id)] = own
    return limits


def _own_router(src: Source, data: dict[str, Any]) -> RouterConfig:
    """A self-contained scenario's providers, routes and resilience, as a router config."""
    patch = parse_overrides(src, data.get("resilience", {}), ("resilience",))
    settings = patch.apply(default_settings())
    validate_settings(src, settings, ("resilience",))
    if "providers" not in data:
        src.problem((), "missing field: providers (or run it against a router config with "
                        "--config)")
    providers = parse_providers(
        src, data.get("providers", {}), ("providers",), patch, env=os.environ,
        extra_fields={"latency": _read_latency, "limits": read_limits},
        connection_fields={"limits": read_limits},
    )
    routes = parse_routes(src, data.get("routes", {}), ("routes",), providers)
    own = {key: data[key] for key in ROUTER_FIELDS if key in data}
    return RouterConfig(providers=providers, routes=routes, settings=settings,
                        source=src.name, raw=own)


def _read_key_limits(
    src: Source, value: Any, providers: Mapping[str, ProviderConfig], origin: str
) -> dict[tuple[str, str], RateLimits]:
    """The `limits:` section of a scenario run against a config: `provider` (each of its
    keys) or `provider/connection` -> limits; a key's own entry wins over its provider's."""
    mapping = read_mapping(src, value, ("limits",))
    limits: dict[tuple[str, str], RateLimits] = {}
    own: set[tuple[str, str]] = set()
    for name, body in (mapping or {}).items():
        where: Path = ("limits", str(name))
        provider_name, _, connection = str(name).partition("/")
        provider = providers.get(provider_name)
        if provider is None:
            src.problem(where, f"unknown provider {provider_name!r}{origin} "
                               f"(providers: {', '.join(providers)})")
            continue
        ids = [c.id for c in provider.connections]
        if connection and connection not in ids:
            src.problem(where, f"provider {provider_name!r}{origin} has no connection "
                               f"{connection!r} (connections: {', '.join(ids)})")
            continue
        read = read_limits(src, body, where)
        if read is None:
            continue
        for key in ([(provider_name, connection)] if connection else
                    [(provider_name, c) for c in ids]):
            if connection or key not in own:
                limits[key] = read
        if connection:
            own.add((provider_name, connection))
    return limits


def _read_latencies(
    src: Source, value: Any, providers: Mapping[str, ProviderConfig], origin: str
) -> dict[str, Latency]:
    """The `latency:` section of a scenario run against a config: provider -> profile."""
    mapping = read_mapping(src, value, ("latency",))
    profiles: dict[str, Latency] = {}
    for name, body in (mapping or {}).items():
        if name not in providers:
            src.problem(("latency", str(name)), f"unknown provider {name!r}{origin} "
                                                f"(providers: {', '.join(providers)})")
            continue
        latency = _read_latency(src, body, ("latency", str(name)))
        if latency is not None:
            profiles[name] = latency
    return profiles


def _check_volume(src: Source, traffic: list[Traffic], duration_ms: int) -> None:
    """Refuse, before any work, a scenario that would simulate more than the limit."""
    volumes = [t.expected_requests(duration_ms) for t in traffic]
    total = sum(volumes)
    if total > MAX_SIMULATED_REQUESTS:
        worst = max(range(len(volumes)), key=volumes.__getitem__)
        src.problem(("traffic", worst),
                    f"the traffic comes to about {total:,.0f} requests, over the limit of "
                    f"{MAX_SIMULATED_REQUESTS:,} a run: lower a rate or shorten the time")


def _fault_names(src: Source, value: Any) -> set[str]:
    """The names the faults are given, read from the file: a fault with a bad field still
    exists by name, so an expectation during it is not reported as a second error
    (docs/design.md §11). A name given twice is a problem at its second place."""
    names: set[str] = set()
    for index, item in enumerate(value if isinstance(value, list) else []):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name.strip():
            continue
        if name in names:
            src.problem(("faults", index, "name"), f"another fault is named {name!r}")
        names.add(name)
    return names


def _items(src: Source, data: dict[str, Any], key: str, read: Any) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        src.problem((key,), "expected a list")
        return []
    return [item for i, v in enumerate(value) if (item := read(v, (key, i))) is not None]
