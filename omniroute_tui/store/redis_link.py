"""A replica's link to the rest of its fleet through Redis: its state changes go out on a
Redis Stream, the others' come back in and are applied by the engine's merge rules; the
latest state of every entity is also kept in a Redis hash, by a Lua script that applies
the same rules atomically (deadlines only extend; a breaker's latest transition wins), so
a replica that (re)connects reads the whole state, however old, before following.

The protocol itself (what is shared, how it is applied, whether this replica may probe) is
the sans-IO `FleetPeer` (`omniroute_tui/fleet/peer.py`); the link does its Redis calls.
Nothing here is on the routing path: the engine routes from its own state, the link
publishes and follows in background tasks, and a HALF_OPEN probe asks for the fleet's
lease without waiting (the peer answers from the lease this replica holds and the link
asks Redis for it in the background, so the request after the grant is the fleet's one
probe).
While Redis is away, outgoing changes queue (bounded), the link says it is failing, and on
reconnect it reads the state hash again before following the stream: the merge rules are
idempotent and indifferent to order for deadlines, so reading again is safe.
Behind Sentinel (`redis+sentinel://`), the sentinels name the master at each connect and
each second (a failover is the "Redis away" path), and each batch waits for a replica
(`WAIT`): an operator's action is `shared` only once a failover cannot lose it.
What it reads from Redis is checked first (`fleet_entries`, docs/design.md §10): a bad
entry is skipped and counted, and nothing an entry holds ends the follow loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ..config.redis_target import SentinelTarget, parse_redis_url
from ..engine.engine import ResilienceEngine
from ..engine.events import (
    BreakerEvent,
    CooldownEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
)
from ..fleet.commands import FleetCommand, ForceOpen, Reset
from ..fleet.peer import FleetPeer, Shared
from .fleet_entries import Accepted, Known, Rejected, Throttle, read_entry, read_state_field
from .sqlite_store import StoreHealth

__all__ = ["FleetHealth", "RedisLink"]

log = logging.getLogger("omniroute.fleet")

# Keeps a field of the state hash as "order|event": `max` replaces it only with a later
# deadline, `latest` only with a later (or equal) time, `set` always (an operator's clear);
# a field of another form (not written by this script) is replaced.
_KEEP = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and ARGV[4] ~= 'set' then
  local bar = string.find(current, '|', 1, true)
  local known = bar and tonumber(string.sub(current, 1, bar - 1))
  local order = tonumber(ARGV[3])
  if known and ((ARGV[4] == 'max' and order <= known)
                or (ARGV[4] == 'latest' and order < known)) then
    return 0
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. '|' .. ARGV[2])
return 1
"""
#: after its probe has answered, a replica keeps the lease this long, so the others hear
#: how it went before one of them probes the same window again
LEASE_HANDOVER_MS = 1000
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RETRY_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
#: behind Sentinel, a reconnect is retried at least this often: asking the sentinels is
#: cheap, and the new master answers within this of its promotion
_SENTINEL_RETRY_MAX_S = 0.5
#: behind Sentinel, the follow loop asks the sentinels this often whether the master
#: moved: a master that was failed over alive (`SENTINEL FAILOVER`, a partition) keeps
#: its clients until it is demoted, seconds later, and what it takes meanwhile is lost
_MASTER_CHECK_S = 1.0
#: behind Sentinel, each batch that goes out waits this long for a replica to have it
#: (`WAIT 1 100`): an operator's action is `shared` once a failover cannot lose it
REPLICA_WAIT_MS = 100
#: a follow loop that ran this long before it ended is restarted after the shortest delay
_STEADY_S = 60.0


@dataclass(frozen=True)
class FleetHealth(StoreHealth):
    """The link's health; `rejected` counts the entries read from Redis and refused (or
    that failed to apply), `last_rejection` says the latest: reason, detail, `at` (ms)."""

    rejected: int = 0
    last_rejection: dict[str, Any] | None = None


