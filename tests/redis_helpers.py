"""The Redis the fleet tests share (127.0.0.1:6379), and a key prefix of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

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
