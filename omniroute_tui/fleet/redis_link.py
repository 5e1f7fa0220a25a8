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
While Redis is away, outgoing changes queue (bounded in entries and bytes, coalesced
before anything is dropped, and a drop is said: `outbox`), the link says it is
failing, and on reconnect it reads the state hash again before following the stream: the
merge rules are idempotent and indifferent to order for deadlines, so reading again is
safe. A batch's stream entries and state fields are written by one Lua call that checks
the keys' types before it writes anything, so a failed batch leaves nothing behind and is
never duplicated on the stream when it is sent again.
Behind Sentinel (`redis+sentinel://`), the sentinels name the master at each connect and
each second (a failover is the "Redis away" path), and each batch waits for a replica
(`WAIT`): an operator's action is `shared` only once a failover cannot lose it.
What it reads from Redis is checked first (`entries`, docs/design.md §10): a bad
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
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio as redis
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from ..config.redis_target import SentinelTarget, describe_redis_url, parse_redis_url
from ..engine.engine import ResilienceEngine
from ..engine.events import (
    BreakerEvent,
    CooldownEvent,
    DisabledEvent,
    EnabledEvent,
    Event,
    LockoutEvent,
    OperatorEvent,
)
from ..store.sqlite_store import StoreHealth
from .commands import FleetCommand, ForceOpen, Reset
from .entries import (
    STATE_VERSION,
    Accepted,
    Known,
    Rejected,
    Throttle,
    config_field,
    read_config_field,
    read_entry,
    read_state_field,
    rebased,
)
from .outbox import Change, ChangeKind, Outbox
from .peer import FleetPeer, Shared
from .sentinel_pool import MasterPool

__all__ = ["FleetHealth", "RedisLink"]

log = logging.getLogger("omniroute.fleet")

# One batch, atomically: every change's stream entry, and its state field kept as
# {"v": 1, "order": n, "event": {...}} (docs/design.md §10): `max` replaces a field only
# with a later deadline, `latest` only with a later (or equal) time, `set` always (an
# operator's clear). A field whose order cannot be read (not this form, nor the earlier
# release's `order|event`, or an order that is not a finite integer below 2^53) is
# replaced. The keys' types are checked before anything is written: a script stopped by
# an error half-way would leave its first entries on the stream, sent again on retry.
# KEYS: the state hash, the stream; ARGV: replica, stream length, then per change its
# event, field ('' for none), order, mode and field value.
_WRITE_BATCH = """
for i, want in ipairs({'hash', 'stream'}) do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= want and kind ~= 'none' then
    return redis.error_reply('OMNIROUTE_WRONGTYPE ' .. KEYS[i] .. ' ' .. kind .. ' ' .. want)
  end
end
local function order_of(current)
  local read, held = pcall(cjson.decode, current)
  local order = nil
  if read and type(held) == 'table' then
    order = held['order']
  else
    order = tonumber(string.match(current, '^(%d+)|'))
  end
  if type(order) ~= 'number' or order ~= order or order < 0 or order > 9007199254740991 then
    return nil
  end
  return order
end
local written = 0
for i = 3, #ARGV, 5 do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'replica', ARGV[1],
             'event', ARGV[i])
  local field, order, mode = ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  if field ~= '' and order then
    local keep = false
    if mode ~= 'set' then
      local current = redis.call('HGET', KEYS[1], field)
      local known = current and order_of(current)
      keep = known and ((mode == 'max' and order <= known)
                        or (mode == 'latest' and order < known))
    end
    if not keep then
      redis.call('HSET', KEYS[1], field, ARGV[i + 4])
      written = written + 1
    end
  end
end
return written
"""
#: after its probe has answered, a replica keeps the lease this long (at most), so the
#: others hear how it went (the breaker event is on its way to the stream, then to their
#: follow loops) before one of them, still HALF_OPEN, probes the same window again
LEASE_HANDOVER_MS = 1000
#: the longest a probe lease lives without being renewed (`store.lease_max`)
LEASE_MAX_MS = 10_000
#: a lease is renewed every quarter of its lifetime, never more often than this
_RENEW_FLOOR_S = 0.05
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
#: moved (its blocking read ends by then): a master that was failed over alive
#: (`SENTINEL FAILOVER`, a partition) keeps its clients until it is demoted, 8 s or more
#: later, and what it takes meanwhile is lost
_MASTER_CHECK_S = 1.0
#: behind Sentinel, each batch that goes out waits this long for a replica to have it
#: how far this replica's clock may be from Redis' before times are moved between them
#: (docs/fleet.md, "Clocks"): two replicas each this far off, in opposite directions, put
#: a deadline off by twice it, within a second
OFFSET_DEADBAND_MS = 250
#: a `TIME` answer slower than this is not read for the offset (its error is up to half it)
OFFSET_ROUND_TRIP_MS = 200
#: (`WAIT 1 100`): an operator's action is `shared` once a failover cannot lose it
REPLICA_WAIT_MS = 100
#: a key of the wrong type is not cured by retrying: the operator must act
_WRONG_TYPE_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
#: a follow loop that ran this long before it ended is restarted after the shortest delay
_STEADY_S = 60.0
#: each replica says which config it runs this often; one not heard from for
#: CONFIG_STALE_MS is no longer counted, one silent for CONFIG_FORGET_MS is deleted
CONFIG_EVERY_S = 2.0
CONFIG_STALE_MS = 10_000
CONFIG_FORGET_MS = 600_000


