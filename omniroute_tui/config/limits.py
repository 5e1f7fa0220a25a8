"""What a config may declare, what one client may cost the gateway, what the store keeps.

The counts a config or scenario file may declare are fixed (`MAX_COUNTS`); what a client
may cost is the config's `gateway.limits`; what the state database keeps is
`store.history`, `store.requests` and `store.audit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .problems import Path
from .readers import read_duration, read_int, read_mapping, reject_unknown
from .yaml_source import Source

__all__ = [
    "MAX_COUNTS", "GatewayLimits", "StoreRetention", "parse_limits", "parse_retention",
]

#: how many of each a config or scenario file may declare (docs/design.md §1): far above
#: any deployment, and low enough that a file loads and a router starts in about a second
#: (200,000 connections on one provider took 17 s and 200 MB to load and build). The
#: benchmarks and tests give a provider 1,000 connections; an engine built in code has no cap.
MAX_COUNTS = {
    "providers": 100,
    "connections per provider": 1_000,
    "connections in all": 10_000,  # 100,000 took 5 s and 105 MB to load and build
    "models per provider": 1_000,
    "routes": 1_000,
    "targets per route": 100,
}


@dataclass(frozen=True)
class GatewayLimits:
    """What one client may cost the gateway (config `gateway.limits`)."""

    max_body_bytes: int = 4 * 1024 * 1024  # a long chat with images inline fits
    max_head_bytes: int = 32 * 1024  # request line and headers together
    head_timeout_s: float = 10.0  # from the first byte of a request to the end of its head
    body_timeout_s: float = 60.0  # from the end of the head to the end of the body
    keep_alive_s: float = 15.0  # an idle kept-alive connection is closed after this
    write_timeout_s: float = 30.0  # a client that reads nothing of its answer for this long
    max_connections: int = 512  # open connections; more are answered 503 and closed
    #: open connections from one address; more from it are answered 503 and closed, so a
    #: client that holds its connections (a slow loris) leaves the other half to the rest
    max_connections_per_client: int = 256
    max_json_depth: int = 64  # nesting of objects and lists in a JSON body

_SIZES = ("max_body_bytes", "max_head_bytes", "max_connections", "max_connections_per_client",
          "max_json_depth")
_TIMES = {"head_timeout": "head_timeout_s", "body_timeout": "body_timeout_s",
          "keep_alive": "keep_alive_s", "write_timeout": "write_timeout_s"}


def parse_limits(src: Source, value: Any, path: Path) -> GatewayLimits:
    """`gateway.limits`: sizes as integers, times as durations (`10s`)."""
    body = read_mapping(src, value, path)
    if body is None:
        return GatewayLimits()
    reject_unknown(src, body, path, (*_SIZES, *_TIMES))
    changes: dict[str, Any] = {}
    for name in _SIZES:
        if name in body:
            number = read_int(src, body[name], path + (name,), minimum=1)
            if number is not None:
                changes[name] = number
    for name, field in _TIMES.items():
        if name in body:
            ms = read_duration(src, body[name], path + (name,), positive=True)
            if ms is not None:
                changes[field] = ms / 1000
    return GatewayLimits(**changes)


_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS
#: the most rows a log of the state database may be asked to keep (about 800 MB of file)
MAX_KEPT_ROWS = 5_000_000
#: how long a log may be asked to keep its rows (the audit's ten years)
MAX_KEPT_AGE_MS = 3650 * _DAY_MS


@dataclass(frozen=True)
class StoreRetention:
    """What the state database's logs keep (config `store.history`, `store.requests`,
    `store.audit`): each is trimmed by age and by count, whichever bites first.

    State changes are rare (well under 1 % of events) and are what a console or an
    incident review wants days later; per-request events are the bulk and only their
    recent past is worth a replay (`omniroute-sim record --db`). Kept apart, a burst of
    traffic never pushes a breaker's transitions out. Decision records (one a request,
    `GET /api/requests/{id}`) are kept for an hour at 100 req/s. The defaults fill about
    190 MB.
    """

    history_max_age_ms: int = 7 * _DAY_MS
    history_max_events: int = 200_000  # a week of the incident rate of hour-long-mixed
    requests_max_age_ms: int = _HOUR_MS
    #: an hour at 20 req/s is ~345,600 events at 4.8 a request; 500,000 leave room for an
    #: incident's retries (6.9 events a request), about 80 MB
    requests_max_events: int = 500_000
    records_max_age_ms: int = _HOUR_MS
    #: an hour at 100 req/s with 10 % to spare, about 230 bytes each with the indexes: 80 MB
    records_max_entries: int = 400_000
    audit_max_age_ms: int = 90 * _DAY_MS
    audit_max_entries: int = 100_000


#: config section -> (its count field, the StoreRetention fields of its age and count)
_RETENTION_SECTIONS = {
    "history": ("max_events", "history_max_age_ms", "history_max_events"),
    "requests": ("max_events", "requests_max_age_ms", "requests_max_events"),
    "audit": ("max_entries", "audit_max_age_ms", "audit_max_entries"),
    "records": ("max_entries", "records_max_age_ms", "records_max_entries"),
}
RETENTION_FIELDS = tuple(_RETENTION_SECTIONS)


def parse_retention(src: Source, store: dict[str, Any], path: Path) -> StoreRetention:
    """`store.history`, `store.requests`, `store.audit`, `store.records`: `max_age` a
    duration from one minute to ten years, `max_events` (`max_entries`) a count from 100
    to 5,000,000."""
    changes: dict[str, Any] = {}
    for section, (count_name, age_field, count_field) in _RETENTION_SECTIONS.items():
        if section not in store:
            continue
        where = path + (section,)
        body = read_mapping(src, store[section], where)
        if body is None:
            continue
        reject_unknown(src, body, where, ("max_age", count_name))
        if "max_age" in body:
            ms = read_duration(src, body["max_age"], where + ("max_age",),
                               longest_ms=MAX_KEPT_AGE_MS)
            if ms is not None and ms < 60_000:
                src.problem(where + ("max_age",), "at least 1m")
            elif ms is not None:
                changes[age_field] = ms
        if count_name in body:
            count = read_int(src, body[count_name], where + (count_name,), minimum=100)
            if count is not None and count > MAX_KEPT_ROWS:
                src.problem(where + (count_name,), f"at most {MAX_KEPT_ROWS:,}")
            elif count is not None:
                changes[count_field] = count
    return StoreRetention(**changes)
