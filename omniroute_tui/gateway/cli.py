"""`omniroute-gateway`: the router and its gateway, headless, for production and tests."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from ..clock import SystemClock
from ..config import ConfigError, MetricsAccess, load_router_config
from ..config.clients import ClientKeys
from ..config.operators import OperatorTokens
from ..config.token import TOKEN_ENV, TokenError, load_token
from ..logs import add_log_arguments, configure_logging
from ..store import Recovery, SqliteStore, StoreError
from ..tracing import RequestTracing, tracing_from_env
from .app import Gateway
from .server import GatewayServer, parse_listen

__all__ = ["main"]

log = logging.getLogger("omniroute.gateway")


_METRICS_SERVED = {
    MetricsAccess.TOKEN: "/metrics with the token",
    MetricsAccess.PUBLIC: "/metrics without a token (gateway.metrics: public)",
    MetricsAccess.OFF: "no /metrics",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omniroute-gateway",
        description="Serve the router as an OpenAI-compatible gateway with a management API.")
    parser.add_argument("--config", type=Path, required=True, help="the router config file")
    parser.add_argument("--listen", default=None,
                        help="HOST:PORT (default: the config's gateway.listen, else "
                             "127.0.0.1:4000)")
    parser.add_argument("--db", default=None,
                        help="the state database (default: the config's store.path; none: "
                             "state lives in memory)")
    parser.add_argument("--db-recover", choices=("fail", "set-aside"), default="fail",
                        help="a corrupt database: refuse (default) or set it aside and "
                             "start empty")
    parser.add_argument("--redis", default=None, metavar="URL",
                        help="share state with the other replicas of a fleet through this "
                             "Redis: redis://HOST:PORT/DB, or behind Sentinel "
                             "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] "
                             "(default: the config's store.redis)")
    parser.add_argument("--token-file", default=None,
                        help=f"the management API's bearer token (or ${TOKEN_ENV}); without "
                             "one the management API is not served")
    add_log_arguments(parser)
    return parser


async def _serve(args: argparse.Namespace) -> int:
    config = load_router_config(args.config)
    host, port = parse_listen(args.listen or config.gateway_listen or "127.0.0.1:4000")
    token_file = args.token_file or config.gateway_token_file
    token = load_token(token_file)
    router = config.build(SystemClock())
    db = args.db or config.store_path
    redis_url = args.redis or config.store_redis
    if db and redis_url:
        raise ValueError("a fleet keeps its state in Redis: give --db (one router) or "
                         "--redis, not both")
    store = link = None
    if redis_url:
        from ..fleet.redis_link import RedisLink

        try:
            link = RedisLink(redis_url, prefix=config.store_prefix,
                             lease_max_ms=config.store_lease_max_ms)
        except ValueError as exc:
            raise ValueError(f"--redis: {exc}") from None
    # before anything is opened: a tracing variable that cannot be used stops the start
    tracing = tracing_from_env(os.environ, router.engine,
                               replica=link.replica if link is not None else None)
    if link is not None:
        await link.attach(router.engine, router.models)
    if db:
        store = await SqliteStore.open(
            db, recover=Recovery.SET_ASIDE if args.db_recover == "set-aside" else Recovery.FAIL,
            retention=config.store_retention)
        if store.set_aside_from is not None:
            log.warning("the bad database was kept as %s", store.set_aside_from)
        await store.attach(router.engine)
    gateway = Gateway(router, config.providers, token=token, store=store,
                      limits=config.gateway_limits, fleet=link, config=config,
                      metrics=config.gateway_metrics, token_file=token_file,
                      served_by_header=config.gateway_served_by_header, tracing=tracing)
    stop = asyncio.Event()
    # a server that ends on its own (logged with its cause) ends the process, with 1: a
    # supervisor starts it again, where a process that lived on would answer nobody
    server = GatewayServer(gateway, host, port, on_end=lambda _: stop.set())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[object]] = set()  # held: the loop keeps only weak references

    def reload_on_hangup() -> None:
        """`SIGHUP`: read the config file again (the outcome is logged and audited)."""
        assert gateway.reloader is not None
        task = loop.create_task(gateway.reloader.reload("SIGHUP"), name="omniroute-reload")
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    hangup = getattr(signal, "SIGHUP", None)
    if hangup is not None:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(hangup, reload_on_hangup)
    try:
        await server.start()
        management = _management(gateway.operators)
        print(f"omniroute-gateway on {server.url} {management}; "
              f"{_METRICS_SERVED[gateway.metrics_access]}; {_traced(tracing)}; "
              f"{_client_keys(gateway.clients.clients, link is not None)}", flush=True)
        await stop.wait()
    finally:
        await server.stop()
        if store is not None:
            # one last bounded write; what could not be written is logged
            await store.close(timeout_s=3)
        if link is not None:
            await link.close()
        if tracing is not None:  # the spans batched, sent within the exporter's timeout
            await tracing.aclose()
    if server.listener.failure is not None:
        print(f"omniroute-gateway stopped: {server.listener.failure}", flush=True)
        return 1
    print("omniroute-gateway stopped", flush=True)
    return 0


def _client_keys(clients: ClientKeys, fleet: bool) -> str:
    """What the start line says of who may send requests."""
    if not clients:
        return "client keys off: anyone who reaches the port may send requests"
    count = len(clients.tenants)
    where = "in Redis, fleet-wide" if fleet else "in memory"
    return (f"client keys on: {count} tenant{'s' if count != 1 else ''}, their limits "
            f"counted {where}")


def _traced(tracing: RequestTracing | None) -> str:
    """How the start line says where traces go (the endpoint without credentials)."""
    if tracing is None:
        return "no traces (set OTEL_EXPORTER_OTLP_ENDPOINT to send them)"
    endpoint = urlsplit(tracing.exporter.settings.endpoint)
    where = f"{endpoint.scheme}://{endpoint.hostname}" + (
        f":{endpoint.port}" if endpoint.port else "") + endpoint.path
    return f"traces to {where} (OTLP)"


def _management(operators: OperatorTokens) -> str:
    """How the start line says who may use the management API."""
    if not operators:
        return (f"WITHOUT the management API (no token: give --token-file or ${TOKEN_ENV}, "
                "or gateway.operators)")
    tokens = [f"{len(operators.by_digest)} named operator(s)"] if operators.by_digest else []
    if operators.single is not None:
        tokens.append("the single token")
    return f"with the management API ({' and '.join(tokens)})"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    try:
        return asyncio.run(_serve(args))
    except (ConfigError, StoreError, TokenError, ValueError, OSError) as exc:
        _refused(args.log_format, exc)
        return 2
    except KeyboardInterrupt:
        return 130


def _refused(log_format: str, exc: Exception) -> None:
    """Why the gateway cannot start: `error: ...` on stderr, or with JSON logs one error
    line (the whole list of a config's problems in its `msg`)."""
    if log_format == "json":
        log.error("%s", exc)
    else:
        print(f"error: {exc}", file=sys.stderr)
