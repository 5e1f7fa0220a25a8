"""Guided lessons (docs/console.md, "Lessons"): a shipped scenario plus steps, each shown
at a virtual time or on an event, with the claims its text makes in a form a test checks
against the run.

A lesson file is validated like a scenario: every problem names the file, the line and
the field, and hostile text (unknown keys, huge or hidden-character texts) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path as FsPath
from typing import Any

from omniroute_tui.config.hidden import DESCRIPTION_KEEPS, hidden_reason
from omniroute_tui.config.problems import ConfigError, Path, Problem
from omniroute_tui.config.readers import (
    read_bool,
    read_duration,
    read_mapping,
    read_name,
    reject_unknown,
)
from omniroute_tui.config.yaml_source import Source, load_source
from omniroute_tui.console.model.row_keys import RowKey
from omniroute_tui.engine.events import EVENT_CLASSES, Event

from .scenario import (
    POLICIES,
    Policy,
    Scenario,
    load_scenario,
    resolve_scenario,
    strategy_names,
)

__all__ = [
    "LESSONS_DIR", "PANES", "Claim", "EventMatch", "Lesson", "Step", "load_lesson",
    "resolve_lesson", "shipped_lessons", "stated_numbers",
]

#: the shipped lessons (`omniroute-sim lessons`)
LESSONS_DIR = FsPath(__file__).parent / "lessons"
#: the panes a step may show (the console's tab ids; docs/console.md)
PANES = ("overview", "providers", "connections", "lockouts", "events", "scenario",
         "requests", "audit")
#: the panes whose rows a step may select
ROW_PANES = ("providers", "connections", "lockouts")
#: bounds on what a lesson file may hold: a lesson is read aloud in a room, not a book
MAX_FILE_BYTES = 256 * 1024
MAX_STEPS = 40
MAX_TEXT = 600  # characters of a step's text or answer
MAX_QUESTION = 300
MAX_CLAIMS = 12  # a step's checks
MAX_SUMMARY = 160

_LESSON_FIELDS = ("name", "title", "summary", "scenario", "steps")
_STEP_FIELDS = ("at", "on", "text", "pane", "row", "pause", "question", "answer", "compare",
                "check", "given")
_CLAIM_FORMS = ("count", "metric", "first", "max")
_BOUNDS = ("equals", "at_least", "at_most")
_CLAIM_FIELDS = (*_CLAIM_FORMS, *_BOUNDS, "from", "to", "policy", "strategy", "provider",
                 "during", "field")
_EVENT_TYPES: dict[str, type[Event]] = {cls.TYPE: cls for cls in EVENT_CLASSES}
#: a number as a text states it: 30, 1.5, 12,000 (not the 1 of `a1` or the 99 of `p99`)
_NUMBER = re.compile(r"(?<![\w.])([0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?)(?![\w])")


@dataclass(frozen=True)
class EventMatch:
    """`{type: breaker, provider: alpha, to: OPEN}`: an event of that type whose fields
    have those values (enums by their word, `from` for the breaker's previous state)."""

    type: str
    where: tuple[tuple[str, str | int | bool], ...]

    def matches(self, event: Event) -> bool:
        if self.type != event.TYPE:
            return False
        for name, wanted in self.where:
            value = getattr(event, "from_" if name == "from" else name)
            if isinstance(wanted, bool) or isinstance(value, bool):
                if value is not wanted:
                    return False
            elif isinstance(wanted, int):
                if value != wanted:
                    return False
            elif value is None or str(value) != wanted:
                return False
        return True

    def __str__(self) -> str:
        return ", ".join([f"type: {self.type}", *(
            f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in self.where)])


@dataclass(frozen=True)
class Claim:
    """One number a step's text states, in a form the run is checked against:

    - `count`: how many events match, in `[from, to)` of virtual time;
    - `metric`: a figure of the run's report (as a scenario's `expect`), of a `provider`
      or `during` a fault;
    - `first`: the first matching event at or after `from`: its time in seconds, or the
      value of its `field`;
    - `max`: the largest `field` of the matching events in `[from, to)`.

    Times and spans are in seconds, as a trainer writes them: an event's time, its `*_ms`
    fields, and `lasts` (how long a cooldown or lockout holds: `until - t`).
    """

    form: str
    policy: Policy
    bound: str  # equals | at_least | at_most
    value: float
    match: EventMatch | None = None
    metric: str | None = None
    provider: str | None = None
    during: str | None = None
    field: str | None = None
    from_ms: int = 0
    to_ms: int | None = None
    line: int | None = None
    #: the resilient run with every route on this strategy (as a scenario's `strategies`)
    strategy: str | None = None

    @property
    def run(self) -> str:
        """The run it speaks of: its strategy's, or its policy's."""
        return self.strategy or self.policy

    def holds(self, observed: float | None) -> bool:
        if observed is None:
            return False
        if self.bound == "equals":
            return observed == self.value
        return observed >= self.value if self.bound == "at_least" else observed <= self.value

    @property
    def numbers(self) -> set[float]:
        """The numbers this claim vouches for in a text: its value (a `*_ms` metric's in
        seconds too), its time bounds in seconds, and the numbers its match names (the
        `level: 2` of a cooldown, a `*_ms` one in seconds)."""
        found = {self.value, self.from_ms / 1000}
        if self.metric is not None and self.metric.endswith("_ms"):
            found.add(self.value / 1000)
        if self.match is not None:
            found |= {v / 1000 if k.endswith("_ms") else float(v) for k, v in self.match.where
                      if isinstance(v, int) and not isinstance(v, bool)}
        if self.to_ms is not None:
            found |= {self.to_ms / 1000, (self.to_ms - self.from_ms) / 1000}
        return found

    def __str__(self) -> str:
        if self.form == "metric":
            scope = "".join([f" of {self.provider}" if self.provider else "",
                             f" during {self.during}" if self.during else ""])
            what = f"{self.metric}{scope}"
        elif self.form == "count":
            what = f"count of {{{self.match}}}"
        else:
            what = f"{self.form} {{{self.match}}}" + (f" .{self.field}" if self.field else " (s)")
        span = ""
        if self.form != "metric" and (self.from_ms or self.to_ms is not None):
            end = "end" if self.to_ms is None else f"{self.to_ms / 1000:g}s"
            span = f" in {self.from_ms / 1000:g}s-{end}"
        value = int(self.value) if self.value.is_integer() else self.value
        bound = {"equals": "==", "at_least": ">=", "at_most": "<="}[self.bound]
        return f"{what}{span} {bound} {value} ({self.run})"


@dataclass(frozen=True)
class Step:
    text: str
    at_ms: int | None = None  # shown at this virtual time ...
    on: EventMatch | None = None  # ... or on the first such event after the step before
    pane: str | None = None
    row: RowKey | None = None  # the row the step selects in `pane`
    pause: bool = False
    question: str | None = None
    answer: str | None = None
    compare: Policy | None = None
    checks: tuple[Claim, ...] = ()
    given: tuple[float, ...] = ()  # numbers quoted from the scenario file, not the run
    line: int | None = None

    @property
    def trigger(self) -> str:
        if self.on is not None:
            return f"on {{{self.on}}}"
        return f"at {(self.at_ms or 0) / 1000:g}s"


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    summary: str
    scenario: Scenario
    steps: tuple[Step, ...]
    source: str = "<memory>"

    @property
    def policies(self) -> tuple[Policy, ...]:
        """Every policy the lesson speaks of: resilient first, then those its steps
        compare with and check."""
        wanted = [Policy.RESILIENT]
        for step in self.steps:
            for policy in (step.compare, *(c.policy for c in step.checks)):
                if policy is not None and policy not in wanted:
                    wanted.append(policy)
        return tuple(wanted)

    @property
    def strategies(self) -> tuple[str, ...]:
        """The strategies its claims speak of, each a resilient run with every route on
        it, in the order the steps name them."""
        named: list[str] = []
        for step in self.steps:
            for claim in step.checks:
                if claim.strategy is not None and claim.strategy not in named:
                    named.append(claim.strategy)
        return tuple(named)

    @property
    def compared(self) -> tuple[Policy, ...]:
        """The herd chart's comparison policies, in the order the steps choose them
        (naive, the console's default, when none does)."""
        chosen: list[Policy] = []
        for step in self.steps:
            if step.compare is not None and step.compare not in chosen:
                chosen.append(step.compare)
        return tuple(chosen) or (Policy.NAIVE,)


def stated_numbers(text: str) -> list[float]:
    """The numbers a text states (`30 s`, `1.5`, `12,000`), in order."""
    return [float(m.group(1).replace(",", "")) for m in _NUMBER.finditer(text)]


def shipped_lessons() -> list[str]:
    """The shipped lessons in their order: by their number (`10-…` after `9-…`)."""
    def number(stem: str) -> tuple[int, str]:
        head = stem.split("-", 1)[0]
        return (int(head) if head.isdigit() else 1 << 30, stem)

    return sorted((p.stem for p in LESSONS_DIR.glob("*.yaml")), key=number)


def resolve_lesson(name: str) -> FsPath:
    """A lesson file's path, or the shipped lesson of that name; ConfigError naming the
    shipped lessons when `name` is neither."""
    path = FsPath(name)
    if path.is_file():
        return path
    shipped = LESSONS_DIR / f"{name}.yaml"
    if "/" not in name and shipped.is_file():
        return shipped
    raise ConfigError([Problem(name, None, "(file)", "no such file, and no shipped lesson of "
                               f"that name (shipped: {', '.join(shipped_lessons())})")])


def load_lesson(path: str | FsPath, *, text: str | None = None) -> Lesson:
    """Load and validate a lesson and its scenario; raises ConfigError listing every
    problem of the lesson file (or the scenario's, should a shipped one not load)."""
    name = str(path)
    if text is None:
        try:
            size = FsPath(name).stat().st_size
        except OSError:
            size = 0  # load_source says what is wrong with the file
        if size > MAX_FILE_BYTES:
            raise ConfigError([Problem(name, None, "(file)", f"larger than "
                                       f"{MAX_FILE_BYTES // 1024} KiB: not a lesson")])
    elif len(text) > MAX_FILE_BYTES:
        raise ConfigError([Problem(name, None, "(file)",
                                   f"larger than {MAX_FILE_BYTES // 1024} KiB: not a lesson")])
    src = load_source(path, text=text)
    data = src.data
    reject_unknown(src, data, (), _LESSON_FIELDS)
    lesson_name = read_name(src, data.get("name", FsPath(name).stem), ("name",)) or "lesson"
    title = _text(src, data.get("title", lesson_name), ("title",), MAX_SUMMARY, lines=False)
    summary = _text(src, data.get("summary"), ("summary",), MAX_SUMMARY, lines=False)
    scenario = _scenario(src, data.get("scenario"))
    raw_steps = data.get("steps")
    steps: list[Step] = []
    if not isinstance(raw_steps, list) or not raw_steps:
        src.problem(("steps",), "expected a non-empty list of steps")
    elif len(raw_steps) > MAX_STEPS:
        src.problem(("steps",), f"{len(raw_steps)} steps: a lesson has at most {MAX_STEPS}")
    else:
        last_at = -1
        for index, raw in enumerate(raw_steps):
            step = _step(src, raw, ("steps", index), scenario)
            if step is None:
                continue
            if step.at_ms is not None:
                if step.at_ms < last_at:
                    src.problem(("steps", index, "at"), "before the time of an earlier step: "
                                "steps are shown in the order written")
                last_at = step.at_ms
            steps.append(step)
    src.raise_if_problems()
    assert scenario is not None and title is not None and summary is not None
    return Lesson(lesson_name, title, summary, scenario, tuple(steps), src.name)


def _row_key(src: Source, pane: Any, text: str | None, path: Path) -> RowKey | None:
    """A step's row as its pane keys it: a provider's name; `provider/connection`; or
    `provider/connection/model` (the model last: it may hold a `/`)."""
    if text is None or pane == "providers":
        return text
    parts = 2 if pane == "connections" else 3
    names = tuple(text.split("/", parts - 1))
    if len(names) != parts or not all(names):
        src.problem(path, f"a row of the {pane} pane is "
                          + ("provider/connection" if parts == 2
                             else "provider/connection/model") + f", got {text!r}")
        return None
    return names


def _text(src: Source, value: Any, path: Path, longest: int, *, lines: bool = True
          ) -> str | None:
    """A text a trainee reads: non-empty, at most `longest` characters, every character
    visible (line breaks and tabs too where `lines`)."""
    if not isinstance(value, str) or not value.strip():
        src.problem(path, "expected a non-empty text")
        return None
    if len(value) > longest:
        src.problem(path, f"{len(value):,} characters: at most {longest} (a step is read "
                          "at a glance)")
        return None
    reason = hidden_reason(value, "the text", DESCRIPTION_KEEPS if lines else "")
    if reason is not None:
        src.problem(path, reason)
        return None
    if not lines:
        return " ".join(value.split())
    # a YAML block's line breaks are the file's, not the trainer's: paragraphs stay
    return "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", value.strip()))


