"""Structured logs and request ids: the two formats field by field, one line a record,
the request id in the answer, the events and the log, hostile ids, and no key nor message
content in any line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from omniroute_tui.engine.events import Event
from omniroute_tui.gateway.request_ids import MAX_ID_CHARS, RequestIds
from omniroute_tui.logs import FIELDS, JsonFormatter, TextFormatter, configure_logging

from .gateway_helpers import TOKEN, running_gateway
from .redis_helpers import REDIS_URL
from .waiting import eventually

CHAT = "/v1/chat/completions"
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
OURS = re.compile(r"[0-9a-f]{8}-\d+")
#: 2026-12-01T11:24:09.123Z
CREATED = 1796124249.123


def _record(msg: str = "answered %d", *args: object, exc: bool = False,
            **extra: Any) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise RuntimeError("boom\nsecond line")
        except RuntimeError:
            info = sys.exc_info()
    record = logging.LogRecord("omniroute.access", logging.INFO, __file__, 1, msg, args,
                               info)
    record.created = CREATED
    record.__dict__.update(extra)
    return record


# -- the formats ---------------------------------------------------------------------------

def test_json_lines_hold_exactly_the_named_fields_in_order() -> None:
    record = _record("answered %d", 200, request_id="abc-1", route="chat",
                     provider="alpha", connection="a1", status=200, api_key="sk-secret",
                     content="hello", attempts=None)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert list(json.loads(line).items()) == [
        ("ts", "2026-12-01T11:24:09.123Z"), ("level", "info"),
        ("logger", "omniroute.access"), ("msg", "answered 200"), ("request_id", "abc-1"),
        ("route", "chat"), ("provider", "alpha"), ("connection", "a1"), ("status", 200)]


def test_the_fields_of_a_resumed_skipping_fleet_request_are_written() -> None:
    """Set on the record by the access line, and written (they once were dropped)."""
    line = json.loads(JsonFormatter().format(_record(
        "answered %d", 200, request_id="r-1", skips="a/m:all_cooling", resume="resumed",
        resumed_by="b/k/m", replica="host:7:abc123")))
    assert {k: line[k] for k in ("skips", "resume", "resumed_by", "replica")} == {
        "skips": "a/m:all_cooling", "resume": "resumed", "resumed_by": "b/k/m",
        "replica": "host:7:abc123"}


def test_json_exception_is_one_exc_field_on_one_line() -> None:
    line = JsonFormatter().format(_record("it failed:\nreally", exc=True, request_id="x"))
    assert "\n" not in line
    data = json.loads(line)
    assert data["msg"] == "it failed:\nreally"
    assert data["request_id"] == "x"
    assert data["exc"].startswith("Traceback (most recent call last):")
    assert data["exc"].endswith("RuntimeError: boom\nsecond line")


def test_text_lines_say_the_fields_as_key_value() -> None:
    record = _record("answered %d", 503, request_id="abc-1", route="my route",
                     status=503, client='a"b', password="sk-secret")
    assert TextFormatter().format(record) == (
        '2026-12-01T11:24:09.123Z INFO omniroute.access: answered 503 request_id=abc-1 '
        'route="my route" status=503 client="a\\"b"')


def test_the_fields_are_the_documented_ones() -> None:
    text = Path("docs/gateway.md").read_text()
    table = text[text.index("| field |"):]
    for name in ("ts", "level", "logger", "msg", "exc", *FIELDS):
        assert f"| `{name}` |" in table, name


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The process's log lines, in JSON, into a buffer; the logging set-up put back."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    library = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate)
               for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")}
    buffer = io.StringIO()
    configure_logging("json", "info", buffer)
    try:
        yield buffer
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        for name, (handlers, propagate) in library.items():
            logging.getLogger(name).handlers[:] = handlers
            logging.getLogger(name).propagate = propagate


def _lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    """Every line, each parsed as one JSON object (a line that is not one fails)."""
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    for line in lines:
        assert TS.fullmatch(line["ts"]), line
    return lines


def test_configure_logging_refuses_unknown_values() -> None:
    with pytest.raises(ValueError, match="log format 'xml'"):
        configure_logging("xml", "info", io.StringIO())
    with pytest.raises(ValueError, match="log level 'loud'"):
        configure_logging("json", "loud", io.StringIO())


async def test_uvicorn_lines_go_through_the_same_formatter(
        tmp_path: Path, captured: io.StringIO) -> None:
    async with running_gateway(tmp_path):  # uvicorn is configured by now
        logging.getLogger("uvicorn.error").warning("from uvicorn\nwith a second line")
        logging.getLogger("uvicorn.error").info("under uvicorn's own level: dropped")
    said = [line for line in _lines(captured) if line["logger"] == "uvicorn.error"]
    assert [(s["level"], s["msg"]) for s in said] == [
        ("warning", "from uvicorn\nwith a second line")]


# -- request ids ---------------------------------------------------------------------------

def test_a_safe_client_id_is_kept_and_ours_are_short_and_unique() -> None:
    ids = RequestIds()
    assert ids.take([(b"x-request-id", b"Req_1.2:3-x")]) == "Req_1.2:3-x"
    longest = b"a" * MAX_ID_CHARS
    assert ids.take([(b"accept", b"*/*"), (b"x-request-id", longest)]) == "a" * 128
    ours = [ids.take([]) for _ in range(1000)]
    assert len(set(ours)) == 1000
    assert all(OURS.fullmatch(i) and len(i) <= 14 for i in ours)
    assert ours[0] == f"{ids.prefix}-1" and ours[-1] == f"{ids.prefix}-1000"
    assert re.fullmatch(r"[0-9a-f]{8}", ids.prefix)


@pytest.mark.parametrize("headers", [
    [(b"x-request-id", b"a" * (MAX_ID_CHARS + 1))],
    [(b"x-request-id", b"")],
    [(b"x-request-id", b"abc\r\nx-injected: 1")],
    [(b"x-request-id", b"abc\x00def")],
    [(b"x-request-id", b"abc\x1b[31m")],
    [(b"x-request-id", "réquest".encode())],
    [(b"x-request-id", "\u202eabc".encode())],
    [(b"x-request-id", b"has space")],
    [(b"x-request-id", b"quo\"te")],
    [(b"x-request-id", b"a"), (b"x-request-id", b"b")],
    [(b"x-request-id", b"same")] * 100,
], ids=["129-chars", "empty", "crlf", "nul", "escape", "latin", "bidi", "space", "quote",
        "two", "a-hundred"])
def test_hostile_client_ids_get_ours(headers: list[tuple[bytes, bytes]]) -> None:
    ids = RequestIds(prefix="0badc0de")
    assert ids.take(headers) == "0badc0de-1"


def test_an_id_names_one_request_in_flight_never_two() -> None:
    """A client's id held by a request in flight gets ours; once released it is the
    client's again. Ours are easy to guess: a client's id that begins with our prefix
    gets ours, so none is taken before we give it."""
    ids = RequestIds(prefix="0badc0de")
    mine = [(b"x-request-id", b"mine")]
    assert ids.take(mine) == "mine"
    assert ids.take(mine) == "0badc0de-1"
    ids.release("mine")
    assert ids.take(mine) == "mine"
    assert ids.take([(b"x-request-id", b"0badc0de-3")]) == "0badc0de-2"  # a guess of ours
    assert ids.take([]) == "0badc0de-3"
    assert ids.take([(b"x-request-id", b"0badc0de")]) == "0badc0de"  # not one of ours
    assert ids.take([(b"x-request-id", b"r12")]) == "0badc0de-4"  # a live run's, in a console
    assert ids.take([(b"x-request-id", b"r12x")]) == "r12x"
    assert ids.in_flight == 7
    for request_id in ("mine", "0badc0de-1", "0badc0de-2", "0badc0de-3", "0badc0de",
                       "0badc0de-4", "r12x", "never-taken"):
        ids.release(request_id)
    assert ids.in_flight == 0


# -- the gateway ---------------------------------------------------------------------------

def _recorder(gw: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def note(event: Event) -> None:
        seen.append(event.to_dict())

    gw.gateway.engine.bus.subscribe(note)
    return seen


def _about(events: list[dict[str, Any]], request_id: str) -> list[str]:
    return [e["type"] for e in events
            if e.get("request") == request_id or (e["type"] == "request"
                                                   and e["id"] == request_id)]


async def test_the_request_id_is_in_the_answer_the_events_and_the_log(
        tmp_path: Path, captured: io.StringIO) -> None:
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url,
                                                                  timeout=10) as http:
        events = _recorder(gw)
        body = {"model": "fallback", "messages": [{"role": "user", "content": "hi"}]}
        given = await http.post(CHAT, json=body, headers={"x-request-id": "client-7"})
        assert given.status_code == 200
        assert given.headers["x-request-id"] == "client-7"
        assert given.headers.get_list("x-request-id") == ["client-7"]
        ours = await http.post(CHAT, json=dict(body, model="chat"))
        own = ours.headers["x-request-id"]
        assert OURS.fullmatch(own) and own.startswith(gw.gateway.request_ids.prefix)
        hostile = await http.post(CHAT, json=dict(body, model="chat"),
                                  headers={"x-request-id": "x" * 129})
        assert OURS.fullmatch(hostile.headers["x-request-id"])
        await eventually(lambda: len(_about(events, own)) == 4, what="the events")
    # the broken provider is tried, fails, and the healthy one answers
    assert _about(events, "client-7") == ["request", "attempt", "result", "attempt",
                                         "result", "response"]
    assert _about(events, own) == ["request", "attempt", "result", "response"]
    access = [line for line in _lines(captured) if line["logger"] == "omniroute.access"]
    assert access[0] == {
        "ts": access[0]["ts"], "level": "info", "logger": "omniroute.access",
        "msg": "chat completion answered 200", "request_id": "client-7", "route": "fallback",
        "provider": "healthy", "connection": "h1", "model": "m", "status": 200,
        "attempts": 2, "latency_ms": access[0]["latency_ms"]}
    assert [(a["request_id"], a["status"]) for a in access] == [
        ("client-7", 200), (own, 200), (hostile.headers["x-request-id"], 200)]


async def test_every_proxied_answer_carries_the_id(
        tmp_path: Path, captured: io.StringIO) -> None:
    """Streaming, our own 4xx (bad body, unknown model) and our 429 with no target."""
    async with running_gateway(tmp_path) as gw, httpx.AsyncClient(base_url=gw.url,
                                                                  timeout=10) as http:
        events = _recorder(gw)
        msgs = [{"role": "user", "content": "hi"}]
        async with http.stream("POST", CHAT, json={"model": "chat", "messages": msgs,
                                                   "stream": True},
                               headers={"x-request-id": "s-1"}) as stream:
            assert stream.status_code == 200
            assert stream.headers["x-request-id"] == "s-1"
            assert b"data:" in b"".join([chunk async for chunk in stream.aiter_bytes()])
        answers = {
            "bad-1": await http.post(CHAT, content=b"{not json",
                                     headers={"x-request-id": "bad-1"}),
            "bad-2": await http.post(CHAT, json={"model": "chat", "messages": "no"},
                                     headers={"x-request-id": "bad-2"}),
            "nope-1": await http.post(CHAT, json={"model": "nope", "messages": msgs},
                                      headers={"x-request-id": "nope-1"}),
            "nope-2": await http.post(CHAT, json={"model": "\u202eevil\x1b[2J",
                                                  "messages": msgs},
                                      headers={"x-request-id": "nope-2"}),
            "busy-1": await http.post(CHAT, json={"model": "busy", "messages": msgs},
                                      headers={"x-request-id": "busy-1"}),
            "busy-2": await http.post(CHAT, json={"model": "busy", "messages": msgs},
                                      headers={"x-request-id": "busy-2"}),
        }
        await eventually(lambda: "response" in _about(events, "busy-2"), what="events")
    assert {k: (a.status_code, a.headers["x-request-id"]) for k, a in answers.items()} == {
        "bad-1": (400, "bad-1"), "bad-2": (400, "bad-2"), "nope-1": (404, "nope-1"),
        "nope-2": (404, "nope-2"),
        "busy-1": (429, "busy-1"), "busy-2": (429, "busy-2")}
    assert _about(events, "busy-2") == ["request", "skip", "response"]  # cooling: ours
    # a stream is answered at its first content, and its result comes when it ends
    assert _about(events, "s-1") == ["request", "attempt", "response", "result"]
    access = {a["request_id"]: a for a in _lines(captured) if a["logger"] == "omniroute.access"}
    assert {k: (a.get("route"), a["status"]) for k, a in access.items()} == {
        "s-1": ("chat", 200), "bad-1": (None, 400), "bad-2": (None, 400),
        "nope-1": ("nope", 404), "nope-2": ("\\u202eevil\\x1b[2J", 404),
        "busy-1": ("busy", 429), "busy-2": ("busy", 429)}
    assert "provider" not in access["busy-2"] and access["busy-2"]["attempts"] == 0
    assert access["busy-2"]["skips"] == "throttled/m:all_cooling"  # why no target took it
    assert "skips" not in access["busy-1"]  # it met the 429 itself: an attempt, no skip
    assert access["s-1"]["stream"] == "whole" and access["s-1"]["relayed_chunks"] > 3
    assert "replica" not in access["s-1"]  # one gateway, no fleet


async def test_a_fleet_replica_names_itself_on_its_access_lines(
        tmp_path: Path, captured: io.StringIO, prefix: str) -> None:
    async with running_gateway(tmp_path, redis=(REDIS_URL, prefix)) as gw, \
            httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        answer = await http.post(CHAT, json={"model": "chat", "messages": []},
                                 headers={"x-request-id": "fleet-1"})
        assert answer.status_code == 200
        assert gw.gateway.fleet is not None
        replica = gw.gateway.fleet.replica
    (line,) = [a for a in _lines(captured) if a.get("request_id") == "fleet-1"]
    assert line["replica"] == replica


async def test_hostile_ids_on_the_wire_get_ours(tmp_path: Path) -> None:
    """Bytes no client library would send, raw on a socket. (A control character other
    than a tab is refused by the HTTP parser before the request is one: a 400 at the
    socket, tests/test_gateway_limits.py.)"""
    hostile = ["réq".encode(), b"x" * 129, b"\t", b"\xff\xfe"]
    async with running_gateway(tmp_path) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        got = []
        for value in [*hostile, None]:
            reader, writer = await asyncio.open_connection(host, int(port))
            body = b'{"model": "chat", "messages": []}'
            head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                    b"content-type: application/json\r\ncontent-length: %d\r\n"
                    b"connection: close\r\n" % len(body))
            if value is not None:
                head += b"x-request-id: " + value + b"\r\n"
            else:  # many headers, each a fine id: which is the request's? none
                head += b"".join(b"x-request-id: id-%d\r\n" % i for i in range(50))
            writer.write(head + b"\r\n" + body)
            answer = await reader.read()
            writer.close()
            status = answer.split(b" ", 2)[1]
            ids = re.findall(rb"(?im)^x-request-id: (.*?)\r$", answer)
            got.append((status, ids))
    for status, ids in got:
        assert status == b"200" and len(ids) == 1 and OURS.fullmatch(ids[0].decode())


# -- no key, no content: the real command, both formats ------------------------------------

SECRET_KEY = "sk-very-secret-key-4242"
CONTENT = "the-private-words-of-a-user"


class EchoUpstream:
    """An upstream that repeats the request's key and content in its answers: a 401 with
    both in the error (as some providers do), or a 200 with the content."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                     ) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
                body = await reader.readexactly(length)
                auth = re.search(rb"(?i)authorization: ([^\r]*)", head)
                echoed = (auth[1] if auth else b"") + b" " + body
                status = b"401 Unauthorized" if b"/deny/" in head.split(b"\r\n")[0] \
                    else b"200 OK"
                answer = json.dumps({"error": {"message": echoed.decode()}} if
                                    status.startswith(b"401") else
                                    {"id": "x", "object": "chat.completion", "choices": [
                                        {"index": 0, "message": {"role": "assistant",
                                                                 "content": echoed.decode()},
                                         "finish_reason": "stop"}]}).encode()
                writer.write(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\n"
                             b"x-request-id: upstream-1\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, len(answer), answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port


def _config(tmp_path: Path, upstream_port: int) -> Path:
    base = f"http://127.0.0.1:{upstream_port}"
    config = {
        "providers": {
            "good": {"base_url": f"{base}/ok/v1", "models": ["m"],
                     "connections": [{"id": "g1", "api_key": SECRET_KEY}]},
            "deny": {"base_url": f"{base}/deny/v1", "models": ["m"],
                     "connections": [{"id": "d1", "api_key": SECRET_KEY + "-deny"}]},
        },
        "routes": {"chat": {"targets": ["deny/m", "good/m"]},
                   "denied": {"targets": ["deny/m"]}},
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "token").write_text(TOKEN)
    return path


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_no_key_and_no_content_in_any_log_line(tmp_path: Path, log_format: str) -> None:
    upstream = EchoUpstream()
    port = await upstream.start()
    config = _config(tmp_path, port)
    listen = _free_port()
    errors = tmp_path / "stderr"
    with errors.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "omniroute_tui.gateway", "--config", str(config),
             "--listen", f"127.0.0.1:{listen}", "--token-file", str(tmp_path / "token"),
             "--log-format", log_format, "--log-level", "debug"],
            stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{listen}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            await eventually(lambda: _up(http), what="the gateway")
            msgs = [{"role": "user", "content": CONTENT}]
            auth = {"authorization": f"Bearer {TOKEN}"}
            denied = await http.post(CHAT, json={"model": "denied", "messages": msgs})
            assert denied.status_code == 401  # ours, naming the kind: auth_failed
            served = await http.post(CHAT, json={"model": "chat", "messages": msgs},
                                     headers={"authorization": f"Bearer {SECRET_KEY}"})
            assert served.status_code == 200
            assert CONTENT in served.text and SECRET_KEY in served.text  # echoed
            assert served.headers["x-upstream-request-id"] == "upstream-1"
            (own,) = served.headers.get_list("x-request-id")  # ours, the upstream's renamed
            assert OURS.fullmatch(own)
            streamed = await http.post(CHAT, json={"model": "chat", "messages": msgs,
                                                   "stream": True})
            assert streamed.status_code == 200 and CONTENT in streamed.text
            for bad, status in (
                    (b'{"model": "chat", "messages": "' + CONTENT.encode() + b'"}', 400),
                    (b'{"model": "no-such-model", "messages": []}', 404),
                    (CONTENT.encode(), 400)):
                assert (await http.post(CHAT, content=bad)).status_code == status
            assert (await http.get("/api/resilience/state", headers=auth)).status_code == 200
            assert (await http.post("/api/resilience/breakers/deny/reset",
                                    headers=auth)).status_code == 200
            assert (await http.get("/api/resilience/state", headers={
                "authorization": f"Bearer {TOKEN}x"})).status_code == 401
    finally:
        proc.send_signal(2)
        proc.wait(timeout=15)
        assert upstream.server is not None
        upstream.server.close()
    text = errors.read_text()
    lines = text.splitlines()
    assert len([line for line in lines if "chat completion answered" in line]) == 6
    for secret in (SECRET_KEY, TOKEN, CONTENT):
        assert secret not in text
    assert "Traceback" not in text
    if log_format == "json":
        parsed = [json.loads(line) for line in lines]
        assert all(TS.fullmatch(p["ts"]) for p in parsed)
        answered = [p for p in parsed if p["logger"] == "omniroute.access"]
        assert [(p.get("route"), p["status"]) for p in answered] == [
            ("denied", 401), ("chat", 200), ("chat", 200), (None, 400),
            ("no-such-model", 404), (None, 400)]
        assert answered[1]["provider"] == "good" and answered[1]["connection"] == "g1"
    else:
        assert all(TS.match(line) for line in lines)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _up(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/health")).status_code == 200
    except httpx.HTTPError:
        return False


# -- the commands' options -----------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--log-format", "xml"], ["--log-format", ""],
                                  ["--log-level", "loud"]])
