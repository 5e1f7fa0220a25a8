"""Long runs keep flat memory: metrics aggregate as they go; only the trace file grows."""

from __future__ import annotations

import io
import tracemalloc

from simulator.scenario import load_scenario
from simulator.virtual import run_virtual

SCENARIO = """\
name: flat
duration: {duration}
seed: 5
providers:
  a: {{models: [m], latency: {{p50: 80ms, p99: 400ms}}, connections: [k1, k2, k3]}}
  b: {{models: [m], latency: 120ms, connections: [x]}}
routes:
  r: {{targets: [a/m, b/m]}}
traffic:
  - {{route: r, rate: 40/s}}
faults:
  - {{name: storm, target: a, error: 429, retry_after: 5s, at: 30s, for: 30s}}
"""


class _Sink(io.TextIOBase):
    """A trace destination that keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)


def peak_bytes(duration: str) -> int:
    scenario = load_scenario("flat.yaml", text=SCENARIO.format(duration=duration))
    tracemalloc.start()
    try:
        run_virtual(scenario, "resilient", trace=_Sink())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_does_not_grow_with_run_length() -> None:
    short = peak_bytes("2m")   # about 4,800 requests
    long = peak_bytes("10m")   # about 24,000 requests
    assert long < short * 1.3 + 256 * 1024, (short, long)
