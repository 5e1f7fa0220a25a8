"""Where a trainee is in a lesson: which step shows, whether the replay waits for `space`,
whether the answer is revealed. No widgets here: the lesson panel paints this.

Steps come in the order written. A step `at` a virtual time shows once the replay reaches
it; a step `on` an event shows at the first such event after the step before it showed.
A step with `pause` holds the replay (and every later step) until the trainee continues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...engine.events import Event
from .backends import SimulationBackend

if TYPE_CHECKING:
    from simulator.lesson import Lesson, Step

__all__ = ["EVENT_SLICE_MS", "LessonBackend", "LessonProgress", "panel_text"]

#: a replay waiting for a step's event advances this much virtual time at a go
EVENT_SLICE_MS = 100


class LessonProgress:
    def __init__(self, lesson: Lesson) -> None:
        self.lesson = lesson
        self.index = -1  # the step shown; -1 before the first
        self.shown_at_ms: int | None = None  # the virtual time the current step appeared
        self.waiting = False  # a paused step holds the replay until `proceed()`
        self.revealed = False

    @property
    def current(self) -> Step | None:
        return self.lesson.steps[self.index] if self.index >= 0 else None

    @property
    def upcoming(self) -> Step | None:
        following = self.index + 1
        return self.lesson.steps[following] if following < len(self.lesson.steps) else None

    @property
    def finished(self) -> bool:
        return self.index == len(self.lesson.steps) - 1 and not self.waiting

    def next_time_ms(self) -> int | None:
        """The virtual time the replay must stop at to show the next step on time (None
        when the next step waits for an event, or while this one holds the replay)."""
        step = self.upcoming
        if self.waiting or step is None:
            return None
        return step.at_ms

    def update(self, now_ms: int) -> None:
        """Show every `at` step due by `now_ms` (in order; a pause stops there)."""
        while (step := self.upcoming) is not None and not self.waiting \
                and step.at_ms is not None and step.at_ms <= now_ms:
            self._show(step.at_ms)

    def on_event(self, event: Event) -> None:
        """The bus's events in time order: the steps due by then, then this one's match."""
        step = self.upcoming
        if step is None or self.waiting:
            return
        if step.at_ms is not None:
            if step.at_ms > event.t:
                return
            self.update(event.t)
            step = self.upcoming
            if step is None or self.waiting:
                return
        if step.on is not None and step.on.matches(event):
            self._show(event.t)

    def _show(self, at_ms: int) -> None:
        self.index += 1
        self.shown_at_ms = at_ms
        self.revealed = False
        step = self.lesson.steps[self.index]
        self.waiting = step.pause

    def proceed(self) -> bool:
        """`space` on a paused step: the replay goes on. False when nothing waits."""
        if not self.waiting:
            return False
        self.waiting = False
        return True

    def reveal(self) -> bool:
        """`enter` on a question: its answer shows. False when there is nothing to reveal."""
        step = self.current
        if step is None or step.question is None or self.revealed:
            return False
        self.revealed = True
        return True


class LessonBackend(SimulationBackend):
    """A replay that stops at each step's time, holds on a paused step, and draws the
    herd chart against the policy the current step compares with."""

    def __init__(self, lesson: Lesson, *, speed: float = 2.0,
                 subscribers: tuple[Callable[[Event], None], ...] = ()) -> None:
        self.progress = LessonProgress(lesson)
        super().__init__(lesson.scenario, speed=speed,
                         subscribers=(*subscribers, self.progress.on_event))
        self.title = f"lesson {lesson.name}"
        self.settle()

    def advance(self, virtual_ms: int) -> None:
        """Play on, but no further than the next step: to its time, or (for a step on an
        event) in slices of `EVENT_SLICE_MS`, so that a paused step holds the replay
        within that much of its event."""
        end = self.now_ms() + max(0, virtual_ms)
        while not self.run.done:
            now, stop = self.now_ms(), self.progress.next_time_ms()
            target = end if stop is None or stop < now else min(end, stop)
            upcoming = self.progress.upcoming
            if upcoming is not None and upcoming.on is not None and not self.progress.waiting:
                target = min(target, now + EVENT_SLICE_MS)
            super().advance(target - now)
            self.settle()
            if self.progress.waiting or self.now_ms() >= end:
                return

    def settle(self) -> None:
        """Show the steps due now; hold on a paused one; compare as the step says."""
        self.progress.update(self.now_ms())
        if self.progress.waiting:
            self.paused = True
        step = self.progress.current
        if step is not None and step.compare is not None:
            self.compare_with(step.compare)

    def jump(self) -> str:
        """Play on to the lesson's next step (past a paused one), and hold there."""
        progress = self.progress
        shown = progress.index
        if progress.waiting:
            progress.proceed()
            self.settle()
        while progress.index == shown and not self.run.done:
            upcoming = progress.next_time_ms()
            self.advance(EVENT_SLICE_MS if upcoming is None
                         else max(1, upcoming - self.now_ms()))
        self.paused = True
        step = progress.current
        if step is None or progress.index == shown:
            return "no lesson step ahead"
        first = " ".join(step.text.split())[:60]
        return f"step {progress.index + 1} of {len(progress.lesson.steps)}: {first}"

    def proceed(self) -> bool:
        if not self.progress.proceed():
            return False
        self.paused = False
        self.settle()
        return True

    def restarted(self, subscribers: tuple[Callable[[Event], None], ...]
                  ) -> SimulationBackend:
        """The lesson from its first step, at the same speed."""
        return LessonBackend(self.progress.lesson, speed=self.speed, subscribers=subscribers)


def panel_text(progress: LessonProgress) -> str:
    """What the lesson panel says: the step, its question (and answer once revealed) and
    the key that moves the trainee on."""
    from .text import clock_text

    lesson, step = progress.lesson, progress.current
    count = len(lesson.steps)
    if step is None:
        upcoming = progress.upcoming
        when = "" if upcoming is None else f" (the first step comes {upcoming.trigger})"
        return f"Lesson: {lesson.title}\n{lesson.summary}{when}"
    head = (f"Lesson: {lesson.title} · step {progress.index + 1} of {count} · "
            f"{clock_text(progress.shown_at_ms or 0)}")
    lines = [head, step.text]
    if step.question is not None:
        lines.append(f"Q: {step.question}")
        lines.append(f"A: {step.answer}" if progress.revealed else "   (enter: the answer)")
    if progress.waiting:
        lines.append("⏸ paused: space to continue")
    elif progress.finished:
        lines.append("That is the whole lesson: R replays it, q leaves.")
    return "\n".join(lines)
