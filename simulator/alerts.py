"""Alert rules against a scenario, in virtual time (docs/simulator.md, docs/alerts.md).

The resilient run's metrics (the gateway's own registry, read at virtual time) are sampled
every scrape interval, written as promtool `input_series`, and the rules are evaluated by
`promtool test rules` itself: a generated test expects no alert at every evaluation time,
and what promtool says it got instead is when each alert fired. The series are what a
Prometheus scraping the gateway would have stored, so the timings are Prometheus's own.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from prometheus_client import CollectorRegistry

from omniroute_tui.config.durations import format_ms
from omniroute_tui.router.core import Router

from .fleet import Fleet
from .scenario import AlertExpect, Fault, Policy, Scenario
from .timeline import Timeline
from .virtual import VirtualRun

__all__ = [
    "MAX_SAMPLES",
    "AlertRun",
    "Firing",
    "SeriesRecorder",
    "alert_names",
    "alert_value",
    "evaluate_rules",
    "find_promtool",
    "relative",
    "report_entries",
    "run_with_alerts",
]

#: samples a run may take: an hour at a 1 s interval is 3,600
MAX_SAMPLES = 10_000
PROMTOOL_TIMEOUT_S = 300
_ALERT_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")
_GOT_HEADER = re.compile(r"^\s*alertname: (\S+), time: (\S+),\s*$")
_GOT_LABELS = re.compile(r"^\s*Labels:\{(.*)\}\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: the escapes of Go's quoted strings that a label value can hold (others are kept as is)
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1, "us": 1e-3, "µs": 1e-3,
            "ns": 1e-6}

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def find_promtool() -> str | None:
    return shutil.which("promtool")


class SeriesRecorder:
    """Every sample of some registries, one scrape at a time, as promtool input series.

    `registries` maps extra labels (a fleet replica's `instance`) to a registry. `_created`
    samples are left out: Prometheus ignores them too.
    """

    def __init__(self, registries: Mapping[tuple[tuple[str, str], ...], CollectorRegistry]
                 ) -> None:
        self._registries = dict(registries)
        self._series: dict[SeriesKey, list[float | None]] = {}
        self.samples = 0

    def sample(self) -> None:
        index = self.samples
        for extra, registry in self._registries.items():
            for metric in registry.collect():
                for sample in metric.samples:
                    if sample.name.endswith("_created"):
                        continue
                    labels = tuple(sorted({**dict(extra), **sample.labels}.items()))
                    values = self._series.get((sample.name, labels))
                    if values is None:
                        values = self._series[(sample.name, labels)] = [None] * index
                    values.append(float(sample.value))
        self.samples += 1
        for values in self._series.values():
            if len(values) < self.samples:
                values.append(None)

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": _series_text(name, labels), "values": _values_text(values)}
                for (name, labels), values in sorted(self._series.items())]


def _series_text(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    def quoted(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    inner = ",".join(f'{key}="{quoted(value)}"' for key, value in labels)
    return f"{name}{{{inner}}}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _values_text(values: Sequence[float | None]) -> str:
    """promtool's notation, run-length coded: `1x3` is four 1s, `_x2` two gaps; a series
    that goes away is marked `stale` once, as a scrape that no longer has it would be."""
    words: list[str] = []
    tokens: list[str] = []
    for value in values:
        if value is None:  # stale right after a value, a gap after that
            tokens.append("stale" if tokens and tokens[-1] not in ("_", "stale") else "_")
        else:
            tokens.append(_number(value))
    start = 0
    while start < len(tokens):
        end = start
        while end + 1 < len(tokens) and tokens[end + 1] == tokens[start]:
            end += 1
        run, token = end - start + 1, tokens[start]
        if run == 1:
            words.append(token)
        elif token == "_":
            words.append(f"_x{run}")
        elif token == "stale":  # never repeats (a gap follows it)
            words += ["stale"] * run
        else:
            words.append(f"{token}x{run - 1}")
        start = end + 1
    return " ".join(words)


def alert_names(rules: Path) -> list[str]:
    """The alerts a rules file defines, in file order; ValueError names what is wrong."""
    try:
        data = yaml.safe_load(rules.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{rules}: not YAML: {exc}") from None
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise ValueError(f"{rules}: not a Prometheus rules file (no `groups:` list)")
    names: list[str] = []
    for group in groups:
        for rule in (group.get("rules") or []) if isinstance(group, dict) else []:
            name = rule.get("alert") if isinstance(rule, dict) else None
            if isinstance(name, str) and _ALERT_NAME.match(name) and name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"{rules}: defines no alert")
    return names


def _go_duration_ms(text: str) -> int:
    return round(sum(float(n) * _UNIT_MS[u] for n, u in _GO_DURATION.findall(text)))


@dataclass
class Firing:
    """One alert for one label set, from the evaluation it fired at to the one it no longer
    did (None: still firing at the end of the run)."""

    alert: str
    labels: dict[str, str]
    fired_ms: int
    resolved_ms: int | None = None

    def active(self, t: int) -> bool:
        return self.fired_ms <= t and (self.resolved_ms is None or t < self.resolved_ms)


@dataclass
class AlertRun:
    """What the rules did over a scenario's run."""

    rules: str
    interval_ms: int
    eval_times: list[int]
    alerts: list[str]
    firings: list[Firing] = field(default_factory=list)

    def firing_at(self, alert: str, t: int) -> bool:
        return any(f.alert == alert and f.active(t) for f in self.firings)


def evaluate_rules(rules: Path, recorder: SeriesRecorder, interval_ms: int,
                   promtool: str) -> AlertRun:
    """Evaluate `rules` over the recorded series with `promtool test rules`."""
    alerts = alert_names(rules)
    eval_times = [i * interval_ms for i in range(recorder.samples)]
    cases = [{"eval_time": f"{t}ms", "alertname": name, "exp_alerts": []}
             for t in eval_times for name in alerts]
    test = {"rule_files": [str(rules.resolve())], "evaluation_interval": f"{interval_ms}ms",
            "tests": [{"interval": f"{interval_ms}ms", "input_series": recorder.input_series(),
                       "alert_rule_test": cases}]}
    with tempfile.TemporaryDirectory(prefix="omniroute-alerts-") as folder:
        path = Path(folder) / "scenario_test.yml"
        path.write_text(yaml.safe_dump(test, sort_keys=False))
        try:
            result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                                    text=True, timeout=PROMTOOL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ValueError(f"promtool took over {PROMTOOL_TIMEOUT_S} s on {rules}") from None
    output = result.stdout + "\n" + result.stderr
    got = _parse_got(output)
    if result.returncode not in (0, 1) or (result.returncode == 1 and not got):
        detail = " ".join(line.strip() for line in output.splitlines() if line.strip())
        raise ValueError(f"promtool could not evaluate {rules}: {detail[:2000]}")
    run = AlertRun(str(rules), interval_ms, eval_times, alerts)
    run.firings = _firings(got, eval_times)
    return run


def _parse_got(output: str) -> dict[tuple[str, int], list[dict[str, str]]]:
    """(alert, time ms) -> the label sets promtool got where the test expected none."""
    got: dict[tuple[str, int], list[dict[str, str]]] = {}
    current: tuple[str, int] | None = None
    for line in output.splitlines():
        if header := _GOT_HEADER.match(line):
            current = (header.group(1), _go_duration_ms(header.group(2)))
            got.setdefault(current, [])
        elif current is not None and (labels := _GOT_LABELS.match(line)):
            pairs = {k: _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), v)
                     for k, v in _LABEL.findall(labels.group(1))}
            got[current].append(pairs)
    return got


