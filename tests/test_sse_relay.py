"""The SSE decoder and the stream relay (docs/design.md §7): a client gets a prefix of the
upstream's bytes, whole events only, and a cut stream ends with an error event naming
what happened; never a short answer that looks whole."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniroute_tui.drivers import UpstreamClient
from omniroute_tui.drivers.http1 import ProtocolError
from omniroute_tui.drivers.relay import StreamBroken, StreamRelay
from omniroute_tui.drivers.sse import SseDecoder, SseError
from omniroute_tui.engine import StreamCut

from .helpers import alpha_beta_driver


def chunk(content: str | None = None, *, role: bool = False, finish: bool = False) -> bytes:
    delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    data = {"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta,
                         "finish_reason": "stop" if finish else None}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def answer(tokens: int) -> bytes:
    """An OpenAI-shaped stream: the role, `tokens` tokens, the finish, [DONE]."""
    return (chunk(role=True) + b"".join(chunk(f"t{i} ") for i in range(tokens))
            + chunk(finish=True) + b"data: [DONE]\n\n")


# -- the decoder ---------------------------------------------------------------------------

sse_lines = st.lists(st.sampled_from([
    b"data: {\"a\": 1}", b"data: [DONE]", b": keep-alive", b"event: error", b"data:x",
    b"id: 7", b"retry: 10", b"data", b""]), max_size=12)
line_ends = st.sampled_from([b"\n", b"\r\n", b"\r"])


@given(st.lists(st.tuples(sse_lines, line_ends), max_size=8), st.data())
def test_any_split_of_a_body_gives_the_same_events(
        blocks: list[tuple[list[bytes], bytes]], data: st.DataObject) -> None:
    body = b"".join(end.join(lines) + end + end for lines, end in blocks)
    whole = SseDecoder()
    expected = whole.feed(body) + whole.finish()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=10)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    split = SseDecoder()
    got = [event for piece in pieces for event in split.feed(piece)] + split.finish()
    assert [(e.raw, e.data, e.name) for e in got] == [
        (e.raw, e.data, e.name) for e in expected]
    # the events are the body's bytes in order (what follows the last is no event)
    assert body.startswith(b"".join(e.raw for e in got))


def test_fields_comments_and_line_ends() -> None:
    decoder = SseDecoder()
    events = decoder.feed(b": ping\n\nevent: error\r\ndata: {\"x\":\r\ndata:  1}\r\n\r\n"
                          b"data: [DONE]\r\r")
    assert [(e.data, e.name) for e in events] == [(None, None), (b'{"x":\n 1}', b"error")]
    assert decoder.pending == len(b"data: [DONE]\r\r")  # a CR may be half a CRLF: wait
    assert [e.data for e in decoder.finish()] == [b"[DONE]"]


def test_an_event_over_the_bound_is_refused_not_held() -> None:
    decoder = SseDecoder(max_event_bytes=1024)
    decoder.feed(b"data: " + b"x" * 1000)
    with pytest.raises(SseError, match="an event over 1 KiB"):
        decoder.feed(b"x" * 100)


# -- the relay -----------------------------------------------------------------------------


class Body:
    """An upstream body: `pieces`, then the end (`end` None), an exception, or a stall."""

    def __init__(self, pieces: list[bytes], end: BaseException | str | None = None) -> None:
        self.pieces = pieces
        self.end = end
        self.closed = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.end == "stall":
            await asyncio.Event().wait()
        if isinstance(self.end, BaseException):
            raise self.end

    async def aclose(self) -> None:
        self.closed = True


async def relayed(body: Body, idle_ms: int = 5000) -> tuple[StreamRelay, bytes]:
    relay = StreamRelay(body, idle_ms)
    await relay.first_content()
    return relay, b"".join([piece async for piece in relay.relay()])


def _error_of(sent: bytes) -> dict[str, object]:
    last = sent.rsplit(b"\n\n", 2)[-2]
    assert last.startswith(b"data: ")
    error: dict[str, object] = json.loads(last[6:])["error"]
    return error


async def test_a_whole_stream_is_passed_on_byte_for_byte() -> None:
    body = answer(60)
    relay, sent = await relayed(Body([body[i:i + 97] for i in range(0, len(body), 97)]))
    assert sent == body
    assert (relay.finished, relay.cut, relay.relayed_bytes, relay.relayed_chunks) == (
        True, None, len(body), 61)  # 60 tokens and the finish


@pytest.mark.parametrize(("tail", "end", "cut", "said"), [
    (b"", ProtocolError("the peer closed the connection mid-body"), StreamCut.RESET,
     "ProtocolError: the peer closed the connection mid-body"),
    (b"", ConnectionResetError("reset by peer"), StreamCut.RESET, "reset by peer"),
    (b"", None, StreamCut.NO_DONE, "the body ended without data: [DONE]"),
    (b'data: {"choices": [{"delta": {"content": "t40"}}', None, StreamCut.NO_DONE,
     "without data: [DONE]"),
    (b"data: {not json}\n\n" + chunk("more"), None, StreamCut.BAD_EVENT,
     "an event that is not JSON"),
    (b"data: [1, 2]\n\n", None, StreamCut.BAD_EVENT, "not a JSON object"),
    (b"<html><body>502 Bad Gateway</body></html>\r\n\r\n", None, StreamCut.BAD_EVENT,
     "a line that is not SSE"),
    (b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n', None,
     StreamCut.UPSTREAM_ERROR, "the upstream sent an error: overloaded"),
    (b'event: error\ndata: {"type": "overloaded"}\n\n', None, StreamCut.UPSTREAM_ERROR,
     "the upstream sent an error"),
])
async def test_a_cut_stream_ends_with_an_error_event_naming_it(
        tail: bytes, end: BaseException | None, cut: StreamCut, said: str) -> None:
    good = chunk(role=True) + b"".join(chunk(f"t{i} ") for i in range(40))
    relay, sent = await relayed(Body([good, tail], end))
    assert sent.startswith(good) and sent.count(b"\n\n") == 42  # the good ones, whole
    error = _error_of(sent)
    assert (error["code"], error["reason"], error["type"]) == ("stream_cut", cut.value,
                                                               "upstream_error")
    assert said in str(error["message"]) and "after 40 chunk(s)" in str(error["message"])
    assert (relay.cut, relay.finished, relay.relayed_chunks) == (cut, False, 40)
    assert relay.relayed_bytes == len(good)


async def test_a_stall_is_cut_after_stream_idle() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    relay, sent = await relayed(Body([answer(20)[:-len(b"data: [DONE]\n\n") - 80]],
                                     "stall"), idle_ms=100)
    took = loop.time() - started
    assert 0.1 <= took < 1.0
    assert relay.cut is StreamCut.IDLE
    assert "nothing came for 0.1 s" in str(_error_of(sent)["message"])


async def test_a_slow_client_is_not_a_stall() -> None:
    """The idle bound counts the upstream's silence, not the time the client takes."""
    body = answer(3)
    relay = StreamRelay(Body([body[:50], body[50:]]), 50)
    await relay.first_content()
    sent = b""
    async for piece in relay.relay():
        sent += piece
        await asyncio.sleep(0.12)  # the client reading slowly, longer than stream_idle
    assert sent == body and relay.cut is None


