"""The gateway's door for requests when client keys are on (`gateway.clients`): whose key
it is, whether its tenant may ask for that route, whether the tenant is under its limits,
and the tokens it spent (docs/gateway.md, "Client keys")."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from ..apis import Endpoint
from ..config.clients import ClientKeys, Tenant
from ..drivers.usage import Usage
from .tenant_limits import LocalUsage, RedisUsage, TenantUsage

__all__ = ["OUTCOMES", "ClientGate", "usage_for"]

#: what became of a tenant's requests at the door: let in, or refused for its routes or
#: one of its limits
OUTCOMES = ("admitted", "route", "rpm", "tpm", "tokens_per_day")
_WHAT = {"rpm": "requests a minute", "tpm": "tokens a minute",
         "tokens_per_day": "tokens a day (UTC)"}

ErrorResponse = Callable[..., JSONResponse]


class ClientGate:
    """Client keys, tenants' limits and their counts: a collector for `/metrics` too."""

    def __init__(self, clients: ClientKeys, usage: TenantUsage,
                 wall_ms: Callable[[], int], error: ErrorResponse) -> None:
        self.clients = clients
        self.usage = usage
        self._wall_ms = wall_ms
        self._error = error  # the gateway's `client_error`: the client API's shape
        self.requests: dict[tuple[str, str], int] = {}
        self.tokens: dict[str, int] = {}
        self.unauthenticated = 0
        self._zeros()

    @property
    def on(self) -> bool:
        return bool(self.clients)

    def reconfigure(self, clients: ClientKeys) -> None:
        """A reload's keys and limits: a key removed stops working at once, one added
        works, and a tenant's counts go on under its new limits."""
        self.clients = clients
        kept = set(clients.tenants)
        self.usage.forget(kept)
        for key in [key for key in self.requests if key[0] not in kept]:
            del self.requests[key]
        for name in [name for name in self.tokens if name not in kept]:
            del self.tokens[name]
        self._zeros()

    def _zeros(self) -> None:
        for name in self.clients.tenants:
            for outcome in OUTCOMES:
                self.requests.setdefault((name, outcome), 0)
            self.tokens.setdefault(name, 0)

    def tenant(self, headers: Headers) -> Tenant | None:
        """The tenant whose key the request carries: `Authorization: Bearer <key>` (what
        OpenAI's clients send) or `x-api-key: <key>` (Anthropic's); None if none is."""
        authorization = headers.get("authorization")
        key = None
        if authorization is not None and authorization[:7].lower() == "bearer ":
            key = authorization[7:].strip()
        if not key:
            key = (headers.get("x-api-key") or "").strip()
        tenant = self.clients.identify(key) if key else None
        if tenant is None:
            self.unauthenticated += 1
        return tenant

    def unauthenticated_response(self, endpoint: Endpoint) -> JSONResponse:
        return self._error(endpoint, 401, "this gateway takes requests with a client key: "
                           "send it as `Authorization: Bearer <key>` or `x-api-key`; ask "
                           "the gateway's operators for one", code="invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})

    async def admit(self, tenant: Tenant, model: str, endpoint: Endpoint
                    ) -> JSONResponse | None:
        """None to let the request in (counted), else the answer that refuses it: 403 for
        a route the tenant may not use, 429 with `Retry-After` for a limit it is at."""
        if not tenant.may_use(model):
            self._count(tenant.name, "route")
            return self._error(endpoint, 403, f"tenant {tenant.name!r} may not use "
                               f"{model!r}; its routes: {', '.join(sorted(tenant.routes or ()))}",
                               code="model_not_allowed", param="model")
        usage = self.usage
        refused = (usage.admit_now(tenant, self._wall_ms()) if isinstance(usage, LocalUsage)
                   else await usage.admit(tenant, self._wall_ms()))
        if refused is None:
            self._count(tenant.name, "admitted")
            return None
        self._count(tenant.name, refused.limit)
        seconds = max(1, -(-refused.retry_after_ms // 1000))
        response = self._error(
            endpoint, 429, f"tenant {tenant.name!r} is at its limit of {refused.allowed:,} "
            f"{_WHAT[refused.limit]} ({refused.used:,} used); retry in {seconds} s",
            code="tenant_limit_exceeded", param=refused.limit,
            headers={"Retry-After": str(seconds)})
        return response

    def spend(self, tenant: Tenant, usage: Usage) -> None:
        """The tokens an answer took count against the tenant's token limits (in Redis:
        with the other answers' of the next tenth of a second, in one round trip)."""
        tokens = usage.prompt_tokens + usage.completion_tokens
        if tokens <= 0:
            return
        self.tokens[tenant.name] = self.tokens.get(tenant.name, 0) + tokens
        usage_ = self.usage
        if isinstance(usage_, LocalUsage):
            usage_.spend_now(tenant, tokens, self._wall_ms())
        else:
            usage_.spend_soon(tenant, tokens, self._wall_ms())

    async def close(self) -> None:
        """Let the token counts not sent yet reach Redis (the gateway is stopping)."""
        if isinstance(self.usage, RedisUsage):
            await self.usage.close()

    def _count(self, tenant: str, outcome: str) -> None:
        key = (tenant, outcome)
        self.requests[key] = self.requests.get(key, 0) + 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "omniroute_client_requests", "Requests with a client key, by tenant and what "
            "became of them at the door: admitted, or refused for a route or a limit.",
            labels=("tenant", "outcome"))
        for (tenant, outcome), count in self.requests.items():
            requests.add_metric((tenant, outcome), count)
        yield requests
        tokens = CounterMetricFamily("omniroute_client_tokens",
                                     "Tokens the tenant's answers took (prompt and "
                                     "completion), as their usage said.", labels=("tenant",))
        for tenant, count in self.tokens.items():
            tokens.add_metric((tenant,), count)
        yield tokens
        yield CounterMetricFamily("omniroute_client_unauthenticated",
                                  "Requests refused for a missing or unknown client key.",
                                  value=self.unauthenticated)
        errors = self.usage.errors if isinstance(self.usage, RedisUsage) else 0
        yield CounterMetricFamily("omniroute_client_limit_errors",
                                  "Times Redis did not count a tenant's request or tokens "
                                  "(the replica counted alone).", value=errors)


def usage_for(redis: object | None, prefix: str) -> TenantUsage:
    """Counts in Redis for a fleet (its link's client), in memory for one gateway."""
    return LocalUsage() if redis is None else RedisUsage(redis, prefix)