@dataclass(frozen=True)
class FleetHealth(StoreHealth):
    """The link's health; `rejected` counts the entries read from Redis and refused (or
    that failed to apply), `last_rejection` says the latest: reason, detail, `at` (ms)."""

    rejected: int = 0
    last_rejection: dict[str, Any] | None = None
    #: changes the full outgoing queue dropped since the replica started, by kind
    #: (`event`, `state`, `operator`), the first and latest drop (ms), and how many it
    #: coalesced (a later change of the same entity kept instead)
    dropped: int = 0
    dropped_kinds: dict[str, int] | None = None
    dropped_since: int | None = None
    last_dropped_at: int | None = None
    coalesced: int = 0
    pending_bytes: int = 0
    #: entries heard from the other replicas and applied (whether or not they changed
    #: anything here), and the id of the last stream entry read (None: none yet)
    applied: int = 0
    read_up_to: str | None = None
    #: replica -> the config version it runs, for each replica heard from lately (this
    #: one too); None before the first answer
    config_versions: dict[str, str] | None = None


@dataclass
class _Lease:
    """A probe lease this replica was granted: how long it lives unrenewed,
    the probe timeout the peer asked it for, and until when it is held (0: handed over,
    kept `handover_ms` more)."""

    lifetime_ms: int
    probe_ms: int
    until: int
    handover_ms: int = LEASE_HANDOVER_MS


class _WrongType(Exception):
    """A fleet key holds another type of Redis value than the link keeps there."""


def lease_lifetime_ms(probe_timeout_ms: int, reset_timeout_ms: int, lease_max_ms: int) -> int:
    """How long a probe lease lives unrenewed: the probe's own timeout, at most the reset
    window and `lease_max`, so a holder that dies blocks the fleet at most that long."""
    return max(1, min(probe_timeout_ms, reset_timeout_ms, lease_max_ms))


