"""Stream faults over real sockets: `omniroute-sim serve`'s fakes (`start_fakes`) stream
their answers token by token, and each stream fault really breaks one, read here with
httpx streaming (docs/simulator.md, "Streams")."""

from __future__ import annotations

import io
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from omniroute_tui.clock import ManualClock
from simulator.http_fakes import BAD_EVENT, start_fakes, stop_fakes
from simulator.live import run_live
from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

SCENARIO = """\
name: stream-sockets
duration: 10m
providers:
  cutter: {models: [m], latency: 10ms, connections: [k]}
  staller: {models: [m], latency: 10ms, connections: [k]}
  garbler: {models: [m], latency: 10ms, connections: [k]}
  undone: {models: [m], latency: 10ms, connections: [k]}
  late: {models: [m], latency: 10ms, connections: [k]}
  fine: {models: [m], latency: 10ms, connections: [k]}
faults:
  - {name: cut, target: cutter, stream_cut: {after_tokens: 40}}
  - {name: stall, target: staller, stream_stall: {after_tokens: 20, for: 600ms}}
  - {name: bad, target: garbler, bad_chunk: {after_tokens: 10}}
  - {name: nodone, target: undone, no_done: true}
  - {name: slow-start, target: late, first_token: 700ms}
"""


class Read:
    """What a client read of one streamed answer: each `data:` line with when it came
    (seconds after the headers), and how the body ended."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self.error: Exception | None = None
        self.headers_s = 0.0

    @property
    def tokens(self) -> list[str]:
        out = []
        for _, data in self.events:
            try:
                delta = json.loads(data)["choices"][0]["delta"]
            except (ValueError, KeyError):
                continue
            if delta.get("content"):
                out.append(delta["content"])
        return out

    def when(self, token: int) -> float:
        """When content token `token` (1-based) came."""
        seen = 0
        for at, data in self.events:
            if data.startswith("{") and '"content": "' in data and '"content": ""' not in data:
                seen += 1
                if seen == token:
                    return at
        raise AssertionError(f"no token {token}")


@asynccontextmanager
async def fakes() -> AsyncIterator[dict[str, str]]:
    scenario = load_scenario("s.yaml", text=SCENARIO)
    servers = await start_fakes(scenario, ManualClock(0))  # every fault on, all along
    try:
        yield {s.provider: s.base_url for s in servers}
    finally:
        await stop_fakes(servers)


async def read_stream(base_url: str, provider: str) -> Read:
    read = Read()
    async with httpx.AsyncClient(timeout=10) as client:
        started = time.monotonic()
        async with client.stream(
                "POST", f"{base_url}/chat/completions",
                headers={"authorization": f"Bearer sk-fake-{provider}-k"},
                json={"model": "m", "stream": True,
                      "messages": [{"role": "user", "content": "hi"}]}) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            headers_at = time.monotonic()
            read.headers_s = headers_at - started
            try:
                async for line in answer.aiter_lines():
                    if line.startswith("data: "):
                        read.events.append((time.monotonic() - headers_at, line[6:]))
            except httpx.RemoteProtocolError as exc:
                read.error = exc
    return read


async def test_a_whole_stream_has_60_tokens_and_done() -> None:
    async with fakes() as urls:
        read = await read_stream(urls["fine"], "fine")
    assert read.error is None and len(read.tokens) == 60
    assert read.events[-1][1] == "[DONE]"
    assert read.when(60) >= 59 * 0.02  # one every 20 ms


async def test_stream_cut_drops_the_connection_after_token_40(
        capfd: pytest.CaptureFixture[str]) -> None:
    async with fakes() as urls:
        read = await read_stream(urls["cutter"], "cutter")
    assert isinstance(read.error, httpx.RemoteProtocolError)  # a chunked body cut short
    assert len(read.tokens) == 40 and read.events[-1][1] != "[DONE]"
    assert "Traceback" not in capfd.readouterr().err


async def test_stream_stall_is_a_real_silence_after_token_20() -> None:
    async with fakes() as urls:
        read = await read_stream(urls["staller"], "staller")
    gap = read.when(21) - read.when(20)
    assert 0.6 <= gap < 2.0
    assert read.when(20) - read.when(19) < 0.3
    assert read.error is None and len(read.tokens) == 60  # it goes on after
    assert read.events[-1][1] == "[DONE]"


async def test_bad_chunk_is_a_data_line_that_is_not_json() -> None:
    async with fakes() as urls:
        read = await read_stream(urls["garbler"], "garbler")
    datas = [data for _, data in read.events]
    bad = BAD_EVENT.decode().strip()[6:]
    assert datas.index(bad) == 11  # the role's event, ten tokens, then it
    with pytest.raises(ValueError):
        json.loads(bad)
    assert len(read.tokens) == 60 and datas[-1] == "[DONE]"


async def test_no_done_ends_the_body_after_the_finish_event() -> None:
    async with fakes() as urls:
        read = await read_stream(urls["undone"], "undone")
    assert read.error is None and len(read.tokens) == 60  # a clean end of the body
    last = json.loads(read.events[-1][1])
    assert last["choices"][0]["finish_reason"] == "stop"
    assert "[DONE]" not in [data for _, data in read.events]


async def test_first_token_holds_the_first_event_after_the_headers() -> None:
    async with fakes() as urls:
        read = await read_stream(urls["late"], "late")
    assert read.headers_s < 0.5  # the headers at once
    first_event = read.events[0][0]
    assert 0.7 <= first_event < 2.0
    assert read.when(1) - first_event < 0.1  # the first token with it
    assert len(read.tokens) == 60 and read.events[-1][1] == "[DONE]"


LIVE = """\
name: live-streams
duration: 3s
clock: live
resilience: {admission: {max_wait: 0s}, request: {timeout: 2s, stream_idle: 400ms}}
providers:
  cutter: {models: [m], latency: 30ms, connections: [k]}
  staller: {models: [m], latency: 30ms, connections: [k]}
  garbler: {models: [m], latency: 30ms, connections: [k]}
  undone: {models: [m], latency: 30ms, connections: [k]}
  late: {models: [m], latency: 30ms, connections: [k]}
  spare: {models: [m], latency: 30ms, connections: [k]}
