"""The gateway: an OpenAI-compatible proxy over the router, plus the management API.

`Gateway.asgi()` is a starlette app; `omniroute-gateway` serves it with uvicorn, and the
console can serve it from its own in-process router.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..apis import ClientApi, Endpoint
from ..config.clients import ClientKeys, Tenant
from ..config.durations import parse_duration_ms
from ..config.hidden import visible
from ..config.limits import GatewayLimits
from ..config.operators import Operator, OperatorTokens, Role
from ..config.router_config import MetricsAccess, ProviderConfig, RouterConfig
from ..config.status import ConfigStatus
from ..config.token import TokenError, load_token
from ..drivers import AsyncDriver, UpstreamClient
from ..drivers.async_driver import Completion
from ..drivers.client_request import ClientRequest
from ..drivers.outbound import FORWARDED_ANTHROPIC_HEADERS
from ..drivers.usage import Usage, usage_of
from ..engine.engine import UnknownTarget
from ..engine.events import STATE_CHANGE_CLASSES, Event, OperatorEvent
from ..fleet.redis_link import RedisLink
from ..metrics import CONTENT_TYPE_LATEST, AnswerCounters, build_registry
from ..router.core import Router, UnknownRoute
from ..state_document import state_document
from ..store import SqliteStore
from ..tracing import RequestTracing
from .client_keys import ClientGate, usage_for
from .events_stream import EventBroadcaster, EventStreamResponse
from .openapi import MANAGEMENT_OPENAPI
from .protocol import client_log
from .relay_response import RelayResponse
from .reload import ConfigReloader
from .request_ids import REQUEST_ID_HEADER, RequestIds, is_request_id
from .request_records import RecordsUnavailable, RequestRecorder, records_for
from .scrapes import Scrapes
from .validation import BadRequest, ClientGone, check_body, json_object, read_body

__all__ = ["Gateway", "error_response"]

#: state changes a gateway keeps for consoles that attach later (`/api/resilience/history`)
HISTORY_LIMIT = 1000

#: an upstream answer's headers passed on, and their names to the client: the upstream's own
#: request id is `x-upstream-request-id` (for its support), `x-request-id` is ours
_FORWARDED_HEADERS = {"content-type": "content-type", "openai-processing-ms":
                      "openai-processing-ms", "x-request-id": "x-upstream-request-id",
                      "request-id": "x-upstream-request-id"}  # the last: Anthropic's
#: why an operator acts, for the audit (who acts is the name of the token)
REASON_HEADER = "x-omniroute-reason"
SERVED_BY_HEADER = "x-omniroute-served-by"
#: one line per proxied request, at info (docs/gateway.md, "Logs")
access_log = logging.getLogger("omniroute.access")
Handler = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("omniroute.gateway")


def error_response(status: int, message: str, *, type_: str = "invalid_request_error",
                   code: str | None = None, headers: Mapping[str, str] | None = None,
                   param: str | None = None) -> JSONResponse:
    """An OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "type": type_, "param": param,
                                   "code": code}}, status, headers=dict(headers or {}))


def _bad_request(exc: BadRequest, endpoint: Endpoint = Endpoint.CHAT) -> JSONResponse:
    code = {413: "request_too_large"}.get(exc.status)
    return client_error(endpoint, exc.status, str(exc), param=exc.param, code=code)


#: Anthropic's error type for a status of ours
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 501: "api_error", 503: "overloaded_error",
                    529: "overloaded_error"}


