"""Drives the routing core from asyncio with real upstream calls (the live path)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..apis import ApiFamily, Endpoint
from ..clock import Clock
from ..config.router_config import ProviderConfig
from ..engine.capacity import Ticket
from ..engine.classify import Classification
from ..engine.kinds import FailureKind
from ..router.core import RequestRouting, Router
from ..router.rate_limits import parse_rate_limits
from ..router.steps import Attempt, Response, Wait
from .client_request import ClientRequest, NotServed
from .dialects import examine_for
from .outbound import upstream_headers, upstream_url
from .relay import StreamRelay
from .resume import StreamResume
from .translated import answer_in_client_api, stream_translator
from .upstream import UpstreamClient, UpstreamReply

__all__ = ["OWN_REQUEST_ID", "AsyncDriver", "Completion"]

#: the ids the driver gives the requests it sends itself (`r1`, `r2`, ...: a live run's)
OWN_REQUEST_ID = re.compile(r"r[0-9]+")


@dataclass
class Completion:
    """The routing outcome and, when an upstream answer is forwarded, that answer.

    A streamed answer (`relay`) is open: relay it (`relay.relay()`), then `finish()`,
    which records how it ended and closes it, whatever happened to the relaying."""

    response: Response
    reply: UpstreamReply | None
    routing: RequestRouting | None = None
    #: the route resumes a cut stream (`stream_resume`): the stream as the client gets it
    resume: StreamResume | None = None

    @property
    def relay(self) -> StreamRelay | None:
        """The stream open now: the first attempt's, or the continuation's that took over."""
        reply = self.resume.reply if self.resume is not None else self.reply
        return reply.relay if reply is not None else None

    def pieces(self) -> AsyncIterator[bytes]:
        """The streamed body as the client gets it."""
        if self.resume is not None:
            return self.resume.relay()
        relay = self.relay
        assert relay is not None
        return relay.relay()

    def client_gone(self) -> None:
        source = self.resume or self.relay
        if source is not None:
            source.client_gone()

    @property
    def gone(self) -> bool:
        source = self.resume or self.relay
        return source is not None and source.gone

    def relayed(self) -> tuple[int, int]:
        """The bytes and chunks with content relayed to the client, every attempt's."""
        relay, resume = self.relay, self.resume
        if relay is None:
            return 0, 0
        if resume is None:
            return relay.relayed_bytes, relay.relayed_chunks
        return (resume.before_bytes + relay.relayed_bytes,
                resume.before_chunks + relay.relayed_chunks)

    async def finish(self) -> None:
        """The streamed answer is over: relayed whole, cut, or left by its client
        (`cancelled`). Its result goes to the router now (docs/design.md §7), then its
        body is read to its end if it ended whole (its connection serves again) and
        closed. A second call does nothing."""
        relay, routing = self.relay, self.routing
        if relay is None or routing is None or not routing.streaming:
            return
        routing.end_stream(relay.cut, cancelled=relay.cut is None and not relay.finished,
                           relayed_bytes=relay.relayed_bytes,
                           relayed_chunks=relay.relayed_chunks)
        try:
            if relay.finished:
                await relay.drain()
        finally:
            await relay.aclose()


