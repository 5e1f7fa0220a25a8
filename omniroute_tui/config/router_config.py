"""The router config file (docs/design.md §1, §8): providers, routes, resilience, store, gateway."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path as FsPath
from typing import Any

from ..clock import Clock
from ..engine.bus import EventBus
from ..engine.engine import ProviderSpec, ResilienceEngine
from ..engine.jitter import Jitter
from ..engine.reload import ReloadSummary
from ..engine.settings import AuthKind, ResilienceSettings, default_settings
from ..router.core import MAX_ROTATION, Router
from ..router.routes import DEFAULT_STRATEGY, Route, Strategy, Target
from .api_family import API_FIELDS, ApiSettings, parse_api
from .clients import ClientKeys, parse_clients
from .hidden import hidden_reason
from .limits import (
    MAX_COUNTS,
    RETENTION_FIELDS,
    GatewayLimits,
    StoreRetention,
    parse_limits,
    parse_retention,
)
from .operators import OperatorTokens, parse_operators
from .overrides import OverridePatch, parse_overrides, read_first_token, validate_settings
from .prescan import check_counts
from .problems import ConfigError, Path
from .readers import (
    read_bool,
    read_duration,
    read_int,
    read_mapping,
    read_name,
    read_str,
    reject_unknown,
)
from .redis_target import SentinelTarget, parse_redis_url, parse_sentinel_address
from .secrets import Secret
from .yaml_source import Source, load_source

__all__ = [
    "ConnectionConfig",
    "MetricsAccess",
    "ProviderConfig",
    "RouterConfig",
    "load_router_config",
    "parse_providers",
    "parse_routes",
]

_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
PROVIDER_FIELDS = ("auth", "per_model_quota", "base_url", "models", "embedding_models",
                   "resilience", "connections", "max_in_flight", "max_queued", *API_FIELDS)
#: requests that may wait for a slot of a capped provider, unless `max_queued` says
#: (docs/design.md §6); the most `max_in_flight` and `max_queued` may be
DEFAULT_MAX_QUEUED = 100
MAX_IN_FLIGHT = 100_000
MAX_QUEUED = 100_000


class MetricsAccess(StrEnum):
    """Who may read the gateway's `GET /metrics` (`gateway.metrics`)."""

    TOKEN = "token"  # with the management token, as the management API (the default)
    PUBLIC = "public"  # anyone who reaches the port: a Prometheus without the token
    OFF = "off"  # not served, and nothing counted


@dataclass(frozen=True)
class ConnectionConfig:
    id: str
    api_key: Secret | None = None
    weight: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields a caller asked to keep
    max_in_flight: int = 0  # attempts in flight at most on this key (0: no cap)


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    auth: AuthKind
    models: tuple[str, ...]
    connections: tuple[ConnectionConfig, ...]
    settings: ResilienceSettings
    per_model_quota: bool = False
    base_url: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields a caller asked to keep
    #: the API the provider speaks (`api:`) and that family's settings
    api: ApiSettings = field(default_factory=ApiSettings)
    #: the models that serve `/v1/embeddings` only (`models` serve the text endpoints)
    embedding_models: tuple[str, ...] = ()
    #: attempts in flight at most on the provider (0: no cap), and requests that may wait
    #: for a slot when it or its keys are full (docs/design.md §6)
    max_in_flight: int = 0
    max_queued: int = DEFAULT_MAX_QUEUED

    @property
    def all_models(self) -> tuple[str, ...]:
        return self.models + self.embedding_models

    def spec(self) -> ProviderSpec:
        weights = tuple(c.weight for c in self.connections)
        return ProviderSpec(
            name=self.name,
            connections=tuple(c.id for c in self.connections),
            settings=self.settings,
            per_model_quota=self.per_model_quota,
            weights=None if all(w == 1 for w in weights) else weights,
            credentials=tuple(c.api_key.fingerprint if c.api_key is not None else ""
                              for c in self.connections),
            max_in_flight=self.max_in_flight,
            connection_caps=(tuple(c.max_in_flight for c in self.connections)
                             if any(c.max_in_flight for c in self.connections) else ()),
            max_queued=self.max_queued,
        )