class RedisLink:
    """Shares one engine's state with the other replicas on the same Redis `prefix`."""

    def __init__(self, url: str, *, prefix: str = "omniroute", replica: str | None = None,
                 queue_limit: int = 10_000, stream_limit: int = 10_000) -> None:
        self.url = url
        self.prefix = prefix
        # host and pid say where it runs; the suffix tells two links in one process apart
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stream = f"{prefix}:events"
        self.state = f"{prefix}:state"
        target = parse_redis_url(url)
        self._sentinel: Sentinel | None = None
        self._redis: Any
        if isinstance(target, SentinelTarget):
            # the master's address is asked of the sentinels at each (re)connect, and a
            # master demoted to a replica (READONLY) drops its connection: the link follows
            # a failover through its "Redis away" path (docs/design.md §10)
            self._sentinel = Sentinel(  # type: ignore[no-untyped-call]
                list(target.sentinels), sentinel_kwargs={"socket_connect_timeout": 1,
                                                         "socket_timeout": 1})
            self._redis = self._sentinel.master_for(
                target.service, db=target.db, username=target.username,
                password=target.password, socket_connect_timeout=2, socket_timeout=5)
            self._where = target.describe()
        else:
            self._redis = redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
            self._where = url
        self._replicas_to_wait = 1 if self._sentinel is not None else 0
        self._retry_s = _RETRY_S if self._sentinel is None else tuple(
            s for s in _RETRY_S if s <= _SENTINEL_RETRY_MAX_S)
        self._replicated = True  # whether a replica had the latest batch (behind Sentinel)
        self._outbox: deque[Shared] = deque(maxlen=queue_limit)
        self._stream_limit = stream_limit
        #: this replica's side of the fleet protocol, once attached
        self.peer: FleetPeer | None = None
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set while nothing waits to go out
        self._drained.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()  # held: the loop keeps weak refs
        self._failing_since: int | None = None
        self._error: str | None = None
        self._known: Known | None = None
        self._throttle = Throttle()
        self.rejected = 0
        self._last_rejection: dict[str, Any] | None = None
        self._follow_fault: str | None = None  # why the follow loop ended, until it runs again
        self.dropped = 0
        #: told of every other replica's event as it arrives (replica id, the event's
        #: JSON object): a gateway streams them to its attached consoles
        self.on_remote: Callable[[str, dict[str, Any]], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def attach(self, engine: ResilienceEngine,
                     models: Mapping[str, frozenset[str]] | None = None) -> None:
        """Follow and publish `engine`'s state from now on; Redis need not answer yet.
        `models`: each provider's models (the router's), to refuse entries naming others."""
        self._known = Known.of(engine, models)
        self.peer = FleetPeer(engine, send=self._publish, lease=self,
                               handover_ms=LEASE_HANDOVER_MS)
        self._tasks = [asyncio.create_task(self._write_loop(), name="omniroute-fleet-out"),
                       asyncio.create_task(self._follow(), name="omniroute-fleet-in")]

    async def close(self, timeout_s: float = 3.0) -> None:
        """Stop following and publishing: one last flush of what is queued, if Redis
        answers; never longer than `timeout_s` (a shutdown must not hang on Redis)."""
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(TimeoutError, RedisError, OSError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*self._tasks, return_exceptions=True)
                await self._flush()
        with contextlib.suppress(TimeoutError, RedisError, OSError):
            async with asyncio.timeout(1.0):
                await self._redis.aclose()
                if self._sentinel is not None:
                    await self._sentinel.aclose()

    def health(self) -> FleetHealth:
        fault = self._follow_fault
        return FleetHealth(self._failing_since is None and fault is None, self._failing_since,
                           fault or self._error, len(self._outbox), self.rejected,
                           self._last_rejection)

    # -- out ----------------------------------------------------------------------------------

    def _publish(self, event: Shared) -> None:
        if len(self._outbox) == self._outbox.maxlen:
            self.dropped += 1
        self._outbox.append(event)
        self._drained.clear()
        self._wake.set()

    async def sync(self, timeout_s: float = 1.0) -> bool:
        """Wait until what is queued has reached Redis, at most `timeout_s`: whether it
        has (an operator's action is answered once it is shared, or says it is not yet);
        behind Sentinel, whether a replica has it too (else a failover could lose it)."""
        try:
            await asyncio.wait_for(self._drained.wait(), timeout_s)
        except TimeoutError:
            return False
        return self._replicated

    async def _write_loop(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
            except (RedisError, OSError) as exc:
                self._failed(exc)
                await asyncio.sleep(self._retry_s[min(failures, len(self._retry_s) - 1)])
                failures += 1
                self._wake.set()
                continue
            failures = 0

    async def _flush(self) -> None:
        while self._outbox:
            batch = list(self._outbox)[:500]
            pipe = self._redis.pipeline(transaction=False)
            for event in batch:
                data = event.to_json()
                pipe.xadd(self.stream, {"replica": self.replica, "event": data},
                          maxlen=self._stream_limit, approximate=True)
                kept = _state_field(event)
                if kept is not None:
                    field, order, mode = kept
                    pipe.eval(_KEEP, 1, self.state, field, data, order, mode)
            master = None
            if self._replicas_to_wait:
                pipe.wait(self._replicas_to_wait, REPLICA_WAIT_MS)
                master = self._master_address()
            replies = await pipe.execute()
            if self._replicas_to_wait:
                await self._check_replicas(replies[-1], master)
            for _ in batch:
                self._outbox.popleft()
            self._recovered()
        self._drained.set()

    async def _check_replicas(self, acknowledged: int, master: tuple[str, int] | None) -> None:
        """What `WAIT` answered: replication is asynchronous, so a batch no replica has
        yet is lost if the master dies now; replication is one ordered stream, so a
        later batch a replica has covers the earlier ones. A batch no replica has may
        have gone to a master that was failed over alive (it has no replica any more):
        if the sentinels name another now, the batch is kept, to go there (the merge
        rules make a second copy harmless)."""
        self._replicated = acknowledged >= self._replicas_to_wait
        if not self._replicated:
            if await self._master_moved(master):
                raise RedisConnectionError("the master moved (Sentinel names another) "
                                           "before a replica had the latest changes")
            self._warn("no replica", "no replica of the fleet's Redis master (%s) had the "
                       "latest changes within %d ms: a failover now would lose them",
                       self._where, REPLICA_WAIT_MS)

    def _master_address(self) -> tuple[str, int] | None:
        """The master the link's connections go to now (None: not asked yet)."""
        address: tuple[str, int] | None = self._redis.connection_pool.master_address
        return address

    async def _master_moved(self, master: tuple[str, int] | None) -> bool:
        """Whether the sentinels name a master other than `master` now; asking drops
        the idle connections to the old one, so the next command goes to the new."""
        current = await self._redis.connection_pool.get_master_address()
        return master is not None and tuple(current) != tuple(master)

    # -- in -----------------------------------------------------------------------------------

    async def _follow(self) -> None:
        """The follow loop, started again (with backoff) whenever it ends unexpectedly:
        meanwhile `/health` says why, so a replica deaf to its fleet does not say ok."""
        restarts = 0
        while True:
            started = time.monotonic()
            try:
                await self._follow_loop()
            except Exception as exc:  # whatever it was, follow again
                if time.monotonic() - started > _STEADY_S:
                    restarts = 0
                delay = _RETRY_S[min(restarts, len(_RETRY_S) - 1)]
                self._follow_fault = (
                    f"the fleet follow loop ended: {type(exc).__name__}: {exc}"[:300])
                unlogged = self._throttle.admit(f"loop {type(exc).__name__}", _now_ms())
                if unlogged is not None:
                    log.error("%s; following again in %g s (%d more like it in the last "
                              "minute)", self._follow_fault, delay, unlogged)
                await asyncio.sleep(delay)
                restarts += 1

    async def _follow_loop(self) -> None:
        last: str | None = None  # None: read the whole state, then follow from there
        failures = 0
        check_master_at = time.monotonic() + _MASTER_CHECK_S
        while True:
            try:
                if self._sentinel is not None and time.monotonic() >= check_master_at:
                    check_master_at = time.monotonic() + _MASTER_CHECK_S
                    if await self._master_moved(self._master_address()):
                        last = None  # another server: read its whole state first
                if last is None:
                    newest = await self._redis.xrevrange(self.stream, count=1)
                    last = newest[0][0].decode() if newest else "0-0"
                    for name, value in (await self._redis.hgetall(self.state)).items():
                        self._apply_state(name, value)
                answer = await self._redis.xread({self.stream: last}, block=1000, count=500)
                for _, entries in answer or ():
                    for entry_id, fields in entries:
                        last = entry_id.decode()
                        self._apply(last, fields)
                self._recovered()
                self._follow_fault = None
                failures = 0
            except (RedisError, OSError) as exc:
                self._failed(exc)
                last = None  # reconnected: read the state again, the merges make that safe
                await asyncio.sleep(self._retry_s[min(failures, len(self._retry_s) - 1)])
                failures += 1

    def _apply(self, entry_id: str, fields: dict[bytes, bytes]) -> None:
        """One stream entry, checked, then merged; nothing it holds ends the loop."""
        assert self._known is not None
        read = read_entry(fields, self._known, _now_ms(), own=self.replica)
        if read is not None:
            self._merge(f"stream entry {entry_id}", read, relay=True)

    def _apply_state(self, name: bytes, value: bytes) -> None:
        assert self._known is not None
        read = read_state_field(name, value, self._known, _now_ms())
        self._merge(f"state field {name[:80]!r}", read, relay=False)

    def _merge(self, where: str, read: Accepted | Rejected, *, relay: bool) -> None:
        assert self.peer is not None
        if isinstance(read, Rejected):
            self._reject(where, read.reason, read.detail)
            return
        if read.clamped is not None:
            what = read.event.TYPE if isinstance(read.event, Event) else read.event.WORD
            self._warn(f"clamped {what}", "clamped a deadline beyond what this "
                       "replica's settings could set, from %s: %s", where, read.clamped)
        if relay and self.on_remote is not None and isinstance(read.event, Event):
            try:  # a command is not relayed: its audit record travels beside it
                self.on_remote(read.replica, read.event.to_dict())
            except Exception as exc:  # a consumer's fault: the merge still happens
                self._reject(where, f"relaying it raised {type(exc).__name__}", str(exc)[:80])
        try:
            if relay:
                self.peer.hear(read.event)
            else:
                self.peer.hear_state(read.event)
        except Exception as exc:  # one entry must not end the loop
            self._reject(where, f"applying it raised {type(exc).__name__}", str(exc)[:80])

    def _reject(self, where: str, reason: str, detail: str) -> None:
        now = _now_ms()
        self.rejected += 1
        self._last_rejection = {"reason": reason, "detail": detail, "where": where, "at": now}
        self._warn(reason, "skipped a fleet %s: %s%s", where, reason,
                   f" ({detail})" if detail else "")

    def _warn(self, reason: str, message: str, *args: object) -> None:
        """One line per reason per minute, saying how many went unsaid since."""
        unlogged = self._throttle.admit(reason, _now_ms())
        if unlogged is not None:
            log.warning(message + ("; %d more like it in the last minute" if unlogged else ""),
                        *args, *((unlogged,) if unlogged else ()))

    # -- the probe lease ---------------------------------------------------------------------

    def ask(self, provider: str, lease_ms: int, now: int) -> None:
        """The peer asks for the fleet's lease (`LeaseStore`): `SET NX PX`, in the
        background; the answer goes back to the peer whatever happens."""
        self._spawn(self._ask(provider, lease_ms))

    async def _ask(self, provider: str, lease_ms: int) -> None:
        assert self.peer is not None
        key = f"{self.prefix}:lease:{provider}"
        until = None
        try:
            if await self._redis.set(key, self.replica, nx=True, px=lease_ms):
                until = _now_ms() + lease_ms
        except (RedisError, OSError) as exc:
            self._failed(exc)  # no lease without Redis: the fleet's others may hold it
        finally:
            self.peer.lease_answer(provider, until)

    def hand_over(self, provider: str, keep_ms: int, now: int) -> None:
        """Our probe has answered: keep the lease only until the others have heard (if
        it is still ours)."""
        key = f"{self.prefix}:lease:{provider}"

        async def shorten() -> None:
            with contextlib.suppress(RedisError, OSError):
                await self._redis.eval(_RELEASE, 1, key, self.replica, keep_ms)

        self._spawn(shorten())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- health -------------------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        if self._failing_since is None:
            self._failing_since = _now_ms()
            log.error("the fleet's Redis at %s fails: %s (routing goes on, on this replica's "
                      "own state; changes queue)", self._where, exc)
        self._error = f"{type(exc).__name__}: {exc}"[:300]

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.warning("the fleet's Redis answers again; %d change(s) queued",
                        len(self._outbox))
            self._failing_since, self._error = None, None


def _state_field(event: Shared) -> tuple[str, int, str] | None:
    """Where an event's entity lives in the state hash, what orders it, and how (None: it
    changes nothing a replica reading the state needs: a level reset during a cooldown,
    a lockout's decay, an operator's clear). A force-open is kept as its command (who
    forced it, until when), replaced by the reset that ends it."""
    if isinstance(event, FleetCommand):
        if isinstance(event, ForceOpen | Reset):
            return f"forced:{event.provider}", event.t, "latest"
        return None
    if isinstance(event, BreakerEvent):
        return f"breaker:{event.provider}", event.t, "latest"
    if isinstance(event, CooldownEvent | LockoutEvent):
        name = (f"connection:{event.provider}/{event.connection}"
                if isinstance(event, CooldownEvent)
                else f"lockout:{event.provider}/{event.connection}/{event.model}")
        if event.kind is not None:
            return name, event.until, "max"
        return (name, event.until, "set") if event.until <= event.t else None  # a clear
    if isinstance(event, DisabledEvent | EnabledEvent):
        return f"enabled:{event.provider}/{event.connection}", event.t, "latest"
    return None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
