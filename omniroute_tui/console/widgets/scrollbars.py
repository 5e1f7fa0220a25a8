"""Scrollbars drawn in whole cells: the thumb's usual eighth-block ends (`▃▃`, `▁▁`) look
like a sparkline's bars, and at 80 columns a table's scrollbar sits beside a dialog, at
the screen's last two columns, where it read as stray data."""

from __future__ import annotations

from typing import ClassVar

from textual.scrollbar import ScrollBarRender
from textual.widget import Widget

__all__ = ["whole_cell_scrollbars"]


class WholeCellScrollBar(ScrollBarRender):
    """A thumb of whole cells in reverse video (visible without colour too)."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


def whole_cell_scrollbars(widget: Widget) -> None:
    """Draw `widget`'s scrollbars in whole cells (Textual's ScrollBar documents setting
    `renderer` on one instance; its type says class variable)."""
    widget.vertical_scrollbar.renderer = WholeCellScrollBar  # type: ignore[misc]
    widget.horizontal_scrollbar.renderer = WholeCellScrollBar  # type: ignore[misc]