@dataclass(frozen=True)
class RouterConfig:
    providers: Mapping[str, ProviderConfig]
    routes: Mapping[str, Route]
    settings: ResilienceSettings  # global: request.max_attempts, admission, jitter
    store_path: str | None = None
    #: a fleet's shared state: redis://host:6379/0, or redis+sentinel://… (the config's
    #: Sentinel mapping reads as that URL)
    store_redis: str | None = None
    store_prefix: str = "omniroute"
    #: the longest a fleet's probe lease lives unrenewed (a holder that dies blocks the
    #: others' probes at most this long, and at most one reset window)
    store_lease_max_ms: int = 10_000
    #: what the state database's logs keep, and for how long
    store_retention: StoreRetention = field(default_factory=StoreRetention)
    gateway_listen: str | None = None
    gateway_token_file: str | None = None
    #: the management API's named tokens and their roles (taken by a reload)
    gateway_operators: OperatorTokens = field(default_factory=OperatorTokens)
    #: who may send requests, by tenant, with its limits (empty: anyone may)
    gateway_clients: ClientKeys = field(default_factory=ClientKeys)
    #: the file `gateway.clients` names, when the tenants live in a file of their own
    gateway_clients_file: str | None = None
    gateway_limits: GatewayLimits = field(default_factory=GatewayLimits)
    gateway_metrics: MetricsAccess = MetricsAccess.TOKEN
    #: whether an answer names its provider/connection/model in `x-omniroute-served-by`
    gateway_served_by_header: bool = True
    source: str = "<memory>"
    #: the file's sha256, first 12 hex digits: which config a router runs
    version: str = ""
    #: the file's own mapping: a simulation writes it back aimed at its fakes
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def provider_specs(self) -> tuple[ProviderSpec, ...]:
        return tuple(p.spec() for p in self.providers.values())

    def reconfigure(self, router: Router, *, previous: RouterConfig | None = None,
                    seed: int = 0) -> ReloadSummary:
        """Swap this config into a running `router` (a reload, docs/design.md §13); the
        `reload` event it announces carries this config's version. `previous`: the
        config it replaces, for the changes the router does not see (a `base_url`)."""
        moved = () if previous is None else tuple(
            name for name, p in self.providers.items()
            if name in previous.providers and previous.providers[name].base_url != p.base_url)
        return router.reconfigure(
            self.provider_specs(), self.routes,
            models={name: frozenset(p.all_models) for name, p in self.providers.items()},
            max_attempts=self.settings.request.max_attempts,
            admission=self.settings.admission,
            jitter=Jitter(self.settings.jitter, random.Random(seed ^ 0x5EED)),
            version=self.version, also_changed=moved)

    def build(self, clock: Clock, *, bus: EventBus | None = None, seed: int = 0) -> Router:
        """An engine and a router for this config, reading time from `clock`."""
        engine = ResilienceEngine(self.provider_specs(), clock, bus=bus, seed=seed)
        return Router(
            engine, self.routes,
            max_attempts=self.settings.request.max_attempts,
            admission=self.settings.admission,
            jitter=Jitter(self.settings.jitter, random.Random(seed ^ 0x5EED)),
            models={name: frozenset(p.all_models) for name, p in self.providers.items()},
            seed=seed,
        )


def _identifier(src: Source, value: Any, path: Path, what: str) -> str | None:
    if isinstance(value, str) and _ID.fullmatch(value):
        return value
    reason = hidden_reason(value, "the name") if isinstance(value, str) else None
    src.problem(path, reason or f"{what} must be letters, digits, '_', '-' or '.', "
                                f"got {value!r}")
    return None


def _within(src: Source, count: int, path: Path, what: str) -> bool:
    """Whether `count` is within the cap on `what` (`MAX_COUNTS`); a problem if not."""
    limit = MAX_COUNTS[what]
    if count <= limit:
        return True
    src.problem(path, f"{count:,} {what.split()[0]}: at most {limit:,} {what}")
    return False


