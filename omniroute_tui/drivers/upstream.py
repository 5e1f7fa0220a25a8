"""One attempt against an OpenAI-compatible upstream over httpx, classified."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..config.secrets import Secret
from ..engine.classify import Classification, TransportFailure, classify, classify_transport

__all__ = ["UpstreamClient", "UpstreamReply", "transport_failure_of"]

_DNS_HINTS = ("name or service not known", "nodename nor servname", "name resolution",
              "getaddrinfo", "no address associated")


@dataclass
class UpstreamReply:
    """What the upstream said (or what went wrong below HTTP), and its classification.

    For a streaming success, `stream` is the open httpx response: the caller reads it
    and must close it. Otherwise `content` holds the whole body.
    """

    status: int
    classification: Classification
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""
    transport_failure: TransportFailure | None = None
    error: str | None = None
    stream: httpx.Response | None = None
    first_chunk: bytes = b""  # a stream's first bytes, read before success is declared
    chunks: AsyncIterator[bytes] | None = None  # the rest of the stream

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()

    def json(self) -> Any:
        import json

        return json.loads(self.content)


def transport_failure_of(exc: Exception) -> TransportFailure:
    """Map an httpx (or OS) exception to the transport failure it means."""
    if isinstance(exc, httpx.ConnectTimeout):
        return TransportFailure.CONNECT_TIMEOUT
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return TransportFailure.READ_TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        if any(hint in text for hint in _DNS_HINTS):
            return TransportFailure.DNS_FAILURE
        return TransportFailure.CONNECT_REFUSED
    if isinstance(exc, httpx.RemoteProtocolError):
        return TransportFailure.CONNECTION_RESET
    return TransportFailure.READ_ERROR


class UpstreamClient:
    """Performs single attempts; retries and fallback are the router's business."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def send(
        self,
        base_url: str,
        body: dict[str, Any],
        *,
        api_key: Secret | None,
        timeout_ms: int,
        stream: bool = False,
        now_epoch_ms: int | None = None,
    ) -> UpstreamReply:
        """POST `body` to `{base_url}/chat/completions` within `timeout_ms` in all."""
        headers = {"content-type": "application/json"}
        if api_key is not None:
            headers["authorization"] = f"Bearer {api_key.reveal()}"
        url = base_url.rstrip("/") + "/chat/completions"
        seconds = timeout_ms / 1000
        request = self._client.build_request(
            "POST", url, json=body, headers=headers, timeout=httpx.Timeout(seconds)
        )
        response: httpx.Response | None = None
        try:
            async with asyncio.timeout(seconds):
                response = await self._client.send(request, stream=True)
                reply_headers = dict(response.headers)
                ok = 200 <= response.status_code < 300
                if stream and ok:
                    # the first bytes decide: a stream that breaks before them is a failed
                    # attempt, and the router can still fall back
                    chunks = response.aiter_raw()
                    first = await anext(chunks, b"")
                    return UpstreamReply(response.status_code, Classification(None),
                                         reply_headers, stream=response, first_chunk=first,
                                         chunks=chunks)
                content = await response.aread()
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            if response is not None:
                await response.aclose()
            failure = transport_failure_of(exc)
            return UpstreamReply(0, classify_transport(failure), transport_failure=failure,
                                 error=f"{type(exc).__name__}: {exc}"[:300])
        await response.aclose()
        outcome = classify(response.status_code, reply_headers, content,
                           now_epoch_ms=now_epoch_ms)
        return UpstreamReply(response.status_code, outcome, reply_headers, content)
