"""Background tasks that end on their own are said (docs/design.md §9, "A task's end is
said"): each test kills one (its coroutine raises, or its socket is closed under it) and
checks the log line, what the owner shows, and that nothing it had taken is lost."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from omniroute_tui.console.model.attach import AttachBackend
from omniroute_tui.engine.events import Event, OperatorEvent
from omniroute_tui.gateway import cli as gateway_cli
from omniroute_tui.gateway.server import GatewayServer
from omniroute_tui.tasks import watch

from .console_helpers import console_app, settle
from .gateway_helpers import TOKEN, running_gateway
from .test_gateway_reload import config_text
from .waiting import eventually


def records(caplog: Any, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno >= logging.WARNING]


async def test_a_gateway_whose_socket_closes_says_so_and_ends_its_streams(
        tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    ended: list[str] = []
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=10) as http:
        gw.server.listener.on_end = ended.append
        frames: list[str] = []

        async def read() -> None:
            async with http.stream("GET", "/api/resilience/events") as stream:
                async for line in stream.aiter_lines():
                    frames.append(line)

        reader = asyncio.create_task(read())
        await eventually(lambda: gw.gateway.events.subscribers == 1, what="the subscription")
        reply = await http.post("/api/resilience/breakers/healthy/reset")
        assert reply.status_code == 200
        await eventually(lambda: any('"operator"' in f for f in frames), what="the event")
        gw.server.server.servers[0].close()  # the listening socket, under uvicorn
        await asyncio.wait_for(reader, 10)  # the stream was ended, not left hanging
        failure = f"the gateway on {gw.url} ended: its listening socket was closed"
        await eventually(lambda: ended, what="the owner told")
        assert ended == [failure] and gw.server.listener.failure == failure
        operator = [json.loads(f[6:]) for f in frames if f.startswith("data: ")
                    and '"operator"' in f]
        assert [(e["action"], e["target"]) for e in operator] == [("reset_breaker", "healthy")]
        with pytest.raises(httpx.ConnectError):
            await http.get("/health")
    [line] = records(caplog, "omniroute.gateway")
    assert (line.levelno, line.getMessage(), line.exc_info) == (logging.ERROR, failure, None)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r is not line]


async def test_omniroute_gateway_exits_with_1_when_its_server_ends(
        tmp_path: Path, caplog: Any, capsys: Any, monkeypatch: Any) -> None:
    caplog.set_level(logging.INFO)
    servers: list[GatewayServer] = []

    class Kept(GatewayServer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            servers.append(self)

    monkeypatch.setattr(gateway_cli, "GatewayServer", Kept)
    path = tmp_path / "router.yaml"
    path.write_text(config_text("http://127.0.0.1:9/v1"))
    args = gateway_cli._parser().parse_args(["--config", str(path), "--listen", "127.0.0.1:0"])
    serving = asyncio.create_task(gateway_cli._serve(args))
    await eventually(lambda: servers and servers[0].server.started, what="the gateway up")

    async def broken(counter: int) -> bool:
        raise RuntimeError("a bug inside uvicorn")

    servers[0].server.on_tick = broken  # type: ignore[method-assign]
    assert await asyncio.wait_for(serving, 10) == 1
    failure = f"the gateway on {servers[0].url} ended: RuntimeError: a bug inside uvicorn"
    assert capsys.readouterr().out.splitlines()[-1] == f"omniroute-gateway stopped: {failure}"
    [line] = records(caplog, "omniroute.gateway")
    assert line.getMessage() == failure and line.exc_info is not None  # a bug: traced


async def test_an_attached_link_whose_handler_raises_says_so_and_attaches_again(
        tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    seen: list[Event] = []
    notes: list[str] = []
    histories: list[list[Event]] = []

    def on_event(event: Event, replica: str | None = None) -> None:
        if isinstance(event, OperatorEvent) and event.target == "healthy":
            raise RuntimeError("a bug in the console")
        seen.append(event)

    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(
            base_url=gw.url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=10) as http:
        backend = AttachBackend(gw.url, TOKEN, on_event=on_event, on_state=lambda _: None,
                                on_history=lambda events, _: histories.append(events),
                                on_note=lambda _, text: notes.append(text))
        await backend.start()
        try:
            await eventually(lambda: backend.connected, what="attached")
            await http.post("/api/resilience/breakers/healthy/reset")
            await eventually(lambda: len(histories) == 2 and backend.connected,
                             what="attached again")
            # what the gateway kept is read again: the reset the handler failed on
            assert [(e.action, e.target) for e in histories[1]
                    if isinstance(e, OperatorEvent)] == [("reset_breaker", "healthy")]
            await http.post("/api/resilience/breakers/broken/reset")
            await eventually(lambda: any(isinstance(e, OperatorEvent) for e in seen),
                             what="the next event")
        finally:
            await backend.stop()
    reason = "RuntimeError: a bug in the console"
    assert notes[0] == f"link: DISCONNECTED from {gw.url} ({reason}); reconnecting"
    assert notes[1].startswith(f"link: attached again to {gw.url} after ")
    [line] = records(caplog, "omniroute.attach")
    assert line.getMessage() == (f"following the event stream failed on {gw.url}: {reason}; "
                                 "going on")
    assert line.exc_info is not None  # a bug: its traceback


async def test_an_attached_health_watch_that_raises_says_so_and_goes_on(caplog: Any) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            raise RuntimeError("a bug reading the health")
        return httpx.Response(503)

    backend = AttachBackend("http://gateway.test", TOKEN, on_event=lambda *_: None,
                            on_state=lambda _: None)
    backend._client = httpx.AsyncClient(base_url=backend.url,
                                        transport=httpx.MockTransport(answer))
    await backend.start()
    try:
        await eventually(lambda: records(caplog, "omniroute.attach"), what="the line")
        assert backend._health_task is not None and not backend._health_task.done()
    finally:
        await backend.stop()
    [line] = records(caplog, "omniroute.attach")
    assert line.getMessage() == ("reading /health failed on http://gateway.test: "
                                 "RuntimeError: a bug reading the health; going on")
    assert line.exc_info is not None


async def test_a_console_whose_start_raises_says_so(caplog: Any) -> None:
    app, _ = console_app("demo", 40_000)

    async def broken(*, recover: bool = False) -> None:
        raise RuntimeError("a bug in the start")

    app.backend.start = broken  # type: ignore[method-assign]
    async with app.run_test() as pilot:
        await settle(pilot, lambda: len(app._notifications) > 0)
        assert [(n.severity, n.message) for n in app._notifications] == [
            ("error", "could not start: RuntimeError: a bug in the start (a bug: --log-file "
                      "has its traceback)")]
    [line] = records(caplog, "omniroute.console")
    assert line.getMessage() == "starting the console failed: RuntimeError: a bug in the start"
    assert line.exc_info is not None


async def test_watch_says_each_kind_of_end_once_and_a_traceback_only_for_a_bug(
        caplog: Any) -> None:
    logger = logging.getLogger("omniroute.test-watch")
    told: list[str] = []

    async def returns() -> None:
        return None

    async def fails(error: BaseException) -> None:
        raise error

    async def waits() -> None:
        await asyncio.Event().wait()

    def watched(work: Any, what: str, **options: Any) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        watch(task, what, logger=logger, on_end=told.append, **options)
        return task

    done = [watched(returns(), "a loop"), watched(returns(), "a one-shot", forever=False),
            watched(fails(OSError("the socket went")), "a server"),
            watched(fails(KeyError("k")), "a writer"),
            watched(fails(OSError("gone")), "a one-shot", forever=False, expected=())]
    cancelled = watched(waits(), "a follower")
    released = asyncio.create_task(returns())
    watch(released, "a stopped one", logger=logger, on_end=told.append)()
    await asyncio.gather(*done, released, return_exceptions=True)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    await asyncio.sleep(0)  # the done callbacks run on the loop's next turn
    assert told == ["a loop ended: it stopped on its own",
                    "a server ended: OSError: the socket went", "a writer ended: KeyError: 'k'",
                    "a one-shot ended: OSError: gone"]
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records
             if r.name == logger.name]
    assert lines == [(told[0], False), (told[1], False), (told[2], True), (told[3], True)]
