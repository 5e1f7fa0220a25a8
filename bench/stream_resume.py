"""What resuming a cut stream costs (`stream_resume: continue`, docs/design.md §7).

The gateway's driver path in one process, without sockets: `AsyncDriver.complete` over
`UpstreamClient` on a pool whose answers are bytes in memory (an OpenAI-shaped stream of
60 tokens, the primary's cut after 40), the body read as `RelayResponse` reads it
(`Completion.pieces`), then `Completion.finish`. Four kinds of request, interleaved round
by round, CPU time (`time.process_time`) per request:

- `whole`: a stream read to its `[DONE]` on a route without `stream_resume`;
- `whole+resume`: the same on a route with it (what keeping the relayed events costs);
- `cut`: cut after 40 tokens, the client gets the error event (no `stream_resume`);
- `resumed`: cut after 40, continued by the next target (20 tokens and the finish, spliced).

What this leaves out is the same for each kind but one: `resumed` makes a second upstream
request, whose HTTP costs (the connection, the request's bytes, the answer's head) come
on top; bench/gateway_overhead.py --stream measures a streamed request's whole gateway CPU.
It also prints the continuation's request against the client's: the extra input tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from functools import cache
from typing import Any

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import load_router_config
from omniroute_tui.drivers import AsyncDriver, UpstreamClient

CONFIG = """\
providers:
  primary: {base_url: "http://primary/v1", models: [cut40, m], connections: [p1]}
  next: {base_url: "http://next/v1", models: [cont], connections: [n1]}
routes:
  whole: {targets: [primary/m, next/cont]}
  whole_resume: {stream_resume: continue, targets: [primary/m, next/cont]}
  cut: {targets: [primary/cut40, next/cont]}
  resumed: {stream_resume: continue, targets: [primary/cut40, next/cont]}
"""
KINDS = {"whole": "whole", "whole+resume": "whole_resume", "cut": "cut", "resumed": "resumed"}
TOKENS, CUT_AT = 60, 40
PROMPT = "Count from zero to fifty-nine, one number a word, nothing else."


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


@cache
def _stream(first: int, last: int, whole: bool) -> list[bytes]:
    """The network's pieces: the role, tokens `first`..`last - 1`, then the finish and
    `[DONE]` if `whole`."""
    pieces = [_chunk({"role": "assistant", "content": ""})]
    pieces += [_chunk({"content": f"t{i} "}) for i in range(first, last)]
    if whole:
        pieces += [_chunk({}, "stop"), b"data: [DONE]\n\n"]
    return pieces


class _Body:
    """An answer in memory; a cut one raises as a connection closed mid-body does."""

    def __init__(self, pieces: list[bytes], cut: bool) -> None:
        self.status = 200
        self.headers = {"content-type": "text/event-stream"}
        self._pieces = pieces
        self._cut = cut

    async def _chunks(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece
        if self._cut:
            raise ConnectionResetError("the peer closed the connection mid-body")

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def aclose(self) -> None:
        return None


class _Pool:
    """Answers by the model asked for; keeps the continuation's request's size."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}

    async def post(self, url: str, headers: dict[str, str], body: bytes,
                   connect_timeout_s: float) -> _Body:
        # the fake's own work is kept out of the time measured: no JSON read
        if b'"model":"cut40"' in body:
            return _Body(_stream(0, CUT_AT, False), cut=True)
        if b'"model":"cont"' in body:  # asked to continue after the 40 tokens relayed
            self.sizes["cont"] = len(body)
            return _Body(_stream(CUT_AT, TOKENS, True), cut=False)
        self.sizes["m"] = len(body)
        return _Body(_stream(0, TOKENS, True), cut=False)

    async def aclose(self) -> None:
        return None


async def _one(route: str, pool: _Pool) -> tuple[float, bytes]:
    """One request, its CPU time and the body its client read. The router is new each
    time (not timed): a cut cools its key, and every request starts alike."""
    config = load_router_config("bench.yaml", text=CONFIG)
    driver = AsyncDriver(config.build(ManualClock(1_000_000)), config.providers,
                         UpstreamClient(pool=pool))
    body = {"model": route, "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    started = time.process_time()
    completion = await driver.complete(body, stream=True)
    read = [piece async for piece in completion.pieces()]
    await completion.finish()
    return time.process_time() - started, b"".join(read)


def _text(body: bytes) -> str:
    return "".join(json.loads(event[6:])["choices"][0]["delta"].get("content") or ""
                   for event in body.split(b"\n\n")
                   if event.startswith(b"data: {\"id\""))


async def _run(rounds: int) -> None:
    pool = _Pool()
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(rounds):
        for kind, route in KINDS.items():
            took, body = await _one(route, pool)
            times[kind].append(took)
            whole = _text(body) == "".join(f"t{i} " for i in range(TOKENS))
            assert whole == (kind != "cut") and body.endswith(
                b"[DONE]\n\n" if kind != "cut" else b"}}\n\n"), (kind, body[-200:])
    print(f"{rounds} rounds; CPU per request, median (p90), in µs:")
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    for kind, values in times.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"  {kind:13} {medians[kind] * 1e6:8.0f} ({p90 * 1e6:.0f})")
    print(f"  resumed - cut: {(medians['resumed'] - medians['cut']) * 1e6:.0f} µs; "
          f"whole+resume - whole: {(medians['whole+resume'] - medians['whole']) * 1e6:+.0f} µs")
    print(f"request bytes: the client's {pool.sizes['m']}, the continuation's "
          f"{pool.sizes['cont']} (+{pool.sizes['cont'] - pool.sizes['m']}: the {CUT_AT} "
          f"tokens relayed, sent back as the prefill)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    if args.rounds < 10:
        parser.error("--rounds: at least 10")
    asyncio.run(_run(args.rounds))


if __name__ == "__main__":
    main()
