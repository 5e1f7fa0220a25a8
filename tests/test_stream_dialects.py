"""Each API's stream as the relay reads it, and a cut stream's last event in the client's
API (docs/design.md §7, §14), down to what the official SDKs raise."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniroute_tui.apis import Endpoint, Translation
from omniroute_tui.drivers.dialects import (
    Seen,
    StreamBroken,
    error_event,
    examine_anthropic,
    examine_openai,
    examine_responses,
    sse_event,
)
from omniroute_tui.drivers.relay import StreamRelay
from omniroute_tui.drivers.sse import SseDecoder, SseEvent
from omniroute_tui.drivers.translated import stream_translator
from omniroute_tui.engine import StreamCut
from omniroute_tui.translate.chat_to_messages import StreamToChat

from .gateway_helpers import serving


def event(text: str) -> SseEvent:
    (parsed,) = SseDecoder().feed(text.encode())
    return parsed


@pytest.mark.parametrize(("examine", "text", "seen"), [
    (examine_openai, 'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n',
     Seen.PREAMBLE),
    (examine_openai, 'data: {"choices": [{"text": "hi", "index": 0}]}\n\n', Seen.CONTENT),
    (examine_openai, "data: [DONE]\n\n", Seen.DONE),
    (examine_responses, 'event: response.created\ndata: {"type": "response.created"}\n\n',
     Seen.PREAMBLE),
    (examine_responses, 'data: {"type": "response.output_item.added"}\n\n', Seen.PREAMBLE),
    (examine_responses, 'data: {"type": "response.output_text.delta", "delta": "x"}\n\n',
     Seen.CONTENT),
    (examine_responses, 'data: {"type": "response.completed"}\n\n', Seen.DONE),
    (examine_anthropic, 'event: message_start\ndata: {"type": "message_start"}\n\n',
     Seen.PREAMBLE),
    (examine_anthropic, 'event: ping\ndata: {"type": "ping"}\n\n', Seen.OTHER),
    (examine_anthropic, 'data: {"type": "content_block_delta"}\n\n', Seen.CONTENT),
    (examine_anthropic, 'data: {"type": "message_stop"}\n\n', Seen.DONE),
    (examine_anthropic, 'data: {"type": "a_future_event"}\n\n', Seen.OTHER),
    (examine_anthropic, ": keep-alive\n\n", Seen.OTHER),
])
def test_each_dialect_reads_its_events(examine: object, text: str, seen: Seen) -> None:
    assert examine(event(text)) is seen  # type: ignore[operator]


@pytest.mark.parametrize(("examine", "text", "cut"), [
    (examine_anthropic, 'event: error\ndata: {"type": "error", "error": {"type": '
     '"overloaded_error", "message": "Overloaded"}}\n\n', StreamCut.UPSTREAM_ERROR),
    (examine_responses, 'data: {"type": "response.failed", "response": {"error": '
     '{"message": "boom"}}}\n\n', StreamCut.UPSTREAM_ERROR),
    (examine_responses, 'data: {"type": "error", "message": "bad"}\n\n',
     StreamCut.UPSTREAM_ERROR),
    (examine_anthropic, "data: [1, 2]\n\n", StreamCut.BAD_EVENT),
    (examine_responses, "data: {not json\n\n", StreamCut.BAD_EVENT),
])
def test_an_error_or_a_bad_event_breaks_the_stream(examine: object, text: str,
                                                   cut: StreamCut) -> None:
    with pytest.raises(StreamBroken) as info:
        examine(event(text))  # type: ignore[operator]
    assert info.value.cut is cut


def test_a_cut_stream_ends_in_the_clients_own_error_shape() -> None:
    anthropic_end = error_event(Endpoint.MESSAGES, StreamCut.RESET, "reset", 3)
    assert anthropic_end.startswith(b"event: error\n")
    body = json.loads(anthropic_end.split(b"data: ", 1)[1])
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    responses_end = json.loads(error_event(Endpoint.RESPONSES, StreamCut.IDLE, "idle", 0)
                               .split(b"data: ", 1)[1])
    assert (responses_end["type"], responses_end["code"]) == ("error", "stream_cut")
    chat_end = json.loads(error_event(Endpoint.CHAT, StreamCut.NO_DONE, "no", 1)[6:])
    assert chat_end["error"]["code"] == "stream_cut"


class Body:
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        raise httpx.RemoteProtocolError("peer closed connection")

    async def aclose(self) -> None:
        return None


async def test_a_translated_stream_cut_midway_ends_with_an_anthropic_error_event() -> None:
    """An OpenAI upstream's stream for an Anthropic client breaks after two tokens: the
    client has its message begun, two text deltas, then Anthropic's error event."""
    chunk = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "one "}}]}
    pieces = [b"data: " + json.dumps(chunk).encode() + b"\n\n"] * 2
    relay = StreamRelay(Body(pieces), 5000, examine=examine_openai, client=Endpoint.MESSAGES,
                        translate=stream_translator(Translation.MESSAGES_TO_CHAT, {}, "gpt", 0))
    await relay.first_content()
    out = b"".join([piece async for piece in relay.relay()])
    names = [e.name for e in SseDecoder().feed(out)]
    assert names == [b"message_start", b"content_block_start", b"content_block_delta",
                     b"content_block_delta", b"error"]
    assert relay.cut is StreamCut.RESET and relay.relayed_chunks == 2


async def test_the_anthropic_sdk_raises_on_a_cut_stream() -> None:
    """What the SDK makes of our error event: its own exception, not a short answer."""
    chunk = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "one "}}]}
    body = (b"data: " + json.dumps(chunk).encode() + b"\n\n")
    translate = stream_translator(Translation.MESSAGES_TO_CHAT, {}, "gpt", 0)
    relay = StreamRelay(Body([body]), 5000, client=Endpoint.MESSAGES, translate=translate)
    await relay.first_content()
    streamed = b"".join([piece async for piece in relay.relay()])

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": streamed})

    async with serving(app) as base, anthropic.AsyncAnthropic(
            api_key="x", base_url=base.removesuffix("/v1"), max_retries=0) as client:
        with pytest.raises(anthropic.APIStatusError, match="the stream broke after 1 chunk"):
            async with client.messages.stream(model="gpt", max_tokens=5, messages=[
                    {"role": "user", "content": "hi"}]) as stream:
                async for _ in stream.text_stream:
                    pass


@given(st.lists(st.one_of(st.text(max_size=20), st.sampled_from(["", "\u2028", '"\\</'])),
                max_size=6), st.text(max_size=12), st.booleans())
def test_a_translated_stream_is_byte_for_byte_what_its_chunks_say(
        texts: list[str], message_id: str, include_usage: bool) -> None:
    """The translator writes text deltas straight to bytes (most events of a stream): the
    bytes are those of the chunks `StreamToChat` makes, each written by `sse_event`."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": message_id, "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                                   "delta": {"type": "text_delta", "text": text}})
          for text in texts],
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": len(texts)}}),
        ("message_stop", {"type": "message_stop"})]
    body = {"stream_options": {"include_usage": include_usage}}
    translate = stream_translator(Translation.CHAT_TO_MESSAGES, body, "claude", 7)
    reference = StreamToChat("claude", 7, include_usage=include_usage)
    for name, data in events:
        raw = sse_event(name, data)
        event = next(iter(SseDecoder().feed(raw)))
        expected = b"".join(sse_event(None, chunk) for chunk in reference.feed(name, data))
        assert translate(event, Seen.CONTENT) == expected
