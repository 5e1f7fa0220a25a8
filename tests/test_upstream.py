"""The async upstream client and driver against httpx.MockTransport."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from omniroute_tui.drivers import UpstreamClient
from omniroute_tui.engine import FailureKind, TransportFailure

from .helpers import alpha_beta_driver
from .waiting import eventually

OK_BODY = {"id": "c1", "object": "chat.completion",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                        "finish_reason": "stop"}]}


def client_for(handler) -> UpstreamClient:  # type: ignore[no-untyped-def]
    return UpstreamClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)))


@pytest.mark.parametrize(
    ("exc", "failure", "kind"),
    [
        (httpx.ConnectError("Connection refused"), TransportFailure.CONNECT_REFUSED,
         FailureKind.NETWORK),
        (httpx.ConnectError("[Errno -2] Name or service not known"),
         TransportFailure.DNS_FAILURE, FailureKind.NETWORK),
        (httpx.ConnectTimeout("slow"), TransportFailure.CONNECT_TIMEOUT, FailureKind.TIMEOUT),
        (httpx.ReadTimeout("slow"), TransportFailure.READ_TIMEOUT, FailureKind.TIMEOUT),
        (httpx.RemoteProtocolError("peer closed"), TransportFailure.CONNECTION_RESET,
         FailureKind.NETWORK),
        (httpx.ReadError("broken"), TransportFailure.READ_ERROR, FailureKind.NETWORK),
    ],
)
async def test_transport_errors_are_classified(
    exc: Exception, failure: TransportFailure, kind: FailureKind
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    reply = await client_for(handler).send("http://x.test/v1", {"model": "m"}, api_key=None,
                                           timeout_ms=1000)
    assert (reply.status, reply.transport_failure, reply.classification.kind) == (0, failure, kind)


async def test_responses_are_classified_with_hints() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer sk-secret-1234"
        return httpx.Response(429, headers={"Retry-After": "12"},
                              json={"error": {"message": "Rate limit reached"}})

    from omniroute_tui.config import Secret

    reply = await client_for(handler).send("http://x.test/v1/", {"model": "m"},
                                           api_key=Secret("sk-secret-1234"), timeout_ms=1000)
    assert reply.status == 429
    assert reply.classification.kind is FailureKind.RATE_LIMITED
    assert reply.classification.hint_ms == 12_000


async def test_overall_timeout_bounds_a_slow_upstream() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200)

    reply = await client_for(handler).send("http://x.test/v1", {}, api_key=None, timeout_ms=50)
    assert reply.classification.kind is FailureKind.TIMEOUT


async def test_driver_falls_back_and_forwards_the_upstream_answer() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers["authorization"][-4:]))
        if request.url.host == "alpha.test":
            return httpx.Response(503, json={"error": {"message": "overloaded"}})
        body = json.loads(request.content)
        assert body["model"] == "m"
        return httpx.Response(200, json=OK_BODY)

    _, driver, rec = alpha_beta_driver(client_for(handler))
    completion = await driver.complete({"model": "r", "messages": []})
    assert completion.response.status == 200
    assert completion.reply is not None and completion.reply.json() == OK_BODY
    assert seen == [("alpha.test", "0001"), ("beta.test", "0003")]
    assert [e["kind"] for e in rec.of("result")] == ["server_error", None]
    assert rec.of("cooldown")[0]["connection"] == "a"


async def test_driver_cancellation_counts_as_cancelled() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(10)
        return httpx.Response(200, json=OK_BODY)

    router, driver, rec = alpha_beta_driver(client_for(handler))
    task = asyncio.create_task(driver.complete({"model": "r", "messages": []}))
    await eventually(lambda: rec.of("attempt"), what="the attempt")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rec.of("result")[-1]["kind"] == "cancelled"
    assert rec.of("response")[-1]["status"] == 499
    assert router.engine.connection_snapshot("alpha", "a").level == 0


async def test_a_stream_from_an_injected_httpx_client_is_passed_decoded() -> None:
    import gzip

    sse = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=gzip.compress(sse), headers={
            "content-type": "text/event-stream", "content-encoding": "gzip"})

    client = UpstreamClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    reply = await client.send("http://upstream.test/v1", {"stream": True}, api_key=None,
                              timeout_ms=5000, stream=True)
    assert reply.status == 200 and reply.relay is not None
    assert b"".join([piece async for piece in reply.relay.relay()]) == sse
    assert reply.relay.finished and reply.relay.cut is None
    await reply.aclose()
    await client.aclose()
