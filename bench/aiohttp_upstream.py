"""aiohttp's client as the gateway's upstream client, for the comparison in
`gateway_overhead.py` only (the gateway ships its own: docs/gateway.md, "Upstream client")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp


class AiohttpBody:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.headers.items()}
        self._response = response

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_any():
            yield chunk

    async def aclose(self) -> None:
        self._response.release()


class AiohttpPool:
    """The same `post()` as `Http1Pool`, over one aiohttp session with an unbounded pool.

    `trust_env` stays off: with it aiohttp looks up proxies and .netrc on every request
    (measured: 1.5 ms of CPU a request instead of 0.46).
    """

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> AiohttpBody:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s)
        response = await self._session.post(url, data=body, headers=headers, timeout=timeout)
        return AiohttpBody(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
