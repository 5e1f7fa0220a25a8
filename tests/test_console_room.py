"""A room (`--serve-room`): one replay in the trainer's console, followed by attached
consoles that show its clock, pause and speed, and cannot drive it; the room's port answers
GETs only."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from omniroute_tui.console.app import ConsoleApp
from omniroute_tui.console.cli import _parser, build_app
from omniroute_tui.console.lesson_app import LessonApp
from omniroute_tui.console.model.attach import AttachBackend, fetch_state
from omniroute_tui.console.model.console_model import ConsoleModel
from omniroute_tui.console.room import RoomServer
from omniroute_tui.console.widgets.herd_chart import HerdChartPlot
from omniroute_tui.console.widgets.panels import EventLog, StatusBar

from .console_helpers import console_app, say_yes, settle
from .gateway_helpers import free_port
from .waiting import eventually


def viewer_args(url: str) -> argparse.Namespace:
    return argparse.Namespace(
        attach=url, token_file=None, scenario=None, config=None, live=False, db=None,
        db_recover="ask", speed=2.0, read_only=False, operator="trainee", web=False,
        listen=None)


@asynccontextmanager
async def room(token: str | None = None) -> AsyncIterator[tuple[ConsoleApp, Any, str]]:
    """The trainer's console (paused at 40 s of the demo) serving a room on a free port."""
    app, _ = console_app("demo", 40_000)
    app.room = RoomServer("127.0.0.1", 0, token=token)
    async with app.run_test() as pilot:
        await settle(pilot, lambda: app.room.server.started)  # type: ignore[union-attr]
        assert app.room is not None and app.room.server.started
        yield app, pilot, app.room.url


@asynccontextmanager
async def attached_viewer(url: str, size: tuple[int, int] | None = None
                          ) -> AsyncIterator[tuple[Any, Any, AttachBackend]]:
    """A console attached to the room at `url` (its state fetched as the CLI does) running
    under Pilot, once its backend is connected: the app, its pilot and its backend."""
    state = await asyncio.to_thread(fetch_state, url, None)
    viewer = build_app(viewer_args(url), attach_state=state)
    async with viewer.run_test(size=size) as pilot:  # type: ignore[attr-defined]
        backend: AttachBackend = viewer.backend  # type: ignore[attr-defined]
        await eventually(lambda: backend.connected, what="attached")
        yield viewer, pilot, backend


async def test_two_viewers_follow_the_trainers_pause_and_speed() -> None:
    async with room() as (trainer, pilot, url):
        viewers = []
        for _ in range(2):
            state = await asyncio.to_thread(fetch_state, url, None)
            assert state["replay"]["paused"] is True and state["replay"]["now"] == 40_000
            viewers.append(build_app(viewer_args(url), attach_state=state))
        async with viewers[0].run_test() as one, viewers[1].run_test() as two:  # type: ignore[attr-defined]
            backends: list[AttachBackend] = [v.backend for v in viewers]  # type: ignore[attr-defined]
            await eventually(lambda: all(b.connected for b in backends), what="attached")
            assert [b.status() for b in backends] == ["room sim 00:40.0 paused"] * 2
            assert all(v.read_only for v in viewers)  # type: ignore[attr-defined]
            # the routes with their strategies come with the room's state
            assert viewers[0].model.routes == trainer.model.routes == {  # type: ignore[attr-defined]
                "chat": "priority", "fast": "round_robin", "reason": "weighted"}

            await pilot.press("space")  # the trainer plays on...
            await pilot.press("plus")  # ...and speeds up: 2 -> 5
            assert trainer.backend.replay is not None
            assert (trainer.backend.replay.paused, trainer.backend.replay.speed) == (False, 5.0)
            await eventually(lambda: all(b.room is not None and not b.room["paused"]
                                         and b.room["speed"] == 5.0 for b in backends),
                             what="the viewers see the replay playing at x5")
            assert all(b.status().endswith(" ×5") for b in backends)

            await pilot.press("space", "n", "n")  # paused again, and two steps of 1 s
            stopped_at = trainer.backend.now_ms()
            assert stopped_at == 42_000
            await eventually(lambda: all(b.room is not None and b.room["paused"]
                                         for b in backends), what="the viewers see the pause")
            assert [b.now_ms() for b in backends] == [stopped_at] * 2
            # what the trainer's run did reaches the viewers' models as it happened
            assert {p: v.state for p, v in trainer.model.providers.items()} == {
                p: v.state for p, v in viewers[0].model.providers.items()}  # type: ignore[attr-defined]
            await one.pause()
            await two.pause()