def _scenario(src: Source, value: Any) -> Scenario | None:
    """The lesson's scenario: a shipped one, by name (a lesson travels with the package)."""
    name = read_name(src, value, ("scenario",), "the scenario name")
    if name is None:
        return None
    from .scenario import shipped_scenarios

    if name not in shipped_scenarios():
        src.problem(("scenario",), f"no shipped scenario {name!r} (shipped: "
                                   f"{', '.join(shipped_scenarios())})")
        return None
    try:
        return load_scenario(resolve_scenario(name))
    except ConfigError as exc:
        src.problem(("scenario",), f"the scenario does not load: {exc.problems[0]}")
        return None


def _event_match(src: Source, value: Any, path: Path, scenario: Scenario | None
                 ) -> EventMatch | None:
    body = read_mapping(src, value, path)
    if body is None:
        return None
    kind = body.get("type")
    cls = _EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        src.problem(path + ("type",), f"expected an event type, one of "
                                      f"{', '.join(_EVENT_TYPES)}; got {kind!r}")
        return None
    names = [("from" if f.name == "from_" else f.name) for f in fields(cls) if f.name != "t"]
    reject_unknown(src, body, path, ("type", *names))
    where: list[tuple[str, str | int | bool]] = []
    for key, wanted in body.items():
        if key == "type" or key not in names:
            continue
        if isinstance(wanted, str):
            reason = hidden_reason(wanted, "the value")
            if reason is not None or len(wanted) > 200:
                src.problem(path + (key,), reason or "longer than 200 characters")
                continue
        elif not isinstance(wanted, int | bool):
            src.problem(path + (key,), "expected a word, a whole number or true/false")
            continue
        if (key == "provider" and scenario is not None and isinstance(wanted, str)
                and wanted not in scenario.providers):
            src.problem(path + (key,), f"no provider {wanted!r} in scenario "
                                       f"{scenario.name} (providers: "
                                       f"{', '.join(scenario.providers)})")
            continue
        where.append((key, wanted))
    return EventMatch(cls.TYPE, tuple(where))


