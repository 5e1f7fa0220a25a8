"""What a request's decision record costs (`GET /api/requests/{id}`): the records of a real
run (the 429 storm's requests, replayed in virtual time), encoded, then kept the three
ways a gateway keeps them, and read back. Prints the bytes a record takes as JSON and
stored, the CPU to encode and to read one, and what an hour at 100 req/s fills: in Redis
(`INFO memory` before and after, under a prefix of its own, deleted after; left out when
no Redis answers at 127.0.0.1:6379), in a state database (the file's size) and in memory.
The baseline in the same run is the JSON itself, uncompressed: what a record would cost
without the dictionary.

    .venv/bin/python bench/request_records.py [--records 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from bench.room_viewers import machine
from omniroute_tui.clock import ManualClock
from omniroute_tui.engine import ResilienceEngine
from omniroute_tui.engine.events import Event, RequestEvent
from omniroute_tui.gateway.record_codec import decode_record, encode_record, record_json
from omniroute_tui.gateway.request_records import RedisRecords
from omniroute_tui.store import SqliteStore
from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

HOUR_AT_100 = 360_000


def storm_records() -> dict[str, list[str]]:
    """Each request of the 429 storm and its events' JSON."""
    scenario = load_scenario(Path(__file__).parent.parent / "scenarios" / "429-storm.yaml")
    by_request: dict[str, list[str]] = defaultdict(list)

    def keep(event: Event) -> None:
        rid = event.id if isinstance(event, RequestEvent) else getattr(event, "request", None)
        if rid is not None:
            by_request[rid].append(event.to_json())

    run_virtual(scenario, subscribers=(keep,))
    return by_request


async def in_redis(blobs: list[tuple[str, bytes]]) -> tuple[float, float] | None:
    """Redis' memory a record, and the CPU a record costs this process to send."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:6379/0",
                                          socket_connect_timeout=1)
    prefix = f"omniroute-bench-{uuid.uuid4().hex[:8]}"
    try:
        await client.ping()
    except Exception as exc:
        print(f"redis: left out ({type(exc).__name__}: no Redis at 127.0.0.1:6379)")
        await client.aclose()
        return None
    try:
        before = (await client.info("memory"))["used_memory"]
        sink = RedisRecords(client, prefix, 3_600_000)
        cpu = 0.0
        for n in range(0, len(blobs), 25):  # a quarter second's records at 100 req/s
            start = time.process_time()
            for rid, blob in blobs[n:n + 25]:
                sink.put(rid, 0, blob)
            await sink.flush()
            cpu += time.process_time() - start
        after = (await client.info("memory"))["used_memory"]
        return (after - before) / len(blobs), cpu / len(blobs) * 1e6
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=5000)]
        for n in range(0, len(keys), 5000):
            await client.delete(*keys[n:n + 5000])
        await client.aclose()


async def in_sqlite(blobs: list[tuple[str, bytes]]) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.db"
        store = await SqliteStore.open(path)
        clock = ManualClock(1_000)
        await store.attach(ResilienceEngine({}, clock))
        before = path.stat().st_size + Path(f"{path}-wal").stat().st_size
        for rid, blob in blobs:
            store.put_record(clock.now_ms(), rid, blob)
        await store.flush()
        await store.close()
        return (path.stat().st_size - before) / len(blobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    print(machine())
    storm = storm_records()
    texts = [(rid, record_json(rid, "gw-1:9f3c01", 200, lines))
             for rid, lines in storm.items()]
    texts = (texts * (args.records // len(texts) + 1))[:args.records]
    texts = [(f"{rid}-{n}", text.replace(f'"{rid}"', f'"{rid}-{n}"'))
             for n, (rid, text) in enumerate(texts)]
    start = time.process_time()
    blobs = [(rid, encode_record(text)) for rid, text in texts]
    encode_us = (time.process_time() - start) / len(blobs) * 1e6
    start = time.process_time()
    for rid, blob in blobs:
        decode_record(blob, rid)
    decode_us = (time.process_time() - start) / len(blobs) * 1e6
    raw = sum(len(t) for _, t in texts) / len(texts)
    stored = sum(len(b) for _, b in blobs) / len(blobs)
    print(f"{len(blobs):,} records of the 429 storm's requests")
    print(f"a record: {raw:.0f} bytes of JSON (baseline), {stored:.0f} stored "
          f"({stored / raw:.2f}x); encode {encode_us:.1f} µs CPU, read back {decode_us:.1f} µs")
    print(f"memory (no database): {stored:.0f} B a record, 10,000 records "
          f"{stored * 10_000 / 2**20:.1f} MiB")
    per_row = asyncio.run(in_sqlite(blobs))
    print(f"state database: {per_row:.0f} B a record with its indexes; an hour at 100 req/s "
          f"{per_row * HOUR_AT_100 / 2**20:.0f} MiB")
    found = asyncio.run(in_redis(blobs))
    per_key = None if found is None else found[0]
    if found is not None:
        print(f"redis: {found[0]:.0f} B a record with its key and expiry; an hour at 100 "
              f"req/s {found[0] * HOUR_AT_100 / 2**20:.0f} MiB (JSON uncompressed: "
              f"{(found[0] - stored + raw) * HOUR_AT_100 / 2**20:.0f} MiB); sent in "
              f"script calls of 25, {found[1]:.0f} µs of this process's CPU a record")
    print(json.dumps({"raw_bytes": round(raw), "stored_bytes": round(stored),
                      "encode_us": round(encode_us, 1), "sqlite_bytes": round(per_row),
                      "redis_bytes": None if per_key is None else round(per_key)}))


if __name__ == "__main__":
    main()