async def test_a_client_that_leaves_ends_the_relay_at_once() -> None:
    relay = StreamRelay(Body([answer(5)[:300]], "stall"), 60_000)
    await relay.first_content()
    pieces = relay.relay()
    await anext(pieces)
    asyncio.get_running_loop().call_later(0.01, relay.client_gone)
    assert [piece async for piece in pieces] == []
    assert (relay.gone, relay.cut, relay.finished) == (True, None, False)


@pytest.mark.parametrize(("pieces", "end", "cut"), [
    ([b""], None, StreamCut.NO_DONE),
    ([chunk(role=True)], ConnectionResetError(), StreamCut.RESET),
    ([chunk(role=True), b"data: nope\n\n"], None, StreamCut.BAD_EVENT),
    ([b'data: {"error": {"message": "busy"}}\n\n'], None, StreamCut.UPSTREAM_ERROR),
])
async def test_a_stream_broken_before_its_first_content_sends_nothing(
        pieces: list[bytes], end: BaseException | None, cut: StreamCut) -> None:
    relay = StreamRelay(Body(pieces, end), 5000)
    with pytest.raises(StreamBroken) as broken:
        await relay.first_content()
    assert broken.value.cut is cut


async def test_what_comes_before_the_first_content_is_held_and_then_sent() -> None:
    body = b": warming up\n\n" + chunk(role=True) + chunk("hi") + b"data: [DONE]\n\n"
    relay = StreamRelay(Body([body[:20], body[20:]]), 5000)
    await relay.first_content()
    assert relay.relayed_bytes == 0  # nothing sent yet: the attempt could still fail
    assert b"".join([piece async for piece in relay.relay()]) == body


async def test_an_answer_without_content_is_whole_at_done() -> None:
    body = chunk(role=True) + b"data: [DONE]\n\n"
    relay, sent = await relayed(Body([body]))
    assert sent == body and relay.finished and relay.relayed_chunks == 0


# -- any cut point -------------------------------------------------------------------------