def _step(src: Source, value: Any, path: Path, scenario: Scenario | None) -> Step | None:
    raw: Any = read_mapping(src, value, path)
    if raw is None:
        return None
    if True in raw and "on" not in raw:  # YAML 1.1 reads a bare `on` key as true
        raw = {("on" if key is True else key): item for key, item in raw.items()}
    body: dict[str, Any] = raw
    reject_unknown(src, body, path, _STEP_FIELDS)
    ok = True
    at = on = None
    if ("at" in body) == ("on" in body):
        src.problem(path, "give exactly one of at (a virtual time, 45s) or on (an event, "
                          "{type: breaker, provider: alpha, to: OPEN})")
        ok = False
    elif "at" in body:
        at = read_duration(src, body["at"], path + ("at",))
        if at is None:
            ok = False
        elif scenario is not None and at > scenario.duration_ms:
            src.problem(path + ("at",), f"after the scenario's end "
                                        f"({scenario.duration_ms / 1000:g}s)")
            ok = False
    else:
        on = _event_match(src, body["on"], path + ("on",), scenario)
        ok = ok and on is not None
    text = _text(src, body.get("text"), path + ("text",), MAX_TEXT)
    pane = body.get("pane")
    if pane is not None and pane not in PANES:
        src.problem(path + ("pane",), f"expected one of {', '.join(PANES)}, got {pane!r}")
        ok = False
    row = body.get("row")
    if row is not None:
        if pane not in ROW_PANES:
            src.problem(path + ("row",), f"a row is picked in the {', '.join(ROW_PANES)} "
                                         "pane: give `pane` too")
            ok = False
        row = _row_key(src, pane, read_name(src, row, path + ("row",), "the row"),
                       path + ("row",))
        ok = ok and row is not None
    pause = read_bool(src, body.get("pause", False), path + ("pause",))
    question = answer = None
    if "question" in body or "answer" in body:
        question = _text(src, body.get("question"), path + ("question",), MAX_QUESTION)
        answer = _text(src, body.get("answer"), path + ("answer",), MAX_TEXT)
        ok = ok and question is not None and answer is not None
    compare = body.get("compare")
    if compare is not None and (compare not in POLICIES or compare == Policy.RESILIENT):
        others = [p for p in POLICIES if p != Policy.RESILIENT]
        src.problem(path + ("compare",), f"the herd chart compares resilient with one of "
                                         f"{', '.join(others)}; got {compare!r}")
        ok = False
    checks = _claims(src, body.get("check", []), path + ("check",), scenario)
    given = body.get("given", [])
    if not isinstance(given, list) or not all(
            isinstance(g, int | float) and not isinstance(g, bool) for g in given):
        src.problem(path + ("given",), "expected a list of numbers the text quotes from the "
                                       "scenario file (a status, a Retry-After)")
        given = []
    if not ok or text is None or pause is None or checks is None:
        return None
    return Step(text, at, on, pane, row, pause, question, answer,
                Policy(compare) if compare else None, checks,
                tuple(float(g) for g in given), src.line(path))


