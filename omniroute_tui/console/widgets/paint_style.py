"""A widget's style worked out once a paint: Textual's `rich_style` walks every ancestor's
styles each time it is read, and DataTable and RichLog read it for each line they draw
(a table of 25 rows read it 25 times a paint, each time the same)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

__all__ = ["StylePerPaint"]

if TYPE_CHECKING:
    _Base = Widget
else:
    _Base = object


class StylePerPaint(_Base):
    """Mixed in before a Widget class: `rich_style` read while lines render is the
    one read as the paint began (nothing restyles a widget during its own paint)."""

    _paint_style: Style | None = None

    @property
    def rich_style(self) -> Style:
        style = self._paint_style
        return super().rich_style if style is None else style

    def render_lines(self, crop: Region) -> list[Strip]:
        self._paint_style = super().rich_style
        try:
            lines: list[Strip] = super().render_lines(crop)
            return lines
        finally:
            self._paint_style = None
