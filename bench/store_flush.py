"""The state database's write cost: microseconds of flush per event, and the file's size.

Feeds the events of `hour-long-mixed` (its own mix: 4.1 events a request, 0.1 % state
changes) to a store on a temporary file, in flushes of `--batch` events each (2 is a
gateway at 20 req/s flushing every 20 ms; 100 a busy one), the clock moving as the trace
says, so the logs' trims run as they would live. Prints the wall and CPU time (the
store's thread included) per event written, trims included, and the file's size after.
With `--fill` it first fills every log to its default bound (the size a gateway's file
reaches) and measures on the full file.

Uses only the store's API common to its releases (open, attach, flush, close), so the
same script measures an earlier checkout: `PYTHONPATH=/path/to/it python bench/...`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import omniroute_tui
from omniroute_tui.clock import ManualClock
from omniroute_tui.engine.events import (
    STATE_CHANGE_CLASSES,
    Event,
    OperatorEvent,
    event_from_dict,
)
from omniroute_tui.store import SqliteStore
from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "hour-long-mixed.yaml"


def trace_events() -> tuple[list[Event], object]:
    """The events of the scenario's resilient run, and its config."""
    scenario = load_scenario(SCENARIO)
    trace = io.StringIO()
    run_virtual(scenario, "resilient", trace=trace)
    lines = trace.getvalue().splitlines()
    return [event_from_dict(json.loads(line)) for line in lines], scenario.config


def file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal"))
               if p.exists())


async def fill(store: SqliteStore, clock: ManualClock, events: list[Event]) -> None:
    """Every log to its bound: the requests and history logs from the trace's events (on
    repeat, times moved on), the audit with operator actions."""
    retention = getattr(store, "retention", None)
    if retention is None:  # an earlier release: one log of `max_events`
        wanted = {"requests": store.max_events, "history": 0}  # type: ignore[attr-defined]
        audit = 0
    else:
        wanted = {"requests": retention.requests_max_events,
                  "history": retention.history_max_events}
        audit = retention.audit_max_entries
    state = [e for e in events if isinstance(e, STATE_CHANGE_CLASSES)]
    requests = [e for e in events if not isinstance(e, STATE_CHANGE_CLASSES)]
    bus = store._engine.bus  # type: ignore[union-attr]
    for source, count in ((requests, wanted["requests"]), (state, wanted["history"])):
        for n in range(count):
            bus.emit(dataclasses.replace(source[n % len(source)], t=clock.now_ms()))
            if n % 20_000 == 19_999:
                await store.flush()
    for n in range(audit):
        bus.emit(OperatorEvent(clock.now_ms(), "reset", "p", f"ops{n}", "ok"))
        if n % 20_000 == 19_999:
            await store.flush()
    await store.flush()


async def measure(everything: list[Event], limit: int, config: object, batch: int,
                  full: bool) -> None:
    events = everything[:limit]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state.db"
        clock = ManualClock(events[0].t)
        router = config.build(clock)  # type: ignore[attr-defined]
        store = await SqliteStore.open(path)
        await store.attach(router.engine)
        await store.flush()
        if full:
            started = time.perf_counter()
            await fill(store, clock, everything)
            print(f"  filled to the default bounds in {time.perf_counter() - started:.1f} s: "
                  f"{file_size(path) / 1e6:.1f} MB")
        offset = clock.now_ms() - events[0].t
        wall = cpu = longest = 0.0
        for start in range(0, len(events), batch):
            for event in events[start:start + batch]:
                at = event.t + offset
                if at > clock.now_ms():
                    clock.set(at)
                router.engine.bus.emit(event)
            began, began_cpu = time.perf_counter(), time.process_time()
            await store.flush()
            took = time.perf_counter() - began
            wall += took
            longest = max(longest, took)
            cpu += time.process_time() - began_cpu
        await store.close()
        with sqlite3.connect(path) as raw:
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            tables = [r[0] for r in raw.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name IN ('events', 'history', 'requests', 'audit') ORDER BY name")]
            rows = {t: raw.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        print(f"  batch {batch:>4}: {wall / len(events) * 1e6:6.1f} us wall, "
              f"{cpu / len(events) * 1e6:6.1f} us CPU per event, longest flush "
              f"{longest * 1e3:.1f} ms; file "
              f"{os.path.getsize(path) / 1e6:.1f} MB, rows {rows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--fill", action="store_true",
                        help="fill every log to its default bound first")
    args = parser.parse_args()
    events, config = trace_events()
    print(f"{omniroute_tui.__file__}: {min(args.events, len(events)):,} events of "
          f"{SCENARIO.name}")
    for batch in args.batch or [2, 100]:
        asyncio.run(measure(events, args.events, config, batch, args.fill))


if __name__ == "__main__":
    main()
