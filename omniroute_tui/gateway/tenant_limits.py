"""Each tenant's requests and tokens a minute and tokens a UTC day, against its limits
(docs/gateway.md, "Client keys").

A minute is a sliding window, estimated from two fixed ones (this minute's count, and the
last minute's weighted by how much of it the window still covers): no burst of twice the
limit at a minute's turn, and two counters a tenant. One gateway counts in memory; a fleet
counts in Redis, so a tenant has one budget whichever replica it reaches. Tokens are
known when the answer is: a request is let in while the tenant is under its token limits,
and its tokens count when it ends (a tenant may pass a limit by one request's tokens).

When Redis does not answer within `REDIS_TIMEOUT_S` (down, slow, or a stranger's value
under a key), the replica counts in memory for that request, logs it (once a minute) and
counts it: the limits then hold per replica, and traffic is not refused for it. After a
failure it counts in memory for `REDIS_BACKOFF_S` before it asks Redis again, so a hung
Redis costs one request a wait, not every request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from ..config.clients import Tenant
from ..tasks import SendSoon

__all__ = [
    "DAY_MS",
    "REDIS_TIMEOUT_S",
    "WINDOW_MS",
    "LocalUsage",
    "RedisUsage",
    "Refusal",
    "TenantUsage",
    "refusal",
]

log = logging.getLogger("omniroute.gateway")

WINDOW_MS = 60_000
DAY_MS = 86_400_000
#: the longest a request waits for Redis to say whether its tenant is under its limits
REDIS_TIMEOUT_S = 0.25
#: after Redis failed, how long the replica counts alone before it asks again
REDIS_BACKOFF_S = 5.0
#: answers' tokens are sent to Redis together, this often: one round trip for all the
#: answers of that time, not one an answer
SPEND_BATCH_S = 0.1


@dataclass(frozen=True)
class Refusal:
    """Which limit refused a request (`rpm`, `tpm` or `tokens_per_day`), what the tenant
    has used of it and may use, and when to retry."""

    limit: str
    used: int
    allowed: int
    retry_after_ms: int


@dataclass
class _Counts:
    """A tenant's counters: requests and tokens of minute `minute` and the one before,
    tokens of day `day`."""

    minute: int = 0
    requests: tuple[int, int] = (0, 0)  # (the minute before, this one)
    tokens: tuple[int, int] = (0, 0)
    day: int = 0
    day_tokens: int = 0

    def roll(self, now_ms: int) -> None:
        minute, day = now_ms // WINDOW_MS, now_ms // DAY_MS
        if minute != self.minute:
            if minute == self.minute + 1:
                self.requests, self.tokens = (self.requests[1], 0), (self.tokens[1], 0)
            else:
                self.requests = self.tokens = (0, 0)
            self.minute = minute
        if day != self.day:
            self.day, self.day_tokens = day, 0


def _wait_ms(before: int, current: int, limit: int, elapsed: int) -> int | None:
    """How long until one more unit fits under `limit` in the sliding minute (None: it
    fits now), with nothing more counted meanwhile. Whole numbers throughout: the
    estimate is `before * (WINDOW - elapsed) / WINDOW + current`, compared times WINDOW."""
    if before * (WINDOW_MS - elapsed) + (current + 1) * WINDOW_MS <= limit * WINDOW_MS:
        return None
    room = limit - 1 - current
    if room >= 0:  # this minute: once enough of the last one has slid out
        return -(-WINDOW_MS * (before - room) // before) - elapsed
    # the next minute, where this one is the last one
    return WINDOW_MS - elapsed + max(0, -(-WINDOW_MS * (current - limit + 1) // current))


def refusal(tenant: Tenant, requests: tuple[int, int], tokens: tuple[int, int],
            day_tokens: int, now_ms: int) -> Refusal | None:
    """The limit a request of `tenant` would pass now, or None to let it in."""
    elapsed = now_ms % WINDOW_MS
    if tenant.rpm:
        wait = _wait_ms(*requests, tenant.rpm, elapsed)
        if wait is not None:
            used = round(requests[0] * (WINDOW_MS - elapsed) / WINDOW_MS + requests[1])
            return Refusal("rpm", used, tenant.rpm, wait)
    if tenant.tpm:
        wait = _wait_ms(*tokens, tenant.tpm, elapsed)
        if wait is not None:
            used = round(tokens[0] * (WINDOW_MS - elapsed) / WINDOW_MS + tokens[1])
            return Refusal("tpm", used, tenant.tpm, wait)
    if tenant.tokens_per_day and day_tokens >= tenant.tokens_per_day:
        return Refusal("tokens_per_day", day_tokens, tenant.tokens_per_day,
                       DAY_MS - now_ms % DAY_MS)
    return None


class LocalUsage:
    """One gateway's counts, in memory."""

    def __init__(self) -> None:
        self._counts: dict[str, _Counts] = {}

    def _of(self, tenant: str, now_ms: int) -> _Counts:
        counts = self._counts.get(tenant)
        if counts is None:
            counts = self._counts[tenant] = _Counts(now_ms // WINDOW_MS, day=now_ms // DAY_MS)
        counts.roll(now_ms)
        return counts

    async def admit(self, tenant: Tenant, now_ms: int) -> Refusal | None:
        return self.admit_now(tenant, now_ms)

    def admit_now(self, tenant: Tenant, now_ms: int) -> Refusal | None:
        counts = self._of(tenant.name, now_ms)
        refused = refusal(tenant, counts.requests, counts.tokens, counts.day_tokens, now_ms)
        if refused is None:
            counts.requests = (counts.requests[0], counts.requests[1] + 1)
        return refused

    async def spend(self, tenant: Tenant, tokens: int, now_ms: int) -> None:
        self.spend_now(tenant, tokens, now_ms)

    def spend_now(self, tenant: Tenant, tokens: int, now_ms: int) -> None:
        counts = self._of(tenant.name, now_ms)
        counts.tokens = (counts.tokens[0], counts.tokens[1] + tokens)
        counts.day_tokens += tokens

    def forget(self, kept: set[str]) -> None:
        """Drop the counts of tenants a reload removed."""
        for name in [n for n in self._counts if n not in kept]:
            del self._counts[name]


#: reads a tenant's five counters and counts the request if it is under every limit, in
#: one step (two replicas cannot both take the last request of a minute). A value that is
#: not a count, digits only (a stranger's: `nan`, `inf`, `0x10`, `-5`, a list), fails
#: the call: the replica then counts in memory.
_ADMIT = """
local values = {}
for i = 1, 5 do
  local raw = redis.call('GET', KEYS[i]) or '0'
  if not string.match(raw, '^%d+$') or string.len(raw) > 15 then
    return redis.error_reply('not a count: ' .. KEYS[i])
  end
  values[i] = tonumber(raw)
end
local window, elapsed = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm, budget = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local left = window - elapsed
local ok = (rpm == 0 or values[1] * left + (values[2] + 1) * window <= rpm * window)
  and (tpm == 0 or values[3] * left + (values[4] + 1) * window <= tpm * window)
  and (budget == 0 or values[5] < budget)
if ok then
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], 2 * window)
end
return {ok and 1 or 0, values[1], values[2], values[3], values[4], values[5]}
"""


class RedisUsage:
    """A fleet's counts, in Redis under `{prefix}:client:{tenant}:...`; this replica's
    memory when Redis fails (`errors` counts those times)."""

    def __init__(self, redis: Any, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._admit = redis.register_script(_ADMIT)
        self.local = LocalUsage()
        self.errors = 0
        self._logged_at = -math.inf
        self._away_until = -math.inf  # Redis failed: counted alone until then (monotonic)
        #: tokens not sent yet, by key (with the key's lifetime), and by tenant (to count
        #: them alone if the send fails)
        self._pending: dict[str, tuple[int, int]] = {}
        self._unsent: list[tuple[Tenant, int, int]] = []
        self._sender = SendSoon(self.flush)

    def _keys(self, tenant: str, now_ms: int) -> list[str]:
        minute, day = now_ms // WINDOW_MS, now_ms // DAY_MS
        base = f"{self._prefix}:client:{tenant}"
        return [f"{base}:r:{minute - 1}", f"{base}:r:{minute}", f"{base}:t:{minute - 1}",
                f"{base}:t:{minute}", f"{base}:d:{day}"]

    async def admit(self, tenant: Tenant, now_ms: int) -> Refusal | None:
        if time.monotonic() < self._away_until:
            return self.local.admit_now(tenant, now_ms)
        keys = self._keys(tenant.name, now_ms)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                answer = await self._admit(keys=keys, args=[
                    WINDOW_MS, now_ms % WINDOW_MS, tenant.rpm, tenant.tpm,
                    tenant.tokens_per_day])
            ok, r0, r1, t0, t1, day = (int(v) for v in answer)
        except Exception as exc:  # down, slow, or a value that is not a count
            self._failed("admit", tenant, exc)
            return self.local.admit_now(tenant, now_ms)
        if ok:
            return None
        return refusal(tenant, (r0, r1), (t0, t1), day, now_ms) or Refusal(
            "rpm", r1, tenant.rpm, 1000)  # refused by a count that moved meanwhile

    def spend_soon(self, tenant: Tenant, tokens: int, now_ms: int) -> None:
        """Count an answer's tokens: sent with the others of the next `SPEND_BATCH_S`."""
        if tokens <= 0:
            return
        if time.monotonic() < self._away_until:
            self.local.spend_now(tenant, tokens, now_ms)
            return
        minute_key, day_key = self._keys(tenant.name, now_ms)[3:]
        pending = self._pending
        pending[minute_key] = (pending.get(minute_key, (0, 0))[0] + tokens, 2 * WINDOW_MS)
        pending[day_key] = (pending.get(day_key, (0, 0))[0] + tokens, 2 * DAY_MS)
        self._unsent.append((tenant, tokens, now_ms))
        self._sender.soon(SPEND_BATCH_S)

    async def spend(self, tenant: Tenant, tokens: int, now_ms: int) -> None:
        """Count an answer's tokens and send them now."""
        self.spend_soon(tenant, tokens, now_ms)
        await self.flush()

    async def flush(self) -> None:
        """Send the tokens not sent yet in one round trip; if Redis fails, this replica
        counts them alone. Never raises: it runs as a task nobody awaits."""
        pending, unsent = self._pending, self._unsent
        if not pending:
            return
        self._pending, self._unsent = {}, []
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S), \
                    self._redis.pipeline(transaction=False) as pipe:
                for key, (tokens, lifetime_ms) in pending.items():
                    pipe.incrby(key, tokens).pexpire(key, lifetime_ms)
                await pipe.execute()
        except Exception as exc:  # down, slow, a stranger's value: counted here instead
            self._failed("count tokens", unsent[0][0], exc)
            for tenant, tokens, now_ms in unsent:
                self.local.spend_now(tenant, tokens, now_ms)

    async def close(self) -> None:
        """The gateway stops: what is pending is sent now."""
        await self._sender.close(REDIS_TIMEOUT_S * 2)

    def _failed(self, what: str, tenant: Tenant, exc: BaseException) -> None:
        self.errors += 1
        now = time.monotonic()
        self._away_until = now + REDIS_BACKOFF_S
        if now - self._logged_at >= 60:
            self._logged_at = now
            log.warning("client limits: Redis failed to %s for tenant %s (%s: %s); this "
                        "replica counts alone, and asks Redis again in %.0f s (%d failures "
                        "so far)", what, tenant.name, type(exc).__name__,
                        str(exc)[:200] or "timed out", REDIS_BACKOFF_S, self.errors)

    def forget(self, kept: set[str]) -> None:
        self.local.forget(kept)


TenantUsage = LocalUsage | RedisUsage
