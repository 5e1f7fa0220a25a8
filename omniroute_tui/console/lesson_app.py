"""The console running a guided lesson (`omniroute-tui --lesson NAME`): the console as
ever, with the lesson panel docked above the footer. Each step that appears shows its
pane (and row); `space` continues past a paused step and `enter` reveals an answer, and
both keep their console meaning when the lesson has nothing for them."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input

from .app import ConsoleApp
from .model.lesson_progress import LessonBackend, LessonProgress
from .screens.modals import HelpScreen
from .widgets.lesson_panel import LessonPanel

__all__ = ["LESSON_KEYS", "LessonApp"]

_STYLES = Path(__file__).parent / "styles"
#: the lesson's keys, one table: (key, action, footer label, help). Priority bindings, so
#: a focused table's own `enter` does not take the key first; an action with nothing to
#: do hands the key on (SkipAction) to the console's binding for it.
LESSON_KEYS = (
    ("space", "lesson_continue", "Continue",
     "a paused lesson step: go on (no step waiting: pause or resume)"),
    ("enter", "lesson_answer", "Answer",
     "reveal the answer to the step's question (none: the row's detail)"),
)


class LessonApp(ConsoleApp):
    CSS_PATH = [_STYLES / "console.tcss", _STYLES / "lesson.tcss"]  # type: ignore[assignment]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(key, action, label, tooltip=help_text, priority=True, show=False)
        for key, action, label, help_text in LESSON_KEYS
    ] + ConsoleApp.BINDINGS

    _shown: tuple[LessonProgress, int] | None = None  # the step the panes were turned to

    @property
    def progress(self) -> LessonProgress | None:
        backend = self.backend
        return backend.progress if isinstance(backend, LessonBackend) else None

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, Footer):
                yield LessonPanel(id="lesson")
            yield widget

    def refresh_view(self) -> None:
        progress = self.progress
        if progress is not None:
            self._turn_to(progress)
            self.query_one(LessonPanel).show(progress)
        super().refresh_view()

    def open_first_pane(self) -> None:
        """The step shown at start turns to its pane, whatever the console opens on (a
        refresh before the app was mounted turned to it, and the dashboard took over)."""
        super().open_first_pane()
        self._shown = None

    def _turn_to(self, progress: LessonProgress) -> None:
        """A step that has just appeared shows its pane, and its row selected."""
        if self._shown == (progress, progress.index):
            return
        self._shown = (progress, progress.index)
        step = progress.current
        if step is None or step.pane is None:
            return
        if step.row is not None:
            self.jump(step.pane, step.row)
        else:
            self.action_pane(step.pane)

    def action_help(self) -> None:
        """Help with the lesson's keys first, then the pane's and the console's."""
        self.push_screen(HelpScreen(self.active_pane, read_only=self.read_only,
                                    lesson=[(key, what) for key, _, _, what in LESSON_KEYS]))

    def _keys_are_the_lessons(self) -> bool:
        """`space` and `enter` are the lesson's only when they reach the panes: not in a
        box that takes text (the filter, `:`), nor behind a dialog, whose own keys they
        are (a Yes/No, the picker)."""
        return not self.behind_a_dialog and not isinstance(self.focused, Input)

    def action_lesson_continue(self) -> None:
        backend = self.backend
        if (not self._keys_are_the_lessons() or not isinstance(backend, LessonBackend)
                or not backend.proceed()):
            raise SkipAction()
        self.refresh_view()

    def action_lesson_answer(self) -> None:
        progress = self.progress
        if not self._keys_are_the_lessons() or progress is None or not progress.reveal():
            raise SkipAction()
        self.refresh_view()