async def test_the_trainer_sees_how_many_viewers_follow() -> None:
    """The status bar counts the viewers following now (repainted each frame; the test's
    app has no frame timer, so it repaints as a frame would)."""
    async with room() as (trainer, pilot, url):
        status = trainer.query_one(StatusBar)

        def shown() -> str:
            trainer.refresh_view()
            return str(status.render())

        assert "paused │ room: 0 viewers │" in shown()
        async with attached_viewer(url):
            assert trainer.room_viewers() == 1
            assert "room: 1 viewer │" in shown()
        await eventually(lambda: trainer.room_viewers() == 0, what="the viewer gone")
        assert "room: 0 viewers" in shown()


async def test_viewers_cannot_drive_and_say_why() -> None:
    async with room() as (trainer, _pilot, url), attached_viewer(url) as (viewer, pilot, backend):
        for key in ("space", "plus", "minus", "n"):
            await pilot.press(key)
        await pilot.press("R", "y", "1", "r", "y")  # a restart, a breaker reset
        await pilot.pause()
        messages = [n.message for n in viewer._notifications]  # type: ignore[attr-defined]
        assert messages == [
            "this console follows a room: only the trainer can pause",
            "this console follows a room: only the trainer can speed up",
            "this console follows a room: only the trainer can slow down",
            "this console follows a room: only the trainer can step",
            *["read-only console: operator actions are disabled"] * 2]
        replay = trainer.backend.replay
        assert replay is not None
        assert (replay.paused, replay.speed, replay.now_ms()) == (True, 2.0, 40_000)


async def test_a_replay_from_the_start_reconnects_the_viewers_to_the_new_run() -> None:
    async with room() as (trainer, pilot, url), attached_viewer(url) as (viewer, _, backend):
        await say_yes(pilot, "R")
        await eventually(lambda: backend.connected and backend.room is not None
                         and backend.room["run"] == 1, timeout_s=15,
                         what="the viewer on the new run")
        assert backend.now_ms() == 0 and backend.room["paused"] is True


async def test_a_replay_from_the_start_is_marked_in_the_viewers_events() -> None:
    async with room() as (trainer, pilot, url), attached_viewer(
            url, size=(100, 30)) as (viewer, seen, backend):
        model = viewer.model  # type: ignore[attr-defined]
        await pilot.press("n", "n")  # the old run goes on a little: requests, attempts
        await eventually(lambda: model.total_requests > 0, what="the old run's traffic")
        await seen.press("4")
        await say_yes(pilot, "R")
        await eventually(lambda: backend.connected and backend.room is not None
                         and backend.room["run"] == 1, timeout_s=15,
                         what="the viewer on the new run")
        mark = ("room: the trainer replayed demo from the start (run 2); what follows "
                "is the new run")
        texts = [entry.line for entry in model.events]
        assert texts[0] == mark and texts.count(mark) == 1
        assert not any(text.startswith("link:") for text in texts)  # not a lost link
        # what the old run left is gone: the new one starts paused at 0
        assert model.total_requests == 0 and not model.requests
        assert not any(model.series.counts.values())
        viewer.refresh_view()  # type: ignore[attr-defined]
        await seen.pause()
        log = viewer.query_one("#events-log", EventLog)  # type: ignore[attr-defined]
        assert log.render_line(0).text.rstrip() == f"   <1s  {mark}"


@asynccontextmanager
async def viewers_chart() -> AsyncIterator[tuple[Any, Any, Any, AttachBackend, HerdChartPlot]]:
    """A room at 40 s of the demo and a viewer on its scenario pane, its chart drawn: the
    trainer, the trainer's pilot, the viewer, its backend and its chart."""
    async with room() as (trainer, pilot, url), attached_viewer(
            url, size=(100, 30)) as (viewer, seen, backend):
        await seen.press("5")
        chart = viewer.query_one(HerdChartPlot)
        await eventually(lambda: chart._make is not None, what="the chart drawn")
        yield trainer, pilot, viewer, backend, chart


