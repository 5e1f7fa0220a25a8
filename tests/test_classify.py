"""Failure classification and retry hints (docs/design.md §2)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.engine import FailureKind, TransportFailure, classify, classify_transport
from omniroute_tui.engine.retry_hints import MAX_HINT_MS, parse_go_duration_ms, retry_hint_ms

K = FailureKind


#: the answer Google's APIs give for a per-minute limit (HTTP 429)
GOOGLE_PER_MINUTE = (
    '{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", '
    '"status": "RESOURCE_EXHAUSTED"}}'
)
#: Gemini's answer for a free tier's per-minute request quota
GEMINI_PER_MINUTE = (
    '{"error": {"code": 429, "message": "You exceeded your current quota. Please retry in '
    '53.9s.", "status": "RESOURCE_EXHAUSTED", "details": [{"violations": [{"quotaId": '
    '"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]}]}}'
)


#: "the prompt is too long", as each provider words it (HTTP 400)
OPENAI_CONTEXT = (
    '{"error": {"message": "This model\'s maximum context length is 8192 tokens. However, '
    'your messages resulted in 9013 tokens. Please reduce the length of the messages.", '
    '"type": "invalid_request_error", "param": "messages", "code": '
    '"context_length_exceeded"}}'
)
ANTHROPIC_CONTEXT = (
    '{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too '
    'long: 215893 tokens > 200000 maximum"}}'
)
GEMINI_CONTEXT = (
    '{"error": {"code": 400, "message": "The input token count (1290571) exceeds the '
    'maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}'
)
MISTRAL_CONTEXT = (
    '{"object": "error", "message": "Prompt contains 40123 tokens and 0 draft tokens, too '
    'large for model with 32768 maximum context length", "type": "invalid_request_error", '
    '"code": 3051}'
)
CONTENT_POLICY = (
    '{"error": {"message": "Your request was rejected as a result of our safety system.", '
    '"type": "invalid_request_error", "code": "content_policy_violation"}}'
)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, "", None),
        (201, "", None),
        (408, "", K.TIMEOUT),
        (401, '{"error": {"code": "model_not_found"}}', K.AUTH_FAILED),
        (402, "", K.QUOTA_EXHAUSTED),
        (403, "", K.FORBIDDEN),
        (404, "", K.MODEL_NOT_FOUND),
        (400, '{"error": {"code": "model_not_found", "message": "x"}}', K.MODEL_NOT_FOUND),
        (429, '{"error": {"code": "model_not_found"}}', K.MODEL_NOT_FOUND),
        (429, '{"error": {"type": "insufficient_quota"}}', K.QUOTA_EXHAUSTED),
        (429, "You exceeded your current quota, please check your plan", K.QUOTA_EXHAUSTED),
        (429, "quota exhausted for today", K.QUOTA_EXHAUSTED),
        (429, "check your billing details", K.QUOTA_EXHAUSTED),
        (429, "out of credit", K.QUOTA_EXHAUSTED),
        (429, "daily limit reached", K.QUOTA_EXHAUSTED),
        (429, "Monthly limit reached", K.QUOTA_EXHAUSTED),
        (429, "plan limit", K.QUOTA_EXHAUSTED),
        (429, "Rate limit reached for requests", K.RATE_LIMITED),
        # Google's per-minute limit: exhausted, then quota, and nothing says hours away
        (429, GOOGLE_PER_MINUTE, K.RATE_LIMITED),
        (429, "Resource has been exhausted (e.g. check quota).", K.RATE_LIMITED),
        (429, "RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota). The "
              "limit resets after 24h.", K.QUOTA_EXHAUSTED),
        (429, "Resource exhausted: quota for today; resets in 3 hours", K.QUOTA_EXHAUSTED),
        (429, "Resource exhausted, check quota; resets in 30s", K.RATE_LIMITED),
        (429, "Resource has been exhausted (e.g. check quota). Requests per day.",
         K.QUOTA_EXHAUSTED),
        # a quota counted per minute or per second is a rate limit by another name
        (429, GEMINI_PER_MINUTE, K.RATE_LIMITED),
        (429, GEMINI_PER_MINUTE.replace("PerMinute", "PerDay"), K.QUOTA_EXHAUSTED),
        (429, "Quota exceeded: 60 requests per minute", K.RATE_LIMITED),
        (429, "Quota exceeded: 60 requests per minute; resets in 1h", K.QUOTA_EXHAUSTED),
        (429, '{"error": {"type": "insufficient_quota", "message": "per minute"}}',
         K.QUOTA_EXHAUSTED),
        (429, "", K.RATE_LIMITED),
        (500, "", K.SERVER_ERROR),
        (502, "", K.SERVER_ERROR),
        (503, "", K.SERVER_ERROR),
        (504, "", K.SERVER_ERROR),
        (529, "", K.SERVER_ERROR),
        (599, "", K.SERVER_ERROR),
        # a prompt longer than the model's context: another model may take it
        (400, OPENAI_CONTEXT, K.CONTEXT_LENGTH),
        (400, ANTHROPIC_CONTEXT, K.CONTEXT_LENGTH),
        (400, GEMINI_CONTEXT, K.CONTEXT_LENGTH),
        (400, MISTRAL_CONTEXT, K.CONTEXT_LENGTH),
        (400, '{"error": {"code": "context_length_exceeded"}}', K.CONTEXT_LENGTH),
        (413, "context length exceeded", K.CONTEXT_LENGTH),
        (422, "context length exceeded", K.CLIENT_ERROR),  # not a length: a bad field
        # a content-policy rejection goes back as it is: no model would take it
        (400, CONTENT_POLICY, K.CLIENT_ERROR),
        (400, '{"error": {"message": "max_tokens must be at least 1"}}', K.CLIENT_ERROR),
        (413, "", K.CLIENT_ERROR),
        (422, "", K.CLIENT_ERROR),
        (301, "", K.SERVER_ERROR),
    ],
)
def test_status_and_body_give_the_kind(status: int, body: str, kind: FailureKind | None) -> None:
    assert classify(status, {}, body).kind is kind


def test_body_may_be_bytes() -> None:
    assert classify(429, {}, b'{"error":{"code":"insufficient_quota"}}').kind is K.QUOTA_EXHAUSTED


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (TransportFailure.CONNECT_REFUSED, K.NETWORK),
        (TransportFailure.CONNECTION_RESET, K.NETWORK),
        (TransportFailure.DNS_FAILURE, K.NETWORK),
        (TransportFailure.READ_ERROR, K.NETWORK),
        (TransportFailure.CONNECT_TIMEOUT, K.TIMEOUT),
        (TransportFailure.READ_TIMEOUT, K.TIMEOUT),
        (TransportFailure.CANCELLED, K.CANCELLED),
    ],
)
def test_transport_failures(failure: TransportFailure, kind: FailureKind) -> None:
    assert classify_transport(failure).kind is kind


@pytest.mark.parametrize(
    ("headers", "hint"),
    [
        ({"Retry-After": "10"}, 10_000),
        ({"retry-after": "1.5"}, 1_500),
        ({"retry-after-ms": "250"}, 250),
        ({"retry-after-ms": "250", "Retry-After": "10"}, 250),
        ({"x-ratelimit-reset-requests": "1s"}, 1_000),
        ({"x-ratelimit-reset-tokens": "6m0s"}, 360_000),
        ({"x-ratelimit-reset-requests": "20ms"}, 20),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "2m"}, 120_000),
        ({"x-ratelimit-reset-requests": "1h2m3.5s"}, 3_723_500),
        ({"Retry-After": "-5"}, None),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "0"}, None),
        ({"Retry-After": "99999999999"}, MAX_HINT_MS),
        ({"retry-after-ms": "garbage", "Retry-After": "3"}, 3_000),
        ({"x-ratelimit-reset-requests": "1x"}, None),
        ({}, None),
    ],
)
def test_retry_hints(headers: dict[str, str], hint: int | None) -> None:
    assert retry_hint_ms(headers) == hint


def test_retry_after_http_date_is_relative_to_now() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    now_ms = int(now.timestamp() * 1000)
    assert retry_hint_ms({"Retry-After": later}, now_ms) == 30_000
    past = format_datetime(datetime(2025, 1, 1, tzinfo=UTC), usegmt=True)
    assert retry_hint_ms({"Retry-After": past}, now_ms) is None


def test_hint_travels_with_the_classification() -> None:
    assert classify(429, {"Retry-After": "7"}).hint_ms == 7000


def test_go_durations() -> None:
    assert parse_go_duration_ms("1m30s") == 90_000
    assert parse_go_duration_ms("") is None
    assert parse_go_duration_ms("s") is None


header_text = st.text(max_size=80)


@given(
    status=st.integers(min_value=-1000, max_value=10_000),
    headers=st.dictionaries(
        st.sampled_from(["Retry-After", "retry-after-ms", "x-ratelimit-reset-requests",
                         "x-ratelimit-reset-tokens", "x-other"]) | header_text,
        header_text, max_size=6,
    ),
    body=st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=300)),
    now=st.one_of(st.none(), st.integers(min_value=0, max_value=2**42)),
)
def test_no_header_or_body_ever_raises(
    status: int, headers: dict[str, str], body: str | bytes | None, now: int | None
) -> None:
    result = classify(status, headers, body, now_epoch_ms=now)
    assert result.hint_ms is None or 0 < result.hint_ms <= MAX_HINT_MS


@given(st.text(max_size=100))
def test_no_retry_after_value_raises(value: str) -> None:
    hint = retry_hint_ms({"Retry-After": value}, 1_700_000_000_000)
    assert hint is None or 0 < hint <= MAX_HINT_MS
