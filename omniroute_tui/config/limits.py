"""What a config may declare and what one client may cost the gateway.

The counts a config or scenario file may declare are fixed (`MAX_COUNTS`); what a client
may cost is the config's `gateway.limits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .problems import Path
from .readers import read_duration, read_int, read_mapping, reject_unknown
from .yaml_source import Source

__all__ = ["MAX_COUNTS", "GatewayLimits", "parse_limits"]

#: how many of each a config or scenario file may declare (docs/design.md §8): far above
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
    max_json_depth: int = 64  # nesting of objects and lists in a JSON body

_SIZES = ("max_body_bytes", "max_head_bytes", "max_connections", "max_json_depth")
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
