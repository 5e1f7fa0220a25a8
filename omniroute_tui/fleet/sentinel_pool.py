"""The connection pool behind a `redis+sentinel://` link: redis-py's asyncio Sentinel pool,
less a gap that kept a link on a master failed over alive.

When the pool learns of a new master (any of its connections connecting, or the link
asking), it disconnects its idle connections only. One that was in use then (the follow
loop's blocking XREAD, most of the time) goes back to the pool still connected to the old
master, and is handed out again: the follow loop read the old master's stream, and its
check of the master found the pool already naming the new one, until Sentinel demoted
the old master and it dropped its clients, 8 to 10 s after the switch. redis-py's
synchronous pool drops such a connection (`owns_connection`); the asyncio pool has the
method but never calls it (redis-py 8.1).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelConnectionPool

__all__ = ["MasterPool"]


class MasterPool(SentinelConnectionPool):
    """Hands out only connections to the master the pool names now: one still connected
    to another is disconnected first, and connects again to the master the sentinels
    name (the stock pool's reconnect asks them)."""

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        if connection.is_connected and not self.to_master(connection):
            await connection.disconnect()
        await super().ensure_connection(connection)

    def to_master(self, connection: Any) -> bool:
        """Whether `connection` goes to the master the pool names now (True before it has
        named one)."""
        return self.master_address is None or (
            connection.host, connection.port) == tuple(self.master_address)