def _firings(got: Mapping[tuple[str, int], list[dict[str, str]]], eval_times: list[int]
             ) -> list[Firing]:
    open_: dict[tuple[str, tuple[tuple[str, str], ...]], Firing] = {}
    done: list[Firing] = []
    for t in eval_times:
        now = {(alert, tuple(sorted(labels.items())))
               for (alert, at), sets in got.items() if at == t for labels in sets}
        for key in [k for k in open_ if k not in now]:
            firing = open_.pop(key)
            firing.resolved_ms = t
            done.append(firing)
        for key in sorted(now - set(open_)):
            alert, labels = key
            open_[key] = Firing(alert, {k: v for k, v in labels if k != "alertname"}, t)
    done += open_.values()
    return sorted(done, key=lambda f: (f.fired_ms, f.alert, sorted(f.labels.items())))


def alert_value(expect: AlertExpect, run: AlertRun, faults: Iterable[Fault]) -> float | None:
    """What an alert expectation observed: for `fires_within`, the seconds from the fault's
    start (the run's, without `during`) to the first evaluation the alert fires at (None:
    it never did); for `never`, the evaluations it fired at (in the fault's window, with
    `during`); for `resolves_within` alone, the seconds from the fault's end to the first
    evaluation it no longer fires at."""
    fault = next((f for f in faults if f.name == expect.during), None)
    start, end = (0, None) if fault is None else (fault.at_ms, fault.until_ms)
    firing = [t for t in run.eval_times if run.firing_at(expect.alert, t)]
    if expect.never:
        window = [t for t in firing if t >= start and (end is None or t < end)]
        return float(len(window))
    if expect.fires_within_ms is not None:
        first = next((t for t in firing if t >= start), None)
        return None if first is None else (first - start) / 1000
    assert end is not None  # resolves_within needs `during` (scenario.py)
    quiet = next((t for t in run.eval_times if t >= end and not run.firing_at(expect.alert, t)),
                 None)
    return None if quiet is None else (quiet - end) / 1000


