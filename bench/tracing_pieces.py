"""Where a traced request's cost goes: instructions a request of a gateway exporting
OpenTelemetry traces, with each piece of the tracing taken out in turn, under valgrind's
callgrind (steady on a busy machine, where the CPU time of `gateway_overhead.py --tracing`
moves by more than the pieces weigh).

Each variant is a gateway (`gateway: {metrics: public}`, or `off` with `--metrics-off`; the
simulator's fake upstream, the
simulator's OTLP receiver) started under callgrind with instrumentation off and a fixed
hash seed (its dicts' layout, and so its counts, the same from run to run); after 300
requests to warm it (their 600 spans send a batch: the exporter's connection opened and
what it imports imported, once in a gateway's life), instrumentation is switched on for
`--requests` sequential requests and off again: instructions a request, all the gateway's
threads, kernel excluded.

- `off`: no tracing (the baseline);
- `on`: tracing as shipped;
- `no-send`: the requests' spans written but not queued (the export thread idle);
- `no-export`: the requests' traces recorded, their spans never written;
- `no-export,no-context`: nor the trace context written upstream;
- `no-export,no-events`: nor the engine's events taken (no attempt spans);
- `no-export,no-usage`: nor the answer's route and tokens.

The pieces are switched off by patching the tracing's methods in the gateway's process
(`--gateway VARIANT`), so this measures the code as it is, not a copy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import gateway_overhead as overhead

VARIANTS = ("off", "on", "no-send", "no-export", "no-export,no-context", "no-export,no-events",
            "no-export,no-usage")
WARM = 300  # past OTEL_BSP_MAX_EXPORT_BATCH_SIZE's 512 spans: a batch sent


def patched_gateway(variant: str) -> int:
    """Run the gateway (its own argv) with the pieces `variant` names taken out."""
    from omniroute_tui.gateway.cli import main
    from omniroute_tui.tracing.exporter import SpanExporter
    from omniroute_tui.tracing.request_spans import RequestTracing

    pieces = set(variant.split(","))
    if "no-send" in pieces:
        SpanExporter.add = lambda self, make, spans=1: make() and None  # type: ignore[method-assign,misc]
    if "no-export" in pieces:
        SpanExporter.add = lambda self, make, spans=1: None  # type: ignore[method-assign,misc]
    if "no-context" in pieces:
        RequestTracing.outbound = lambda self, request_id: {}  # type: ignore[method-assign]
    if "no-usage" in pieces:
        RequestTracing.trace = lambda self, request_id: None  # type: ignore[method-assign]
    if "no-events" in pieces:
        subscribed = RequestTracing.__init__

        def unsubscribed(self: RequestTracing, *args: object, **kwargs: object) -> None:
            subscribed(self, *args, **kwargs)  # type: ignore[arg-type]
            for unsubscribe in self._unsubscribe:
                unsubscribe()

        RequestTracing.__init__ = unsubscribed  # type: ignore[method-assign]
    return main()


async def send(url: str, count: int) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        for _ in range(count):
            reply = await http.post(f"{url}/v1/chat/completions", json=overhead.BODY)
            assert reply.status_code == 200, reply.text


def instructions(out: Path) -> int:
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {out}")


def measure(variant: str, config: Path, receiver: int, count: int, folder: Path) -> float:
    """Instructions a request of one variant's gateway."""
    port = overhead.free_port()
    env = {**os.environ, "OMNIROUTE_TOKEN": "", "PYTHONHASHSEED": "0"}  # steadier counts
    if variant != "off":
        # batches sent when full, as at full speed: under valgrind a gateway is some 50
        # times slower, and the 5 s default delay would send them a tenth as big
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver}",
                "OTEL_SERVICE_NAME": "bench", "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    out = folder / f"callgrind.{variant}.out"
    gateway = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, __file__, "--gateway", variant, "--config", str(config),
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        overhead.wait_until_up(f"{url}/health", timeout_s=600)
        asyncio.run(send(url, WARM))
        subprocess.run(["callgrind_control", "-i", "on", str(gateway.pid)], check=True,
                       capture_output=True)
        asyncio.run(send(url, count))
        subprocess.run(["callgrind_control", "-i", "off", str(gateway.pid)], check=True,
                       capture_output=True)
    finally:
        overhead.stop([gateway])
    return instructions(out) / count


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--gateway":
        variant = sys.argv[2]
        del sys.argv[1:3]
        sys.exit(patched_gateway(variant))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--metrics-off", action="store_true",
                        help="the gateways without metrics (the answer's usage then read "
                             "for the trace alone)")
    parser.add_argument("--variants", default=";".join(VARIANTS),
                        help="which, separated by ';'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        scenario, config = folder / "overhead.yaml", folder / "router.yaml"
        scenario.write_text(overhead.SCENARIO)
        procs = [overhead.fakes_process(scenario, config)]
        try:
            overhead.wait_for_file(config)
            data = yaml.safe_load(config.read_text())
            data["gateway"] = {**(data.get("gateway") or {}),
                               "metrics": "off" if args.metrics_off else "public"}
            config.write_text(yaml.safe_dump(data))
            receiver = overhead.free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "simulator.otlp_receiver", "--port", str(receiver),
                 "--out", str(folder / "spans.jsonl")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            print(f"instructions a request, {args.requests} sequential requests, metrics "
                  f"{'off' if args.metrics_off else 'on'}:")
            base: float | None = None
            for variant in args.variants.split(";"):
                ir = measure(variant, config, receiver, args.requests, folder)
                base = ir if base is None else base
                print(f"  {variant:24s} {ir:11,.0f}  ({ir - base:+9,.0f}, {ir / base - 1:+.1%})",
                      flush=True)
        finally:
            overhead.stop(procs)


if __name__ == "__main__":
    main()