class AsyncDriver:
    """`wall`: the clock an answer's dated headers are read against (a Retry-After date,
    Anthropic's reset times), which a server writes in wall time: the router's own clock
    (None) where that keeps wall time, as the gateway's and the console's do; the system
    clock under a clock that counts from a run's start (a live replay)."""

    def __init__(
        self, router: Router, providers: Mapping[str, ProviderConfig], client: UpstreamClient,
        *, wall: Clock | None = None,
    ) -> None:
        self.router = router
        self.providers = providers
        self.client = client
        self.wall = wall or router.engine.clock
        #: the trace headers (`traceparent`, `tracestate`) of a request's attempt being
        #: sent, by its request id: set by the gateway when it traces
        self.trace_headers: Callable[[str], Mapping[str, str]] | None = None
        self._ids = 0
        self._native: tuple[Mapping[str, ProviderConfig], bool] | None = None

    def why_not(self, request: ClientRequest) -> NotServed | None:
        """Why no target of the request's route serves it (a 400 before any upstream
        call), or None; UnknownRoute for an unknown model."""
        providers = self.providers
        if request.endpoint is Endpoint.CHAT and self._native_chat(providers):
            return None
        return request.why_not(self.router.resolve(str(request.body["model"])), providers)

    def next_request_id(self) -> str:
        """An id of its own (`OWN_REQUEST_ID`) for a request sent without one."""
        self._ids += 1
        return f"r{self._ids}"

    async def complete(
        self, body: dict[str, Any], *, request_id: str | None = None, stream: bool = False,
        request: ClientRequest | None = None, tenant: str | None = None,
    ) -> Completion:
        """Route one request (`request`; by default a chat completion of `body`); raises
        UnknownRoute for an unknown model. A target that does not serve the request's
        endpoint, or cannot take its translation, is skipped `not_served`.

        A request that ends without its answer (the task cancelled, an exception on the
        way) cancels its routing before anything else: the attempt in flight counts as
        `cancelled`, and what it held (its count in flight, a probe slot) is given back.
        `tenant`: the client key's, for the request's events.
        """
        providers = self.providers  # a reload swaps them: this request keeps its own
        if request is None:
            request = ClientRequest(Endpoint.CHAT, body, stream)
        serves = (None if request.endpoint is Endpoint.CHAT and self._native_chat(providers)
                  else partial(request.serves, providers))
        routing = self.router.start(request_id or self.next_request_id(), str(body["model"]),
                                    serves, tenant)
        wall = self.wall
        last_reply: UpstreamReply | None = None
        #: a "prompt too long" answer, kept: the client's answer if no later target takes
        #: the request (docs/design.md §2)
        too_long: tuple[Attempt, UpstreamReply] | None = None
        try:
            with routing:  # left unanswered, it cancels
                while True:
                    step = routing.next_step()
                    if isinstance(step, Response):
                        reply = None
                        if step.upstream is not None:
                            reply = (too_long[1] if too_long and too_long[0] is step.upstream
                                     else last_reply)
                        if reply is not None and reply.translation is not None \
                                and reply.relay is None and step.upstream is not None:
                            reply.content = answer_in_client_api(
                                reply.translation, reply.status, reply.content,
                                step.upstream.model, wall.now_ms() // 1000)
                        completion = Completion(step, reply, routing)
                        if (reply is not None and reply.relay is not None
                                and routing.route.stream_resume
                                and request.endpoint is Endpoint.CHAT):
                            completion.resume = self._resumable(routing, providers, body,
                                                                reply)
                        return completion
                    if isinstance(step, Wait):
                        if step.queue is None:
                            await asyncio.sleep(step.delay_ms / 1000)
                        else:
                            await _queued(step.queue, step.delay_ms)
                        continue
                    last_reply = await self._attempt(providers, step, request,
                                                     wall.now_ms())
                    if (too_long is None
                            and last_reply.classification.kind is FailureKind.CONTEXT_LENGTH):
                        too_long = (step, last_reply)
                    self._record(routing, last_reply)
        except (Exception, asyncio.CancelledError):  # not GeneratorExit: no await then
            if last_reply is not None and last_reply.relay is not None:
                routing.end_stream(cancelled=True)
                await last_reply.relay.aclose()
            raise

    def _record(self, routing: RequestRouting, reply: UpstreamReply) -> None:
        """Report an attempt's reply to the router, with what its headers say of the
        key's rate limits."""
        limits = (parse_rate_limits(reply.headers, self.wall.now_ms())
                  if reply.headers else None)
        routing.record(reply.status, reply.classification, limits,
                       stream=reply.relay is not None, reason=reply.reason)

    def _resumable(self, routing: RequestRouting, providers: Mapping[str, ProviderConfig],
                   body: dict[str, Any], reply: UpstreamReply) -> StreamResume:
        """The stream of `reply`, to be continued on the route's next target if it is cut
        (`stream_resume`, docs/design.md §7)."""

        async def send(attempt: Attempt, continued: dict[str, Any]) -> UpstreamReply:
            return await self._attempt(providers, attempt,
                                       ClientRequest(Endpoint.CHAT, continued, True),
                                       self.wall.now_ms())

        return StreamResume(reply, routing, body, send, partial(self._record, routing))

    async def _attempt(
        self, providers: Mapping[str, ProviderConfig], attempt: Attempt,
        request: ClientRequest, now_epoch_ms: int
    ) -> UpstreamReply:
        provider = providers[attempt.provider]
        how = request.serving(provider, attempt.model)
        if provider.base_url is None or how is None:  # (a reload took the model's kind)
            return UpstreamReply(
                0, Classification(FailureKind.NETWORK),
                error=f"provider {attempt.provider!r} has no base_url" if how is not None
                else f"{attempt.provider}/{attempt.model} no longer serves the request",
            )
        connection = next((c for c in provider.connections if c.id == attempt.connection),
                          None)
        if connection is None:  # a reload added it after this request began: its key is
            current = self.providers.get(attempt.provider)  # in the config in force
            connection = None if current is None else next(
                (c for c in current.connections if c.id == attempt.connection), None)
        if connection is None:
            return UpstreamReply(0, Classification(FailureKind.NETWORK), error=(
                f"connection {attempt.connection!r} of {attempt.provider!r} is in no config "
                "this request can read"))
        upstream_body = request.upstream_body(how, attempt.model)
        stream = request.stream and request.endpoint.streams
        translate = None
        if stream and how.translation is not None:
            translate = stream_translator(how.translation, request.body, attempt.model,
                                          now_epoch_ms // 1000)
        headers = upstream_headers(provider.api, connection.api_key, request.headers)
        if self.trace_headers is not None:
            headers.update(self.trace_headers(attempt.request_id))
        reply = await self.client.post(
            upstream_url(provider.base_url, provider.api, how.upstream, attempt.model),
            headers,
            json.dumps(upstream_body, separators=(",", ":")).encode(),
            timeout_ms=attempt.timeout_ms, stream=stream, now_epoch_ms=now_epoch_ms,
            first_token_ms=attempt.first_token_ms, stream_idle_ms=attempt.stream_idle_ms,
            examine=examine_for(how.upstream) if stream else examine_for(Endpoint.CHAT),
            client=request.endpoint, translate=translate,
        )
        reply.translation = how.translation
        return reply

    def _native_chat(self, providers: Mapping[str, ProviderConfig]) -> bool:
        """Whether every provider serves chat completions natively with every model: the
        router then needs no `serves` (today's configs, and the hot path). Known once per
        providers mapping (a reload swaps in a new one)."""
        known = self._native
        if known is None or known[0] is not providers:
            known = self._native = (providers, all(
                p.api.family is not ApiFamily.ANTHROPIC and not p.embedding_models
                for p in providers.values()))
        return known[1]


async def _queued(ticket: Ticket, delay_ms: int) -> None:
    """Wait in a full provider's queue until a slot is handed over, or `delay_ms` at most
    (docs/design.md §6)."""
    if ticket.reserved is not None:
        return
    handed = asyncio.Event()
    ticket.wake = handed.set
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay_ms / 1000):
            await handed.wait()
