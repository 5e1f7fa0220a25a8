"""Every proxied request's decision record, kept where any replica can read it back
(`GET /api/requests/{id}`, docs/gateway.md "A request's why").

The recorder keeps the events of each request in flight (a list append each, on the
routing path) and, when the request's access line is written (a stream's when it ends,
so a resume is in it), hands the whole record to a sink in one piece:

- a fleet's replicas write to Redis (`{prefix}:request:{id}`, kept `store.records.max_age`,
  one script call for all the records of a quarter second), so any replica
  answers for a request another served, even one that has died since;
- one gateway with a state database writes to its `records` table, with the other logs;
- one gateway without writes to memory: its last `MEMORY_RECORDS` requests.

A client may send its own `x-request-id`, and send it again: a key holds the last
`PER_ID` records under that id, oldest first. A record write that fails is retried; what
is past the bound of records waiting is dropped and counted, never the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from redis.exceptions import ResponseError

from ..config.limits import StoreRetention
from ..engine.bus import EventBus
from ..engine.events import (
    AttemptEvent,
    BudgetEvent,
    Event,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    SkipEvent,
    WaitEvent,
)
from ..store.sqlite_store import SqliteStore
from ..tasks import SendSoon
from .record_codec import decode_record, encode_record, record_json

__all__ = ["MEMORY_RECORDS", "PER_ID", "MemoryRecords", "RecordSink", "RecordsUnavailable",
           "RedisRecords", "RequestRecorder", "StoreRecords", "records_for"]

log = logging.getLogger("omniroute.records")

#: requests in flight whose events are kept; past it the oldest is dropped (a request that
#: never ends would be a bug: this bounds what it costs)
MAX_OPEN = 10_000
#: one gateway without a state database keeps this many records (about 1.6 MB)
MEMORY_RECORDS = 10_000
#: records kept under one request id (a client that reuses its ids)
PER_ID = 8
#: records waiting for Redis at most; past it the oldest are dropped and counted
MAX_PENDING = 50_000
SEND_EVERY_S = 0.25
REDIS_TIMEOUT_S = 1.0
#: records one script call writes at most (the script holds Redis while it runs)
_PUT_BATCH = 500
#: each record pushed on its id's list, the list cut to the last ARGV[2] and kept ARGV[1]
#: ms: one call for a batch, not three commands a record (5 µs of CPU a record sent,
#: against 34 for a pipeline of the three). A record the list holds already is not
#: pushed again (a call that timed out here may have run there: its retry is the same
#: bytes). A key of another type (a stranger's) refuses its record alone; any other
#: error (out of memory, a replica that turned read-only) stops the call there, and it
#: returns how many records it went through, to send the rest again.
_PUT = """
local refused = 0
for i = 1, #KEYS do
  local found = redis.pcall('LPOS', KEYS[i], ARGV[i + 2])
  local pushed = found
  if found == false then
    pushed = redis.pcall('RPUSH', KEYS[i], ARGV[i + 2])
  end
  if type(pushed) == 'table' and pushed.err then
    if string.find(pushed.err, 'WRONGTYPE') then
      refused = refused + 1
    else
      return {refused, i - 1, pushed.err}
    end
  elseif found == false then
    redis.pcall('LTRIM', KEYS[i], -tonumber(ARGV[2]), -1)
    redis.pcall('PEXPIRE', KEYS[i], ARGV[1])
  end
