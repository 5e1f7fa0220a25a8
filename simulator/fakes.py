"""Fake providers of every API family: what each attempt gets, as a pure function.

`FakeProviders.answer()` decides an attempt's fate from the time, the target, the
scenario's faults and a seeded RNG. The virtual runner schedules that answer after its
delay; the HTTP rendering (`simulator.http_fakes`) serves the very same answer over a
socket, so both modes see the same classification.
"""

from __future__ import annotations

import json
import random
from dataclasses import field
from typing import Any

from omniroute_tui.apis import ApiFamily
from omniroute_tui.engine.classify import (
    Classification,
    TransportFailure,
    classify,
    classify_transport,
)
from omniroute_tui.engine.kinds import StreamCut
from omniroute_tui.engine.values import value

from .rate_limits import KeyWindow
from .scenario import STREAM_FAULTS, Fault, FaultAction, Scenario

__all__ = ["FakeAnswer", "FakeProviders", "error_body"]

_OK = Classification(None)


#: Anthropic's error type of each status (its API's "Errors" page)
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
#: Google's status word of each HTTP status (google.rpc.Code)
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                  404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                  503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(status: int, *, quota: bool = False,
               family: ApiFamily = ApiFamily.OPENAI) -> str:
    """The error body a real provider of `family` sends with `status`: OpenAI's shape
    (Azure's too), Anthropic's, or Google's list-wrapped one (Gemini's)."""
    if family is ApiFamily.ANTHROPIC:
        message = ("Your credit balance is too low to access the Anthropic API. Please go to "
                   "Plans & Billing to upgrade or purchase credits." if quota else
                   {429: "Number of requests has exceeded your rate limit", 529: "Overloaded",
                    401: "invalid x-api-key"}.get(status, "Internal server error"
                                                  if status >= 500 else "Invalid request"))
        kind = "invalid_request_error" if quota else _ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}})
    if family is ApiFamily.GEMINI:
        quota_id = ("GenerateRequestsPerDayPerProjectPerModel-FreeTier" if quota
                    else "GenerateRequestsPerMinutePerProjectPerModel-FreeTier")
        error: dict[str, Any] = {
            "code": status, "status": _GOOGLE_STATUS.get(status, "UNKNOWN"),
            "message": ("You exceeded your current quota, please check your plan and billing "
                        "details." if status == 429 else "The model is overloaded. Please "
                        "try again later." if status == 503 else "Request failed")}
        if status == 429:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                 "violations": [{"quotaId": quota_id}]}]
        return json.dumps([{"error": error}])
    if family is ApiFamily.AZURE and status == 404:
        return json.dumps({"error": {"code": "DeploymentNotFound", "message": (
            "The API deployment for this resource does not exist.")}})
    error = {}
    if quota:
        error = {"message": "You exceeded your current quota, please check your plan and "
                            "billing details.", "type": "insufficient_quota",
                 "code": "insufficient_quota"}
    elif status == 429:
        error = {"message": "Rate limit reached for requests", "type": "requests",
                 "code": "rate_limit_exceeded"}
    elif status == 401:
        error = {"message": "Incorrect API key provided", "type": "invalid_request_error",
                 "code": "invalid_api_key"}
    elif status == 403:
        error = {"message": "You are not allowed to use this model", "type": "forbidden",
                 "code": "forbidden"}
    elif status == 404:
        error = {"message": "The model does not exist", "type": "invalid_request_error",
                 "code": "model_not_found"}
    elif status >= 500:
        error = {"message": "The server had an error while processing your request",
                 "type": "server_error", "code": None}
    else:
        error = {"message": "Invalid request", "type": "invalid_request_error", "code": None}
    return json.dumps({"error": error})


@value
class StreamEnd:
    """How a streamed answer ends, `after_ms` after its first content: whole (`cut`
    None) or cut, with what had been relayed by then (docs/simulator.md)."""

    after_ms: int
    cut: StreamCut | None
    relayed_bytes: int
    relayed_chunks: int