def relative(t_ms: int | None, scenario: Scenario) -> str:
    """`storm +1m15s`: a time against the nearest fault edge at or before it."""
    if t_ms is None:
        return "still firing at the end"
    edges = [(edge_t, f"{fault.name}{'' if phase == 'start' else ' end'}")
             for edge_t, fault, phase in scenario.fault_edges(scenario.duration_ms)
             if edge_t <= t_ms]
    since, name = edges[-1] if edges else (0, "start")
    return f"{name} +{format_ms(t_ms - since) if t_ms > since else '0s'}"


def report_entries(run: AlertRun, scenario: Scenario) -> dict[str, Any]:
    """The alerts part of the JSON report."""
    return {
        "rules": run.rules, "interval_ms": run.interval_ms, "evaluations": len(run.eval_times),
        "alerts": run.alerts,
        "firings": [{"alert": f.alert, "labels": f.labels, "fired_ms": f.fired_ms,
                     "fired": relative(f.fired_ms, scenario), "resolved_ms": f.resolved_ms,
                     "resolved": relative(f.resolved_ms, scenario)}
                    for f in run.firings],
    }



def run_with_alerts(scenario: Scenario, rules: Path, interval_ms: int, promtool: str, *,
                    trace: IO[str] | None = None, progress: Callable[[int], None] | None = None,
                    timeline: Timeline | None = None) -> tuple[dict[str, Any], AlertRun]:
    """The resilient run, its metrics sampled every `interval_ms` of virtual time up to the
    scenario's end, then the rules evaluated over them. The run itself is the one
    `run_virtual` makes: the same events, the same trace."""
    from omniroute_tui.metrics import build_registry

    run = VirtualRun(scenario, Policy.RESILIENT, trace=trace, timeline=timeline)
    policy_routers = run.router.replicas if isinstance(run.router, Fleet) else [run.router]
    routers = [router for router in policy_routers if isinstance(router, Router)]
    registries: dict[tuple[tuple[str, str], ...], CollectorRegistry] = {
        (() if len(routers) == 1 else (("instance", f"replica-{index}"),)):
            build_registry(router, clock=run.clock)
        for index, router in enumerate(routers)
    }
    recorder = SeriesRecorder(registries)
    for index in range(scenario.duration_ms // interval_ms + 1):
        run.advance_to(index * interval_ms, progress)
        recorder.sample()
    run.advance_to(2**62, progress)
    if progress is not None:
        progress(scenario.duration_ms)
    return run.finish(), evaluate_rules(rules, recorder, interval_ms, promtool)