end
return {refused, #KEYS, ''}
"""
_STEPS = (AttemptEvent, ResultEvent, SkipEvent, WaitEvent, BudgetEvent, ResponseEvent)


def _text(value: object) -> str:
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))[:200]


class RecordsUnavailable(Exception):
    """Where the records are kept did not answer (Redis down, the database failing)."""


class RecordSink(Protocol):
    #: where the records are, for the answer and the start line ("redis", "database", ...)
    where: str

    @property
    def dropped(self) -> int:
        """Records lost before they were kept (past the bound of those waiting)."""

    def put(self, request_id: str, t: int, blob: bytes) -> None:
        """Keep a record (written later, in a batch); never raises."""

    async def get(self, request_id: str) -> list[bytes]:
        """The records kept under `request_id`, oldest first; RecordsUnavailable."""

    async def close(self) -> None:
        """Write what waits, within a bounded time."""


class RequestRecorder:
    """Builds each request's record from the engine's events; a collector for `/metrics`."""

    def __init__(self, bus: EventBus, sink: RecordSink, *, replica: str | None,
                 wall_ms: Any) -> None:
        self.sink = sink
        self.replica = replica
        self._wall_ms = wall_ms
        #: each request in flight's events (its id names no other in flight: `RequestIds`)
        self._open: dict[str, list[str]] = {}
        self.kept = 0
        self.abandoned = 0
        bus.subscribe(self._begin, RequestEvent)
        bus.subscribe(self._step, *_STEPS)

    def _begin(self, event: Event) -> None:
        assert isinstance(event, RequestEvent)
        opened = self._open
        if len(opened) >= MAX_OPEN:
            del opened[next(iter(opened))]
            self.abandoned += 1
        opened[event.id] = [event.to_json()]

    def _step(self, event: Event) -> None:
        lines = self._open.get(event.request)  # type: ignore[attr-defined]
        if lines is not None:
            lines.append(event.to_json())

    def in_flight(self, request_id: str) -> list[str] | None:
        """The events so far of a request not ended yet (each a JSON object)."""
        lines = self._open.get(request_id)
        return None if lines is None else list(lines)

    def finish(self, request_id: str, status: int) -> None:
        """The request's access line is written: its record goes to the sink. A request
        the router never saw (refused at the door, a body that was not JSON) has none."""
        lines = self._open.pop(request_id, None)
        if lines is None:
            return
        self.kept += 1
        self.sink.put(request_id, self._wall_ms(), encode_record(record_json(
            request_id, self.replica, status, lines)))

    async def lookup(self, request_id: str) -> dict[str, Any] | None:
        """What is known of `request_id`: its records, oldest first (each its replica,
        the status the client got and its events), and its events so far if it is in
        flight here; None: nothing. RecordsUnavailable when the store does not answer
        and the request is not in flight here."""
        open_lines = self.in_flight(request_id)
        try:
            blobs = await self.sink.get(request_id)
        except RecordsUnavailable:
            if open_lines is None:
                raise
            blobs = []
        records = [decode_record(blob, request_id) for blob in blobs]
        found = [record.to_dict() for record in records if record is not None]
        if not found and open_lines is None:
            return None if not blobs else {
                "id": request_id, "kept_in": self.sink.where, "records": [],
                "unreadable_records": len(blobs)}
        body: dict[str, Any] = {"id": request_id, "kept_in": self.sink.where,
                                "records": found}
        if len(found) < len(blobs):
            body["unreadable_records"] = len(blobs) - len(found)
        if open_lines is not None:
            body["in_flight"] = {"replica": self.replica,
                                 "events": [json.loads(line) for line in open_lines]}
        return body

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "omniroute_request_records", "Requests whose decision record was handed to "
            "where records are kept (GET /api/requests/{id}).", value=self.kept)
        yield CounterMetricFamily(
            "omniroute_request_records_dropped", "Decision records lost: a request open "
            "too long, or records past the bound of those waiting for their store.",
            value=self.abandoned + self.sink.dropped)
        yield GaugeMetricFamily("omniroute_request_records_open",
                                "Requests in flight whose events are being recorded.",
                                value=len(self._open))

    def kept_for(self) -> str:
        """How long records are kept, said for a person."""
        sink = self.sink
        if isinstance(sink, MemoryRecords):
            return f"for the last {sink.limit:,} requests"
        ms = sink.keep_ms if isinstance(sink, RedisRecords) else (
            sink.store.retention.records_max_age_ms if isinstance(sink, StoreRecords) else 0)
        return f"for {ms / 60_000:g} minutes"

    async def close(self) -> None:
        await self.sink.close()


def records_for(fleet: Any, store: SqliteStore | None,
                retention: StoreRetention | None) -> RecordSink:
    """Where a gateway keeps its records: a fleet's Redis, else its state database,
    else its memory."""
    if fleet is not None:
        return RedisRecords(fleet.client, fleet.prefix,
                            (retention or StoreRetention()).records_max_age_ms)
    if store is not None:
        return StoreRecords(store)
    return MemoryRecords()


class MemoryRecords:
    """The last `limit` records, in this process (one gateway without a database)."""

    where = "memory"

    def __init__(self, limit: int = MEMORY_RECORDS) -> None:
        self.limit = limit
        self.dropped = 0
        self._records: OrderedDict[str, list[bytes]] = OrderedDict()
        self._count = 0  # records kept, under every id

    def put(self, request_id: str, t: int, blob: bytes) -> None:
        kept = self._records.pop(request_id, None) or []
        kept.append(blob)
        self._count += 1
        if len(kept) > PER_ID:
            del kept[0]
            self._count -= 1
        self._records[request_id] = kept
        while self._count > self.limit:  # the oldest ids go, all their records with them
            _, gone = self._records.popitem(last=False)
            self._count -= len(gone)

    async def get(self, request_id: str) -> list[bytes]:
        return list(self._records.get(request_id, ()))

    async def close(self) -> None:
        return None


class StoreRecords:
    """The state database's `records` table (written and trimmed with its other logs)."""

    where = "database"

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    @property
    def dropped(self) -> int:
        return self.store.records_dropped

    def put(self, request_id: str, t: int, blob: bytes) -> None:
        self.store.put_record(t, request_id, blob)

    async def get(self, request_id: str) -> list[bytes]:
        try:
            return await self.store.records(request_id, PER_ID)
        except Exception as exc:  # a failing file: said to the caller as such
            raise RecordsUnavailable(f"the state database: {type(exc).__name__}") from None

    async def close(self) -> None:
        return None  # the store writes what waits when it closes


class RedisRecords:
    """A fleet's records, in Redis lists that expire `keep_ms` after their last write."""

    where = "redis"

    def __init__(self, redis: Any, prefix: str, keep_ms: int) -> None:
        self._redis = redis
        self._put = redis.register_script(_PUT)
        self._prefix = prefix
        self.keep_ms = keep_ms
        self.dropped = 0
        self.errors = 0
        #: records not sent yet, oldest first; the oldest go past MAX_PENDING (a deque:
        #: a Redis outage at 100 req/s fills it, and each put then drops one)
        self._pending: deque[tuple[str, bytes]] = deque(maxlen=MAX_PENDING)
        self._sender = SendSoon(self.flush)
        self._logged_at = -float("inf")

    def key(self, request_id: str) -> str:
        return f"{self._prefix}:request:{request_id}"

    def put(self, request_id: str, t: int, blob: bytes) -> None:
        pending = self._pending
        if len(pending) == MAX_PENDING:
            self.dropped += 1  # the append takes the oldest out
        pending.append((request_id, blob))
        self._sender.soon(SEND_EVERY_S)

    async def flush(self) -> bool:
        """Send what waits, a script call for each 500; on failure what was not sent
        waits again (newest kept) and the next try is a second away. Never raises: it
        runs as a task nobody awaits."""
        if not self._pending:
            return True
        sending = list(self._pending)
        self._pending.clear()
        refused = sent = 0
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                while sent < len(sending):
                    chunk = sending[sent:sent + _PUT_BATCH]
                    answer = await self._put(
                        keys=[self.key(request_id) for request_id, _ in chunk],
                        args=[self.keep_ms, PER_ID, *[blob for _, blob in chunk]])
                    refused += int(answer[0])
                    sent += int(answer[1])
                    if int(answer[1]) < len(chunk):  # Redis refused to write: try later
                        raise RecordsUnavailable(_text(answer[2]))
        except Exception as exc:  # down or slow: what was not sent waits for the next try
            self.errors += 1
            sending = sending[sent:]
            excess = len(sending) + len(self._pending) - MAX_PENDING
            if excess > 0:  # the oldest go
                self.dropped += excess
            kept = deque(sending, maxlen=MAX_PENDING)
            kept.extend(self._pending)  # put while this was sent: newer
            self._pending = kept
            self._say(f"Redis did not take {len(sending)} record(s) ({type(exc).__name__}: "
                      f"{str(exc)[:200] or 'timed out'}); kept to try again")
            self._sender.soon(1.0)
            return False
        # a stranger's key of another type under a request's name refuses its record
        # alone (the others are in): not retried, counted
        if refused:
            self.dropped += refused
            self._say(f"{refused} record(s) refused by keys of another type")
        return True

    def _say(self, what: str) -> None:
        now = time.monotonic()
        if now - self._logged_at >= 60:
            self._logged_at = now
            log.warning("request records: %s (%d failures so far)", what, self.errors)

    async def get(self, request_id: str) -> list[bytes]:
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                kept = await self._redis.lrange(self.key(request_id), -PER_ID, -1)
        except ResponseError as exc:  # a stranger's key of another type: no record
            if str(exc).startswith("WRONGTYPE"):
                return [b""]
            raise RecordsUnavailable(f"Redis: {str(exc)[:80]}") from None
        except Exception as exc:  # down or slow
            raise RecordsUnavailable(f"Redis: {type(exc).__name__}") from None
        return [blob for blob in kept if isinstance(blob, bytes)]

    async def close(self) -> None:
        await self._sender.close(REDIS_TIMEOUT_S * 2)
        if self._pending:  # Redis did not take them before the end: lost, and said
            self.dropped += len(self._pending)
            log.warning("request records: %d record(s) lost at shutdown: Redis did not "
                        "take them", len(self._pending))
            self._pending.clear()