def in_client_api(endpoint: Endpoint, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """An error body of ours (OpenAI's shape) in the client's API: Anthropic's
    `{"type": "error", "error": {"type", "message"}}` for its endpoints, the rest of
    ours (`code`, `attempts`, `skipped`) kept beside."""
    if endpoint.api is not ClientApi.ANTHROPIC:
        return body
    error = body.get("error")
    error = dict(error) if isinstance(error, dict) else {"message": str(error)}
    error["type"] = _ANTHROPIC_TYPES.get(status, "api_error")
    return {"type": "error", "error": error}


def client_error(endpoint: Endpoint, status: int, message: str, *,
                 code: str | None = None, param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An error of ours, in the shape of the client's API."""
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}
    return JSONResponse(in_client_api(endpoint, status, body), status,
                        headers=dict(headers or {}))


class Gateway:
    def __init__(
        self,
        router: Router,
        providers: Mapping[str, ProviderConfig],
        *,
        token: str | None,
        store: SqliteStore | None = None,
        client: UpstreamClient | None = None,
        limits: GatewayLimits | None = None,
        fleet: RedisLink | None = None,
        config: RouterConfig | None = None,
        metrics: MetricsAccess = MetricsAccess.TOKEN,
        config_status: ConfigStatus | None = None,
        served_by_header: bool = True,
        operators: OperatorTokens | None = None,
        token_file: str | None = None,
        tracing: RequestTracing | None = None,
        clients: ClientKeys | None = None,
    ) -> None:
        """`token`: the single management token (role `operate`), read again from
        `token_file` on each reload when it came from one; `operators`: the named tokens,
        by default the config's `gateway.operators` (a reload takes its new ones). With
        neither, there is no management API. `tracing`: OpenTelemetry spans of the proxied
        requests (`tracing_from_env`), whose context goes upstream with each attempt.
        `clients`: who may send requests and how much (by default the config's
        `gateway.clients`; none: anyone who reaches the port)."""
        self.router = router
        self.limits = limits or GatewayLimits()
        self.engine = router.engine
        self.providers = providers
        if operators is None:
            operators = OperatorTokens() if config is None else config.gateway_operators
        #: who may use the management API, and for what
        self.operators = operators.with_single(token)
        self.token_file = token_file
        self.store = store
        self.fleet = fleet
        self.client = client or UpstreamClient()
        self.driver = AsyncDriver(router, providers, self.client)
        self.tracing = tracing
        if tracing is not None:
            self.driver.trace_headers = tracing.outbound
        #: `x-omniroute-served-by: provider/connection/model` on every proxied answer
        #: (`gateway.served_by_header`): a connection id may name a team or an account
        self.served_by_header = served_by_header
        self.request_ids = RequestIds()
        if clients is None:
            clients = ClientKeys() if config is None else config.gateway_clients
        #: client keys, their tenants' limits and counts (off when `clients` is empty)
        self.clients = ClientGate(
            clients, usage_for(None if fleet is None else fleet.client,
                               "omniroute" if fleet is None else fleet.prefix),
            self.driver.wall.now_ms, client_error)
        #: each request's decision record, for `GET /api/requests/{id}` on any replica
        self.records = RequestRecorder(
            router.engine.bus, records_for(fleet, store, None if config is None
                                           else config.store_retention),
            replica=None if fleet is None else fleet.replica, wall_ms=router.engine.now)
        self.events = EventBroadcaster(
            router.engine.bus, replica=None if fleet is None else fleet.replica,
            echo=None if fleet is None else lambda: fleet.relaying)
        if fleet is not None:
            fleet.on_remote = self._remote
        self._audit: deque[OperatorEvent] = deque(maxlen=1000)
        self._history: deque[Event] = deque(maxlen=HISTORY_LIMIT)
        if store is None:  # a store keeps both, from before this gateway started too
            router.engine.bus.subscribe(self._remember, *STATE_CHANGE_CLASSES)
        #: re-reads the config file (`SIGHUP`, `POST /api/resilience/reload`); None: the
        #: router was not built from a file
        self.reloader = None if config is None else ConfigReloader(
            router, config, on_swap=self._swap)
        #: the config in force: the reloader's, or what a caller serving a router it
        #: reloads no other way says of it (the console's `--listen`)
        self.status = config_status if self.reloader is None else self.reloader.status
        if fleet is not None and config is not None:
            fleet.announce_config(config.version, self.reloader.status.loaded_at_ms
                                  if self.reloader is not None else 0)

        #: who may scrape `/metrics`: with the token (none: not served), anyone, or no one
        self.metrics_access = (MetricsAccess.OFF if metrics is MetricsAccess.TOKEN
                               and not self.operators else metrics)
        #: what the metrics learn of the answers passed on (None: nothing counted)
        self.answers = (None if self.metrics_access is MetricsAccess.OFF
                        else AnswerCounters(router))
        self.metrics = None if self.answers is None else build_registry(
            router, clock=router.engine.clock, store=store, fleet=fleet,
            config_status=self.status, answers=self.answers,
            traces=None if tracing is None else tracing.exporter, clients=self.clients,
            records=self.records)
        #: `/metrics` bodies, shared by scrapes that come together
        self.scrapes = None if self.metrics is None else Scrapes(
            self.metrics, router.engine.clock, router.engine.bus)
        self._scrape_failures = 0

    def _swap(self, config: RouterConfig) -> None:
        """A reloaded config is in force: new requests go out with its keys and URLs
        (one in flight keeps the config it started with), the fleet link knows its
        names and tells the others its version."""
        self.providers = config.providers
        self.driver.providers = config.providers
        self.operators = config.gateway_operators.with_single(self._single_token())
        self.clients.reconfigure(config.gateway_clients)
        if self.fleet is not None and self.reloader is not None:
            self.fleet.reconfigure(self.engine, self.router.models)
            self.fleet.announce_config(config.version, self.reloader.status.loaded_at_ms)

    def _single_token(self) -> str | None:
        """The single token after a reload: its file read again (rotated), or, if it
        cannot be read or is not usable now, the one in force, said in an error line."""
        token = self.operators.single
        if self.token_file is None or token is None:
            return token
        try:
            return load_token(self.token_file) or token
        except TokenError as exc:
            log.error("the management token was not rotated: %s; the one in force stays",
                      exc)
            return token

    def config_status(self) -> dict[str, Any] | None:
        return None if self.status is None else asdict(self.status)

    def _remote(self, replica: str, data: dict[str, Any]) -> None:
        """Another replica's event: streamed to attached consoles, and an operator's
        action is in this replica's audit log too (the fleet's audit is one log)."""
        self.events.relay(replica, data)
        if data.get("type") == OperatorEvent.TYPE:
            try:
                self._audit.append(OperatorEvent(
                    int(data["t"]), str(data["action"]), str(data["target"]),
                    str(data["actor"]), str(data["result"])))
            except (KeyError, TypeError, ValueError):
                return

    def _remember(self, event: Event) -> None:
        """State changes, for a console that attaches later (the per-request events are
        not history: they would push the transitions out)."""
        self._history.append(event)
        if isinstance(event, OperatorEvent):
            self._audit.append(event)

    def asgi(self) -> ASGIApp:
        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            *(Route(endpoint.path, partial(self.proxy, endpoint=endpoint), methods=["POST"])
              for endpoint in Endpoint if endpoint is not Endpoint.CHAT),
            Route("/v1/responses/{rest:path}", self.stored_response,
                  methods=["GET", "POST", "DELETE"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/ready", self.ready, methods=["GET"]),
        ]
        if self.metrics_access is MetricsAccess.PUBLIC:
            routes.append(Route("/metrics", self.scrape, methods=["GET"]))
        elif self.metrics_access is MetricsAccess.TOKEN:
            routes.append(Route("/metrics", self._managed(self.scrape), methods=["GET"]))
        if self.operators:  # no token, no management API
            read, operate = self._managed, self._operated
            routes += [
                Route("/api/resilience/openapi.json", self.openapi, methods=["GET"]),
                Route("/api/resilience/state", read(self.state), methods=["GET"]),
                Route("/api/resilience/events", read(self.event_stream), methods=["GET"]),
                Route("/api/resilience/audit", read(self.audit), methods=["GET"]),
                Route("/api/resilience/history", read(self.history), methods=["GET"]),
                Route("/api/requests/{request_id}", read(self.request_record),
                      methods=["GET"]),
                Route("/api/resilience/breakers/{provider}/reset",
                      operate(self.reset_breaker), methods=["POST"]),
                Route("/api/resilience/breakers/{provider}/force-open",
                      operate(self.force_open), methods=["POST"]),
                Route("/api/resilience/connections/{provider}/{connection}/{action}",
                      operate(self.connection_action), methods=["POST"]),
                Route("/api/resilience/lockouts", operate(self.clear_lockouts),
                      methods=["DELETE"]),
                Route("/api/resilience/reload", operate(self.reload), methods=["POST"]),
            ]
        app = Starlette(routes=routes, exception_handlers={
            404: _http_error, 405: _http_error})  # OpenAI-style bodies here too

        async def entry(scope: Scope, receive: Receive, send: Send) -> None:
            """Completions go straight to their handler: routing and middleware cost about
            a tenth of a millisecond a request on the hot path; the rest goes through."""
            if (scope["type"] == "http" and scope["path"] == "/v1/chat/completions"
                    and scope["method"] == "POST"):
                response = await self.chat_completions(Request(scope, receive, send))
                await response(scope, receive, send)
            else:
                await app(scope, receive, send)

        return entry

    async def aclose(self) -> None:
        self.events.close()
        await self.records.close()
        await self.clients.close()
        await self.client.aclose()

    # -- the proxy ------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        return await self.proxy(request, Endpoint.CHAT)

    async def proxy(self, request: Request, endpoint: Endpoint) -> Response:
        """A proxied request; every answer says the request's id in `x-request-id`."""
        request_id = self.request_ids.take(request.scope["headers"])
        tracing = self.tracing
        try:
            if tracing is not None:
                scope = request.scope
                tracing.begin(request_id, scope["method"], scope["path"], scope["headers"],
                              endpoint)
            response = await self._proxied(request, request_id, endpoint)
        except asyncio.CancelledError:
            self._cut_short(request_id, 499)
            raise
        except Exception:
            self._cut_short(request_id, 500)
            raise
        if not isinstance(response, RelayResponse):  # a stream's end is `_stream_ended`
            self._end_trace(request_id, response.status_code)
        response.raw_headers.append((REQUEST_ID_HEADER, request_id.encode("ascii")))
        return response

    def _end_trace(self, request_id: str, status: int, usage: Usage | None = None) -> None:
        """The request's last step: its trace ended, its id free again (whatever the
        trace met: a bug of ours)."""
        try:
            if self.tracing is not None:
                self.tracing.end(request_id, status, usage)
        finally:
            self.request_ids.release(request_id)

    def _cut_short(self, request_id: str, status: int) -> None:
        """The request ended in an exception (a bug of ours, or the client gone): its
        trace and its record end here, as its access line would have ended them."""
        try:
            self.records.finish(request_id, status)
        finally:
            self._end_trace(request_id, status)

    async def stored_response(self, request: Request) -> Response:
        """`/v1/responses/{id}` and its kin read or change a response an upstream stored:
        which one is not known here (the router may have sent its creation to any
        target), so they are refused plainly rather than sent somewhere at random."""
        return error_response(
            501, "stored responses are not served through the gateway: the response lives "
                 "with the provider that made it; create responses with store: false, or "
                 "call that provider directly", type_="not_implemented",
            code="stored_responses_unsupported")

    async def _proxied(self, request: Request, request_id: str, endpoint: Endpoint
                       ) -> Response:
        tenant: Tenant | None = None
        if self.clients.on:  # whose key, before a byte of the body is read
            tenant = self.clients.tenant(request.headers)
            if tenant is None:
                self._answered(request_id, 401, endpoint=endpoint)
                return self.clients.unauthenticated_response(endpoint)
        try:
            raw = await read_body(request, self.limits.max_body_bytes)
            body = json_object(raw, self.limits.max_json_depth)
            model, stream = check_body(endpoint, body)
        except BadRequest as exc:
            self._answered(request_id, exc.status, endpoint=endpoint, tenant=tenant)
            return _bad_request(exc, endpoint)
        except ClientGone:
            return _client_gone(request, request_id)
        if tenant is not None:
            refused = await self.clients.admit(tenant, model, endpoint)
            if refused is not None:
                self._answered(request_id, refused.status_code, route=visible(model),
                               endpoint=endpoint, tenant=tenant)
                return refused
        client_request = ClientRequest(endpoint, body, stream, _client_headers(request,
                                                                              endpoint))
        try:
            not_served = self.driver.why_not(client_request)
            if not_served is not None:
                self._answered(request_id, 400, route=model, endpoint=endpoint, tenant=tenant)
                return client_error(endpoint, 400, not_served.reason, param=not_served.param,
                                    code="unsupported_parameter" if not_served.param
                                    else "unsupported_endpoint")
            completion = await self._complete_unless_disconnected(
                request, client_request, request_id, tenant)
        except UnknownRoute:  # a name of the client's: its hidden characters escaped
            self._answered(request_id, 404, route=visible(model), endpoint=endpoint,
                           tenant=tenant)
            return client_error(endpoint, 404, f"the model {model!r} does not exist here: ask "
                                "for a route or provider/model (GET /v1/models lists them)",
                                code="model_not_found")
        if completion is None:  # the client went away; the attempt was cancelled
            self._answered(request_id, 499, route=model, endpoint=endpoint, tenant=tenant)
            return Response(status_code=499)
        response = self._respond(completion, request_id, model, endpoint, tenant)
        if self.answers is not None or self.tracing is not None or tenant is not None:
            self._note_answer(request_id, model, completion, tenant)
        if completion.relay is None:  # a stream's line is written when it ends
            self._answered(request_id, response.status_code, route=model, completion=completion,
                           endpoint=endpoint, tenant=tenant)
        return response

    def _note_answer(self, request_id: str, route: str, completion: Completion,
                     tenant: Tenant | None) -> None:
        """What the metrics, the trace and the tenant's token limits learn of an answer:
        the route asked for; a success's time to first token (a stream: its first content
        was read before it was chosen) or its tokens (a whole body's `usage`; a stream's
        are known when it ends, `_stream_ended`)."""
        trace = self.tracing.trace(request_id) if self.tracing is not None else None
        if trace is not None:
            trace.route = route
        reply, upstream = completion.reply, completion.response.upstream
        if reply is None or upstream is None or not 200 <= reply.status < 300:
            return
        if reply.relay is not None:
            if self.answers is not None:
                self.answers.streamed(upstream.provider, upstream.model,
                                      self.engine.now() - upstream.started_at)
            return
        traced = trace is not None and trace.sampled
        if (self.answers is not None or traced or tenant is not None) and (
                usage := usage_of(reply.content)) is not None:
            if self.answers is not None:
                self.answers.usage(upstream.provider, route, upstream.model, usage)
            if trace is not None:
                trace.usage = usage
            if tenant is not None:
                self.clients.spend(tenant, usage)

    def _answered(self, request_id: str, status: int, *, route: str | None = None,
                  completion: Completion | None = None,
                  endpoint: Endpoint = Endpoint.CHAT, tenant: Tenant | None = None) -> None:
        """The request's access line, naming this replica when it is one of a fleet and
        the tenant when client keys are on."""
        self.records.finish(request_id, status)
        _answered(request_id, status, route=route, completion=completion, endpoint=endpoint,
                  replica=self.fleet.replica if self.fleet is not None else None,
                  tenant=None if tenant is None else tenant.name)

    def _stream_ended(self, request_id: str, route: str, endpoint: Endpoint,
                      tenant: Tenant | None, completion: Completion) -> None:
        """A relayed stream is over: its access line, and the tokens its last usage
        chunk said it took (a stream cut before it counts none)."""
        relay, upstream = completion.relay, completion.response.upstream
        try:
            if (self.answers is not None and relay is not None and relay.usage is not None
                    and upstream is not None):
                self.answers.usage(upstream.provider, route, upstream.model, relay.usage)
            if tenant is not None and relay is not None and relay.usage is not None:
                self.clients.spend(tenant, relay.usage)
            self._answered(request_id, completion.response.status, route=route,
                           completion=completion, endpoint=endpoint, tenant=tenant)
        finally:
            self._end_trace(request_id, completion.response.status,
                            None if relay is None else relay.usage)

    async def _complete_unless_disconnected(
        self, request: Request, client_request: ClientRequest, request_id: str,
        tenant: Tenant | None = None,
    ) -> Completion | None:
        """The completion, routed in this task; a watcher cancels it if the client goes
        away (one extra task per request, not two and an `asyncio.wait`)."""
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            await _disconnected(request)
            gone = True
            task.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            return await self.driver.complete(client_request.body, request_id=request_id,
                                              stream=client_request.stream,
                                              request=client_request,
                                              tenant=None if tenant is None else tenant.name)
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()  # our own cancellation, handled: the attempt counted `cancelled`
            return None
        finally:
            watcher.cancel()

    def _respond(self, completion: Completion, request_id: str, model: str,
                 endpoint: Endpoint, tenant: Tenant | None) -> Response:
        response, reply = completion.response, completion.reply
        if reply is None:
            return JSONResponse(in_client_api(endpoint, response.status, response.body or {}),
                                response.status, headers=response.headers)
        headers = {_FORWARDED_HEADERS[k.lower()]: v for k, v in reply.headers.items()
                   if k.lower() in _FORWARDED_HEADERS}
        if self.served_by_header and response.upstream is not None:
            headers[SERVED_BY_HEADER] = response.upstream.served_by
        if reply.relay is not None:
            return RelayResponse(completion, reply.status, headers, partial(
                self._stream_ended, request_id, model, endpoint, tenant))
        return Response(reply.content, reply.status, headers=headers)

    async def models(self, request: Request) -> Response:
        """`GET /v1/models`: the routes and provider/models; with client keys, a key is
        asked and only what its tenant may use is listed."""
        names = list(self.router.routes)
        names += [f"{p}/{m}" for p, config in self.providers.items() for m in config.all_models]
        if self.clients.on:
            tenant = self.clients.tenant(request.headers)
            if tenant is None:
                return self.clients.unauthenticated_response(Endpoint.CHAT)
            names = [name for name in names if tenant.may_use(name)]
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "omniroute"}
            for name in names]})

    def store_health(self) -> dict[str, Any] | None:
        return None if self.store is None else self.store.health().to_dict()

    async def health(self, request: Request) -> Response:
        """Routing works while the store fails, so the answer stays 200; `status` says
        `degraded` and `store` says since when, for the operator to see."""
        states = {b.provider: b.state.value for b in self.engine.snapshot().breakers}
        store = self.store_health()
        fleet = None if self.fleet is None else self.fleet.health().to_dict()
        ok = (store is None or store["ok"]) and (fleet is None or fleet["ok"])
        body = {"status": "ok" if ok else "degraded", "providers": states, "store": store}
        config = self.config_status()
        if config is not None:
            body["config"] = {key: config[key] for key in (
                "version", "loaded_at_ms", "reloads", "failures", "last_reload_ok")}
        if fleet is not None:
            body["fleet"] = fleet  # the shared state in Redis, when this is a fleet
            versions = fleet.get("config_versions") or {}
            if len(set(versions.values())) > 1:
                # each replica reloads its own file: the operator should know they differ
                body["config_mismatch"] = versions
        if self.engine.bus.faults:
            # a consumer of the events raised (isolated from routing, logged once a minute)
            body["subscriber_faults"] = dict(self.engine.bus.faults)
        return JSONResponse(body)

    async def ready(self, request: Request) -> Response:
        """`GET /ready`: whether to send this gateway traffic: its config loaded, its store
        open (when it has one), its fleet link up (when it is a replica). 200, or 503 with
        what is not; `/health` stays 200 while routing works at all."""
        checks: dict[str, dict[str, Any]] = {"config": {
            "ok": self.status is None or bool(self.status.version),
            "version": None if self.status is None else self.status.version}}
        if self.store is not None:
            checks["store"] = {"ok": self.store.is_open}
        if self.fleet is not None:
            link = self.fleet.health()
            checks["fleet"] = {"ok": link.ok, "error": link.error}
        ok = all(check["ok"] for check in checks.values())
        return JSONResponse({"ready": ok, "checks": checks}, 200 if ok else 503,
                            headers=None if ok else {"Retry-After": "5"})

    async def scrape(self, request: Request) -> Response:
        """`GET /metrics`: the engine's state now and the traffic counted since start. A
        scrape that fails is logged and answered 503: Prometheus marks the target down, and
        routing goes on (docs/design.md §13)."""
        assert self.scrapes is not None
        try:
            body = await self.scrapes.body()
        except Exception as exc:
            self._scrape_failures += 1
            # the first with its traceback (a bug to fix), the later ones a line each
            log.error("a metrics scrape failed (%d in all): %s: %s", self._scrape_failures,
                      type(exc).__name__, exc, exc_info=self._scrape_failures == 1)
            return Response("metrics unavailable: the scrape failed; the gateway's log says "
                            "why\n", 503, media_type="text/plain",
                            headers={"Retry-After": "15"})  # about the next scrape
        return Response(body, 200, headers={"content-type": CONTENT_TYPE_LATEST})

    # -- the management API ----------------------------------------------------------------

    def _managed(self, handler: Handler, role: Role = Role.READ) -> Handler:
        """A management endpoint: a token of `role` (or above) first, whose operator is
        `request.state.operator`; a provider or connection it names that does not exist
        is a 404."""

        async def guarded(request: Request) -> Response:
            operator = self.operators.identify(request.headers.get("authorization"))
            if operator is None:
                return error_response(
                    401, "the management API needs `Authorization: Bearer <token>`",
                    type_="authentication_error", headers={"WWW-Authenticate": "Bearer"})
            if role is Role.OPERATE and not operator.may_operate:
                return error_response(
                    403, f"the token of {operator.name!r} may only read (role read): "
                         "acting on the router needs an operate token",
                    type_="permission_error", code="read_only_token")
            request.state.operator = operator
            try:
                return await handler(request)
            except UnknownTarget as exc:
                return error_response(404, str(exc), code="not_found")

        return guarded

    def _operated(self, handler: Handler) -> Handler:
        """An endpoint that acts on the router: an `operate` token only."""
        return self._managed(handler, Role.OPERATE)

    @staticmethod
    def _actor(request: Request) -> str:
        """Who acts, for the audit: the name of the token used, never a header's, with
        the caller's reason if it gave one (`x-omniroute-reason`)."""
        operator: Operator = request.state.operator
        return operator.acting(request.headers.get(REASON_HEADER) or "")

    def _state(self) -> dict[str, Any]:
        return {**state_document(self.engine, self.providers, self.router.routes),
                "store": self.store_health(), "config": self.config_status()}

    async def openapi(self, request: Request) -> Response:
        """The management API's description (it holds nothing secret: no token asked)."""
        return JSONResponse(MANAGEMENT_OPENAPI)

    async def state(self, request: Request) -> Response:
        """The state, and who asks: the console attached with a `read` token says it is
        read-only."""
        operator: Operator = request.state.operator
        return JSONResponse({**self._state(), "caller": {"name": operator.name,
                                                         "role": operator.role.value}})

    async def event_stream(self, request: Request) -> Response:
        return EventStreamResponse(self.events.stream())

    async def history(self, request: Request) -> Response:
        """The recent state changes (breakers, cooldowns, lockouts, operator actions,
        faults), oldest first: from the store's history log, which holds those from
        before this gateway started (days of them) and is never pushed out by traffic;
        without a store, those since it started."""
        raw = request.query_params.get("limit", str(HISTORY_LIMIT))
        if not raw.isdigit() or not 1 <= int(raw) <= HISTORY_LIMIT:
            return error_response(400, f"limit: a whole number from 1 to {HISTORY_LIMIT}",
                                  param="limit")
        limit = int(raw)
        if self.store is not None:
            return JSONResponse({"events": await self.store.state_changes(limit)})
        return JSONResponse({"events": [e.to_dict() for e in self._history][-limit:]})

    async def request_record(self, request: Request) -> Response:
        """A request's decision steps by its id (`x-request-id`), from any replica: what
        the records keep (the last hour by default) and what is in flight here."""
        request_id = request.path_params["request_id"]
        if not is_request_id(request_id):
            return error_response(400, "a request id is 1 to 128 characters of A-Z a-z 0-9 "
                                  ". _ : -", param="request_id")
        try:
            found = await self.records.lookup(request_id)
        except RecordsUnavailable as exc:
            return error_response(503, f"the request records cannot be read now ({exc}); "
                                  "try again", type_="unavailable", code="records_unavailable",
                                  headers={"Retry-After": "1"})
        if found is None:
            return error_response(
                404, f"no request {request_id} is kept: records are kept "
                f"{self.records.kept_for()} in {self.records.sink.where}",
                code="not_found")
        return JSONResponse(found)

    async def audit(self, request: Request) -> Response:
        if self.store is not None:
            entries = [{"t": a.t, "actor": a.actor, "action": a.action, "target": a.target,
                        "result": a.result} for a in await self.store.audit_log(1000)]
        else:
            entries = [{"t": e.t, "actor": e.actor, "action": e.action, "target": e.target,
                        "result": e.result} for e in self._audit]
        return JSONResponse({"entries": entries})

    async def _json_body(self, request: Request) -> dict[str, Any] | Response:
        try:
            raw = await read_body(request, MANAGEMENT_BODY_BYTES)
            return json_object(raw, MANAGEMENT_JSON_DEPTH) if raw.strip() else {}
        except BadRequest as exc:
            return _bad_request(exc)
        except ClientGone:
            return _client_gone(request)

    async def _done(self, **extra: Any) -> Response:
        """An operator action's answer; in a fleet, given once the action has reached the
        shared store (`shared`: false if it has not within a second: it is queued; and
        `dropped`: how many changes the full queue dropped meanwhile, if any)."""
        if self.fleet is not None:
            extra["shared"] = await self.fleet.sync(timeout_s=1.0)
            if not extra["shared"] and self.fleet.dropping:
                extra["dropped"] = self.fleet.dropping
        return JSONResponse({"ok": True, **extra, **self._state()})

    async def reset_breaker(self, request: Request) -> Response:
        self.engine.reset_breaker(request.path_params["provider"], actor=self._actor(request))
        return await self._done()

    async def force_open(self, request: Request) -> Response:
        body = await self._json_body(request)
        if isinstance(body, Response):
            return body
        unknown = set(body) - {"for"}
        if unknown:
            return error_response(400, f"unknown field(s): {', '.join(sorted(unknown))}; "
                                       "expected {\"for\": \"5m\"}")
        try:
            duration = parse_duration_ms(body.get("for", "5m"))
            if duration <= 0:
                raise ValueError("`for` must be longer than 0")
            self.engine.force_open(request.path_params["provider"], duration,
                                   actor=self._actor(request))
        except ValueError as exc:
            return error_response(400, f"`for`: {exc}")
        return await self._done()

    async def connection_action(self, request: Request) -> Response:
        provider = request.path_params["provider"]
        connection = request.path_params["connection"]
        action = request.path_params["action"]
        actor = self._actor(request)
        if action == "clear":
            self.engine.clear_cooldown(provider, connection, actor=actor)
        elif action in ("enable", "disable"):
            self.engine.set_enabled(provider, connection, action == "enable", actor=actor)
        else:
            return error_response(404, f"unknown action {action!r}: clear, enable or "
                                       "disable", code="not_found")
        return await self._done()

    async def clear_lockouts(self, request: Request) -> Response:
        body = await self._json_body(request)
        if isinstance(body, Response):
            return body
        unknown = set(body) - {"provider", "connection", "model", "all"}
        if unknown:
            return error_response(400, f"unknown field(s): {', '.join(sorted(unknown))}")
        if not body:
            return error_response(400, "say what to clear: any of provider, connection, "
                                       "model, or {\"all\": true}")
        if "all" in body and (body["all"] is not True or len(body) > 1):
            return error_response(400, "`all` must be true, and alone")
        for key in ("provider", "connection", "model"):
            if key in body and not isinstance(body[key], str):
                return error_response(400, f"`{key}` must be a string")
        try:
            cleared = self.engine.clear_lockouts(
                body.get("provider"), body.get("connection"), body.get("model"),
                actor=self._actor(request))
        except ValueError as exc:
            return error_response(400, str(exc))
        return await self._done(cleared=cleared)


    async def reload(self, request: Request) -> Response:
        """Re-read the config file: 200 with what changed, or 422 with every problem of a
        file that was refused (the running config stays)."""
        body = await self._json_body(request)
        if isinstance(body, Response):
            return body
        if body:
            return error_response(400, "a reload takes no fields: send no body or {} (the "
                                       "config file is read again)")
        if self.reloader is None:
            return error_response(409, "this router was not started from a config file: "
                                       "there is nothing to reload", code="no_config_file")
        result = await self.reloader.reload(self._actor(request))
        if not result.ok:
            return JSONResponse({**result.to_dict(), "error": {
                "message": f"the config was refused: {len(result.problems)} problem(s); "
                           f"version {result.version} stays in force",
                "type": "invalid_request_error", "param": None, "code": "config_refused"}},
                422)
        return JSONResponse(result.to_dict())


