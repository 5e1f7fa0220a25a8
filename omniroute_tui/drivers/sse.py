"""An incremental Server-Sent Events decoder: bytes in as they arrive, whole events out.

Each event keeps the exact bytes it came in (`raw`, its blank line included), so a relay
forwards what the upstream sent, byte for byte, and nothing it did not. Lines end with
LF, CRLF or CR, as the SSE format allows; an event is the lines up to a blank one. An
event that grows past `max_event_bytes` before its blank line is an error, not memory
held for whatever a broken upstream sends.
"""

from __future__ import annotations

import re

from ..engine.values import value

__all__ = ["MAX_EVENT_BYTES", "SseDecoder", "SseError", "SseEvent"]

#: the longest event taken (an OpenAI chunk is under 1 KiB; a tool call's arguments come
#: in many)
MAX_EVENT_BYTES = 1 << 20

#: a line's end followed by an empty line's: the end of an event (a CR followed by an LF
#: is one line end, and a CR at the end of what has come may be the first half of one)
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!$)|\n)")
#: the same once the body has ended: a CR at its very end is a whole line end
_LAST_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)$")
_LINE_END = re.compile(rb"\r\n|\r|\n")


class SseError(ValueError):
    """The body is not SSE this decoder takes (an event over the bound)."""


@value
class SseEvent:
    """One event: its bytes as they came, its `data` lines joined with LF (None: it had
    none, a comment or a keep-alive), its `event` field's value, if any, and whether it
    had a line that is no SSE field (`data`, `event`, `id`, `retry`) nor a comment: the
    format ignores such a line, a relay of an API's stream has reason not to (an error
    page in the middle of it)."""

    raw: bytes
    data: bytes | None
    name: bytes | None = None
    strange: bool = False


class SseDecoder:
    """Feed it the body's bytes as they come; it returns each event once it is whole."""

    __slots__ = ("_buffer", "_scanned", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = b""
        self._scanned = 0  # where the search for an event's end starts again

    @property
    def pending(self) -> int:
        """Bytes of an event begun and not finished."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        events = []
        start = 0
        search = _EVENT_END.search
        at = max(0, self._scanned - 3)  # an end (4 bytes at most) may straddle two chunks
        while True:
            found = search(buffer, at)
            if found is None:
                break
            end = found.end()
            events.append(_parse(buffer[start:end]))
            start = at = end
        rest = buffer[start:] if start else buffer
        if len(rest) > self.max_event_bytes:
            raise SseError(f"an event over {self.max_event_bytes >> 10} KiB without its end")
        self._buffer = rest
        self._scanned = len(rest)
        return events

    def finish(self) -> list[SseEvent]:
        """The body has ended: the event its last CR ended, if it was waiting for an LF
        that did not come; an event without its end is dropped, as the format says."""
        buffer, self._buffer, self._scanned = self._buffer, b"", 0
        if buffer.endswith(b"\r") and _LAST_END.search(buffer) is not None:
            return [_parse(buffer)]
        return []


def _parse(raw: bytes) -> SseEvent:
    """An event's fields; the usual one, a single `data: ...` line, without a split."""
    if raw.startswith(b"data: ") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2 \
            and b"\r" not in raw:
        return SseEvent(raw, raw[6:-2])
    data: list[bytes] = []
    name = None
    strange = False
    for line in _LINE_END.split(raw):
        if not line or line[0] == 58:  # empty, or a comment (":")
            continue
        field, _, content = line.partition(b":")
        if content[:1] == b" ":
            content = content[1:]
        if field == b"data":
            data.append(content)
        elif field == b"event":
            name = content
        elif field not in _OTHER_FIELDS:
            strange = True
    return SseEvent(raw, b"\n".join(data) if data else None, name, strange)


_OTHER_FIELDS = frozenset({b"id", b"retry"})
