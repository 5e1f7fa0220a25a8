"""Failure classification (docs/design.md §2): one attempt outcome in, one kind and a
retry hint out."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from .error_body import ErrorBody, read_error_body
from .kinds import FailureKind
from .retry_hints import retry_hint_ms

__all__ = ["Classification", "TransportFailure", "classify", "classify_transport"]

#: words that only a spent quota or balance uses
_QUOTA_WORDS = re.compile(
    r"insufficient_quota|billing|credit|daily[ _-]limit|monthly[ _-]limit|plan[ _-]limit",
    re.IGNORECASE,
)
#: "quota exceeded", "exceeded your quota", "quota exhausted": a quota, unless it is one
#: counted per minute or per second (a rate limit under another name)
_QUOTA_EXCEEDED = re.compile(
    r"quota.{0,40}?(?:exceed|exhaust)|exceed.{0,40}?quota", re.IGNORECASE | re.DOTALL)
_SHORT_WINDOW = re.compile(r"per[ _-]?(?:minute|second)", re.IGNORECASE)
#: "Resource has been exhausted (e.g. check quota)" is Google's per-minute limit: exhausted
#: before quota is quota text only with a reset hours or days away (docs/design.md §2)
_EXHAUSTED_THEN_QUOTA = re.compile(r"exhaust.{0,40}?quota", re.IGNORECASE | re.DOTALL)
_GOOGLE_STATUS = re.compile(r"\bRESOURCE_EXHAUSTED\b")
_LONG_RESET = re.compile(
    r"reset(?:s|ting)?\s+(?:after|in)\s+\d+(?:\.\d+)?\s*(?:h|hrs?|hours?|d|days?)\b"
    r"|per[ _-]?day",
    re.IGNORECASE,
)
#: a prompt longer than the model takes, as OpenAI ("maximum context length", code
#: `context_length_exceeded`), Anthropic ("prompt is too long: N tokens > M maximum"),
#: Gemini ("The input token count (N) exceeds the maximum number of tokens allowed") and
#: Mistral ("too large for model with N maximum context length") word it
_CONTEXT_TEXT = re.compile(
    r"context[ _-]length|context[ _-]window|prompt is too long"
    r"|input token count.{0,80}?exceeds the maximum", re.IGNORECASE | re.DOTALL)
#: "Please retry after 86400 seconds": Azure's word on a 429 whose limit lifts in a day
_RETRY_AFTER_SECONDS = re.compile(r"retry after ([0-9]{1,12}) seconds?\b", re.IGNORECASE)
_LONG_RETRY_S = 3600
#: Google's `QuotaFailure` quota ids name their window: `...PerDay...` lifts in a day,
#: `...PerMinute...` in seconds
_DAY_QUOTA_ID = re.compile(r"PerDay")
_SHORT_QUOTA_ID = re.compile(r"Per(?:Minute|Second)")
#: Anthropic's 400 for an account out of prepaid credit: a quota, it must cool the key
_CREDIT_BALANCE = re.compile(r"credit balance is too low", re.IGNORECASE)
#: Google's `ErrorInfo` reason for a key it does not know (sent with 400)
_BAD_KEY_REASON = "API_KEY_INVALID"
#: `error.code`s that name a missing model: OpenAI's, and Azure's missing deployment
_MODEL_CODES = frozenset({"model_not_found", "DeploymentNotFound"})
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


def _long_retry(text: str) -> bool:
    """Whether the body tells the client to come back an hour or more from now."""
    return any(int(seconds) >= _LONG_RETRY_S
               for seconds in _RETRY_AFTER_SECONDS.findall(text))


def _is_quota(text: str, error: ErrorBody | None) -> bool:
    """Whether a 429's body says a quota ran out (hours away), not a rate limit (seconds)."""
    if error is not None and error.quota_ids:
        # Google named the quotas it refused on: their windows decide, whatever the text
        if any(_DAY_QUOTA_ID.search(quota_id) for quota_id in error.quota_ids):
            return True
        if all(_SHORT_QUOTA_ID.search(quota_id) for quota_id in error.quota_ids):
            return False
    # Google's status word names no quota: "check quota).", "status": "RESOURCE_EXHAUSTED"
    # must not read as "quota ... exhausted"
    text = _GOOGLE_STATUS.sub(" ", text)
    if _QUOTA_WORDS.search(text) or _long_retry(text):
        return True
    exceeded = _QUOTA_EXCEEDED.search(text) is not None
    if _LONG_RESET.search(text):
        return exceeded or _EXHAUSTED_THEN_QUOTA.search(text) is not None
    return exceeded and _SHORT_WINDOW.search(text) is None


def classify(
    status: int,
    headers: Mapping[str, str] | None = None,
    body: str | bytes | None = None,
    *,
    now_epoch_ms: int | None = None,
) -> Classification:
    """Classify an HTTP response; the order of the checks is the order of docs/design.md §2.

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
    error = read_error_body(text)
    if error is not None and _BAD_KEY_REASON in error.reasons:
        return Classification(FailureKind.AUTH_FAILED, hint)
    if status == 404 or (error is not None and error.code in _MODEL_CODES):
        return Classification(FailureKind.MODEL_NOT_FOUND, hint)
    if status == 429:
        if _is_quota(text, error):
            return Classification(FailureKind.QUOTA_EXHAUSTED, hint)
        if hint is None and error is not None:
            hint = error.retry_delay_ms  # Google's RetryInfo, when no header said
        return Classification(FailureKind.RATE_LIMITED, hint)
    if status == 400 and _CREDIT_BALANCE.search(text):
        return Classification(FailureKind.QUOTA_EXHAUSTED, hint)
    if status in (400, 413) and ((error is not None and error.code == "context_length_exceeded")
                                 or _CONTEXT_TEXT.search(text)):
        return Classification(FailureKind.CONTEXT_LENGTH, hint)
    return Classification(FailureKind.CLIENT_ERROR, hint)
