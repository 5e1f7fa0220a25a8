"""Cost of a config reload at 3 providers x 1,000 connections.

A router runs a 3 x 1,000 config with state on a third of its connections (cooldowns,
auth disables, lockouts, an OPEN breaker). The reload reads a file in which one provider
changed its settings, lost 100 connections and got 100 new ones, and 100 keys were
rotated on another. Two figures, CPU time, medians of several runs:

- reading and checking the file (`load_router_config`): done away from the event loop
  (a thread), so routing goes on meanwhile;
- the swap (`RouterConfig.reconfigure`): on the event loop, between two decisions; no
  request waits longer than this for it.

And the refusal of an oversized file (a million connections in flow style, 6.9 MB, under
the 8 MiB cap): from its YAML events, as the loader does, against building its node tree
first (the loader before the event walk), in the same runs: CPU time and peak memory.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

from omniroute_tui.clock import ManualClock
from omniroute_tui.config import ConfigError, load_router_config
from omniroute_tui.config.yaml_source import load_source
from omniroute_tui.engine import Classification, FailureKind
from omniroute_tui.router import Router

PROVIDERS, CONNECTIONS = 3, 1_000


def config(edited: bool) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    for n in range(PROVIDERS):
        ids = list(range(CONNECTIONS))
        if edited and n == 0:
            ids = ids[100:] + list(range(CONNECTIONS, CONNECTIONS + 100))
        keys = {i: f"sk-bench-{n}-{i:06d}" + ("-new" if edited and n == 1 and i < 100 else "")
                for i in ids}
        providers[f"p{n}"] = {"models": ["m1", "m2"], "connections": [
            {"id": f"c{i}", "api_key": keys[i]} for i in ids]}
    if edited:
        providers["p0"]["resilience"] = {"cooldown": {"base": "5s"},
                                         "breaker": {"reset_timeout": "10s"}}
    return {"providers": providers,
            "routes": {"chat": {"targets": [f"p{n}/m1" for n in range(PROVIDERS)]}}}


def with_state(router: Router) -> None:
    engine = router.engine
    kinds = (FailureKind.RATE_LIMITED, FailureKind.AUTH_FAILED, FailureKind.MODEL_NOT_FOUND)
    for n in range(PROVIDERS):
        for i in range(0, CONNECTIONS, 3):
            engine.record(f"p{n}", f"c{i}", "m1", engine.admit(f"p{n}"),
                          Classification(kinds[i % 3]))
    for _ in range(5):
        engine.record("p2", "c1", "m1", engine.admit("p2"),
                      Classification(FailureKind.SERVER_ERROR))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        before, after = Path(folder) / "before.yaml", Path(folder) / "after.yaml"
        before.write_text(yaml.safe_dump(config(False)))
        after.write_text(yaml.safe_dump(config(True)))
        loads, swaps = [], []
        summary = None
        for _ in range(args.runs):
            router = load_router_config(before, env={}).build(ManualClock(1_000_000))
            with_state(router)
            started = time.process_time()
            new = load_router_config(after, env={})
            loaded = time.process_time()
            summary = new.reconfigure(router)
            swapped = time.process_time()
            loads.append(loaded - started)
            swaps.append(swapped - loaded)
    assert summary is not None
    print(f"reload of {PROVIDERS} x {CONNECTIONS:,} connections "
          f"({len(summary.connections_added)} added, {len(summary.connections_removed)} "
          f"removed, {len(summary.providers_changed)} providers changed), "
          f"median of {args.runs} runs, CPU time:")
    print(f"  read and check the file (off the event loop): "
          f"{statistics.median(loads) * 1000:7.1f} ms")
    print(f"  swap into the router (between two decisions): "
          f"{statistics.median(swaps) * 1000:7.1f} ms")
    print(f"  whole reload:                                 "
          f"{statistics.median(a + b for a, b in zip(loads, swaps, strict=True)) * 1000:7.1f}"
          " ms")
    oversized(args.runs)


def refusal(path: Path, whole_tree: bool) -> tuple[float, int]:
    """CPU seconds and peak bytes to refuse the file at `path`."""
    tracemalloc.start()
    started = time.process_time()
    try:
        if whole_tree:  # the tree built first, as before the event walk
            load_source(path)
        else:
            load_router_config(path, env={})
    except ConfigError:
        pass
    spent = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return spent, peak


def oversized(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "huge.yaml"
        names = ",".join(f"k{i}" for i in range(1_000_000))
        path.write_text("providers:\n  p: {base_url: 'http://127.0.0.1:9/v1', models: [m], "
                        f"connections: [{names}]}}\n")
        size = path.stat().st_size
        walks = [refusal(path, False) for _ in range(runs)]
        trees = [refusal(path, True) for _ in range(max(1, runs // 3))]
    walk_s, tree_s = (statistics.median(s for s, _ in runs_) for runs_ in (walks, trees))
    print(f"refusing a file of 1,000,000 connections ({size / 1e6:.1f} MB), CPU time and "
          "peak memory:")
    print(f"  from its events (the loader):    {walk_s * 1000:8.1f} ms "
          f"{max(p for _, p in walks) / 1e6:7.1f} MB")
    print(f"  its node tree first (before):    {tree_s * 1000:8.1f} ms "
          f"{max(p for _, p in trees) / 1e6:7.1f} MB   ({tree_s / walk_s:,.0f}x the time)")


if __name__ == "__main__":
    main()
