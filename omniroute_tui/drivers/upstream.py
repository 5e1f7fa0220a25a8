"""One attempt against an OpenAI-compatible upstream over httpx, classified."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ..apis import Endpoint, Translation
from ..config.secrets import Secret
from ..engine.classify import Classification, TransportFailure, classify, classify_transport
from ..engine.kinds import FailureKind, StreamCut
from ..engine.settings import STREAM_IDLE_MS
from .dialects import Examine, examine_openai
from .http1 import ConnectTimeout, Http1Pool, ProtocolError
from .relay import StreamBroken, StreamRelay, Translate

__all__ = ["UpstreamClient", "UpstreamReply", "transport_failure_of"]

#: the most of an answer read into memory (a completion is well under 1 MiB; an error
#: answer is classified on its first 64 KiB): past it the attempt is a `network` failure,
#: not a process holding whatever a broken upstream sends
MAX_ANSWER_BYTES = 16 << 20

_DNS_HINTS = ("name or service not known", "nodename nor servname", "name resolution",
              "getaddrinfo", "no address associated")


_STREAM_CUT = Classification(FailureKind.STREAM_CUT)


@dataclass
class UpstreamReply:
    """What the upstream said (or what went wrong below HTTP), and its classification.

    For a streaming success, `relay` holds the stream, its first content read: the caller
    relays it and must close it. Otherwise `content` holds the whole body; `reason` says
    what went wrong with a stream that failed before its first content.
    """

    status: int
    classification: Classification
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""
    transport_failure: TransportFailure | None = None
    error: str | None = None
    relay: StreamRelay | None = None
    reason: StreamCut | None = None
    #: the attempt's request was translated for its upstream: its answer is translated
    #: back for the client (docs/design.md §14)
    translation: Translation | None = None

    async def aclose(self) -> None:
        if self.relay is not None:
            await self.relay.aclose()

    def json(self) -> Any:
        import json

        return json.loads(self.content)


def transport_failure_of(exc: BaseException) -> TransportFailure:
    """Map an httpx, HTTP/1.1 client or OS exception to the transport failure it means."""
    if isinstance(exc, httpx.ConnectTimeout | ConnectTimeout):
        return TransportFailure.CONNECT_TIMEOUT
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return TransportFailure.READ_TIMEOUT
    if isinstance(exc, socket.gaierror):
        return TransportFailure.DNS_FAILURE
    if isinstance(exc, ConnectionRefusedError):
        return TransportFailure.CONNECT_REFUSED
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        if any(hint in text for hint in _DNS_HINTS):
            return TransportFailure.DNS_FAILURE
        return TransportFailure.CONNECT_REFUSED
    if isinstance(exc, httpx.RemoteProtocolError | ProtocolError | ConnectionResetError
                  | BrokenPipeError | asyncio.IncompleteReadError):
        return TransportFailure.CONNECTION_RESET
    return TransportFailure.READ_ERROR


class _HttpxBody:
    """An httpx response seen through the same small interface as Http1Response."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = dict(response.headers)
        self._response = response

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body decoded, as httpx's `aread()` gives it: httpx asks for gzip by itself and the
        gateway does not forward `content-encoding`; and a response made from bytes
        (MockTransport) is already read, which `aiter_raw` refuses."""
        return self._response.aiter_bytes()

    async def aclose(self) -> None:
        await self._response.aclose()


class ResponseBody(Protocol):
    status: int
    headers: dict[str, str]

    def aiter_raw(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


class PostPool(Protocol):
    """What sends one POST and opens its answer: `Http1Pool`, or another for comparison."""

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> ResponseBody: ...
    async def aclose(self) -> None: ...


class _HttpxPool:
    """An `httpx.AsyncClient` (for instance on `httpx.MockTransport`) as a PostPool."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> _HttpxBody:
        request = self._client.build_request("POST", url, content=body, headers=headers,
                                             timeout=httpx.Timeout(connect_timeout_s))
        return _HttpxBody(await self._client.send(request, stream=True))

    async def aclose(self) -> None:
        await self._client.aclose()