routes:
  rcut: {targets: [cutter/m]}
  rstall: {targets: [staller/m]}
  rbad: {targets: [garbler/m]}
  rdone: {targets: [undone/m]}
  rlate: {first_token: 300ms, targets: [late/m, spare/m]}
traffic:
  - {route: rcut, at: [100ms], stream: true}
  - {route: rstall, at: [100ms], stream: true}
  - {route: rbad, at: [100ms], stream: true}
  - {route: rdone, at: [100ms], stream: true}
  - {route: rlate, at: [100ms], stream: true}
faults:
  - {name: cut, target: cutter, stream_cut: {after_tokens: 40}}
  - {name: stall, target: staller, stream_stall: {after_tokens: 20, for: 1500ms}}
  - {name: bad, target: garbler, bad_chunk: {after_tokens: 10}}
  - {name: nodone, target: undone, no_done: true}
  - {name: slow-start, target: late, first_token: 1s}
"""


def _outcomes(trace: str) -> list[tuple[object, ...]]:
    events = [json.loads(line) for line in trace.splitlines()]
    return sorted(((e["provider"], e["kind"], e.get("reason"), e.get("relayed_chunks"))
                   for e in events if e["type"] == "result"), key=str)


async def test_the_gateways_relay_sees_each_stream_fault_as_virtual_time_says() -> None:
    """The same scenario live (the fakes over sockets, the router's relay reading them)
    and in virtual time: each attempt ends the same way, with the same tokens relayed."""
    scenario = load_scenario("live.yaml", text=LIVE)
    virtual, live = io.StringIO(), io.StringIO()
    run_virtual(scenario, trace=virtual)
    await run_live(scenario, trace=live)
    assert _outcomes(live.getvalue()) == _outcomes(virtual.getvalue()) == sorted([
        ("cutter", "stream_cut", "reset", 40), ("staller", "stream_cut", "idle", 20),
        ("garbler", "stream_cut", "bad_event", 10), ("undone", "stream_cut", "no_done", 61),
        ("late", "timeout", "first_token", None), ("spare", None, None, 61)], key=str)
