"""Gateway overhead on loopback: the same fake provider called directly and through the
gateway, alternating request by request (the direct call is the baseline), then the
gateway's throughput with 32 concurrent clients. Target: <= 0.6 ms median overhead.

The same gateway with its metrics on (`gateway: {metrics: public}`: every request counted
from the events for `GET /metrics`) runs in the same rounds: its CPU per request against the
one without metrics is what counting costs (target: within 5 %).

With `--stream` every request asks for a stream (`"stream": true`: the fake sends the role,
a token a word, the finish and `[DONE]`, 20 to 40 events) and is read to its end: what the
gateway's relay costs per streamed request, the events decoded and looked at one by one
(docs/gateway.md, "Streams"); with `--baseline` against the tree before, in the same
rounds (target: within 5 %).

With `--tracing`, a gateway exporting OpenTelemetry traces (`OTEL_EXPORTER_OTLP_ENDPOINT`: a
span per request and one per attempt, batched and sent over OTLP/HTTP) to a local receiver
(`python -m simulator.otlp_receiver`, its own process) runs in the same rounds, with metrics
off and with them on: its CPU per request against the same gateway without is what tracing
costs (target: within 5 %).

With `--client-keys`, a gateway asking for client keys (`gateway.clients`: one tenant with
every limit set, far above the load, so each request is identified and checked against its
requests and tokens a minute and a day) runs in the same rounds, and one more that counts
them in Redis as a fleet does (`store.redis`: 127.0.0.1:6379, under a prefix of its own,
deleted after; left out when no Redis answers) beside the same fleet replica without keys:
their CPU per request against the same gateway without keys is what the door costs.

A further gateway, the same but with aiohttp's client for its upstream calls
(`aiohttp_upstream.py`), is measured in the same rounds: docs/gateway.md says why the gateway
keeps its own client, with these numbers. With `--baseline TREE`, a third one runs from
another checkout of the source (say `git worktree add /tmp/base main`), in the same
rounds too: a change to the request path is judged by its CPU per request against that
baseline on the same machine at the same time. The fake and each gateway run in their
own process, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

SCENARIO = """\
name: overhead
duration: 1h
providers:
  fake: {models: [m], latency: 0ms, connections: [{id: k, api_key: sk-bench-key-0001}]}
routes:
  chat: {targets: [fake/m]}
"""
BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
#: the client key every request carries (a gateway without client keys ignores it)
CLIENT_KEY = "sk-bench-client-0001"
REDIS_URL = "redis://127.0.0.1:6379/0"


#: where the running Python's console scripts are (the venv's bin)
BIN = Path(sys.executable).parent


def fakes_process(scenario: Path, config: Path) -> subprocess.Popen[bytes]:
    """The simulator's fakes of `scenario`, in their own process, for an hour; they write
    the router config that points at them to `config` (`wait_for_file`)."""
    return subprocess.Popen([str(BIN / "omniroute-sim"), "serve", str(scenario), "--for", "1h",
                             "--config-out", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def gateway_process(config: Path, port: int, *options: str, token: str = "",
                    env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`omniroute-gateway` for `config` on 127.0.0.1:`port`, quiet, its management token
    `token` (none: no management API), with `env` added to the environment."""
    return subprocess.Popen(
        [str(BIN / "omniroute-gateway"), "--config", str(config), "--listen",
         f"127.0.0.1:{port}", *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "OMNIROUTE_TOKEN": token, **(env or {})})


def client_key_gateways(folder: Path, data: dict[str, Any], ports: dict[str, int],
                        pids: dict[str, int], procs: list[subprocess.Popen[bytes]],
                        log_format: str) -> str | None:
    """Start the gateways asking for client keys (in memory; in Redis when one answers);
    returns the Redis key prefix used, to delete after."""
    import hashlib
    import uuid

    import redis

    huge = 10 ** 9
    clients = {"bench": {"keys": [hashlib.sha256(CLIENT_KEY.encode()).hexdigest()],
                         "rpm": huge, "tpm": huge, "tokens_per_day": huge}}
    configs = {"keys": {**data, "gateway": {**(data.get("gateway") or {}),
                                            "clients": clients}}}
    prefix = None
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        fleet = {"redis": REDIS_URL, "prefix": prefix}
        configs["fleet"] = {**data, "store": fleet}  # the same replica, without keys
        configs["keys_redis"] = {**configs["keys"], "store": fleet}
    except redis.RedisError as exc:
        print(f"no Redis at {REDIS_URL} ({exc}): client keys counted in memory only")
    for name, config in configs.items():
        path = folder / f"router-{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        ports[name] = free_port()
        procs.append(gateway_process(path, ports[name], "--log-format", log_format))
        pids[name] = procs[-1].pid
    return prefix