ENDS = {"eof": None, "reset": ConnectionResetError("reset")}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.data())
def test_at_any_cut_the_client_gets_a_prefix_and_the_outcome_says_so(
        tokens: int, data: st.DataObject) -> None:
    body = answer(tokens)
    cut_at = data.draw(st.integers(0, len(body)), label="cut_at")
    end = data.draw(st.sampled_from(sorted(ENDS)), label="end")
    bad = data.draw(st.booleans(), label="a malformed event at the cut")
    upstream = body[:cut_at] + (b"data: {oops\n\n" if bad and cut_at < len(body) else b"")
    splits = sorted(data.draw(st.lists(st.integers(0, len(upstream)), max_size=6)))
    pieces = [upstream[a:b] for a, b in zip([0, *splits], [*splits, len(upstream)],
                                            strict=True)]
    whole_events = body[:cut_at].count(b"\n\n")  # events the cut left whole
    first_content = len(chunk(role=True)) + len(chunk("t0 "))
    # a bad event ends the stream (what the cut left of an event joins it); else how
    # the body ended does
    expected = (StreamCut.BAD_EVENT if bad else StreamCut.RESET if end == "reset"
                else StreamCut.NO_DONE)

    async def run() -> None:
        relay = StreamRelay(Body(pieces, ENDS[end] if cut_at < len(body) else None), 5000)
        try:
            await relay.first_content()
        except StreamBroken as broken:  # before the first content: nothing was sent
            assert cut_at < first_content and broken.cut is expected
            return
        sent = b"".join([piece async for piece in relay.relay()])
        if cut_at == len(body):
            assert sent == body and relay.finished and relay.cut is None
            return
        relayed, _, error = sent.rpartition(b"data: {\"error\"")
        assert body.startswith(relayed) and relayed.count(b"\n\n") == whole_events
        assert relay.relayed_bytes == len(relayed)
        assert relay.cut is not None and not relay.finished
        assert json.loads(b"{\"error\"" + error)["error"]["reason"] == relay.cut.value
        assert relay.cut is expected

    asyncio.run(run())


async def test_keep_alives_without_end_before_any_content_hold_no_memory() -> None:
    relay = StreamRelay(Body([b": keep-alive\n\n" * 10_000] * 10), 5000)
    with pytest.raises(StreamBroken, match="over 1024 KiB of events before any content"):
        await relay.first_content()


# -- any cut point, through the driver: what the engine records ----------------------------


class _Cut(httpx.AsyncByteStream):
    """An upstream body that ends, or breaks (a reset), after `upstream`."""

    def __init__(self, upstream: bytes, splits: list[int], reset: bool) -> None:
        self.pieces = [upstream[a:b] for a, b in zip([0, *splits], [*splits, len(upstream)],
                                                     strict=True)]
        self.reset = reset

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.reset:
            raise httpx.ReadError("connection reset by peer")


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.data())
def test_the_engine_records_what_the_client_got(tokens: int, data: st.DataObject) -> None:
    """alpha streams a body cut at a random byte, beta a whole one: a cut before the
    first content falls back to beta unseen; after it, the client's bytes are a prefix of
    alpha's and an error event, and the result the engine records says so."""
    body = answer(tokens)
    cut_at = data.draw(st.integers(0, len(body)), label="cut_at")
    reset = data.draw(st.booleans(), label="reset") and cut_at < len(body)
    splits = sorted(data.draw(st.lists(st.integers(0, cut_at), max_size=5), label="splits"))
    first_content = len(chunk(role=True)) + len(chunk("t0 "))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "beta.test":
            return httpx.Response(200, content=answer(3),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, stream=_Cut(body[:cut_at], splits, reset),
                              headers={"content-type": "text/event-stream"})

    async def run() -> None:
        client = UpstreamClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
        _, driver, seen = alpha_beta_driver(client)
        completion = await driver.complete({"model": "r", "messages": [], "stream": True},
                                           stream=True)
        assert completion.relay is not None
        try:
            sent = b"".join([piece async for piece in completion.relay.relay()])
        finally:
            await completion.finish()
        await client.aclose()
        results = [(r["provider"], r["kind"], r.get("reason"), r.get("relayed_bytes"))
                   for r in seen.of("result")]
        if cut_at < first_content:  # alpha failed before anything was sent: beta answered
            assert sent == answer(3)
            assert results[0][:2] == ("alpha", "stream_cut")
            assert results[1] == ("beta", None, None, len(sent))
        elif cut_at == len(body):
            assert sent == body and results == [("alpha", None, None, len(body))]
        else:
            relayed, _, error = sent.rpartition(b'data: {"error"')
            assert body.startswith(relayed) and error
            reason = json.loads(b'{"error"' + error)["error"]["reason"]
            assert reason == ("reset" if reset else "no_done")
            assert results == [("alpha", "stream_cut", reason, len(relayed))]

    asyncio.run(run())
