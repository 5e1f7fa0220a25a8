"""`omniroute-gateway`: the router and its gateway, headless, for production and tests."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..clock import SystemClock
from ..config import ConfigError, MetricsAccess, load_router_config
from ..config.status import ConfigStatus
from ..config.token import TOKEN_ENV, TokenError, load_token
from ..store import Recovery, SqliteStore, StoreError
from .app import Gateway
from .server import GatewayServer, parse_listen

__all__ = ["main"]


_METRICS_SERVED = {
    MetricsAccess.TOKEN: "/metrics with the token",
    MetricsAccess.PUBLIC: "/metrics without a token (gateway.metrics: public)",
    MetricsAccess.OFF: "no /metrics",
}


def config_status(path: Path) -> ConfigStatus:
    """The config in force: its file, the hash of its bytes, and when it was loaded."""
    version = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return ConfigStatus(str(path), version, time.time_ns() // 1_000_000)


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
    return parser


async def _serve(args: argparse.Namespace) -> int:
    config = load_router_config(args.config)
    host, port = parse_listen(args.listen or config.gateway_listen or "127.0.0.1:4000")
    token = load_token(args.token_file or config.gateway_token_file)
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
        await link.attach(router.engine, router.models)
    if db:
        store = await SqliteStore.open(
            db, recover=Recovery.SET_ASIDE if args.db_recover == "set-aside" else Recovery.FAIL,
            retention=config.store_retention)
        if store.set_aside_from is not None:
            print(f"the bad database was kept as {store.set_aside_from}", file=sys.stderr)
        await store.attach(router.engine)
    gateway = Gateway(router, config.providers, token=token, store=store,
                      limits=config.gateway_limits, fleet=link,
                      metrics=config.gateway_metrics, config_status=config_status(args.config))
    server = GatewayServer(gateway, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        management = "with the management API" if token else (
            f"WITHOUT the management API (no token: give --token-file or ${TOKEN_ENV})")
        print(f"omniroute-gateway on {server.url} {management}; "
              f"{_METRICS_SERVED[gateway.metrics_access]}", flush=True)
        await stop.wait()
    finally:
        await server.stop()
        if store is not None:
            # one last bounded write; what could not be written is logged
            await store.close(timeout_s=3)
        if link is not None:
            await link.close()
    print("omniroute-gateway stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_serve(args))
    except (ConfigError, StoreError, TokenError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