async def test_a_viewers_herd_chart_draws_the_trainers_run() -> None:
    async with viewers_chart() as (trainer, pilot, viewer, backend, chart):

        def same_as_the_trainers(now: int) -> bool:
            assert chart._make is not None
            drawn = chart._make(40)
            theirs = trainer.model.herd_chart(now, 40)
            return drawn.lines == theirs.lines and (drawn.start_s, drawn.end_s) == (
                0, now // 1000)

        # joined at 40 s: the run so far comes with the room's state, the same
        # attempts per second as the trainer's own chart, on the run's clock
        assert same_as_the_trainers(40_000)
        assert sum(sum(ys) for _, _, ys in chart._make(40).lines) > 0
        assert chart.xlabel == "scenario seconds"
        for _ in range(5):
            await pilot.press("n")  # five more seconds: they come over the stream
        await eventually(lambda: backend.now_ms() == 45_000 and viewer.refresh_view()
                         is None and same_as_the_trainers(45_000),
                         what="the viewer's chart up to 45 s")
        timeline = str(viewer.query_one("#timeline").render())  # type: ignore[attr-defined]
        assert "the trainer's run at 00:45.0; attempts per second on each provider " \
               "since its start" in timeline


async def test_a_viewers_chart_has_the_naive_line_and_the_fault_lines() -> None:
    """Trainees are shown the herd: the trainer's compared policy, per second as the
    trainer's chart draws it, and the scenario's fault windows, joined late or followed
    over the stream."""
    async with viewers_chart() as (trainer, pilot, viewer, backend, chart):
        def theirs(now: int) -> Any:
            replay = trainer.backend.replay
            assert replay is not None
            return trainer.model.herd_chart(now, 40, compared=replay.comparison, faults=[
                (f.name, f.at_ms, f.until_ms) for f in replay.scenario.faults])

        def same(now: int) -> bool:
            assert chart._make is not None
            drawn, expected = chart._make(40), theirs(now)
            return (drawn.compared, drawn.faults, drawn.compared_policy) == (
                expected.compared, expected.faults, "naive")

        assert same(40_000)  # from the room's state: joined at 40 s
        drawn = chart._make(40)  # type: ignore[misc]
        assert sum(sum(ys) for _, _, ys in drawn.compared) > 0
        assert [name for name, *_ in drawn.faults] == ["openai-429-storm"]
        await pilot.press("f")  # to 75 s, where the next fault starts: over the stream
        await eventually(lambda: backend.now_ms() == 75_000 and viewer.refresh_view()
                         is None and same(75_000), what="the viewer's lines up to 75 s")
        shown = str(chart.query_one("#herd-key").render())
        assert "hollow ○ naive" in shown and "fault start/end" in shown


def test_a_rooms_attempts_of_another_shape_are_left_out() -> None:
    """A room's document is not ours to trust: only well-formed pairs for the providers
    its state names are taken, at most the chart's ten minutes of them."""
    def state(attempts: object) -> dict[str, object]:
        return {"breakers": [{"provider": "alpha", "state": "CLOSED", "failures": 0,
                              "cycles": 0, "threshold": 5, "opened_at": None,
                              "open_for_ms": 0}],
                "connections": [], "lockouts": [], "attempts": attempts}

    model = ConsoleModel({}, lambda: 0)
    model.load_state_document(state({
        "alpha": [[1, 3], [2, -1], ["3", 4], [4, 5, 6], [True, 2], [5, 2.5], [2**60, 1],
                  "x", None, [6, 7]],
        "ghost": [[1, 1]], "beta": "no", "": {}}))
    assert dict(model.series.counts) == {"alpha": {1: 3, 6: 7}}
    for odd in ([1, 2], "attempts", None, 7, {"alpha": {"1": 2}}):
        model.load_state_document(state(odd))  # never raises; takes nothing
    assert dict(model.series.counts) == {"alpha": {1: 3, 6: 7}}
    model.load_state_document(state({"alpha": [[s, 1] for s in range(100_000)]}))
    assert len(model.series.counts["alpha"]) == 2 + 600
    assert min(s for s in model.series.counts["alpha"] if s > 6) == 100_000 - 600


async def test_a_room_with_a_token_refuses_viewers_without_it() -> None:
    token = "room-token-0123456789abcdef"
    async with room(token) as (_trainer, _pilot, url), httpx.AsyncClient(
            base_url=url, timeout=5) as http:
        refused = await http.get("/api/resilience/state")
        assert refused.status_code == 401
        assert "Bearer" in refused.json()["error"]["message"]
        taken = await http.get("/api/resilience/state",
                               headers={"authorization": f"Bearer {token}"})
        assert taken.status_code == 200 and taken.json()["replay"]["now"] == 40_000
        assert (await http.get("/health")).json()["room"] is True


async def test_hostile_requests_to_a_room_get_a_4xx_and_no_traceback(caplog: Any) -> None:
    async with room() as (trainer, _pilot, url), httpx.AsyncClient(
            base_url=url, timeout=5) as http:
        for method, path in (("POST", "/api/resilience/breakers/alpha/reset"),
                             ("POST", "/api/resilience/state"),
                             ("DELETE", "/api/resilience/lockouts"),
                             ("PUT", "/api/resilience/events"),
                             ("POST", "/v1/chat/completions")):
            reply = await http.request(method, path, json={"all": True})
            assert reply.status_code in (404, 405), (method, path)
            assert "error" in reply.json()
        for path in ("/nope", "/api/resilience/../../etc/passwd", "/api/resilience/state/x",
                     "/%00", "/" + "a" * 5000):
            reply = await http.get(path)
            assert reply.status_code == 404, path
        reply = await http.get("/api/resilience/state", headers={"x-big": "b" * 40_000})
        assert reply.status_code == 431
        # a request line of garbage (a TLS hello on the plain port): refused, not crashed
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"\x16\x03\x01 garbage \r\n\r\n")
        assert (await asyncio.wait_for(reader.read(100), 5)).startswith(b"HTTP/1.1 400")
        writer.close()
        assert (await http.get("/health")).status_code == 200
        replay = trainer.backend.replay
        assert replay is not None and replay.now_ms() == 40_000  # nothing drove the run
    assert not [r for r in caplog.records if r.exc_info], "a traceback in the log"


