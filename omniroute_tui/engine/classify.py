"""Failure classification (SPEC §2): one attempt outcome in, one kind and a retry hint out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from .kinds import FailureKind
from .retry_hints import retry_hint_ms

__all__ = ["Classification", "TransportFailure", "classify", "classify_transport"]

_QUOTA_TEXT = re.compile(
    r"insufficient_quota|billing|credit|daily[ _-]limit|monthly[ _-]limit|plan[ _-]limit"
    r"|quota.{0,40}?(?:exceed|exhaust)|(?:exceed|exhaust).{0,40}?quota",
    re.IGNORECASE | re.DOTALL,
)
_BODY_SCAN_LIMIT = 64 * 1024


class TransportFailure(StrEnum):
    """What went wrong below HTTP, as seen by a driver."""

    CONNECT_REFUSED = "connect_refused"
    CONNECTION_RESET = "connection_reset"
    DNS_FAILURE = "dns_failure"
    READ_ERROR = "read_error"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Classification:
    """`kind` is None for a success; `hint_ms` is the server's retry hint, if any."""

    kind: FailureKind | None
    hint_ms: int | None = None

    @property
    def ok(self) -> bool:
        return self.kind is None


_TRANSPORT_KINDS = {
    TransportFailure.CONNECT_REFUSED: FailureKind.NETWORK,
    TransportFailure.CONNECTION_RESET: FailureKind.NETWORK,
    TransportFailure.DNS_FAILURE: FailureKind.NETWORK,
    TransportFailure.READ_ERROR: FailureKind.NETWORK,
    TransportFailure.CONNECT_TIMEOUT: FailureKind.TIMEOUT,
    TransportFailure.READ_TIMEOUT: FailureKind.TIMEOUT,
    TransportFailure.CANCELLED: FailureKind.CANCELLED,
}


def classify_transport(failure: TransportFailure) -> Classification:
    return Classification(_TRANSPORT_KINDS[failure])


def _body_text(body: str | bytes | None) -> str:
    if body is None:
        return ""
    if isinstance(body, bytes):
        return body[:_BODY_SCAN_LIMIT].decode("utf-8", errors="replace")
    return body[:_BODY_SCAN_LIMIT]


def _error_code(text: str) -> str | None:
    """The OpenAI-style `error.code` (or top-level `code`) of a JSON body, if any."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    code = error.get("code") if isinstance(error, dict) else data.get("code")
    return code if isinstance(code, str) else None


def classify(
    status: int,
    headers: Mapping[str, str] | None = None,
    body: str | bytes | None = None,
    *,
    now_epoch_ms: int | None = None,
) -> Classification:
    """Classify an HTTP response; the order of the checks is the order of SPEC §2.

    Statuses outside 2xx and 4xx (1xx, 3xx, 5xx and nonsense) are server errors: an LLM
    API that answers with them is not serving.
    """
    if 200 <= status < 300:
        return Classification(None)
    hint = retry_hint_ms(headers or {}, now_epoch_ms)
    if status == 408:
        return Classification(FailureKind.TIMEOUT, hint)
    if status == 401:
        return Classification(FailureKind.AUTH_FAILED, hint)
    if status == 402:
        return Classification(FailureKind.QUOTA_EXHAUSTED, hint)
    if status == 403:
        return Classification(FailureKind.FORBIDDEN, hint)
    if not 400 <= status < 500:
        return Classification(FailureKind.SERVER_ERROR, hint)
    text = _body_text(body)
    if status == 404 or _error_code(text) == "model_not_found":
        return Classification(FailureKind.MODEL_NOT_FOUND, hint)
    if status == 429:
        if _QUOTA_TEXT.search(text):
            return Classification(FailureKind.QUOTA_EXHAUSTED, hint)
        return Classification(FailureKind.RATE_LIMITED, hint)
    return Classification(FailureKind.CLIENT_ERROR, hint)
