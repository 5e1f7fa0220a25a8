"""The Redis the fleet tests share (127.0.0.1:6379), and a key prefix of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

import pytest
import redis
import redis.asyncio

from omniroute_tui.fleet.redis_link import RedisLink

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted after the test. Skips the
    test when no Redis answers."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        pytest.skip(f"no Redis answers at {REDIS_URL}: {exc}")
    name = f"omniroute-test-{uuid.uuid4().hex[:12]}"
    yield name
    keys = list(client.scan_iter(match=f"{name}:*"))
    if keys:
        client.delete(*keys)
    client.close()


async def close_fleet(links: Iterable[RedisLink], client: redis.asyncio.Redis, prefix: str
                      ) -> None:
    """Close the replicas' links, delete every key under `prefix` and close `client`."""
    for link in links:
        await link.close()
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()