def room_lines(caplog: Any) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "omniroute.room"]


async def assert_down(trainer: ConsoleApp, pilot: Any, url: str, failure: str) -> None:
    """The trainer's console says the room is down, and it listens no more."""
    await eventually(lambda: trainer.servers_down == ["ROOM"], what="the console told")
    await pilot.pause()
    assert trainer.room is not None and trainer.room.failure == failure
    assert "ROOM DOWN │" in str(trainer.query_one("#status").render())
    assert trainer.query_one("#status").has_class("-alert")
    notices = [(n.title, n.severity, n.message) for n in trainer._notifications]
    assert notices[-1] == ("room down", "error", f"{failure}: viewers no longer follow "
                           "this run; restart the console to serve it again")
    async with httpx.AsyncClient(timeout=2) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"{url}/health")
    await pilot.press("n")  # the trainer's replay goes on
    assert trainer.backend.now_ms() == 41_000


async def test_a_room_whose_server_raises_says_so_once_and_stops_clean(caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    async with room() as (trainer, pilot, url):
        assert trainer.room is not None
        state = await asyncio.to_thread(fetch_state, url, None)
        viewer = build_app(viewer_args(url), attach_state=state)
        async with viewer.run_test():  # type: ignore[attr-defined]
            backend: AttachBackend = viewer.backend  # type: ignore[attr-defined]
            await eventually(lambda: backend.connected, what="attached")

            async def broken(counter: int) -> bool:
                raise RuntimeError("a bug inside uvicorn")

            trainer.room.server.on_tick = broken  # type: ignore[method-assign]
            failure = f"the room on {url} ended: RuntimeError: a bug inside uvicorn"
            await assert_down(trainer, pilot, url, failure)
            # the viewer's stream was ended, not left hanging: it says it lost the room
            await eventually(lambda: not backend.connected, what="the viewer told")
        [line] = room_lines(caplog)
        assert (line.levelno, line.getMessage()) == (logging.ERROR, failure)
        assert line.exc_info is not None  # a bug: its traceback
    # the console's end stopped the dead room cleanly: nothing more said
    assert len(room_lines(caplog)) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and r.name != "omniroute.room"]


async def test_a_room_whose_socket_closes_says_so_once_without_a_traceback(
        caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    async with room() as (trainer, pilot, url):
        assert trainer.room is not None
        trainer.room.server.servers[0].close()  # the listening socket, under uvicorn
        failure = f"the room on {url} ended: its listening socket was closed"
        await assert_down(trainer, pilot, url, failure)
    [line] = room_lines(caplog)
    assert (line.levelno, line.getMessage(), line.exc_info) == (logging.ERROR, failure, None)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r is not line]