MANAGEMENT_BODY_BYTES = 16 * 1024
MANAGEMENT_JSON_DEPTH = 4  # the deepest management body is {"for": "5m"}: one level


async def _http_error(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    message = (f"no {request.method} {request.url.path} here" if status == 405 else
               f"nothing at {request.url.path}: the API is /v1/chat/completions, "
               "/v1/completions, /v1/embeddings, /v1/responses, /v1/messages, /v1/models, "
               "/health, /ready and /api/resilience/...")
    return error_response(status, message, code="not_found" if status == 404 else None,
                          headers=getattr(exc, "headers", None))


def _client_gone(request: Request, request_id: str | None = None) -> Response:
    client = request.client
    client_log.note("hung-up", "%s hung up before its request to %s was read whole",
                    f"{client.host}:{client.port}" if client else "a client",
                    visible(request.url.path),
                    client=client.host if client else None, request_id=request_id)
    return Response(status_code=499)


def _client_headers(request: Request, endpoint: Endpoint) -> dict[str, str]:
    """The client's headers a native upstream of its own API is given: Anthropic's."""
    if endpoint.api is not ClientApi.ANTHROPIC:
        return {}
    headers = request.headers
    return {name: headers[name] for name in FORWARDED_ANTHROPIC_HEADERS if name in headers}


def _answered(request_id: str, status: int, *, route: str | None = None,
              completion: Completion | None = None,
              endpoint: Endpoint = Endpoint.CHAT, replica: str | None = None,
              tenant: str | None = None) -> None:
    """The access line of a proxied request: its id, route and status, the target that
    served it and the targets passed over, and why; a stream's, how it ended and what it
    relayed; the fleet replica that served it and the client key's tenant; never its body
    (docs/gateway.md, "Logs")."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {"request_id": request_id, "route": route, "status": status,
                              "replica": replica, "tenant": tenant}
    message = f"{endpoint.noun} answered %d"
    if completion is not None:
        response = completion.response
        upstream = response.upstream
        if upstream is not None:
            fields.update(provider=upstream.provider, connection=upstream.connection,
                          model=upstream.model)
        fields.update(attempts=len(response.attempts), latency_ms=response.latency_ms)
        routing = completion.routing
        if routing is not None and routing.skips:  # provider/model:reason, comma-separated
            fields["skips"] = ",".join([f"{skip.target}:{skip.reason}"
                                        for skip in routing.skips])
        relay = completion.relay
        if relay is not None:
            ended = ("stream_cut" if relay.cut is not None else "whole" if relay.finished
                     else "cancelled")
            relayed_bytes, relayed_chunks = completion.relayed()
            fields.update(stream=ended, reason=relay.cut, relayed_bytes=relayed_bytes,
                          relayed_chunks=relayed_chunks)
            message = f"{endpoint.noun} answered %d, its stream {ended}"
            resume = completion.resume
            if resume is not None and resume.outcome is not None:
                fields.update(resume=resume.outcome, resumed_by=resume.resumed_by)
                message += f" ({resume.cut} cut, {resume.outcome})"
    access_log.info(message, status, extra=fields)


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
