"""Classification of each provider family's real error answers (docs/design.md §2,
"Provider families"): Anthropic's Messages API, Azure OpenAI and Gemini's
OpenAI-compatible endpoint, and the rate-limit headers they send (§7)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.engine import FailureKind, classify
from omniroute_tui.engine.error_body import ErrorBody, read_error_body
from omniroute_tui.engine.retry_hints import MAX_HINT_MS, parse_proto_duration_ms
from omniroute_tui.router.rate_limits import RateLimitInfo, parse_rate_limits

K = FailureKind
NOW = int(datetime(2025, 8, 21, 12, 40, 0, tzinfo=UTC).timestamp() * 1000)

# -- Anthropic (bodies as the API sent them, quoted in public bug reports) -------------

#: 529, docs.claude.com/en/api/errors and docs.llmgateway.io's 529 page
ANTHROPIC_OVERLOADED = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
#: 429, e.g. github.com/bhouston/mycoder/issues/62
ANTHROPIC_RATE_LIMIT = (
    '{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed '
    'the rate limit for your organization (d3f27ff7-9afe-4ee2-9645-76ecfc73c2b7) of 40,000 '
    'input tokens per minute. For details, refer to: https://docs.anthropic.com/en/api/rate-'
    'limits. You can see the response headers for current usage. Please reduce the prompt '
    'length or the maximum tokens requested, or try again later. You may also contact sales '
    'at https://www.anthropic.com/contact-sales to discuss your options for a rate limit '
    'increase."}}'
)
#: 400, github.com/anthropics/claude-code/issues/66314
ANTHROPIC_CREDIT = (
    '{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance '
    'is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or '
    'purchase credits."},"request_id":"req_011CbrFTcXhtiMzr3s6EocF7"}'
)
#: 401, github.com/eyaltoledano/claude-task-master/issues/222
ANTHROPIC_AUTH = ('{"type":"error","error":{"type":"authentication_error",'
                  '"message":"invalid x-api-key"}}')
#: 403, github.com/anthropics/claude-code/issues/51610
ANTHROPIC_PERMISSION = (
    '{"type":"error","error":{"type":"permission_error","message":"Permission denied"},'
    '"request_id":"req_011CaH53rCYtDAVnwhLQvkuc"}'
)
#: 404, github.com/anthropics/anthropic-sdk-typescript/issues/690
ANTHROPIC_NOT_FOUND = ('{"type":"error","error":{"type":"not_found_error",'
                       '"message":"model: invalid-model"}}')
#: 413 (sent by Cloudflare in front of the API), github.com/anthropics/claude-code/issues/10314
ANTHROPIC_TOO_LARGE = ('{"error":{"type":"request_too_large",'
                       '"message":"Request exceeds the maximum size"}}')
#: 400, the shape of docs.claude.com's errors page
ANTHROPIC_PROMPT_TOO_LONG = (
    '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: '
    '215893 tokens > 200000 maximum"}}'
)
#: 500, github.com/anthropics/claude-code/issues/11840
ANTHROPIC_API_ERROR = (
    '{"type":"error","error":{"type":"api_error","message":"Internal server error"},'
    '"request_id":"req_011CVF4NYpajMo2MsJduYxta"}'
)

# -- Azure OpenAI ----------------------------------------------------------------------

_AZURE_LIMIT = (
    "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
    "2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. "
    "Please retry after {} seconds. Please go here: https://aka.ms/oai/quotaincrease if you "
    "would like to further increase the default rate limit."
)
#: 429 with `retry-after: 7`, the wording of github.com/microsoft/sample-app-aoai-chatGPT
#: issues/406 and github.com/jasonacox/TinyLLM/issues/17
AZURE_RATE_LIMIT = json.dumps({"error": {"code": "429", "message": _AZURE_LIMIT.format(7)}})
#: 429 with `retry-after: 86400`: a deployment out of quota (a free trial's, or one with no
#: tokens per minute left), github.com/alex-wolf-ps/dbchatprov2/issues/2
AZURE_QUOTA_DAY = json.dumps({"error": {"code": "429", "message": _AZURE_LIMIT.format(86400)}})
#: 404, github.com/Azure/openai-at-scale/issues/48 (the code is Azure's own)
AZURE_DEPLOYMENT = (
    '{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource '
    'does not exist. If you created the deployment within the last 5 minutes, please wait a '
    'moment and try again."}}'
)
#: 400, github.com/vibrantlabsai/ragas/issues/649
AZURE_CONTENT_FILTER = json.dumps({"error": {
    "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
               "content management policy. Please modify your prompt and retry. To learn "
               "more about our content filtering policies please read our documentation: "
               "https://go.microsoft.com/fwlink/?linkid=2198766",
    "type": None, "param": "prompt", "code": "content_filter", "status": 400,
    "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
        "hate": {"filtered": False, "severity": "safe"},
        "self_harm": {"filtered": False, "severity": "safe"},
        "sexual": {"filtered": False, "severity": "safe"},
        "violence": {"filtered": True, "severity": "medium"}}}}})
#: 401, github.com/SciSharp/BotSharp/issues/386
AZURE_AUTH = (
    '{"error":{"code":"401","message":"Access denied due to invalid subscription key or '
    'wrong API endpoint. Make sure to provide a valid key for an active subscription and use '
    'a correct regional API endpoint for your resource."}}'
)

# -- Gemini (generativelanguage.googleapis.com) ----------------------------------------

_GEMINI_QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)
_HELP = {"@type": "type.googleapis.com/google.rpc.Help", "links": [
    {"description": "Learn more about Gemini API quotas",
     "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}


def _violation(metric: str, quota_id: str) -> dict[str, Any]:
    return {"quotaMetric": f"generativelanguage.googleapis.com/{metric}", "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"}}


def _gemini_429(violations: list[dict[str, Any]], delay: str) -> list[dict[str, Any]]:
    """Gemini's 429 as github.com/googleapis/python-genai/issues/2044 and
    github.com/google-gemini/gemini-cli/issues/8437 show it, list-wrapped."""
    return [{"error": {"code": 429, "message": _GEMINI_QUOTA_MESSAGE,
                       "status": "RESOURCE_EXHAUSTED", "details": [
                           _HELP,
                           {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                            "violations": violations},
                           {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                            "retryDelay": delay}]}}]


#: a free tier's per-minute limits: a rate limit, whatever its message says of billing
GEMINI_PER_MINUTE = json.dumps(_gemini_429([
    _violation("generate_content_free_tier_requests",
               "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
    _violation("generate_content_free_tier_input_token_count",
               "GenerateContentInputTokensPerModelPerMinute-FreeTier")], "37s"), indent=2)
#: the per-day limit among them (python-genai#2044 as it was): a quota
GEMINI_PER_DAY = json.dumps(_gemini_429([
    _violation("generate_content_free_tier_requests",
               "GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
    _violation("generate_content_free_tier_requests",
               "GenerateRequestsPerMinutePerProjectPerModel-FreeTier")], "47s"), indent=2)
#: 400, github.com/continuedev/continue/issues/8516 (list-wrapped as sent)
GEMINI_BAD_KEY = json.dumps([{"error": {
    "code": 400, "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT", "details": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
         "domain": "googleapis.com",
         "metadata": {"service": "generativelanguage.googleapis.com"}},
        {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US",
         "message": "API key not valid. Please pass a valid API key."}]}}], indent=2)
#: 403, github.com/PublicAffairs/openai-gemini/issues/92
GEMINI_PERMISSION = json.dumps({"error": {
    "code": 403, "message": "Method doesn't allow unregistered callers (callers without "
    "established identity). Please use API Key or other form of API consumer identity to "
    "call this API.", "status": "PERMISSION_DENIED"}})
#: 404, github.com/wwardaww/gnome-gemini-ai/issues/22
GEMINI_NOT_FOUND = json.dumps({"error": {
    "code": 404, "message": "models/gemini-pro is not found for API version v1beta, or is "
    "not supported for generateContent. Call ListModels to see the list of available models "
    "and their supported methods.", "status": "NOT_FOUND"}})
#: 503, github.com/google-gemini/gemini-cli/issues/5191
GEMINI_OVERLOADED = ('{"error":{"code":503,"message":"The model is overloaded. Please try '
                     'again later.","status":"UNAVAILABLE"}}')
#: 500, github.com/PublicAffairs/openai-gemini/issues/15
GEMINI_INTERNAL = json.dumps({"error": {
    "code": 500, "message": "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting", "status": "INTERNAL"}})


def _unwrapped(body: str) -> str:
    data = json.loads(body)
    return json.dumps(data[0] if isinstance(data, list) else data)


def _wrapped(body: str) -> str:
    data = json.loads(body)
    return json.dumps(data if isinstance(data, list) else [data])


CASES = [
    # family, status, headers, body, kind, hint
    ("anthropic", 529, {}, ANTHROPIC_OVERLOADED, K.SERVER_ERROR, None),
    ("anthropic", 429, {"retry-after": "12"}, ANTHROPIC_RATE_LIMIT, K.RATE_LIMITED, 12_000),
    ("anthropic", 400, {}, ANTHROPIC_CREDIT, K.QUOTA_EXHAUSTED, None),
    ("anthropic", 401, {}, ANTHROPIC_AUTH, K.AUTH_FAILED, None),
    ("anthropic", 403, {}, ANTHROPIC_PERMISSION, K.FORBIDDEN, None),
    ("anthropic", 404, {}, ANTHROPIC_NOT_FOUND, K.MODEL_NOT_FOUND, None),
    ("anthropic", 413, {}, ANTHROPIC_TOO_LARGE, K.CLIENT_ERROR, None),
    ("anthropic", 400, {}, ANTHROPIC_PROMPT_TOO_LONG, K.CONTEXT_LENGTH, None),
    ("anthropic", 500, {}, ANTHROPIC_API_ERROR, K.SERVER_ERROR, None),
    ("azure", 429, {"retry-after": "7", "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-remaining-tokens": "12000"},
     AZURE_RATE_LIMIT, K.RATE_LIMITED, 7_000),
    ("azure", 429, {"retry-after": "86400"}, AZURE_QUOTA_DAY, K.QUOTA_EXHAUSTED, 86_400_000),
    ("azure", 404, {}, AZURE_DEPLOYMENT, K.MODEL_NOT_FOUND, None),
    ("azure", 400, {}, AZURE_CONTENT_FILTER, K.CLIENT_ERROR, None),
    ("azure", 401, {}, AZURE_AUTH, K.AUTH_FAILED, None),
    ("gemini", 429, {}, GEMINI_PER_MINUTE, K.RATE_LIMITED, 37_000),
    ("gemini", 429, {"retry-after": "5"}, GEMINI_PER_MINUTE, K.RATE_LIMITED, 5_000),
    # a day's quota: the minute's retryDelay says nothing of when it lifts
    ("gemini", 429, {}, GEMINI_PER_DAY, K.QUOTA_EXHAUSTED, None),
    ("gemini", 400, {}, GEMINI_BAD_KEY, K.AUTH_FAILED, None),
    ("gemini", 403, {}, GEMINI_PERMISSION, K.FORBIDDEN, None),
    ("gemini", 404, {}, GEMINI_NOT_FOUND, K.MODEL_NOT_FOUND, None),
    ("gemini", 503, {}, GEMINI_OVERLOADED, K.SERVER_ERROR, None),
    ("gemini", 500, {}, GEMINI_INTERNAL, K.SERVER_ERROR, None),
]


@pytest.mark.parametrize(("family", "status", "headers", "body", "kind", "hint"), CASES)
def test_each_familys_answer_gives_its_kind_and_hint(
    family: str, status: int, headers: dict[str, str], body: str, kind: FailureKind,
    hint: int | None,
) -> None:
    assert family in ("anthropic", "azure", "gemini")
    outcome = classify(status, headers, body, now_epoch_ms=NOW)
    assert (outcome.kind, outcome.hint_ms) == (kind, hint)
    assert classify(status, headers, body.encode(), now_epoch_ms=NOW) == outcome


@pytest.mark.parametrize(("status", "body"), [
    (429, GEMINI_PER_MINUTE), (429, GEMINI_PER_DAY), (400, GEMINI_BAD_KEY),
    (403, GEMINI_PERMISSION), (404, GEMINI_NOT_FOUND), (503, GEMINI_OVERLOADED),
    (500, GEMINI_INTERNAL)])
def test_a_list_wrapped_body_reads_as_the_unwrapped_one(status: int, body: str) -> None:
    assert classify(status, {}, _wrapped(body)) == classify(status, {}, _unwrapped(body))


def test_the_body_fields_read() -> None:
    assert read_error_body(GEMINI_PER_MINUTE) == ErrorBody(
        code=None, reasons=(), retry_delay_ms=37_000, quota_ids=(
            "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "GenerateContentInputTokensPerModelPerMinute-FreeTier"))
    assert read_error_body(GEMINI_BAD_KEY) == ErrorBody(reasons=("API_KEY_INVALID",))
    assert read_error_body(AZURE_DEPLOYMENT) == ErrorBody(code="DeploymentNotFound")
    assert read_error_body(ANTHROPIC_CREDIT) == ErrorBody()
    assert read_error_body("Overloaded") is None
    assert read_error_body("[1, 2]") is None


def test_azures_deployment_code_is_a_missing_model_on_any_4xx() -> None:
    assert classify(400, {}, AZURE_DEPLOYMENT).kind is K.MODEL_NOT_FOUND


def test_the_credit_balance_is_a_quota_only_on_a_400() -> None:
    # a 401 or 403 is the key's or the model's, whatever it says of credit
    assert classify(401, {}, ANTHROPIC_CREDIT).kind is K.AUTH_FAILED
    assert classify(403, {}, ANTHROPIC_CREDIT).kind is K.FORBIDDEN


def test_a_short_azure_retry_is_a_rate_limit_and_an_hours_one_a_quota() -> None:
    message = {"error": {"code": "429", "message": _AZURE_LIMIT.format(3599)}}
    assert classify(429, {}, json.dumps(message)).kind is K.RATE_LIMITED
    message = {"error": {"code": "429", "message": _AZURE_LIMIT.format(3600)}}
    assert classify(429, {}, json.dumps(message)).kind is K.QUOTA_EXHAUSTED


# -- rate-limit headers ----------------------------------------------------------------

#: an Anthropic answer's headers (rdrr.io/cran/tidyllm's recorded fixture), without the
#: plain tokens ones and with some spent
ANTHROPIC_HEADERS = {
    "retry-after": "12",
    "anthropic-ratelimit-requests-limit": "1000",
    "anthropic-ratelimit-requests-remaining": "0",
    "anthropic-ratelimit-requests-reset": "2025-08-21T12:40:59Z",
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "20000",
    "anthropic-ratelimit-input-tokens-reset": "2025-08-21T12:40:30Z",
    "anthropic-ratelimit-output-tokens-limit": "16000",
    "anthropic-ratelimit-output-tokens-remaining": "8000",
    "anthropic-ratelimit-output-tokens-reset": "2025-08-21T12:40:10Z",
}


def test_anthropics_split_token_headers_fill_the_tokens_dimension() -> None:
    # input 25 % left, output 50 %: the input tokens run out first
    assert parse_rate_limits(ANTHROPIC_HEADERS, NOW) == RateLimitInfo(
        requests_remaining=0, requests_limit=1000, requests_reset_ms=59_000,
        tokens_remaining=20_000, tokens_limit=80_000, tokens_reset_ms=30_000)
    output_short = {**ANTHROPIC_HEADERS, "anthropic-ratelimit-output-tokens-remaining": "1000"}
    assert parse_rate_limits(output_short, NOW) == RateLimitInfo(
        0, 1000, 59_000, tokens_remaining=1000, tokens_limit=16_000, tokens_reset_ms=10_000)


def test_the_plain_tokens_headers_win_over_the_split_ones() -> None:
    plain = {**ANTHROPIC_HEADERS, "anthropic-ratelimit-tokens-limit": "96000",
             "anthropic-ratelimit-tokens-remaining": "96000",
             "anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:59Z"}
    info = parse_rate_limits(plain, NOW)
    assert info is not None
    assert (info.tokens_remaining, info.tokens_limit, info.tokens_reset_ms) == (
        96_000, 96_000, 59_000)


def test_split_tokens_without_limits_take_the_smaller_count() -> None:
    headers = {"anthropic-ratelimit-input-tokens-remaining": "20000",
               "anthropic-ratelimit-output-tokens-remaining": "8000",
               "anthropic-ratelimit-output-tokens-limit": "16000"}
    assert parse_rate_limits(headers) == RateLimitInfo(tokens_remaining=8000,
                                                       tokens_limit=16_000)
    # an unreadable count leaves the other; a reset without a clock is left out
    headers = {"anthropic-ratelimit-input-tokens-remaining": "-3",
               "anthropic-ratelimit-output-tokens-remaining": "8000",
               "anthropic-ratelimit-output-tokens-reset": "2025-08-21T12:40:10Z"}
    assert parse_rate_limits(headers) == RateLimitInfo(tokens_remaining=8000)


def test_azures_headers_are_openais() -> None:
    headers = {"retry-after": "7", "x-ratelimit-remaining-requests": "0",
               "x-ratelimit-remaining-tokens": "12000"}
    assert parse_rate_limits(headers) == RateLimitInfo(requests_remaining=0,
                                                       tokens_remaining=12_000)


# -- hostile bodies --------------------------------------------------------------------


def _with_delay(delay: object) -> str:
    body = json.loads(GEMINI_PER_MINUTE)
    body[0]["error"]["details"][2]["retryDelay"] = delay
    return json.dumps(body)


@pytest.mark.parametrize(("delay", "hint"), [
    ("37s", 37_000), ("0.5s", 500), ("1.000340s", 1001), (" 2s ", 2000),
    ("-5s", None), ("1e309s", None), ("abc", None), ("37", None), ("0s", None),
    ("٣٧s", None), ("", None), (37, None), (None, None), ({"seconds": 37}, None),
    ("1000000000000s", MAX_HINT_MS), ("9" * 15 + "s", MAX_HINT_MS), ("9" * 16 + "s", None),
    ("1" * 40 + "s", None)])
def test_a_retry_delay_is_read_bounded(delay: object, hint: int | None) -> None:
    assert parse_proto_duration_ms(delay) == hint
    outcome = classify(429, {}, _with_delay(delay))
    assert (outcome.kind, outcome.hint_ms) == (K.RATE_LIMITED, hint)


@pytest.mark.parametrize("body", [
    json.dumps([1, "x", None, [], {"error": "flat"}, json.loads(_unwrapped(GEMINI_BAD_KEY))]),
    json.dumps([{"error": None}] * 3 + json.loads(GEMINI_BAD_KEY)),
])
def test_junk_before_the_error_in_a_list_is_skipped(body: str) -> None:
    assert classify(400, {}, body).kind is K.AUTH_FAILED


@pytest.mark.parametrize("body", [
    "[" * 100_000, "{\"error\": " * 50_000, '{"error": {"details": ' + "[" * 60_000,
    '[{"error": {"details": [{"violations": ' + "[" * 10_000 + "]" * 10_000 + "}]}}]",
    json.dumps([{"error": {"details": "not a list", "code": 7}}]),
    json.dumps({"error": {"details": [{"violations": "x", "reason": 5, "retryDelay": []}]}}),
    json.dumps({"error": {"details": [None, 1, "s", {"violations": [None, {"quotaId": 3}]}]}}),
    "[]", "{}", "null", "[null]", '"error"', "\ufeff{}", "\x00" * 1000,
])
def test_hostile_bodies_never_raise(body: str) -> None:
    for status in (400, 404, 429):
        outcome = classify(status, {}, body)
        assert outcome.kind is not None
        assert outcome.hint_ms is None


def test_a_huge_body_is_read_as_text_past_the_scan_limit() -> None:
    padded = _with_delay("37s").replace(_GEMINI_QUOTA_MESSAGE,
                                        _GEMINI_QUOTA_MESSAGE + " " * 200_000)
    # the JSON is cut at 64 KiB and not read: no retryDelay, and the text's "billing" is
    # quota text, as for any 429 whose structure cannot be read
    assert classify(429, {}, padded) == classify(429, {}, _GEMINI_QUOTA_MESSAGE)
    assert classify(429, {}, padded).hint_ms is None
    assert classify(429, {}, b"x" * 10_000_000).kind is K.RATE_LIMITED


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["error", "details", "violations", "quotaId",
                                       "reason", "retryDelay", "code", "message"])
                      | st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@given(value=json_values, wrap=st.booleans(), status=st.sampled_from([400, 404, 413, 429]))
def test_any_json_body_classifies_with_a_bounded_hint(value: object, wrap: bool,
                                                      status: int) -> None:
    body = json.dumps([value] if wrap else value)
    outcome = classify(status, {}, body)
    assert outcome.kind is not None
    assert outcome.hint_ms is None or 0 < outcome.hint_ms <= MAX_HINT_MS
    assert read_error_body(body) is None or isinstance(read_error_body(body), ErrorBody)