def _claims(src: Source, value: Any, path: Path, scenario: Scenario | None
            ) -> tuple[Claim, ...] | None:
    if not isinstance(value, list):
        src.problem(path, "expected a list of claims")
        return None
    if len(value) > MAX_CLAIMS:
        src.problem(path, f"{len(value)} claims: a step checks at most {MAX_CLAIMS}")
        return None
    claims = [_claim(src, item, path + (i,), scenario) for i, item in enumerate(value)]
    if any(c is None for c in claims):
        return None
    return tuple(c for c in claims if c is not None)


def _claim(src: Source, value: Any, path: Path, scenario: Scenario | None) -> Claim | None:
    body = read_mapping(src, value, path)
    if body is None:
        return None
    reject_unknown(src, body, path, _CLAIM_FIELDS)
    forms = [f for f in _CLAIM_FORMS if f in body]
    bounds = [b for b in _BOUNDS if b in body]
    if len(forms) != 1 or len(bounds) != 1:
        src.problem(path, "give one of count, metric, first or max, and one of equals, "
                          "at_least or at_most")
        return None
    form, bound = forms[0], bounds[0]
    number = body[bound]
    if not isinstance(number, int | float) or isinstance(number, bool):
        src.problem(path + (bound,), f"expected a number, got {number!r}")
        return None
    policy = body.get("policy", "resilient")
    if policy not in POLICIES:
        src.problem(path + ("policy",), f"expected one of {', '.join(POLICIES)}, got {policy!r}")
        return None
    strategy = body.get("strategy")
    if strategy is not None and (strategy not in strategy_names() or policy != "resilient"):
        src.problem(path + ("strategy",), f"the resilient run with every route on one of "
                                          f"{', '.join(strategy_names())}; got {strategy!r}"
                                          + (f" with policy {policy}" if policy != "resilient"
                                             else ""))
        return None
    start = read_duration(src, body.get("from", 0), path + ("from",))
    end = read_duration(src, body["to"], path + ("to",)) if "to" in body else None
    if start is None or ("to" in body and end is None):
        return None
    if end is not None and end <= start:
        src.problem(path + ("to",), "`to` must be after `from`")
        return None
    line = src.line(path)
    if form == "metric":
        claim = _metric_claim(src, body, path, scenario, Policy(policy), bound,
                              float(number), line)
        return None if claim is None else replace(claim, strategy=strategy)
    for key in ("provider", "during"):
        if key in body:
            src.problem(path + (key,), f"`{key}` scopes a metric; in an event match, write "
                                       "it inside the match")
            return None
    match = _event_match(src, body[form], path + (form,), scenario)
    if match is None:
        return None
    field = body.get("field")
    if field is not None:
        names = {("from" if f.name == "from_" else f.name)
                 for f in fields(_EVENT_TYPES[match.type]) if f.name != "t"}
        if "until" in names:
            names.add("lasts")  # until - t: how long it holds
        if form not in ("first", "max") or field not in names:
            src.problem(path + ("field",), f"a field of the {match.type} event, one of "
                                           f"{', '.join(sorted(names))} (with first or max)")
            return None
    elif form == "max":
        src.problem(path + ("field",), "missing: the field whose largest value is claimed")
        return None
    return Claim(form, Policy(policy), bound, float(number), match=match, field=field,
                 from_ms=start, to_ms=end, line=line, strategy=strategy)