def _secret(src: Source, value: Any, path: Path, env: Mapping[str, str]) -> Secret | None:
    text = read_str(src, value, path)
    if text is None:
        return None
    match = _ENV_REF.match(text.strip())
    if match is None:
        value, where = text, "the key"
    else:
        name = match.group(1)
        if name not in env:
            src.problem(path, f"environment variable {name} is not set")
            return None
        value, where = env[name].strip(), f"${name}"
    if not value.isprintable():
        src.problem(path, f"{where} holds a line break or control character (it would be "
                          "sent in a header)")
        return None
    return Secret(value)


def _connections(
    src: Source, value: Any, path: Path, env: Mapping[str, str] | None,
    extra_fields: Mapping[str, Callable[[Source, Any, Path], Any]],
) -> tuple[ConnectionConfig, ...]:
    if not isinstance(value, list) or not value:
        src.problem(path, "expected a non-empty list of connections ({id, api_key} or bare ids)")
        return ()
    if not _within(src, len(value), path, "connections per provider"):
        return ()
    seen: set[str] = set()
    result = []
    for index, item in enumerate(value):
        where = path + (index,)
        if isinstance(item, str | int) and not isinstance(item, bool):
            item = {"id": str(item)}
        body = read_mapping(src, item, where)
        if body is None:
            continue
        reject_unknown(src, body, where, ("id", "api_key", "weight", "max_in_flight",
                                          *extra_fields))
        conn_id = _identifier(src, str(body.get("id", "")), where + ("id",), "a connection id")
        if conn_id is None:
            continue
        if conn_id in seen:
            src.problem(where + ("id",), f"connection {conn_id!r} is listed twice")
            continue
        seen.add(conn_id)
        secret = _secret(src, body["api_key"], where + ("api_key",), env) \
            if body.get("api_key") is not None and env is not None else None
        weight = _connection_weight(src, body["weight"], where + ("weight",)) \
            if "weight" in body else 1
        cap = (_whole_weight(src, body["max_in_flight"], where + ("max_in_flight",),
                             MAX_IN_FLIGHT) if "max_in_flight" in body else 0)
        extra = {key: reader(src, body[key], where + (key,))
                 for key, reader in extra_fields.items() if key in body}
        result.append(ConnectionConfig(conn_id, secret, weight, extra, cap))
    total = sum(c.weight for c in result)
    if total > MAX_ROTATION:
        src.problem(path, f"the connections' weights add up to {total:,}: at most "
                          f"{MAX_ROTATION:,} (a rotation is that many requests long)")
    return tuple(result)


def _connection_weight(src: Source, value: Any, path: Path) -> int:
    """A connection's `weight`: a whole number 1..MAX_ROTATION."""
    return _whole_weight(src, value, path, MAX_ROTATION)


