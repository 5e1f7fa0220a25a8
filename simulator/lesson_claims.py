"""A lesson's claims against its run: every number a step states, checked on the events
and the report of the same seeded replay the trainee watches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omniroute_tui.engine.events import Event

from .lesson import Claim, Lesson, Step
from .report import metric_value
from .scenario import Expect, Policy, with_strategy
from .timeline import Timeline
from .virtual import run_virtual

__all__ = ["ClaimResult", "LessonRun", "check_lesson", "run_lesson"]


@dataclass
class LessonRun:
    """Each run's events (in time order) and report, by its policy or strategy (`Claim.run`),
    and each policy's timeline for the charts."""

    events: dict[str, list[Event]]
    reports: dict[str, dict[str, Any]]
    timelines: dict[Policy, Timeline]


@dataclass(frozen=True)
class ClaimResult:
    step: int  # its index in the lesson
    claim: Claim
    observed: float | None

    @property
    def ok(self) -> bool:
        return self.claim.holds(self.observed)


def run_lesson(lesson: Lesson, *, charts: bool = False) -> LessonRun:
    """Replay the lesson's scenario under every policy it speaks of (with `charts`, and
    the policies its herd chart compares with, keeping their timelines), and its
    resilient policy with every route on each strategy it speaks of."""
    run = LessonRun({}, {}, {})
    policies = list(lesson.policies)
    if charts:
        policies += [p for p in lesson.compared if p not in policies]
    for policy in policies:
        events: list[Event] = []
        timeline = Timeline(lesson.scenario) if charts else None
        run.reports[policy] = run_virtual(lesson.scenario, policy, subscribers=(events.append,),
                                          timeline=timeline)
        run.events[policy] = events
        if timeline is not None:
            run.timelines[policy] = timeline
    for strategy in lesson.strategies:
        events = []
        run.reports[strategy] = run_virtual(with_strategy(lesson.scenario, strategy),
                                            Policy.RESILIENT, subscribers=(events.append,))
        run.events[strategy] = events
    return run


def observe(claim: Claim, run: LessonRun) -> float | None:
    """What the run shows for `claim`, or None when it shows nothing (no such event)."""
    if claim.form == "metric":
        expect = Expect(claim.metric or "", "==", claim.value, claim.policy, claim.during,
                        claim.provider)
        return metric_value(run.reports[claim.run], expect)
    assert claim.match is not None
    end = claim.to_ms if claim.to_ms is not None else 2**62
    inside = (e for e in run.events[claim.run]
              if claim.from_ms <= e.t < end and claim.match.matches(e))
    if claim.form == "count":
        return float(sum(1 for _ in inside))
    if claim.form == "max":
        values = [v for e in inside if (v := field_value(e, claim.field)) is not None]
        return max(values, default=None)
    first = next(inside, None)
    if first is None:
        return None
    return field_value(first, claim.field)


def field_value(event: Event, field: str | None) -> float | None:
    """A number of `event` as a trainer states it: times and spans in seconds (its time
    with no field, `*_ms` fields, and `lasts`: how long a cooldown or lockout holds)."""
    if field is None:
        return event.t / 1000
    if field == "lasts":
        until: int = getattr(event, "until")  # noqa: B009 - the loader checked it has one
        return (until - event.t) / 1000
    value = getattr(event, "from_" if field == "from" else field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value / 1000 if field.endswith("_ms") else float(value)


def check_lesson(lesson: Lesson, run: LessonRun | None = None) -> list[ClaimResult]:
    """Every claim of every step, with what the run shows."""
    run = run or run_lesson(lesson)
    return [ClaimResult(index, claim, observe(claim, run))
            for index, step in enumerate(lesson.steps) for claim in step.checks]


def unchecked_numbers(step: Step) -> list[float]:
    """The numbers a step's text (and question and answer) states that no claim of the
    step vouches for, nor its time, nor its `given` list: each is a number a trainee
    could be told wrong."""
    vouched = set(step.given)
    for claim in step.checks:
        vouched |= claim.numbers
    if step.at_ms is not None:
        vouched.add(step.at_ms / 1000)
    from .lesson import stated_numbers

    said = " ".join(t for t in (step.text, step.question, step.answer) if t)
    return [n for n in stated_numbers(said) if n not in vouched]