@value
class FakeAnswer:
    """An attempt's fate: after `delay_ms`, this status (0: transport failure) or error.

    A streamed answer's (virtual time): `stream` set, `delay_ms` is when its first content
    comes and `stream` says how it ends; `reason` is what broke one before its first
    content (a `stream_cut`, or a `timeout` for `first_token`)."""

    delay_ms: int
    status: int
    classification: Classification
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    transport: TransportFailure | None = None
    reason: StreamCut | None = None
    stream: StreamEnd | None = None


class FakeProviders:
    """The scenario's providers with their latencies and faults."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.latencies = dict(scenario.latencies)
        self.faults = scenario.faults
        self._served = {(name, model) for name, p in scenario.providers.items()
                        for model in p.all_models}
        #: the API each provider speaks: its error bodies are that API's
        self.families = {name: p.api.family for name, p in scenario.providers.items()}
        self._rendered: dict[tuple[str | None, int, bool, ApiFamily],
                             tuple[dict[str, str], str, Classification]] = {}
        #: the faults a streamed answer may meet on each provider, and the others
        self._streamed: dict[str, tuple[Fault, ...]] = {
            name: tuple(f for f in scenario.faults
                        if f.target.provider is None or f.target.provider == name)
            for name in scenario.providers
        }
        self._by_provider = {name: tuple(f for f in faults if f.action not in STREAM_FAULTS)
                             for name, faults in self._streamed.items()}
        #: the keys with `limits:`, each with its window's counts
        self.windows = {key: KeyWindow(limits) for key, limits in scenario.limits.items()}
        self._limited: dict[tuple[int, ApiFamily], Classification] = {}

    def fault_for(
        self, t: int, provider: str, connection: str | None, model: str | None,
        rng: random.Random, *, streamed: bool = False,
    ) -> Fault | None:
        """The first listed fault active at `t` on the target, if its rate roll hits; a
        stream fault only for a `streamed` answer (others pass it by)."""
        for fault in (self._streamed if streamed else self._by_provider).get(provider, ()):
            if fault.at_ms <= t < fault.until_ms and fault.target.matches(
                provider, connection, model
            ):
                if fault.rate >= 1.0 or rng.random() < fault.rate:
                    return fault
                return None
        return None

    def answer(
        self, t: int, provider: str, connection: str, model: str, timeout_ms: int,
        rng: random.Random,
    ) -> FakeAnswer:
        latency = self.latencies[provider].sample(rng)
        fault = self.fault_for(t, provider, connection, model, rng)
        return self._answer(t, provider, connection, model, timeout_ms, latency, fault)

    def answer_stream(
        self, t: int, provider: str, connection: str, model: str, timeout_ms: int,
        rng: random.Random,
    ) -> tuple[FakeAnswer, Fault | None]:
        """A streamed request's answer up to its headers (an error comes as for any
        request), and the stream fault that breaks its body, if one hits."""
        latency = self.latencies[provider].sample(rng)
        fault = self.fault_for(t, provider, connection, model, rng, streamed=True)
        if fault is not None and fault.action in STREAM_FAULTS:
            return self._answer(t, provider, connection, model, timeout_ms, latency,
                                None), fault
        return self._answer(t, provider, connection, model, timeout_ms, latency, fault), None

    def _answer(
        self, t: int, provider: str, connection: str, model: str, timeout_ms: int,
        latency: int, fault: Fault | None,
    ) -> FakeAnswer:
        if (provider, model) not in self._served:
            return self._status(404, latency, None, timeout_ms,
                                family=self.families[provider])
        window = self.windows.get((provider, connection)) if self.windows else None
        if window is not None:
            return self._limited_answer(window, t, latency, fault, timeout_ms,
                                        self.families[provider])
        if fault is None:
            if latency >= timeout_ms:
                return _timed_out(timeout_ms)
            return FakeAnswer(latency, 200, _OK)
        return self._fault_answer(fault, latency, timeout_ms, self.families[provider])

    def _limited_answer(
        self, window: KeyWindow, t: int, latency: int, fault: Fault | None, timeout_ms: int,
        family: ApiFamily,
    ) -> FakeAnswer:
        """A key with limits: a fault's answer as ever (a transport failure takes no
        request of the window), else a 429 when the window is spent; every HTTP answer
        says what is left (docs/simulator.md "Rate limits")."""
        if fault is None:
            if not window.take(t):
                return self._rate_limited(window, t, latency, timeout_ms, family)
            if latency >= timeout_ms:
                return _timed_out(timeout_ms)
            return FakeAnswer(latency, 200, _OK, window.headers(t, latency))
        answer = self._fault_answer(fault, latency, timeout_ms, family)
        if answer.status == 0:
            return answer
        if answer.status == 200:
            window.take(t)  # a slow answer is still an answer
        return FakeAnswer(answer.delay_ms, answer.status, answer.classification,
                          {**answer.headers, **window.headers(t, answer.delay_ms)},
                          answer.body)

    def _rate_limited(self, window: KeyWindow, t: int, latency: int, timeout_ms: int,
                      family: ApiFamily) -> FakeAnswer:
        if latency >= timeout_ms:
            return _timed_out(timeout_ms)
        seconds = max(1, -(-window.retry_after_ms(t, latency) // 1000))
        headers = {"content-type": "application/json", "retry-after": str(seconds),
                   **window.headers(t, latency)}
        body = error_body(429, family=family)
        outcome = self._limited.get((seconds, family))
        if outcome is None:  # one classification per hint: at most 60 of them a family
            outcome = self._limited[(seconds, family)] = classify(429, headers, body)
        return FakeAnswer(latency, 429, outcome, headers, body)

    def _fault_answer(self, fault: Fault, latency: int, timeout_ms: int, family: ApiFamily
                      ) -> FakeAnswer:
        action = fault.action
        if action is FaultAction.STATUS:
            assert fault.status is not None
            return self._status(fault.status, latency, fault, timeout_ms, family=family)
        if action is FaultAction.QUOTA:
            return self._status(429, latency, fault, timeout_ms, quota=True, family=family)
        if action is FaultAction.REFUSED:
            return FakeAnswer(0, 0, classify_transport(TransportFailure.CONNECT_REFUSED),
                              transport=TransportFailure.CONNECT_REFUSED)
        if action is FaultAction.TIMEOUT:
            return _timed_out(timeout_ms)
        if action is FaultAction.RESET:
            if latency >= timeout_ms:
                return _timed_out(timeout_ms)
            return FakeAnswer(latency, 0, classify_transport(TransportFailure.CONNECTION_RESET),
                              transport=TransportFailure.CONNECTION_RESET)
        # slow: the added latency, then success (or a timeout if that is too slow)
        total = latency + fault.latency_ms
        if total >= timeout_ms:
            return _timed_out(timeout_ms)
        return FakeAnswer(total, 200, _OK)

    def _status(
        self, status: int, latency: int, fault: Fault | None, timeout_ms: int,
        *, quota: bool = False, family: ApiFamily = ApiFamily.OPENAI,
    ) -> FakeAnswer:
        if latency >= timeout_ms:
            return _timed_out(timeout_ms)
        name = fault.name if fault else None
        key = (name, status, quota, family)
        rendered = self._rendered.get(key)
        if rendered is None:  # the same fault always renders the same answer
            headers = {"content-type": "application/json"}
            if fault is not None and fault.retry_after_ms is not None:
                headers["retry-after-ms"] = str(fault.retry_after_ms)
                headers["retry-after"] = str(max(1, -(-fault.retry_after_ms // 1000)))
            body = fault.body if fault is not None and fault.body is not None else error_body(
                status, quota=quota, family=family)
            rendered = self._rendered[key] = (headers, body, classify(status, headers, body))
        headers, body, outcome = rendered
        return FakeAnswer(latency, status, outcome, headers, body)


def _timed_out(timeout_ms: int) -> FakeAnswer:
    return FakeAnswer(timeout_ms, 0, classify_transport(TransportFailure.READ_TIMEOUT),
                      transport=TransportFailure.READ_TIMEOUT)