def parse_providers(
    src: Source,
    value: Any,
    path: Path,
    patch: OverridePatch,
    *,
    env: Mapping[str, str] | None,
    extra_fields: Mapping[str, Callable[[Source, Any, Path], Any]] | None = None,
    connection_fields: Mapping[str, Callable[[Source, Any, Path], Any]] | None = None,
) -> dict[str, ProviderConfig]:
    """The `providers:` mapping; `extra_fields` (`connection_fields`) lets the simulator
    read e.g. `latency` of a provider (`limits` of a connection).

    With `env` None the keys are not read at all (a simulation against the config).
    """
    extra_fields = extra_fields or {}
    mapping = read_mapping(src, value, path)
    if mapping is None:
        return {}
    if not mapping:
        src.problem(path, "no providers: name at least one")
    if not _within(src, len(mapping), path, "providers"):
        return {}
    providers: dict[str, ProviderConfig] = {}
    for name, body in mapping.items():
        where = path + (str(name),)
        provider_id = _identifier(src, name, where, "a provider name")
        body = read_mapping(src, body, where)
        if provider_id is None or body is None:
            continue
        reject_unknown(src, body, where, (*PROVIDER_FIELDS, *extra_fields))
        auth = AuthKind.APIKEY
        if "auth" in body:
            try:
                auth = AuthKind(body["auth"])
            except ValueError:
                src.problem(where + ("auth",), f"expected apikey or oauth, got {body['auth']!r}")
        settings = patch.apply(default_settings(auth))
        if "resilience" in body:
            settings = parse_overrides(src, body["resilience"], where + ("resilience",)).apply(
                settings
            )
        validate_settings(src, settings, where + ("resilience",))
        embedding_models: tuple[str, ...] = ()
        if "embedding_models" in body:
            embedding_models = _models(src, body["embedding_models"],
                                       where + ("embedding_models",))
        models = (_models(src, body.get("models"), where + ("models",))
                  if "models" in body or not embedding_models else ())
        for index, name in enumerate(embedding_models):
            if name in models:
                src.problem(where + ("embedding_models", index),
                            f"model {name!r} is in models too: a model serves the text "
                            "endpoints or embeddings, not both")
        api = parse_api(src, body, where)
        per_model = (read_bool(src, body["per_model_quota"], where + ("per_model_quota",))
                     if "per_model_quota" in body else False)
        base_url = (read_str(src, body["base_url"], where + ("base_url",))
                    if body.get("base_url") is not None else None)
        connections = _connections(src, body.get("connections"), where + ("connections",), env,
                                   connection_fields or {})
        extra = {key: reader(src, body[key], where + (key,))
                 for key, reader in extra_fields.items() if key in body}
        max_in_flight = (_whole_weight(src, body["max_in_flight"], where + ("max_in_flight",),
                                       MAX_IN_FLIGHT) if "max_in_flight" in body else 0)
        max_queued = (_whole_number(src, body["max_queued"], where + ("max_queued",),
                                    MAX_QUEUED) if "max_queued" in body else DEFAULT_MAX_QUEUED)
        providers[provider_id] = ProviderConfig(
            name=provider_id, auth=auth, models=models, connections=connections,
            settings=settings, per_model_quota=bool(per_model), base_url=base_url, extra=extra,
            api=api, embedding_models=embedding_models, max_in_flight=max_in_flight,
            max_queued=max_queued,
        )
    _within(src, sum(len(p.connections) for p in providers.values()), path,
            "connections in all")
    return providers