class RedisLink:
    """Shares one engine's state with the other replicas on the same Redis `prefix`."""

    def __init__(self, url: str, *, prefix: str = "omniroute", replica: str | None = None,
                 queue_limit: int = 10_000, queue_bytes: int = 8 << 20,
                 stream_limit: int = 10_000, lease_max_ms: int = LEASE_MAX_MS,
                 clock: Callable[[], int] | None = None) -> None:
        self.url = url
        self.prefix = prefix
        # host and pid say where it runs; the suffix tells two links in one process apart
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stream = f"{prefix}:events"
        self.state = f"{prefix}:state"
        self.configs = f"{prefix}:configs"
        target = parse_redis_url(url)
        self._sentinel: Sentinel | None = None
        self._redis: Any
        if isinstance(target, SentinelTarget):
            # the master's address is asked of the sentinels at each (re)connect, and a
            # master demoted to a replica (READONLY) drops its connection: the link follows
            # a failover through its "Redis away" path (docs/design.md §10);
            # redis types Sentinel from 8.2 on, not before
            self._sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
                list(target.sentinels), sentinel_kwargs={"socket_connect_timeout": 1,
                                                         "socket_timeout": 1})
            self._redis = self._sentinel.master_for(
                target.service, connection_pool_class=MasterPool, db=target.db,
                username=target.username,
                password=target.password, socket_connect_timeout=2, socket_timeout=5)
            self._where = target.describe()
        else:
            self._redis = redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
            self._where = describe_redis_url(url)  # never its password
        self._replicas_to_wait = 1 if self._sentinel is not None else 0
        self._retry_s = _RETRY_S if self._sentinel is None else tuple(
            s for s in _RETRY_S if s <= _SENTINEL_RETRY_MAX_S)
        self._replicated = True  # whether a replica had the latest batch (behind Sentinel)
        self._outbox = Outbox(queue_limit, queue_bytes)
        self._write_batch = self._redis.register_script(_WRITE_BATCH)
        self._stream_limit = stream_limit
        self.lease_max_ms = lease_max_ms
        #: this replica's side of the fleet protocol, once attached
        self.peer: FleetPeer | None = None
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set while nothing waits to go out
        self._drained.set()
        self._tasks: list[asyncio.Task[None]] = []
        #: provider -> the latest lease this replica was granted (a renewal keeps only its own)
        self._leases: dict[str, _Lease] = {}
        self._background: set[asyncio.Task[None]] = set()  # held: the loop keeps weak refs
        self._failing_since: int | None = None
        self._error: str | None = None
        self._known: Known | None = None
        self._throttle = Throttle()
        self.rejected = 0
        self.applied = 0
        #: the id of the last stream entry this replica has read (its own ones too)
        self.read_up_to: str | None = None
        self._last_rejection: dict[str, Any] | None = None
        #: why the follow or the write loop ended ("follow", "write"), until it runs again
        self._loop_faults: dict[str, str] = {}
        self._loop_bugs: set[str] = set()  # the loop faults logged with their traceback
        self._key_fault: str | None = None  # a fleet key of the wrong type, until fixed
        #: told of every other replica's event as it arrives (replica id, the event's
        #: JSON object): a gateway streams them to its attached consoles
        self.on_remote: Callable[[str, dict[str, Any]], None] | None = None
        #: True while an event `on_remote` was told of is merged: what the merge makes
        #: this engine say again is that event's echo (the event streams say it once)
        self.relaying = False
        self._config: tuple[str, int] | None = None  # (version, loaded at) this one runs
        self._config_versions: dict[str, str] | None = None
        self._config_refused: dict[bytes, bytes] = {}  # counted once, until they change
        self._config_wake = asyncio.Event()
        #: told, for every other replica's event applied here, how late it was (ms from
        #: when it happened there to now): the metrics' propagation lag
        self._lag_listeners: list[Callable[[int], None]] = []
        #: this replica's wall clock (epoch ms; the engine's), and how far Redis' `TIME`
        #: is ahead of it: every time written to Redis is in Redis' time, and every time
        #: read from it is taken back to this clock, so a replica's skew moves no deadline
        #: of the others' (docs/fleet.md, "Clocks")
        self._clock = clock or _now_ms
        self.offset_ms = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def attach(self, engine: ResilienceEngine,
                     models: Mapping[str, frozenset[str]] | None = None) -> None:
        """Follow and publish `engine`'s state from now on; Redis need not answer yet.
        `models`: each provider's models (the router's), to refuse entries naming others."""
        self._known = Known.of(engine, models)
        self.peer = FleetPeer(engine, send=self._publish, lease=self,
                               handover_ms=LEASE_HANDOVER_MS)
        self._tasks = [asyncio.create_task(self._keep_running("write", self._write_loop),
                                           name="omniroute-fleet-out"),
                       asyncio.create_task(self._keep_running("follow", self._follow_loop),
                                           name="omniroute-fleet-in"),
                       asyncio.create_task(self._config_loop(), name="omniroute-fleet-config")]

    def reconfigure(self, engine: ResilienceEngine,
                    models: Mapping[str, frozenset[str]] | None = None) -> None:
        """A reloaded config is in force: entries are checked against its names."""
        self._known = Known.of(engine, models)

    def announce_config(self, version: str, loaded_at_ms: int) -> None:
        """Tell the fleet which config this replica runs (each reloads its own file):
        `/health` says when the replicas' versions differ."""
        self._config = (version, loaded_at_ms)
        self._config_wake.set()

    async def close(self, timeout_s: float = 3.0) -> None:
        """Stop following and publishing: one last flush of what is queued, if Redis
        answers; never longer than `timeout_s` (a shutdown must not hang on Redis)."""
        for task in (*self._tasks, *self._background):
            task.cancel()
        with contextlib.suppress(TimeoutError, RedisError, OSError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*self._tasks, return_exceptions=True)
                await self._flush()
                if self._config is not None:  # gone: no longer one of the fleet's versions
                    await self._redis.hdel(self.configs, self.replica)
        with contextlib.suppress(TimeoutError, RedisError, OSError):
            async with asyncio.timeout(1.0):
                await self._redis.aclose()
                if self._sentinel is not None:
                    await self._sentinel.aclose()

    @property
    def client(self) -> Any:
        """The Redis client, for what else the gateway keeps fleet-wide (client limits)."""
        return self._redis

    def health(self) -> FleetHealth:
        fault = self._key_fault or next(iter(self._loop_faults.values()), None)
        outbox = self._outbox.health()
        return FleetHealth(self._failing_since is None and fault is None
                           and not self._outbox.dropping, self._failing_since,
                           fault or self._error, len(self._outbox), self.rejected,
                           self._last_rejection, **outbox, applied=self.applied,
                           read_up_to=self.read_up_to,
                           config_versions=None if self._config_versions is None
                           else dict(self._config_versions))

    def on_applied(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Tell `listener` the lag (ms) of every other replica's event applied from now
        on; returns its removal."""
        self._lag_listeners.append(listener)
        return lambda: self._lag_listeners.remove(listener)

    @property
    def dropping(self) -> int:
        """Changes dropped since everything queued last reached Redis (0: none)."""
        return self._outbox.dropping

    # -- out ----------------------------------------------------------------------------------

    def _publish(self, item: Shared) -> None:
        """The peer's `send`: queue what it shares, and say it if the full queue dropped."""
        now = self._clock()
        dropped = self._outbox.dropping
        self._outbox.put(_change(rebased(item, self.offset_ms)), now)
        if self._outbox.dropping > dropped:
            self._say_dropped(now)
        self._drained.clear()
        self._wake.set()

    def _say_dropped(self, now: int) -> None:
        """An ERROR line (once a minute) saying how many changes of which kind are lost."""
        unlogged = self._throttle.admit("dropped changes", now)
        if unlogged is not None:
            kinds = self._outbox.dropped
            log.error("the fleet's outgoing queue is full (%d changes, %d bytes at most): "
                      "%d change(s) dropped since %s: %d event(s), %d state change(s), %d "
                      "operator action(s); %d coalesced into a later change of the same "
                      "entity", self._outbox.max_entries, self._outbox.max_bytes,
                      sum(kinds.values()), _iso(self._outbox.dropped_since),
                      kinds[ChangeKind.EVENT], kinds[ChangeKind.STATE],
                      kinds[ChangeKind.OPERATOR], self._outbox.coalesced)

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
        self._wake.set()  # what was queued before it (re)started goes out at once
        while True:
            _end_if_cancelled()
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
            except _WrongType as exc:
                self._wrong_type(str(exc))
                await asyncio.sleep(
                    _WRONG_TYPE_RETRY_S[min(failures, len(_WRONG_TYPE_RETRY_S) - 1)])
                failures += 1
                self._wake.set()
                continue
            except (RedisError, OSError) as exc:
                self._failed(exc)
                await asyncio.sleep(self._retry_s[min(failures, len(self._retry_s) - 1)])
                failures += 1
                self._wake.set()
                continue
            self._loop_faults.pop("write", None)
            failures = 0

    async def _flush(self) -> None:
        while len(self._outbox):
            batch = self._outbox.take()
            try:  # whatever fails from here gives the batch back: it is written later
                args: list[str | int] = [self.replica, self._stream_limit]
                for change in batch:
                    args += [change.data, change.field or "", change.order, change.mode,
                             f'{{"v":{STATE_VERSION},"order":{change.order},'
                             f'"event":{change.data}}}' if change.field else ""]
                master = self._master_address() if self._replicas_to_wait else None
                await self._write_batch(keys=[self.state, self.stream], args=args)
                if self._replicas_to_wait:
                    # behind Sentinel: kept (to go to the new master) if the master moved
                    # before a replica had it
                    acknowledged = await self._redis.wait(self._replicas_to_wait,
                                                          REPLICA_WAIT_MS)
                    await self._check_replicas(acknowledged, master)
            except ResponseError as exc:
                self._outbox.give_back(batch)
                if str(exc).startswith("OMNIROUTE_WRONGTYPE"):
                    raise _WrongType(_wrong_type_reason(str(exc))) from None
                raise
            except BaseException:
                self._outbox.give_back(batch)
                raise
            dropping = self._outbox.dropping
            self._outbox.done()
            if dropping and not self._outbox.dropping:
                log.warning("the fleet's outgoing queue has drained: %d change(s) were "
                            "dropped while it was full", dropping)
            self._key_fault = None
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
        """Whether the sentinels name a master other than `master` now; once asked, no
        connection to the old one is used again (`MasterPool`): the next command goes to
        the new."""
        current = await self._redis.connection_pool.get_master_address()
        return master is not None and tuple(current) != tuple(master)

    # -- in -----------------------------------------------------------------------------------

    async def _keep_running(self, name: str,
                            loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """The follow or the write loop, started again (with backoff) whenever it ends
        unexpectedly (Redis errors are handled inside; this is a bug): meanwhile `/health`
        says why, so a replica deaf or mute to its fleet does not say ok. What was queued
        to go out stays queued (a failed batch is given back), so nothing is lost."""
        restarts = 0
        while True:
            started = time.monotonic()
            try:
                await loop()
            except Exception as exc:  # whatever it was, run again
                if time.monotonic() - started > _STEADY_S:
                    restarts = 0
                delay = _RETRY_S[min(restarts, len(_RETRY_S) - 1)]
                fault = self._loop_faults[name] = (
                    f"the fleet {name} loop ended: {type(exc).__name__}: {exc}"[:300])
                key = f"loop {name} {type(exc).__name__}"
                unlogged = self._throttle.admit(key, self._clock())
                if unlogged is not None:  # the first of its kind with its traceback
                    log.error("%s; running it again in %g s (%d more like it in the last "
                              "minute)", fault, delay, unlogged,
                              exc_info=exc if key not in self._loop_bugs else None)
                    self._loop_bugs.add(key)
                await asyncio.sleep(delay)
                restarts += 1

    async def _follow_loop(self) -> None:
        last: str | None = None  # None: read the whole state, then follow from there
        failures = 0
        check_master_at = time.monotonic() + _MASTER_CHECK_S
        following: tuple[str, int] | None = None  # behind Sentinel: whose state was read
        while True:
            _end_if_cancelled()
            try:
                block_ms = 1000
                if self._sentinel is not None:
                    if time.monotonic() >= check_master_at:
                        check_master_at = time.monotonic() + _MASTER_CHECK_S
                        await self._redis.connection_pool.get_master_address()
                    # compared with the master the pool names, whichever task asked last
                    # (a connection of any of them asks again): another server, whose whole
                    # state is read first
                    if self._master_address() != following:
                        last = None
                    # the read ends by the next check: the sentinels are asked each second
                    block_ms = max(1, min(block_ms, round(
                        (check_master_at - time.monotonic()) * 1000)))
                if last is None:
                    if self._sentinel is not None:
                        following = await self._redis.connection_pool.get_master_address()
                    await self._check_types()
                    await self._measure_offset()
                    newest = await self._redis.xrevrange(self.stream, count=1)
                    at = newest[0][0].decode() if newest else "0-0"
                    for name, value in (await self._redis.hgetall(self.state)).items():
                        self._apply_state(name, value)
                    last = self.read_up_to = at  # the state holds what came before
                answer = await self._redis.xread({self.stream: last}, block=block_ms,
                                                 count=500)
                for _, entries in answer or ():
                    for entry_id, fields in entries:
                        last = self.read_up_to = entry_id.decode()
                        self._apply(last, fields)
                self._recovered()
                self._loop_faults.pop("follow", None)
                failures = 0
            except _WrongType as exc:
                self._wrong_type(str(exc))
                await asyncio.sleep(
                    _WRONG_TYPE_RETRY_S[min(failures, len(_WRONG_TYPE_RETRY_S) - 1)])
                failures += 1
            except (RedisError, OSError) as exc:
                self._failed(exc)
                last = None  # reconnected: read the state again, the merges make that safe
                await asyncio.sleep(self._retry_s[min(failures, len(self._retry_s) - 1)])
                failures += 1

    async def _config_loop(self) -> None:
        """Say which config this replica runs, and read which the others run, every
        CONFIG_EVERY_S (at once after a reload). Redis away: the follow loop says so in
        `/health`; the versions known stay until it answers again."""
        while True:
            _end_if_cancelled()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONFIG_EVERY_S):
                    await self._config_wake.wait()
            self._config_wake.clear()
            try:
                await self._exchange_config()
            except (RedisError, OSError):
                continue
            except Exception as exc:  # a bug: said, and the loop goes on
                self._warn(f"config {type(exc).__name__}", "the fleet config versions: %s: %s",
                           type(exc).__name__, exc)

    async def _measure_offset(self) -> None:
        """How far Redis' clock (`TIME`) is ahead of this replica's, read at the middle of
        the round trip."""
        before = self._clock()
        seconds, micros = await self._redis.time()
        after = self._clock()
        if after - before > OFFSET_ROUND_TRIP_MS:
            return  # a slow answer says little of when Redis read its clock: the last stays
        offset = int(seconds) * 1000 + int(micros) // 1000 - (before + after) // 2
        # a clock kept by NTP is within a few ms: taken as Redis' own, so that times
        # travel unchanged (a round trip's jitter would move them by a millisecond or two)
        self.offset_ms = offset if abs(offset) >= OFFSET_DEADBAND_MS else 0

    async def _exchange_config(self) -> None:
        await self._measure_offset()
        now = self._clock() + self.offset_ms  # the versions' times are in Redis' time
        if self._config is not None:
            version, loaded_at = self._config
            await self._redis.hset(self.configs, self.replica,
                                   config_field(version, loaded_at + self.offset_ms, now))
        versions: dict[str, str] = {}
        forget = []
        for name, value in (await self._redis.hgetall(self.configs)).items():
            read = read_config_field(name, value, now)
            if isinstance(read, Rejected):
                if self._config_refused.get(name) != value:
                    self._config_refused[name] = value
                    self._reject("config version", read.reason, read.detail)
                continue
            self._config_refused.pop(name, None)
            if now - read.t > CONFIG_FORGET_MS:
                forget.append(name)
            elif now - read.t <= CONFIG_STALE_MS:
                versions[read.replica] = read.version
        if forget:
            await self._redis.hdel(self.configs, *forget)
        if len(self._config_refused) > 1000:  # names come from anyone: keep it bounded
            self._config_refused.clear()
        self._config_versions = versions

    async def _check_types(self) -> None:
        """The state hash and the stream are of their types (or absent), before reading."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.type(self.state)
        pipe.type(self.stream)
        kinds = await pipe.execute()
        for key, kind, want in zip((self.state, self.stream), kinds, ("hash", "stream"),
                                   strict=True):
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            if kind not in (want, "none"):
                raise _WrongType(_wrong_type_reason(f"OMNIROUTE_WRONGTYPE {key} {kind} {want}"))
        self._key_fault = None

    def _wrong_type(self, reason: str) -> None:
        """Said on `/health` until fixed; logged once a minute, retried with a long backoff."""
        self._key_fault = reason
        unlogged = self._throttle.admit(f"wrong type {reason}", self._clock())
        if unlogged is not None:
            log.error("%s; retrying every %g s at most%s", reason, _WRONG_TYPE_RETRY_S[-1],
                      f" ({unlogged} more like it in the last minute)" if unlogged else "")

    def _apply(self, entry_id: str, fields: dict[bytes, bytes]) -> None:
        """One stream entry, checked, then merged; nothing it holds ends the loop."""
        assert self._known is not None
        read = read_entry(fields, self._known, self._clock() + self.offset_ms,
                          own=self.replica)
        if read is not None:
            self._merge(f"stream entry {entry_id}", read, relay=True)

    def _apply_state(self, name: bytes, value: bytes) -> None:
        assert self._known is not None
        read = read_state_field(name, value, self._known, self._clock() + self.offset_ms)
        self._merge(f"state field {name[:80]!r}", read, relay=False)

    def _merge(self, where: str, read: Accepted | Rejected, *, relay: bool) -> None:
        assert self.peer is not None
        if isinstance(read, Rejected):
            self._reject(where, read.reason, read.detail)
            return
        read = replace(read, event=rebased(read.event, -self.offset_ms))  # to this clock
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
                self.relaying = True
                self.peer.hear(read.event)
            else:
                self.peer.hear_state(read.event)
        except Exception as exc:  # one entry must not end the loop
            self._reject(where, f"applying it raised {type(exc).__name__}", str(exc)[:80])
            return
        finally:
            self.relaying = False
        if relay:
            self.applied += 1
            lag = max(0, self._clock() - read.event.t)
            for listener in self._lag_listeners:
                try:
                    listener(lag)
                except Exception as exc:  # a consumer's fault: the loop goes on
                    self._warn("lag listener", "a listener of the fleet's lag raised "
                               "%s: %s", type(exc).__name__, str(exc)[:80])

    def _reject(self, where: str, reason: str, detail: str) -> None:
        now = self._clock()
        self.rejected += 1
        self._last_rejection = {"reason": reason, "detail": detail, "where": where, "at": now}
        self._warn(reason, "skipped a fleet %s: %s%s", where, reason,
                   f" ({detail})" if detail else "")

    def _warn(self, reason: str, message: str, *args: object) -> None:
        """One line per reason per minute, saying how many went unsaid since."""
        unlogged = self._throttle.admit(reason, self._clock())
        if unlogged is not None:
            log.warning(message + ("; %d more like it in the last minute" if unlogged else ""),
                        *args, *((unlogged,) if unlogged else ()))

    # -- the probe lease ---------------------------------------------------------------------

    def ask(self, provider: str, lease_ms: int, now: int) -> None:
        """The peer asks for the fleet's lease (`LeaseStore`) for its probe, `lease_ms`
        its timeout: `SET NX PX`, in the background, for the lease's unrenewed lifetime
        (`lease_lifetime_ms`), renewed while the probe is in flight; the answer goes back
        to the peer whatever happens."""
        assert self.peer is not None
        reset_ms = self.peer.engine.layers(provider).spec.settings.breaker.reset_timeout_ms
        self._spawn(self._ask(provider, lease_ms,
                              lease_lifetime_ms(lease_ms, reset_ms, self.lease_max_ms)))

    async def _ask(self, provider: str, probe_ms: int, lease_ms: int) -> None:
        assert self.peer is not None
        key = f"{self.prefix}:lease:{provider}"
        asked = self._clock()  # the key expires no sooner than this says
        until = None
        try:
            if await self._redis.set(key, self.replica, nx=True, px=lease_ms):
                until = asked + lease_ms
                self._leases[provider] = lease = _Lease(lease_ms, probe_ms, until)
                self._spawn(self._renew(provider, key, lease))
        except (RedisError, OSError) as exc:
            self._failed(exc)  # no lease without Redis: the fleet's others may hold it
        finally:
            self.peer.lease_answer(provider, until)

    async def _renew(self, provider: str, key: str, lease: _Lease) -> None:
        """Keep the lease while our probe is in flight, never past the probe's timeout (what
        the peer asked for): a replica that dies holding it blocks the others at most its
        lifetime (docs/design.md §10). A lease granted but not used by a probe lapses."""
        assert self.peer is not None
        started = self._clock()
        while True:
            await asyncio.sleep(max(lease.lifetime_ms / 4000, _RENEW_FLOOR_S))
            now = self._clock()
            if (self._leases.get(provider) is not lease or lease.until == 0
                    or now - started >= lease.probe_ms):
                return  # handed over, granted again, or the probe has timed out
            if not self.peer.engine.breaker_snapshot(provider).probes_in_flight:
                if lease.until <= now:
                    return  # never used: it lapsed
                continue
            try:
                renewed = await self._redis.eval(_RELEASE, 1, key, self.replica,
                                                 lease.lifetime_ms)
            except (RedisError, OSError) as exc:
                self._failed(exc)
                continue
            if not renewed:  # lapsed, maybe taken: the probe goes on, unrenewed
                lease.until = 0
                return
            if lease.until == 0:  # handed over while renewing: shorten it again
                self._shorten(key, lease.handover_ms)
                return
            lease.until = now + lease.lifetime_ms
            self.peer.lease_answer(provider, lease.until)

    def hand_over(self, provider: str, keep_ms: int, now: int) -> None:
        """Our probe has answered: keep the lease only until the others have heard (if
        it is still ours), and never longer than it lived unrenewed."""
        lease = self._leases.get(provider)
        if lease is not None:
            keep_ms = min(keep_ms, lease.lifetime_ms)
            lease.until, lease.handover_ms = 0, keep_ms
        self._shorten(f"{self.prefix}:lease:{provider}", keep_ms)

    def _shorten(self, key: str, keep_ms: int) -> None:
        """The lease on `key`, if still this replica's, expires in `keep_ms`."""

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
            self._failing_since = self._clock()
            log.error("the fleet's Redis at %s fails: %s (routing goes on, on this replica's "
                      "own state; changes queue)", self._where, exc)
        self._error = f"{type(exc).__name__}: {exc}"[:300]

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.warning("the fleet's Redis answers again; %d change(s) queued",
                        len(self._outbox))
            self._failing_since, self._error = None, None


