"""A proxied request's id: the client's `x-request-id` when it is safe to repeat, else ours.

The id is the request's id in the router's events, in the console's requests pane and in
the log lines about it, and it comes back in the answer's `x-request-id`. A client's id
is taken as it is when it is one header of 1 to 128 characters from `A-Z a-z 0-9 . _ : -`:
nothing a log line, a terminal or a header could misread. Anything else (too long, empty,
control characters, non-ASCII, the header twice) gets ours: a random prefix drawn when
the gateway starts and a counter, unique across restarts and the replicas of a fleet
(docs/design.md §13).

An id names one request in flight here, never two: the router's events, the trace and
the record of a request are found by it. A client's id already in flight (the client
sent it twice at once, or another client sent it) gets ours. Ours are easy to guess
from any answer, so a client's id that begins with our prefix gets ours too: no client
can take one of ours before we give it. Nor one of the router's own (`r12`: the
requests a live run in the console sends itself, on the same router).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable

from ..drivers.async_driver import OWN_REQUEST_ID

__all__ = ["MAX_ID_CHARS", "REQUEST_ID_HEADER", "RequestIds", "is_request_id"]

REQUEST_ID_HEADER = b"x-request-id"
MAX_ID_CHARS = 128
_SAFE = re.compile(rb"[A-Za-z0-9._:-]{1,%d}" % MAX_ID_CHARS)


def is_request_id(text: str) -> bool:
    """Whether `text` could be a request's id (ours, or a client's we took)."""
    return _SAFE.fullmatch(text.encode("utf-8", "replace")) is not None


class RequestIds:
    """Issues the ids of the requests in flight: `take()` one for a request, the client's
    or ours; `release()` it when the request has ended (its access line written)."""

    def __init__(self, prefix: str | None = None) -> None:
        # 8 hex digits: two gateways share a prefix once in about 65,000 pairs
        self.prefix = prefix if prefix is not None else secrets.token_hex(4)
        self._ours = self.prefix.encode("ascii") + b"-"
        self._count = 0
        self._in_flight: set[str] = set()

    @property
    def in_flight(self) -> int:
        """How many ids are taken and not released."""
        return len(self._in_flight)

    def take(self, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The id of a request with these raw ASGI headers (names in lower case), taken
        until `release`."""
        found: bytes | None = None
        for name, value in headers:
            if name == REQUEST_ID_HEADER:
                if found is not None:  # two ids: neither is the request's
                    return self._new()
                found = value
        if found is not None and _SAFE.fullmatch(found) and not found.startswith(self._ours):
            request_id = found.decode("ascii")
            if request_id not in self._in_flight and not OWN_REQUEST_ID.fullmatch(request_id):
                self._in_flight.add(request_id)
                return request_id
        return self._new()

    def release(self, request_id: str) -> None:
        self._in_flight.discard(request_id)

    def _new(self) -> str:
        self._count += 1
        request_id = f"{self.prefix}-{self._count}"
        self._in_flight.add(request_id)
        return request_id