def _metric_claim(src: Source, body: Mapping[str, Any], path: Path, scenario: Scenario | None,
                  policy: Policy, bound: str, number: float, line: int | None) -> Claim | None:
    from .scenario import FAULT_METRICS, PROVIDER_METRICS, RUN_METRICS

    metric, provider, during = body.get("metric"), body.get("provider"), body.get("during")
    if "from" in body or "to" in body or "field" in body:
        src.problem(path, "a metric is the whole run's: no from, to or field")
        return None
    if scenario is not None:
        if provider is not None and provider not in scenario.providers:
            src.problem(path + ("provider",), f"no provider {provider!r} in scenario "
                                              f"{scenario.name}")
            return None
        if during is not None and during not in {f.name for f in scenario.faults}:
            src.problem(path + ("during",), f"no fault {during!r} in scenario {scenario.name}")
            return None
    allowed = FAULT_METRICS if during else PROVIDER_METRICS if provider else RUN_METRICS
    base = metric.split(".", 1)[0] if isinstance(metric, str) else None
    if base not in allowed or (isinstance(metric, str) and "." in metric
                               and base != "failures"):
        src.problem(path + ("metric",), f"expected one of {', '.join(sorted(allowed))}, got "
                                        f"{metric!r}")
        return None
    assert isinstance(metric, str)
    return Claim("metric", policy, bound, number, metric=metric, provider=provider,
                 during=during, line=line)