class UpstreamClient:
    """Performs single attempts; retries and fallback are the router's business.

    By default it speaks HTTP/1.1 itself (`Http1Pool`); given an `httpx.AsyncClient`
    (for instance one on `httpx.MockTransport`) it sends through that instead, and given
    a `pool` through that.
    """

    def __init__(self, client: httpx.AsyncClient | None = None, *,
                 pool: PostPool | None = None) -> None:
        self._pool: PostPool = pool or (
            _HttpxPool(client) if client is not None else Http1Pool())

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def send(
        self,
        base_url: str,
        body: dict[str, Any],
        *,
        api_key: Secret | None,
        timeout_ms: int,
        stream: bool = False,
        now_epoch_ms: int | None = None,
        first_token_ms: int = 0,
        stream_idle_ms: int = STREAM_IDLE_MS,
    ) -> UpstreamReply:
        """POST `body` to `{base_url}/chat/completions` of an OpenAI-shaped upstream."""
        headers = {"content-type": "application/json"}
        if api_key is not None:
            headers["authorization"] = f"Bearer {api_key.reveal()}"
        return await self.post(
            base_url.rstrip("/") + "/chat/completions", headers,
            json.dumps(body, separators=(",", ":")).encode(), timeout_ms=timeout_ms,
            stream=stream, now_epoch_ms=now_epoch_ms, first_token_ms=first_token_ms,
            stream_idle_ms=stream_idle_ms)

    async def post(
        self,
        url: str,
        headers: dict[str, str],
        payload: bytes,
        *,
        timeout_ms: int,
        stream: bool = False,
        now_epoch_ms: int | None = None,
        first_token_ms: int = 0,
        stream_idle_ms: int = STREAM_IDLE_MS,
        examine: Examine = examine_openai,
        client: Endpoint = Endpoint.CHAT,
        translate: Translate | None = None,
    ) -> UpstreamReply:
        """POST `payload` to `url` within `timeout_ms` in all; a stream's answer once its
        first content is in, within `first_token_ms` of the start when that is set
        (docs/design.md §7). A stream is read as `examine` says its API streams, and
        relayed to a client of `client`'s API, through `translate` if given (§14)."""
        seconds = timeout_ms / 1000
        response: ResponseBody | None = None
        first_token = False  # waiting for a stream's first content within first_token_ms
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(seconds) as deadline:
                response = await self._pool.post(url, headers, payload, seconds)
                ok = 200 <= response.status < 300
                if stream and ok and response.headers.get("content-type", "").startswith(
                        "text/event-stream"):  # else not a stream: passed on as it is
                    # the first content decides: a stream that breaks before it is a
                    # failed attempt, and the router can still fall back
                    if first_token_ms:
                        first_token = True
                        deadline.reschedule(started + first_token_ms / 1000)
                    relay = StreamRelay(response, stream_idle_ms, examine=examine,
                                        client=client, translate=translate)
                    try:
                        await relay.first_content()
                    except StreamBroken as broken:
                        await response.aclose()
                        return UpstreamReply(0, _STREAM_CUT, response.headers,
                                             error=broken.detail, reason=broken.cut)
                    return UpstreamReply(response.status, Classification(None),
                                         response.headers, relay=relay)
                content = await _read_bounded(response)
        except (httpx.HTTPError, OSError, TimeoutError, ProtocolError,
                asyncio.IncompleteReadError, ValueError) as exc:
            if response is not None:
                await response.aclose()
            failure = transport_failure_of(exc)
            timed_out = first_token and isinstance(exc, TimeoutError)
            return UpstreamReply(0, classify_transport(failure), transport_failure=failure,
                                 error=(f"no content within {first_token_ms} ms" if timed_out
                                        else f"{type(exc).__name__}: {exc}"[:300]),
                                 reason=StreamCut.FIRST_TOKEN if timed_out else None)
        await response.aclose()
        outcome = classify(response.status, response.headers, content,
                           now_epoch_ms=now_epoch_ms)
        return UpstreamReply(response.status, outcome, response.headers, content)


async def _read_bounded(response: ResponseBody) -> bytes:
    """The whole answer, if it is at most MAX_ANSWER_BYTES; else ProtocolError."""
    chunks, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ProtocolError(f"the answer is over {MAX_ANSWER_BYTES >> 20} MiB, more than "
                                "any completion")
        chunks.append(chunk)
    return b"".join(chunks)