def test_serve_room_refuses_what_is_not_a_replay(capsys: Any) -> None:
    from omniroute_tui.console.cli import main

    for argv, said in (
            (["--scenario", "vpn-blip", "--live", "--serve-room", "127.0.0.1:0"],
             "--serve-room serves a replay in virtual time"),
            (["--attach", "http://127.0.0.1:9", "--serve-room", "127.0.0.1:0"],
             "--serve-room serves this console's own replay: not with --attach"),
            (["--scenario", "demo", "--serve-room", "4100"], "HOST:PORT")):
        assert main(argv) == 2
        assert said in capsys.readouterr().err


async def test_a_lesson_is_served_to_a_room_and_viewers_follow_its_steps() -> None:
    """`--lesson NAME --serve-room HOST:PORT`: the room starts with the lesson, and a
    viewer's status says which step the trainer is at."""
    port = free_port()
    trainer = build_app(_parser().parse_args(
        ["--lesson", "1-cooldown-ladder", "--speed", "100", "--serve-room", f"127.0.0.1:{port}"]))
    assert isinstance(trainer, LessonApp) and trainer.room is not None
    async with trainer.run_test() as pilot:
        await settle(pilot, lambda: trainer.room is not None and trainer.room.server.started)
        assert trainer.room is not None and trainer.room.server.started
        state = await asyncio.to_thread(fetch_state, trainer.room.url, None)
        assert state["replay"]["lesson"] == {"title": "The cooldown ladder", "step": 1,
                                             "steps": 4}
        async with attached_viewer(trainer.room.url) as (_, _, backend):
            await eventually(lambda: backend.status().endswith("paused · step 1 of 4"),
                             what="the viewer at the lesson's first step")
            await pilot.press("space")  # the trainer goes on; step 3 holds the run again
            await eventually(lambda: backend.status().endswith("paused · step 3 of 4"),
                             what="the viewer at the lesson's third step")
            await pilot.press("f")  # the trainer jumps to the next step: everyone goes
            await eventually(lambda: backend.status().endswith("paused · step 4 of 4"),
                             what="the viewer at the lesson's last step")
            await pilot.press("f")
            assert trainer.backend.replay is not None
            assert trainer.backend.replay.paused


async def test_the_trainer_jumps_to_the_next_fault_and_the_viewers_follow() -> None:
    async with room() as (trainer, pilot, url), attached_viewer(url) as (_, _, backend):
        await pilot.press("f")  # at 40 s: the next fault starts at 75 s
        replay = trainer.backend.replay
        assert replay is not None and (replay.now_ms(), replay.paused) == (75_000, True)
        await eventually(lambda: backend.now_ms() == 75_000 and backend.room is not None
                         and backend.room["paused"], what="the viewer at 75 s")
        assert any("anthropic-blip starts on anthropic" in str(n.message)
                   for n in trainer._notifications)
        for _ in range(3):  # then 100 s, 130 s, and nothing ahead: it stays paused
            await pilot.press("f")
        assert (replay.now_ms(), replay.paused) == (130_000, True)
        assert any("no fault ahead" in str(n.message) for n in trainer._notifications)


async def test_a_rooms_faults_and_compared_policy_of_another_shape_are_left_out() -> None:
    """The faults and the compared policy's attempts are a room's too: odd ones are
    dropped, never raised on, and a frame's seconds only for the providers named."""
    backend = AttachBackend("http://127.0.0.1:9", None, on_event=lambda *_: None,
                            on_state=lambda _: None)
    try:
        state = {"breakers": [{"provider": "alpha"}], "faults": [
            ["storm", 1000, 5000], ["bad", -1, 5], ["short"], "x", [None, 1, 2],
            ["big", 1, 2**60]], "compared": {"policy": "naive", "attempts": {
                "alpha": [[1, 4], [2, "x"]], "ghost": [[1, 1]]}}}
        backend._take_state(state)
        assert backend.room_faults == [("storm", 1000, 5000)]
        assert backend.comparison is not None
        assert dict(backend.comparison.counts) == {"alpha": {1: 4}}
        for odd in (None, 7, "naive", {"policy": 3}, {"policy": "naive", "attempts": [1]}):
            backend._take_state({**state, "faults": odd, "compared": odd})
        backend.follow_room({"now": 2000, "speed": 2.0, "compared": {
            "policy": "naive", "attempts": {"alpha": [[2, 9]], "ghost": [[2, 1]]}}})
        assert backend.comparison is not None
        assert dict(backend.comparison.counts) == {"alpha": {2: 9}}
    finally:
        await backend._client.aclose()
