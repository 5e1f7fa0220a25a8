"""The lesson panel: the current step of a guided lesson over the console's panes."""

from __future__ import annotations

from ..model.lesson_progress import LessonProgress, panel_text
from .panels import PlainStatic

__all__ = ["LessonPanel"]


class LessonPanel(PlainStatic):
    """Paints `panel_text(progress)`; marked `-waiting` while a step holds the replay."""

    def show(self, progress: LessonProgress) -> None:
        self.update(panel_text(progress))
        self.set_class(progress.waiting, "-waiting")