def forget_redis_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_up(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def wait_for_file(path: Path, timeout_s: float = 30) -> None:
    """Until a process started before has written `path` (a fake's --config-out)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Ctrl-C each process still running, the last started first; kill one that hangs."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _whole(reply: httpx.Response, stream: bool) -> bool:
    """A 200 with the whole answer: a stream's ends with `[DONE]`."""
    return reply.status_code == 200 and (not stream or reply.content.endswith(
        b"data: [DONE]\n\n"))


async def latencies(direct: str, gateways: dict[str, str], count: int, body: dict[str, Any],
                    block: int = 1) -> dict[str, list[float]]:
    """Milliseconds per request: `direct`, then each gateway, in turn, `block` requests at a
    time (a stream's until its last byte). The gateways' order is shuffled each turn
    (seeded): a process that runs right after one running the same code finds the CPU's
    caches warm for it, and a fixed order would favour some gateways by a few points of
    CPU. A block of one is every process cold at every request; a larger block is each
    gateway serving a run of requests, warm, as under steady traffic."""
    result: dict[str, list[float]] = {"direct": [], **{name: [] for name in gateways}}
    order = list(gateways.items())
    shuffle = random.Random(1).shuffle
    headers = {"authorization": "Bearer sk-bench-key-0001"}
    stream = bool(body.get("stream"))
    async with httpx.AsyncClient(timeout=10) as http:
        for first in range(0, count + 50, block):
            shuffle(order)
            for name, url in [("direct", ""), *order]:
                for i in range(first, min(first + block, count + 50)):
                    start = time.perf_counter()
                    if name == "direct":
                        reply = await http.post(f"{direct}/chat/completions",
                                                json=dict(body, model="m"), headers=headers)
                    else:
                        reply = await http.post(
                            f"{url}/v1/chat/completions", json=body,
                            headers={"authorization": f"Bearer {CLIENT_KEY}"})
                    took = (time.perf_counter() - start) * 1000
                    assert _whole(reply, stream), (name, reply.text)
                    if i >= 50:  # warm-up done
                        result[name].append(took)
    return result


def kind_of(name: str) -> str:
    """A gateway's kind: `tracing@2`, the second of `--processes`, is a `tracing`."""
    return name.split("@")[0]


def scraped_requests(gateway: str) -> int:
    """The answered requests a gateway's `/metrics` counted (all routes, all classes)."""
    text = httpx.get(f"{gateway}/metrics", timeout=10).text
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith("omniroute_requests_total{")))


async def serve_with_aiohttp(config_path: str, port: int) -> None:
    """A gateway like `omniroute-gateway`'s, its upstream calls made with aiohttp."""
    sys.path.insert(0, str(Path(__file__).parent))
    from aiohttp_upstream import AiohttpPool

    from omniroute_tui.clock import SystemClock
    from omniroute_tui.config import load_router_config
    from omniroute_tui.drivers import UpstreamClient
    from omniroute_tui.gateway import Gateway, GatewayServer

    config = load_router_config(config_path)
    gateway = Gateway(config.build(SystemClock()), config.providers, token=None,
                      client=UpstreamClient(pool=AiohttpPool()))
    server = GatewayServer(gateway, "127.0.0.1", port)
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await server.stop()


