"""What translation costs the gateway: CPU per chat request served by an Anthropic target
(the request translated to a Messages request, the answer back) against one served by an
OpenAI target, same family, in the same gateway and alternating rounds. Target: the
translated request costs at most 15 % more.

Both upstreams are the simulator's fakes (`omniroute-sim serve`, an OpenAI one and an
Anthropic one, no latency), in their own process: only the gateway's CPU is counted, read
from /proc before and after each round. With `--stream` every request streams (60 events,
each translated one by one for the Anthropic target) and is read to its end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from gateway_overhead import (
    cpu_s,
    fakes_process,
    free_port,
    gateway_process,
    stop,
    wait_for_file,
    wait_until_up,
)
from sim_throughput import loop_step_ns

SCENARIO = """\
name: translation
duration: 1h
providers:
  o: {models: [m], latency: 0ms, connections: [{id: k, api_key: sk-bench-openai-0001}]}
  a:
    api: anthropic
    models: [m]
    latency: 0ms
    connections: [{id: k, api_key: sk-bench-anthropic-0001}]
routes:
  same: {targets: [o/m]}
  translated: {targets: [a/m]}
"""


async def round_of(http: httpx.AsyncClient, route: str, count: int, stream: bool) -> None:
    """`count` requests to `route`: one after another, or, streamed (the fakes send a
    token every 20 ms: 1.2 s a stream), 32 at a time."""
    body = {"model": route, "messages": [{"role": "user", "content": "hi"}],
            "stream": stream}
    left = count

    async def client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            reply = await http.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            if stream:
                assert reply.content.endswith(b"data: [DONE]\n\n"), reply.content[-200:]

    await asyncio.gather(*(client() for _ in range(STREAMS_AT_ONCE if stream else 1)))


#: streamed requests in flight at once
STREAMS_AT_ONCE = 32


async def measure(url: str, pid: int, requests: int, rounds: int, stream: bool
                  ) -> dict[str, float]:
    """CPU µs a request on each route, over `rounds` alternating rounds."""
    spent = {"same": 0.0, "translated": 0.0}
    limits = httpx.Limits(max_connections=STREAMS_AT_ONCE)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        for route in spent:  # warm-up: connections, caches, the first decisions
            await round_of(http, route, 64 if stream else 50, stream)
        for index in range(rounds * 2):
            route = ("same", "translated")[index % 2]
            before = cpu_s(pid)
            await round_of(http, route, requests, stream)
            spent[route] += cpu_s(pid) - before
    return {route: seconds / (requests * rounds) * 1e6 for route, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="requests a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each route")
    parser.add_argument("--stream", action="store_true",
                        help="every request streams and is read to its end")
    args = parser.parse_args()
    if args.requests < 1 or args.rounds < 1:
        parser.error("--requests and --rounds: at least 1")
    speed = loop_step_ns()
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "translation.yaml"
        scenario.write_text(SCENARIO)
        config = Path(folder) / "router.yaml"
        procs = [fakes_process(scenario, config)]
        try:
            wait_for_file(config)
            port = free_port()
            procs.append(gateway_process(config, port))
            url = f"http://127.0.0.1:{port}"
            wait_until_up(f"{url}/health")
            cpu = asyncio.run(measure(url, procs[1].pid, args.requests, args.rounds,
                                      args.stream))
        finally:
            stop(procs)
    kind = "streamed chat requests" if args.stream else "chat requests"
    print(f"machine: {speed:.1f} ns a Python loop step (now {loop_step_ns():.1f})")
    print(f"{args.rounds} rounds of {args.requests} {kind} on each route, alternating:")
    print(f"  same family (OpenAI target):      CPU {cpu['same']:,.0f} µs a request")
    print(f"  translated (Anthropic target):    CPU {cpu['translated']:,.0f} µs a request")
    ratio = (f"{cpu['translated'] / cpu['same']:.3f}" if cpu["same"] > 0
             else "n/a (too few requests for the CPU clock's 10 ms ticks)")
    print(f"translated / same CPU ratio: {ratio} (target <= 1.15)")


if __name__ == "__main__":
    main()
