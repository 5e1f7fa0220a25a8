"""The status bar, the fault banner, the scenario timeline and the events log."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.events import Resize
from textual.geometry import Size
from textual.strip import Strip
from textual.visual import VisualType
from textual.widgets import RichLog, Static

from ...config.hidden import DESCRIPTION_KEEPS, visible
from ..model.event_lines import LogEntry
from ..model.text import clock_text, event_age
from .paint_style import StylePerPaint
from .scrollbars import whole_cell_scrollbars

if TYPE_CHECKING:
    from ..model.console_model import ConsoleModel

__all__ = ["EventLog", "FaultBanner", "PlainStatic", "ScenarioTimeline", "StatusBar"]

#: an event line's age column (`event_age`: at most `59m59s`, `99h59m`), and the gap after
AGE_WIDTH = 6
_GAP = "  "
_DIM = Style(dim=True)


class PlainStatic(Static):
    """A Static that shows its text as written: names from files and typed filters are
    never read as markup, and a hidden character (an attached gateway's names are not ours
    to check) is shown as its escape, never sent to the terminal."""

    def __init__(self, content: str = "", **kwargs: Any) -> None:
        self._text: str | None = visible(content, DESCRIPTION_KEEPS)  # what it shows
        super().__init__(self._text, markup=False, **kwargs)

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        """Show `content`. The same text again is not painted again, and a text that
        cannot change the widget's size is painted without a layout of the screen (the
        status bar changes at every paint; a layout each time cost a second screen
        update, for the scrollbars it touches)."""
        if isinstance(content, str):
            content = visible(content, DESCRIPTION_KEEPS)
            if content == self._text:
                return
            layout = layout and self._resizes(content)
            self._text = content
        else:
            self._text = None
        super().update(content, layout=layout)

    def _resizes(self, text: str) -> bool:
        """Whether showing `text` instead of what is shown may change this widget's
        size: it is sized by its content, and the number of lines differs or a line
        (before or now) is too wide to stay on one row."""
        width, height = self.styles.width, self.styles.height
        if (width is not None and width.is_auto) or self._text is None:
            return True
        if height is None or not height.is_auto:
            return False
        lines, before = text.split("\n"), self._text.split("\n")
        return len(lines) != len(before) or max(map(cell_len, [*lines, *before])) > (
            self.content_region.width)


class StatusBar(PlainStatic):
    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; color: $text; padding: 0 1; }
    StatusBar.-alert { background: $error 40%; }
    """


class FaultBanner(PlainStatic):
    DEFAULT_CSS = """
    FaultBanner { height: 1; display: none; padding: 0 1; background: $warning 30%; }
    FaultBanner.-active { display: block; }
    """


class ScenarioTimeline(PlainStatic):
    DEFAULT_CSS = """
    ScenarioTimeline { padding: 1 1; height: auto; }
    """