async def throughput(gateway: str, clients: int, seconds: float, body: dict[str, Any]
                     ) -> tuple[int, int]:
    done = errors = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients)
    stream = bool(body.get("stream"))
    async with httpx.AsyncClient(timeout=10, limits=limits) as http:
        async def one() -> None:
            nonlocal done, errors
            while time.monotonic() < deadline:
                reply = await http.post(f"{gateway}/v1/chat/completions", json=body)
                if _whole(reply, stream):
                    done += 1
                else:
                    errors += 1
        await asyncio.gather(*(one() for _ in range(clients)))
    return done, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure the sequential requests this many times, each round's "
                             "CPU a request printed (a shared machine's noise: the median)")
    parser.add_argument("--block", type=int, default=1,
                        help="requests each gateway serves in a row before the next one's "
                             "turn (1: every request to a cold process; 50: each warm, as "
                             "under steady traffic)")
    parser.add_argument("--processes", type=int, default=1,
                        help="gateways of each kind (plain, metrics, tracing), their CPU a "
                             "request averaged: one process can be a few points cheaper or "
                             "dearer than its twin in every round, which rounds do not "
                             "average out")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--baseline", metavar="TREE", type=Path,
                        help="also measure a gateway run from this checkout's source")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="the gateway's log lines (an access line per request, to "
                             "/dev/null)")
    parser.add_argument("--rate-limit-headers", action="store_true",
                        help="the fake answers with x-ratelimit-* headers, as OpenAI's and "
                             "Anthropic's do (limits far above the load: never a 429)")
    parser.add_argument("--stream", action="store_true",
                        help="every request asks for a stream and reads it to its end")
    parser.add_argument("--tracing", action="store_true",
                        help="also measure a gateway exporting traces to a local receiver")
    parser.add_argument("--client-keys", action="store_true",
                        help="also measure gateways asking for client keys: counting in "
                             "memory, and in Redis")
    parser.add_argument("--serve-aiohttp", nargs=2, metavar=("CONFIG", "PORT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_aiohttp:
        asyncio.run(serve_with_aiohttp(args.serve_aiohttp[0], int(args.serve_aiohttp[1])))
        return
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "overhead.yaml"
        scenario.write_text(SCENARIO if not args.rate_limit_headers else SCENARIO.replace(
            "latency: 0ms,", "latency: 0ms, limits: {rpm: 1000000, tpm: 100000000},"))
        config = Path(folder) / "router.yaml"
        procs = [fakes_process(scenario, config)]
        try:
            wait_for_file(config)
            direct = yaml.safe_load(config.read_text())["providers"]["fake"]["base_url"]
            with_metrics = Path(folder) / "router-metrics.yaml"
            data = yaml.safe_load(config.read_text())
            data["gateway"] = {**(data.get("gateway") or {}), "metrics": "public"}
            with_metrics.write_text(yaml.safe_dump(data))
            ports: dict[str, int] = {}
            pids: dict[str, int] = {}

            def start(name: str, path: Path, traced: Mapping[str, str] | None = None) -> None:
                """`--processes` gateways of one kind: `name`, `name@2`, ..."""
                for k in range(1, args.processes + 1):
                    key = name if k == 1 else f"{name}@{k}"
                    ports[key] = free_port()
                    procs.append(gateway_process(path, ports[key], "--log-format",
                                                 args.log_format, env=traced))
                    pids[key] = procs[-1].pid

            env = {**os.environ, "OMNIROUTE_TOKEN": ""}
            start("gateway", config)
            start("metrics", with_metrics)
            ports["aiohttp"] = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--serve-aiohttp", str(config),
                 str(ports["aiohttp"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env))
            pids["aiohttp"] = procs[-1].pid
            if args.baseline is not None:
                ports["baseline"] = free_port()
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", "import sys; from omniroute_tui.gateway.cli "
                     "import main; sys.exit(main())", "--config", str(config), "--listen",
                     f"127.0.0.1:{ports['baseline']}"], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**env, "PYTHONPATH": str(args.baseline.resolve())}))
                pids["baseline"] = procs[-1].pid
            spans = Path(folder) / "spans.jsonl"
            if args.tracing:
                receiver = free_port()
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "simulator.otlp_receiver", "--port", str(receiver),
                     "--out", str(spans)], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))
                traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver}",
                          "OTEL_SERVICE_NAME": "bench"}
                start("tracing", config, traced)
                start("tracing_metrics", with_metrics, traced)
            redis_prefix = None
            if args.client_keys:
                redis_prefix = client_key_gateways(
                    Path(folder), yaml.safe_load(config.read_text()), ports, pids, procs,
                    args.log_format)
            gateways = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
            for url in gateways.values():
                wait_until_up(f"{url}/health")
            body = dict(BODY, stream=True) if args.stream else BODY
            ms: dict[str, list[float]] = {}
            rounds: list[dict[str, float]] = []  # CPU µs a request, each gateway, each round
            for _ in range(args.rounds):
                before = {name: cpu_s(pid) for name, pid in pids.items()}
                for name, values in asyncio.run(latencies(direct, gateways, args.requests,
                                                          body, args.block)).items():
                    ms.setdefault(name, []).extend(values)
                rounds.append({name: (cpu_s(pid) - before[name]) / (args.requests + 50) * 1e6
                               for name, pid in pids.items()})
            # each kind's figures: its processes' together
            kinds = list(dict.fromkeys(map(kind_of, pids)))
            per_process = {name: statistics.mean(r[name] for r in rounds) for name in pids}
            rounds = [{kind: statistics.mean(cpu for name, cpu in r.items()
                                             if kind_of(name) == kind) for kind in kinds}
                      for r in rounds]
            ms = {kind: [m for name, values in ms.items() if kind_of(name) == kind
                         for m in values] for kind in ["direct", *kinds]}
            cpu_us = {kind: statistics.mean(r[kind] for r in rounds) for kind in kinds}
            counted = scraped_requests(gateways["metrics"])
            if args.tracing:
                traced_procs = 2 * args.processes
                stop(procs[-traced_procs:])  # each gateway's exit sends its last batch
                del procs[-traced_procs:]
                time.sleep(1)
            done, errors = asyncio.run(throughput(gateways["gateway"], args.clients,
                                                  args.seconds, body))
        finally:
            stop(procs)
            if redis_prefix is not None:
                forget_redis_prefix(redis_prefix)
        spans_text = spans.read_text() if spans.exists() else ""
    d50, d99 = statistics.median(ms["direct"]), percentile(ms["direct"], 0.99)
    kind = "streamed requests" if args.stream else "requests"
    print(f"{args.requests} sequential {kind}, in turn direct / through each gateway"
          f"{f', {args.block} at a time' if args.block > 1 else ''}"
          f"{f', {args.processes} processes of each kind' if args.processes > 1 else ''}:")
    print(f"  direct:             median {d50:6.2f} ms   p99 {d99:6.2f} ms")
    labels = [("gateway", "gateway"), ("metrics", "gateway, metrics"),
              ("aiohttp", "gateway, aiohttp")]
    if "baseline" in ms:
        labels.append(("baseline", "gateway, baseline"))
    if "tracing" in ms:
        labels += [("tracing", "gateway, tracing"), ("tracing_metrics", "… and metrics")]
    labels += [(name, label) for name, label in (("keys", "gateway, client keys"),
                                                 ("fleet", "fleet replica"),
                                                 ("keys_redis", "… client keys"))
               if name in ms]
    for name, label in labels:
        t50, t99 = statistics.median(ms[name]), percentile(ms[name], 0.99)
        print(f"  {label + ':':18s}  median {t50:6.2f} ms   p99 {t99:6.2f} ms   "
              f"overhead {t50 - d50:5.2f} ms (p99 {t99 - d99:+.2f})   ratio {t50 / d50:.2f}   "
              f"CPU {cpu_us[name]:,.0f} µs a request")
    print(f"  metrics on against off: CPU {cpu_us['metrics']:,.0f} against "
          f"{cpu_us['gateway']:,.0f} µs a request "
          f"({cpu_us['metrics'] / cpu_us['gateway'] - 1:+.1%}; target within 5 %); "
          f"/metrics counted {counted:,} of the {(args.requests + 50) * args.rounds:,} "
          "requests sent")
    if "tracing" in ms:
        received = len(spans_text.splitlines())
        print(f"  tracing on against off: CPU {cpu_us['tracing']:,.0f} against "
              f"{cpu_us['gateway']:,.0f} µs a request "
              f"({cpu_us['tracing'] / cpu_us['gateway'] - 1:+.1%}); with metrics on in both: "
              f"{cpu_us['tracing_metrics']:,.0f} against {cpu_us['metrics']:,.0f} µs "
              f"({cpu_us['tracing_metrics'] / cpu_us['metrics'] - 1:+.1%}); target within "
              f"5 %; the receiver got {received:,} spans for {2 * args.processes} x "
              f"{(args.requests + 50) * args.rounds:,} requests")
        if args.rounds > 1:
            off = [r["tracing"] / r["gateway"] - 1 for r in rounds]
            on = [r["tracing_metrics"] / r["metrics"] - 1 for r in rounds]
            print(f"  each round: {', '.join(f'{x:+.1%}' for x in off)} (metrics off), "
                  f"{', '.join(f'{x:+.1%}' for x in on)} (on); medians "
                  f"{statistics.median(off):+.1%} and {statistics.median(on):+.1%}")
    for name, base, what in (("keys", "gateway", "client keys on against off"),
                             ("keys_redis", "fleet", "a fleet replica's client keys (in "
                              "Redis) against the same replica without")):
        if name in ms:
            print(f"  {what}: CPU {cpu_us[name]:,.0f} against {cpu_us[base]:,.0f} µs "
                  f"a request ({cpu_us[name] / cpu_us[base] - 1:+.1%}); median "
                  f"{statistics.median(ms[name]) - statistics.median(ms[base]):+.2f} ms")
    if args.processes > 1:
        print("  each process's CPU a request (µs): " + "; ".join(
            f"{kind} " + ", ".join(f"{cpu:,.0f}" for name, cpu in per_process.items()
                                   if kind_of(name) == kind)
            for kind in kinds if kind != "aiohttp" and kind != "baseline"))
    own, other = statistics.median(ms["gateway"]), statistics.median(ms["aiohttp"])
    print(f"  aiohttp's client costs {other - own:+.2f} ms a request more than ours")
    if "baseline" in ms:
        print(f"  CPU a request against the baseline ({args.baseline}): "
              f"{cpu_us['gateway']:,.0f} against {cpu_us['baseline']:,.0f} µs "
              f"({cpu_us['gateway'] / cpu_us['baseline'] - 1:+.1%})")
    print(f"throughput, {args.clients} concurrent clients for {args.seconds:g} s: "
          f"{done / args.seconds:,.0f} requests/s ({errors} errors)")


if __name__ == "__main__":
    main()