def _models(src: Source, value: Any, path: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        src.problem(path, "expected a non-empty list of model names")
        return ()
    if not _within(src, len(value), path, "models per provider"):
        return ()
    models = []
    for index, item in enumerate(value):
        name = read_name(src, item, path + (index,))
        if name is not None:
            if name in models:
                src.problem(path + (index,), f"model {name!r} is listed twice")
            models.append(name)
    return tuple(models)


def parse_routes(
    src: Source, value: Any, path: Path, providers: Mapping[str, ProviderConfig]
) -> dict[str, Route]:
    mapping = read_mapping(src, value, path) or {}
    routes: dict[str, Route] = {}
    if not _within(src, len(mapping), path, "routes"):
        return routes
    for name, body in mapping.items():
        where = path + (str(name),)
        if read_name(src, str(name), where) is None:
            continue
        body = read_mapping(src, body, where)
        if body is None:
            continue
        reject_unknown(src, body, where,
                       ("strategy", "targets", "fallback_wait", "first_token",
                        "stream_resume"))
        fallback_wait = 0
        if "fallback_wait" in body:
            fallback_wait = read_duration(src, body["fallback_wait"],
                                          where + ("fallback_wait",),
                                          longest_ms=MAX_FALLBACK_WAIT_MS) or 0
        stream_resume = ("stream_resume" in body
                         and _stream_resume(src, body["stream_resume"],
                                            where + ("stream_resume",)))
        route_first_token = (read_first_token(src, body["first_token"], where + ("first_token",))
                             if "first_token" in body else None)
        strategy: Strategy | None = DEFAULT_STRATEGY  # None: unreadable, said so
        if "strategy" in body:
            try:
                strategy = Strategy(body["strategy"])
            except (ValueError, TypeError):
                src.problem(where + ("strategy",), f"expected one of {STRATEGY_NAMES}, got "
                                                   f"{_shown(body['strategy'])}")
                strategy = None
        targets_raw = body.get("targets")
        if not isinstance(targets_raw, list) or not targets_raw:
            src.problem(where + ("targets",), "expected a non-empty list of provider/model")
            continue
        if not _within(src, len(targets_raw), where + ("targets",), "targets per route"):
            continue
        targets: list[Target] = []
        weights: list[int] = []
        for index, item in enumerate(targets_raw):
            at = where + ("targets", index)
            weight = 1
            first_token = route_first_token
            if isinstance(item, dict):
                reject_unknown(src, item, at, ("target", "weight", "first_token"))
                if "weight" in item:
                    weight = _weight(src, item["weight"], at + ("weight",), strategy,
                                     "strategy" in body)
                if "first_token" in item:
                    first_token = read_first_token(src, item["first_token"],
                                                   at + ("first_token",))
                item = item.get("target")
                at = at + ("target",)
            target = _target(src, item, at, providers, first_token)
            if target is not None and any(str(t) == str(target) for t in targets):
                # the walk would ask it twice, least_busy draw it twice
                src.problem(at, f"target {target} is listed twice")
            elif target is not None:
                targets.append(target)
                weights.append(weight)
        routes[str(name)] = Route(str(name), tuple(targets), strategy or DEFAULT_STRATEGY,
                                  None if all(w == 1 for w in weights) else tuple(weights),
                                  fallback_wait, stream_resume)
    return routes


def _stream_resume(src: Source, value: Any, path: Path) -> bool:
    """A route's `stream_resume`: `continue`, or `off` (YAML's `off` is false)."""
    if value == "continue":
        return True
    if value is False or value == "off":
        return False
    src.problem(path, f"expected continue or off, got {_shown(value)}")
    return False


STRATEGY_NAMES = ", ".join(s.value for s in Strategy)
#: a route's `fallback_wait` at most: past a minute, the fallback is the better answer
MAX_FALLBACK_WAIT_MS = 60_000
#: a target's weight at most: its share is weight / total, and a decision costs the same
MAX_WEIGHT = 1_000_000


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**39:
        return f"a number of {len(str(abs(value))):,} digits"  # not its first 40, as if all
    return repr(value)[:40] if isinstance(value, str | int | float) else type(value).__name__


def _weight(src: Source, value: Any, path: Path, strategy: Strategy | None, named: bool
            ) -> int:
    """A target's `weight`: a whole number 1..MAX_WEIGHT, and only under `weighted` (a
    weight another strategy would ignore is refused: it would mislead the reader). Under
    a strategy that could not be read (None) only the number is checked."""
    if strategy is not Strategy.WEIGHTED and strategy is not None:
        src.problem(path, f"a weight is read only by strategy weighted; this route's is "
                          f"{strategy.value}{'' if named else ' (it names none)'} (write "
                          "strategy: weighted, or drop the weight)")
        return 1
    return _whole_weight(src, value, path, MAX_WEIGHT)


def _whole_number(src: Source, value: Any, path: Path, largest: int, least: int = 0) -> int:
    """A whole number least..largest (not a bool); `least` after a problem."""
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= largest:
        src.problem(path, f"expected a whole number from {least} to {largest:,}, got "
                          f"{_shown(value)}")
        return least
    return value


def _whole_weight(src: Source, value: Any, path: Path, largest: int) -> int:
    """A whole number 1..largest (not a bool); 1 after a problem."""
    return _whole_number(src, value, path, largest, 1)


def _target(
    src: Source, value: Any, path: Path, providers: Mapping[str, ProviderConfig],
    first_token_ms: int | None = None,
) -> Target | None:
    if not isinstance(value, str) or value.count("/") < 1:
        src.problem(path, f"expected provider/model or {{target: provider/model, weight: N}}, "
                          f"got {_shown(value)}")
        return None
    provider, _, model = value.partition("/")
    config = providers.get(provider)
    if config is None:
        known = ", ".join(providers) or "none"
        src.problem(path, f"unknown provider {provider!r} (providers: {known})")
        return None
    if model not in config.all_models:
        src.problem(path, f"provider {provider!r} has no model {model!r} "
                          f"(models: {', '.join(config.all_models)})")
        return None
    return Target(provider, model, first_token_ms)


def load_router_config(
    path: str | FsPath, *, text: str | None = None, env: Mapping[str, str] | None = None,
    read_keys: bool = True,
) -> RouterConfig:
    """Load and validate a router config; raises ConfigError listing every problem.

    `read_keys=False` skips the keys and the environment they name: a simulation stands
    fakes in for every provider and never needs them.
    """
    src = load_source(path, text=text, precheck=check_counts)
    data = src.data
    reject_unknown(src, data, (), ("providers", "routes", "resilience", "store", "gateway"))
    patch = parse_overrides(src, data.get("resilience", {}), ("resilience",))
    settings = patch.apply(default_settings())
    validate_settings(src, settings, ("resilience",))
    if "providers" not in data:
        src.problem((), "missing field: providers")
    providers = parse_providers(src, data.get("providers", {}), ("providers",), patch,
                                env=None if not read_keys else os.environ if env is None
                                else env)
    routes = parse_routes(src, data.get("routes", {}), ("routes",), providers)
    store_path = store_redis = listen = token_file = None
    prefix = "omniroute"
    lease_max = 10_000
    retention = StoreRetention()
    limits = GatewayLimits()
    operators = OperatorTokens()
    clients = ClientKeys()
    clients_file = None
    metrics = MetricsAccess.TOKEN
    served_by_header = True
    if "store" in data and (store := read_mapping(src, data["store"], ("store",))) is not None:
        if "events" in store:  # the earlier release's one log of every event
            src.problem(("store", "events"), "state changes and per-request events are kept "
                        "apart now: write store.requests.max_events (what omniroute-sim "
                        "record reads) and store.history.max_events")
        reject_unknown(src, {k: v for k, v in store.items() if k != "events"}, ("store",),
                       ("path", "redis", "prefix", "lease_max", *RETENTION_FIELDS))
        retention = parse_retention(src, store, ("store",))
        if "path" in store:
            store_path = read_str(src, store["path"], ("store", "path"))
        if "redis" in store:
            store_redis = _read_redis(src, store["redis"], ("store", "redis"))
            if store_path is not None:
                src.problem(("store", "redis"), "a fleet keeps its state in Redis: give "
                                                "store.path (one router) or store.redis")
        if "prefix" in store:
            prefix = read_str(src, store["prefix"], ("store", "prefix")) or prefix
        if "lease_max" in store:
            lease_max = read_duration(src, store["lease_max"], ("store", "lease_max"),
                                      positive=True, longest_ms=3_600_000) or lease_max
    if "gateway" in data and (gw := read_mapping(src, data["gateway"], ("gateway",))) is not None:
        reject_unknown(src, gw, ("gateway",), ("listen", "token_file", "limits", "metrics",
                                               "served_by_header", "operators", "clients"))
        if "served_by_header" in gw:
            served_by_header = _on_or_off(src, gw["served_by_header"],
                                          ("gateway", "served_by_header"))
        if "operators" in gw:
            operators = parse_operators(src, gw["operators"], ("gateway", "operators"))
        if "clients" in gw:
            value = gw["clients"]
            if isinstance(value, str):
                clients_file = str(_beside(src, value))
                clients = _clients_file(src, clients_file)
            else:
                clients = parse_clients(src, value, ("gateway", "clients"))
            _check_client_routes(src, clients, routes, providers)
        if "metrics" in gw:
            metrics = _metrics_access(src, gw["metrics"], ("gateway", "metrics"))
        if "limits" in gw:
            limits = parse_limits(src, gw["limits"], ("gateway", "limits"))
        if "listen" in gw:
            listen = read_str(src, gw["listen"], ("gateway", "listen"))
        if "token_file" in gw:
            token_file = read_str(src, gw["token_file"], ("gateway", "token_file"))
    src.raise_if_problems()
    return RouterConfig(
        providers=providers, routes=routes, settings=settings, store_path=store_path,
        store_redis=store_redis, store_prefix=prefix, store_lease_max_ms=lease_max,
        store_retention=retention,
        gateway_listen=listen, gateway_token_file=token_file, gateway_operators=operators,
        gateway_clients=clients, gateway_clients_file=clients_file, gateway_limits=limits,
        gateway_metrics=metrics, gateway_served_by_header=served_by_header,
        source=src.name, version=src.version, raw=data,
    )


def _beside(src: Source, value: str) -> FsPath:
    """A file the config names: as written when absolute, else beside the config."""
    name = FsPath(value)
    return name if name.is_absolute() else FsPath(src.name).parent / name


def _clients_file(src: Source, name: str) -> ClientKeys:
    """`gateway.clients: <file>`: the tenants in a YAML file of their own, read again
    with the config on every reload; its problems name it."""
    try:
        clients_src = load_source(name)
    except ConfigError as exc:
        src.problems.extend(exc.problems)
        return ClientKeys()
    clients = parse_clients(clients_src, clients_src.data, ())
    src.problems.extend(clients_src.problems)
    return clients


def _check_client_routes(src: Source, clients: ClientKeys, routes: Mapping[str, Route],
                         providers: Mapping[str, ProviderConfig]) -> None:
    """Each name a tenant may use is a route or a declared provider/model: a typo would
    refuse the tenant's requests without saying why."""
    for tenant in clients.tenants.values():
        for name in sorted(tenant.routes or ()):
            provider, _, model = name.partition("/")
            if name not in routes and model not in (
                    providers[provider].all_models if provider in providers else ()):
                src.problem(("gateway", "clients", tenant.name, "routes"),
                            f"{name!r} is neither a route nor a provider/model of the config")


def _metrics_access(src: Source, value: Any, path: Path) -> MetricsAccess:
    """`gateway.metrics`: token, public or off (a problem otherwise: the default stands).
    YAML reads an unquoted `off` as false: that is off too."""
    if value is False:
        return MetricsAccess.OFF
    if isinstance(value, str) and value in MetricsAccess._value2member_map_:
        return MetricsAccess(value)
    src.problem(path, f"expected token (the management token is asked, the default), "
                      f"public (no token asked) or off (not served), got "
                      f"{repr(value)[:40] if isinstance(value, str) else type(value).__name__}")
    return MetricsAccess.TOKEN


def _on_or_off(src: Source, value: Any, path: Path) -> bool:
    """`on` or `off` (YAML reads them unquoted as true and false): on unless said."""
    if isinstance(value, bool):
        return value
    if value in ("on", "off"):
        return bool(value == "on")
    src.problem(path, f"expected on or off, got "
                      f"{repr(value)[:40] if isinstance(value, str) else type(value).__name__}")
    return True


def _read_redis(src: Source, value: Any, path: Path) -> str | None:
    """`store.redis`: a URL (redis://, rediss://, unix://, redis+sentinel://) or a
    Sentinel group as a mapping, read as its `redis+sentinel://` URL."""
    if not isinstance(value, dict):
        url = read_str(src, value, path)
        if url is None:
            return None
        try:
            parse_redis_url(url)
        except ValueError as exc:
            src.problem(path, str(exc))
            return None
        return url
    reject_unknown(src, value, path, ("sentinels", "service", "db", "password"))
    sentinels: list[tuple[str, int]] = []
    listed = value.get("sentinels")
    if not isinstance(listed, list) or not listed:
        src.problem(path + ("sentinels",), "expected a list of HOST:PORT, the sentinels "
                    "to ask for the master")
        listed = []
    for i, item in enumerate(listed):
        address = read_str(src, item, path + ("sentinels", i))
        if address is not None:
            try:
                sentinels.append(parse_sentinel_address(address))
            except ValueError as exc:
                src.problem(path + ("sentinels", i), str(exc))
    service = None
    if "service" not in value:
        src.problem(path + ("service",), "missing field: the master's name in Sentinel "
                    "(its `sentinel monitor NAME ...`)")
    else:
        service = read_str(src, value["service"], path + ("service",))
    db = read_int(src, value["db"], path + ("db",)) if "db" in value else 0
    password = (read_str(src, value["password"], path + ("password",))
                if "password" in value else None)
    if len(sentinels) != len(listed) or service is None or db is None or (
            "password" in value and password is None):
        return None
    return SentinelTarget(tuple(sentinels), service, db, None, password).to_url()