class EventLog(StylePerPaint, RichLog):
    """The engine's state changes, newest last. Each line starts with how long ago it
    happened (`12s`), as of the data's clock at the last paint (a replay's virtual time:
    the same at the same moment of a run); `t` shows clock times instead. The time is
    drawn as the line is painted, so the ages move on without rewriting the log, and it
    stays put when a long line is scrolled sideways."""

    DEFAULT_CSS = """
    EventLog { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, max_lines=500, wrap=False, markup=False, highlight=False)
        # the lines cropped for the screen, by line: a few screens' worth, not 1,024 (a
        # storm scrolls a screen's worth a paint; each is objects a full collection walks)
        self._line_cache.maxsize = 200
        self.filter_text = ""
        self.matched = 0  # lines written since the last clear
        self.seen = 0  # lines offered since the last clear, the filter's or not
        self.shown_serial = 0  # the model's event serial this log has caught up with
        self.title_text = ""
        self._following = True  # on the newest line (not scrolled back to read)
        #: each line's time, oldest first (one a line: a line never holds a newline)
        self.times: deque[int] = deque(maxlen=self.max_lines)
        self.now_ms = 0  # the data's clock at the last paint: the ages are counted to it
        self.show_clock = False  # `t`: clock times instead of ages
        self.shown_epoch = 0  # the model's log epoch the lines are of

    def on_mount(self) -> None:
        whole_cell_scrollbars(self)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """Follow the newest line until a reader scrolls up (writes only ever scroll a
        log down), and again once back at the end."""
        super().watch_scroll_y(old_value, new_value)
        if not self.lines or new_value >= self.max_scroll_y:
            self._following = True
        elif new_value < old_value:
            self._following = False

    def on_resize(self, event: Resize) -> None:
        """Stay on the newest line when the layout gives the log another height (a fault
        banner coming and going), unless scrolled back to read."""
        super().on_resize(event)
        if self._following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def watch_show_horizontal_scrollbar(self, shown: bool) -> None:
        """The same when a line wider than the log brings the horizontal scrollbar (it
        takes the last row: the newest line would sit under it)."""
        if self._following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def set_title(self, text: str) -> None:
        """The title over the log, as written (a typed filter is never markup)."""
        if text != self.title_text:
            self.title_text = text
            self.border_title = Content(text)

    def clear(self) -> EventLog:
        self.matched = self.seen = self.shown_serial = 0
        self._following = True  # an empty log follows what comes
        self.times.clear()
        return super().clear()

    def use_clock(self, show_clock: bool) -> None:
        """Ages (`12s`) or clock times (`01:23.4`) at the start of the lines."""
        if show_clock != self.show_clock:
            self.show_clock = show_clock
            self._fit_width()
            self.refresh()

    def _stamp(self, index: int) -> str:
        """The time column of line `index` of `lines` (blank past the last line)."""
        lines, times = len(self.lines), len(self.times)
        if not 0 <= index < lines or times < lines:
            return " " * (self._stamp_width() - len(_GAP)) + _GAP
        t = self.times[times - lines + index]
        if self.show_clock:
            return clock_text(t) + _GAP
        return f"{event_age(max(0, self.now_ms - t)):>{AGE_WIDTH}}{_GAP}"

    def _stamp_width(self) -> int:
        if self.show_clock:
            return len(clock_text(self.times[-1] if self.times else 0)) + len(_GAP)
        return AGE_WIDTH + len(_GAP)

    def _fit_width(self) -> None:
        """The lines are as wide as their text and the time column before it."""
        self.virtual_size = Size(self._widest_line_width + self._stamp_width(),
                                 len(self.lines))

    def write(self, *args: Any, **kwargs: Any) -> EventLog:
        super().write(*args, **kwargs)
        if self._size_known:
            self._fit_width()
        return self

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        stamp = self._stamp(scroll_y + y)
        width = self.scrollable_content_region.width
        body = self._render_line(scroll_y + y, scroll_x, max(0, width - len(stamp)))
        line = Strip.join([Strip([Segment(stamp, _DIM)], len(stamp)), body])
        return line.crop(0, width).apply_style(self.rich_style)

    @property
    def scrolled_back(self) -> bool:
        """Scrolled up from the newest line (to read): new lines wait, the view stays."""
        return bool(self.lines) and not self._following

    def catch_up(self, model: ConsoleModel, now: int) -> None:
        """Append what the model logged since this log last caught up (at most what it
        still holds), the ages counted to `now`; a log the model started again (a room's
        new run) starts again too. While scrolled back nothing is written: a write would
        drop lines at the top (the log keeps 500) and the text read would creep up; `G`
        or scrolling to the end catches up (the ages still move on)."""
        if model.log_epoch != self.shown_epoch:
            self.clear()
            self.shown_epoch = model.log_epoch
        if now // 1000 != self.now_ms // 1000 and not self.show_clock:
            self.refresh()  # an age shown in whole seconds changes at most once a second
        self.now_ms = now
        events, serial = model.events, model.event_serial
        new = serial - self.shown_serial
        if new <= 0 or self.scrolled_back:
            return
        self.show(list(events)[-min(new, len(events)):])
        self.shown_serial = serial

    def show(self, entries: Iterable[LogEntry]) -> None:
        """Append the entries' lines that pass the filter and end scrolled to the last one.

        All of them at once (a storm logs hundreds a paint), and the scroll travels with
        them: before the log knows its size, RichLog defers writes, and a separate
        `scroll_end` would run before them; once it knows, the lines are appended as
        strips (`_append`) and the scroll is done at once, not after the next refresh.
        """
        needle = self.filter_text.lower()
        lines = [(entry.t, entry.line) for entry in entries]
        self.seen += len(lines)
        kept = [(t, visible(text)) for t, text in lines
                if not needle or needle in text.lower()]
        self.times.extend(t for t, _ in kept)
        shown = [text for _, text in kept]
        if shown:
            if self._size_known:
                self._append(shown)
                # at once: a scroll after the next refresh left a screen a line short
                self.scroll_end(animate=False, immediate=True, x_axis=False)
            else:  # RichLog defers the write, and its scroll, until it knows its size
                self.write(Text("\n".join(shown), no_wrap=True, end=""), scroll_end=True,
                           animate=False)
        self.matched += len(shown)

    def _append(self, shown: list[str]) -> None:
        """What `write` of these lines as one plain Text does, without laying the text
        out with Rich: one line (visible, so no tab or line break) is one segment of no
        style, which is what Rich made of it. A storm logs a few hundred lines a paint
        and most never reach the screen; Rich's layout of them was most of a paint."""
        strips = [Strip([Segment(line)], cell_len(line)) for line in shown]
        self.lines.extend(strips)
        if self.max_lines is not None and len(self.lines) > self.max_lines:
            self._start_line += len(self.lines) - self.max_lines
            self.refresh()
            self.lines = self.lines[-self.max_lines:]
        self._widest_line_width = max(self._widest_line_width,
                                      max(strip.cell_length for strip in strips))
        self._fit_width()