@pytest.mark.parametrize("command", ["omniroute_tui.gateway", "omniroute_tui.console"])
def test_a_bad_log_option_is_a_usage_error(command: str, argv: list[str]) -> None:
    extra = ["--config", "router.yaml"] if command.endswith("gateway") else []
    done = subprocess.run([sys.executable, "-m", command, *extra, *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "invalid choice" in done.stderr and argv[0] in done.stderr
    assert "Traceback" not in done.stderr


def test_the_console_writes_its_log_lines_to_the_log_file(tmp_path: Path) -> None:
    from omniroute_tui.console.cli import _log_to_file, _parser

    done = subprocess.run([sys.executable, "-m", "omniroute_tui.console", "--log-format",
                           "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "give it too" in done.stderr
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        _log_to_file(_parser().parse_args(["--log-file", str(tmp_path / "log"),
                                           "--log-format", "json"]))
        logging.getLogger("omniroute.gateway").info("one", extra={"request_id": "r-1"})
        logging.getLogger("omniroute.gateway").debug("under the level")
        handler = root.handlers[0]
        handler.close()
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    lines = (tmp_path / "log").read_text().splitlines()
    assert [(line["msg"], line["request_id"]) for line in map(json.loads, lines)] == [
        ("one", "r-1")]


def test_a_gateway_that_cannot_start_says_why_in_a_json_line(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("providers: [\n")
    done = subprocess.run([sys.executable, "-m", "omniroute_tui.gateway", "--config",
                           str(tmp_path / "bad.yaml"), "--log-format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    said = json.loads(line)
    assert said["level"] == "error" and said["logger"] == "omniroute.gateway"
    assert said["msg"].startswith("1 problem:\n") and f"{tmp_path}/bad.yaml:2:" in said["msg"]


def test_the_requests_pane_shows_a_long_client_id_short_and_the_detail_whole() -> None:
    from omniroute_tui.console.model.console_model import ConsoleModel
    from omniroute_tui.console.model.panes import Pane
    from omniroute_tui.engine.events import RequestEvent, ResponseEvent

    model = ConsoleModel({}, lambda: 0)
    long_id, short_id = "c" * 128, "client-7"
    for request_id in (long_id, short_id):
        model.on_event(RequestEvent(1, request_id, "chat"))
        model.on_event(ResponseEvent(5, request_id, 200, 1, 4, 0, "p/a/m"))
    rows = model.request_rows(10)
    assert rows[short_id][0] == short_id
    assert rows[long_id][0] == "c" * 23 + "…"
    detail = model.detail(Pane.REQUESTS, long_id, 10)
    assert detail is not None and detail[0] == f"request {long_id}"


async def test_the_console_serving_the_gateway_shows_and_logs_the_client_id(
        tmp_path: Path) -> None:
    """`omniroute-tui --config F --listen ... --log-file L --log-format json`: the id is in
    the answer, the console's requests pane and the log file."""
    from omniroute_tui.console.cli import _log_to_file, _parser, build_app
    from omniroute_tui.console.widgets.keyed_table import KeyedTable

    from .console_helpers import settle

    config, log_file = tmp_path / "router.yaml", tmp_path / "gateway.log"
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    async with running_gateway(tmp_path) as gw:
        config.write_text(gw.config_text)
        args = _parser().parse_args(["--config", str(config), "--listen", "127.0.0.1:0",
                                     "--operator", "dave", "--log-file", str(log_file),
                                     "--log-format", "json"])
        try:
            _log_to_file(args)
            app = build_app(args)
            async with app.run_test() as pilot:
                await settle(pilot, lambda: app.gateway_server is not None)  # type: ignore[attr-defined]
                url = app.gateway_server.url  # type: ignore[attr-defined]
                async with httpx.AsyncClient(timeout=10) as http:
                    reply = await http.post(f"{url}{CHAT}", headers={"x-request-id": "tui-1"},
                                            json={"model": "chat", "messages": []})
                assert reply.headers["x-request-id"] == "tui-1"
                await settle(pilot, lambda: "tui-1" in app.model.requests, 50)  # type: ignore[attr-defined]
                app.action_pane("requests")  # type: ignore[attr-defined]
                app.refresh_view()  # type: ignore[attr-defined]
                await pilot.pause()
                table = app.query_one("#requests-table", KeyedTable)  # type: ignore[attr-defined]
                assert table.shown_row("tui-1")[:3] == ["tui-1", "chat", "200"]
        finally:
            for handler in root.handlers:
                handler.close()
            root.handlers[:], root.level = saved[0], saved[1]
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    access = [line for line in lines if line["logger"] == "omniroute.access"]
    assert [(a["request_id"], a["route"], a["status"]) for a in access] == [
        ("tui-1", "chat", 200)]