def _end_if_cancelled() -> None:
    """End the loop that asks, if its task was cancelled: redis-py's read timeout can
    swallow a cancellation that lands while a command waits (seen with redis-py 8.1 on
    Python 3.11: the follow loop went on reading after `close` cancelled it, for as long as
    `close` waited), so each loop turn checks for itself."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _change(item: Shared) -> Change:
    """What the peer shares, as the outgoing queue holds it: its JSON, kind and state
    field; an operator's command, its audit record and the breaker event it caused are
    operator actions (dropped last)."""
    data = item.to_json()
    kept = _state_field(item)
    operator = isinstance(item, FleetCommand | OperatorEvent) or (
        isinstance(item, BreakerEvent) and item.reason.startswith("operator_"))
    kind = (ChangeKind.OPERATOR if operator else
            ChangeKind.EVENT if kept is None else ChangeKind.STATE)
    if kept is None:
        return Change(data, kind)
    field, order, mode = kept
    return Change(data, kind, field, order, mode)


def _wrong_type_reason(reply: str) -> str:
    """The script's `OMNIROUTE_WRONGTYPE key type wanted`, as a sentence for `/health`."""
    _, key, kind, want = (reply.split() + ["?"] * 4)[:4]
    return (f"the fleet's Redis key {key} holds a {kind}, not a {want}: nothing is shared "
            f"until it is deleted or renamed (or the fleet given another store.prefix)")[:300]


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


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
