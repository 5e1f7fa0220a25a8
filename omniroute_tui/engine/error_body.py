"""The fields of an upstream error body that classification reads (docs/design.md §2).

Providers answer errors in three shapes: OpenAI's and Azure's `{"error": {"code",
"message", "type"}}`, Anthropic's `{"type": "error", "error": {"type", "message"}}` and
Google's `{"error": {"code": 429, "status", "message", "details": [...]}}`, which Gemini's
OpenAI-compatible endpoint often sends wrapped in a list. `read_error_body` reads any of
them into one typed value. It never raises: a body that is not JSON, or not one of these
shapes, reads as None or as the fields it does have; every walk is bounded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .retry_hints import parse_proto_duration_ms

__all__ = ["ErrorBody", "read_error_body"]

#: list items, `details` entries and quota violations looked at, at most
_MAX_ITEMS = 16


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """`code` is a string `error.code` (Google's is the HTTP status number: not kept);
    `reasons` are Google's `ErrorInfo` reasons, `quota_ids` its `QuotaFailure` violations'
    `quotaId`s, `retry_delay_ms` its `RetryInfo.retryDelay` (bounded as any hint)."""

    code: str | None = None
    reasons: tuple[str, ...] = ()
    quota_ids: tuple[str, ...] = ()
    retry_delay_ms: int | None = None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _unwrap(data: object) -> dict[str, Any] | None:
    """The error object of a body: a list's first object with an `error` object (Google's
    list-wrapped answer), else the body itself when it is an object."""
    if isinstance(data, list):
        for item in data[:_MAX_ITEMS]:
            if isinstance(item, dict) and isinstance(item.get("error"), dict):
                return item
        return None
    return data if isinstance(data, dict) else None


def _details(error: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...], int | None]:
    reasons: list[str] = []
    quota_ids: list[str] = []
    delay: int | None = None
    details = error.get("details")
    for entry in details[:_MAX_ITEMS] if isinstance(details, list) else ():
        if not isinstance(entry, dict):
            continue
        if (reason := _text(entry.get("reason"))) is not None:
            reasons.append(reason)
        violations = entry.get("violations")
        for violation in violations[:_MAX_ITEMS] if isinstance(violations, list) else ():
            if isinstance(violation, dict) and (
                    quota_id := _text(violation.get("quotaId"))) is not None:
                quota_ids.append(quota_id)
        if delay is None and "retryDelay" in entry:
            delay = parse_proto_duration_ms(entry["retryDelay"])
    return tuple(reasons), tuple(quota_ids), delay


def read_error_body(text: str) -> ErrorBody | None:
    """The error fields of a JSON body (already cut to the scan limit), or None when it is
    not a JSON object or a list holding one."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    body = _unwrap(data)
    if body is None:
        return None
    inner = body.get("error")
    error = inner if isinstance(inner, dict) else body
    reasons, quota_ids, delay = _details(error)
    return ErrorBody(
        code=_text(error.get("code")),
        reasons=reasons,
        quota_ids=quota_ids,
        retry_delay_ms=delay,
    )
