"""The fakes' streamed answers: their SSE events, and in virtual time what the gateway
sees of one, stream faults included (docs/simulator.md, "Streams").

A streamed answer's headers come after the provider's latency `L`, with an event that
names the role; token `k` (1 to `tokens`) comes at `L + k·interval`, and the finish event
and `data: [DONE]` right after the last. A stream fault changes that timeline:

- `stream_cut: {after_tokens: N}`: reset right after token N; a `stream_cut` (reset)
  at `L + N·interval`.
- `stream_stall: {after_tokens: N, for: D}`: token N+1 comes D after token N; when D is
  `stream_idle` or longer, a `stream_cut` (idle) at `L + N·interval + stream_idle`.
- `bad_chunk: {after_tokens: N}`: a malformed event where token N+1 would come; a
  `stream_cut` (bad_event) at `L + (N+1)·interval`.
- `no_done: true`: the body ends after the finish event; a `stream_cut` (no_done) at
  `L + tokens·interval`.
- `first_token: D`: the first events come D after the headers; with `L + D` at or past
  the attempt's `first_token`, a `timeout` (first_token) then; without `first_token`,
  `request.timeout` bounds the first content alike (a plain `timeout`).

A fault that counts tokens acts on answers longer than N tokens only. A stream broken
before its first token (`after_tokens: 0`) fails the attempt with nothing relayed, and
the request moves on, as does a first token that comes too late.
"""

from __future__ import annotations

import json
from typing import Any

from omniroute_tui.engine.classify import Classification, TransportFailure, classify_transport
from omniroute_tui.engine.kinds import FailureKind, StreamCut
from omniroute_tui.router.steps import Attempt

from .fakes import FakeAnswer, StreamEnd
from .scenario import Fault, FaultAction, StreamSpec

__all__ = ["DONE", "chunk", "stream_fate"]

DONE = b"data: [DONE]\n\n"
#: the `created` of the events whose sizes virtual time counts (ten digits, as today's)
_CREATED = 1_700_000_000
#: a token as virtual time counts its bytes: a word of five letters and a space
_WORD = "token "
_CUT = Classification(FailureKind.STREAM_CUT)
_TIMED_OUT = classify_transport(TransportFailure.READ_TIMEOUT)


def chunk(model: str, delta: dict[str, Any], finish: str | None = None, *,
          created: int = _CREATED) -> bytes:
    """One `chat.completion.chunk` event, as OpenAI streams them."""
    data = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(data)}\n\n".encode()


_SIZES: dict[str, tuple[int, int, int]] = {}


def _sizes(model: str) -> tuple[int, int, int]:
    """The bytes of the role's event, of a token's and of the finish event, for `model`."""
    sizes = _SIZES.get(model)
    if sizes is None:
        if len(_SIZES) > 1024:  # a scenario's models are few; a bound all the same
            _SIZES.clear()
        sizes = _SIZES[model] = (len(chunk(model, {"role": "assistant", "content": ""})),
                                 len(chunk(model, {"content": _WORD})),
                                 len(chunk(model, {}, "stop")))
    return sizes


def stream_fate(fate: FakeAnswer, fault: Fault | None, spec: StreamSpec, attempt: Attempt
                ) -> FakeAnswer:
    """What the gateway sees of a streamed answer whose headers came as `fate` says
    (an error or a timeout before them is `fate` itself), with `attempt`'s bounds."""
    if fate.status != 200:
        return fate
    start, gap, tokens = fate.delay_ms, spec.interval_ms, spec.tokens
    action = fault.action if fault is not None else None
    after = fault.after_tokens if fault is not None else 0
    if action in (FaultAction.STREAM_CUT, FaultAction.STREAM_STALL, FaultAction.BAD_CHUNK) \
            and after >= tokens:
        action = None  # the answer ends before the fault's token
    first = start + (fault.hold_ms if fault is not None and action is FaultAction.FIRST_TOKEN
                     else gap)
    # the first content is awaited for `first_token`, else for `request.timeout`
    limit = attempt.first_token_ms or attempt.timeout_ms
    broken: tuple[int, StreamCut] | None = None  # a break before the first content
    if action is FaultAction.STREAM_CUT and after == 0:
        broken = (start, StreamCut.RESET)
    elif action is FaultAction.BAD_CHUNK and after == 0:
        broken = (first, StreamCut.BAD_EVENT)
    if (broken[0] if broken else first) >= limit:
        return FakeAnswer(limit, 0, _TIMED_OUT,
                          reason=StreamCut.FIRST_TOKEN if attempt.first_token_ms else None)
    if broken is not None:
        return FakeAnswer(broken[0], 0, _CUT, reason=broken[1])
    role, token, finish = _sizes(attempt.model)
    cut: StreamCut | None = None
    chunks = tokens
    if action is FaultAction.STREAM_CUT:
        end, cut, chunks = start + after * gap, StreamCut.RESET, after
    elif action is FaultAction.BAD_CHUNK:
        end, cut, chunks = start + (after + 1) * gap, StreamCut.BAD_EVENT, after
    elif action is FaultAction.STREAM_STALL:
        assert fault is not None
        stalled = start + after * gap
        if fault.hold_ms >= attempt.stream_idle_ms:
            end, cut, chunks = stalled + attempt.stream_idle_ms, StreamCut.IDLE, after
        else:
            end = stalled + fault.hold_ms + (tokens - after - 1) * gap
    elif action is FaultAction.NO_DONE:
        end, cut = start + tokens * gap, StreamCut.NO_DONE
    else:
        end = first + (tokens - 1) * gap
    relayed = role + chunks * token
    if cut is None or cut is StreamCut.NO_DONE:  # the finish event: content, as a relay
        chunks += 1                              # counts it
        relayed += finish + (len(DONE) if cut is None else 0)
    return FakeAnswer(first, 200, fate.classification, fate.headers,
                      stream=StreamEnd(end - first, cut, relayed, chunks))
