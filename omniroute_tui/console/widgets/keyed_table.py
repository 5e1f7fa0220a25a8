"""A DataTable that applies keyed diffs: stale rows removed, changed cells updated, new
rows added; nothing is cleared and refilled. It can keep the rows in a given order, mark
the sorted column's header, show a subset of its columns, and keeps the first column (the
name) in place when it scrolls sideways."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from rich.markup import escape
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.content import Content
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellKey, ColumnKey
from textual.widgets.data_table import RowKey as DataTableRowKey

from ...config.hidden import visible
from ..model.panes import Pane
from ..model.row_keys import RowKey
from .paint_style import StylePerPaint
from .scrollbars import whole_cell_scrollbars

__all__ = ["KeyedTable"]

SegmentLines = list[list[Segment]]
Key = TypeVar("Key", bound=RowKey)
#: cells and row lines kept by what they show: a few screens' worth
CACHED = 1_000
#: entries kept by DataTable's caches of one paint (each paint starts them over)
STALE = 200


class KeyedTable(StylePerPaint, DataTable[str]):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; }
    """
    SORTED = " ▼"  # after the sorted column's name

    def __init__(self, kind: Pane, columns: tuple[tuple[str, int | None], ...], *,
                 pick: tuple[int, ...] | None = None, id: str | None = None) -> None:
        """A table of `kind` (providers, connections, lockouts) rows. `columns`: names
        with a fixed width, or None for one that grows with its contents; `pick` shows
        only those of the rows' cells (a compact table on the dashboard)."""
        #: rendered cells by what they show (see `_render_cell`)
        self._cells: LRUCache[tuple[object, ...], SegmentLines] = LRUCache(CACHED)
        #: rendered row lines by what they show (see `_render_line_in_row`)
        self._rows: LRUCache[tuple[object, ...], tuple[SegmentLines, SegmentLines]] = (
            LRUCache(CACHED))
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, fixed_columns=1)
        # DataTable's own caches are keyed on its update counter: what they hold is stale
        # after the next paint's first update, yet they keep up to 10,000 cells and 1,000
        # lines a table, objects that every full garbage collection walks
        for cache in (self._cell_render_cache, self._row_render_cache,
                      self._row_renderable_cache, self._line_cache):
            cache.maxsize = STALE
        self.kind = kind
        self._all_columns = columns
        self._pick = pick
        self._set_columns(pick)
        #: each row shown: its key and cells, and the id DataTable knows it by (a key is
        #: a name or a tuple of names: never text to split back)
        self._shown: dict[RowKey, tuple[str, ...]] = {}
        self._ids: dict[RowKey, str] = {}
        self._keys: dict[str, RowKey] = {}
        self._next_id = 0
        self._sorted_as: tuple[RowKey, ...] = ()
        self._sorted_column: str | None = None
        self.filter_text = ""
        self.title_text = ""
        self.total = 0  # rows before the filter, at the last sync
        self._reselect: RowKey | None = None  # the row to select again after use_columns

    def _set_columns(self, pick: tuple[int, ...] | None) -> None:
        columns = self._all_columns
        if pick is not None:
            columns = tuple(columns[i] for i in pick)
        self._columns = columns
        self._column_names = tuple(name for name, _ in columns)
        self._grows = {name for name, width in columns if width is None}

    def on_mount(self) -> None:
        whole_cell_scrollbars(self)
        self._add_columns()

    def _add_columns(self) -> None:
        for name, width in self._columns:
            # room for the sort mark, so that sorting never moves the columns
            self.add_column(self._label(name), key=name, width=None if width is None
                            else max(width, len(name) + len(self.SORTED)))

    def _label(self, name: str) -> str:
        return name + self.SORTED if name == self._sorted_column else name

    @property
    def pick(self) -> tuple[int, ...] | None:
        return self._pick

    def use_columns(self, pick: tuple[int, ...] | None) -> None:
        """Show only the columns `pick` (indexes into the rows' cells; None: all), keeping
        the selected row."""
        if pick == self._pick:
            return
        selected = self.selected_key
        self._pick = pick
        self._set_columns(pick)
        self.clear(columns=True)
        self._forget_rows()
        self._add_columns()
        self._reselect = selected

    def mark_sorted(self, column: str | None) -> None:
        """Put the sort mark on `column`'s header (None: the rows' own order, no mark)."""
        if column == self._sorted_column:
            return
        before, self._sorted_column = self._sorted_column, column
        for name in (before, column):
            if name is not None and name in self._column_names:
                header = self.columns[ColumnKey(name)]
                header.label = Text(self._label(name))
                header.content_width = max(header.content_width, header.label.cell_len)
        self._require_update_dimensions = True
        self.refresh()

    def set_title(self, text: str) -> None:
        """The title over the table, as written (a typed filter is never markup)."""
        if text != self.title_text:
            self.title_text = text
            self.border_title = Content(text)

    @property
    def selected_key(self) -> RowKey | None:
        if not self.row_count:
            return None
        try:
            row_id = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None
        return self._keys.get(row_id or "")

    def sync(self, rows: Mapping[Key, tuple[str, ...]],
             order: Sequence[Key] | None = None) -> int:
        """Make the table show `rows` (key -> cells), touching only what changed, in
        `order` (row keys) when given; returns how many rows pass the filter. Cells are
        text: a model or route named like markup (`[/x]`) is shown as it is written, and
        a hidden character in a name (an attached gateway's are not ours to check) as
        its escape (`\\x1b`), never sent to the terminal. The cursor stays on its row as
        rows come, go and move (a new request on top used to slide the next one under
        it); where its row is gone, it keeps its place."""
        held = self.selected_key
        if self._pick is not None:
            pick = self._pick
            rows = {k: tuple(v[i] for i in pick) for k, v in rows.items()}
        total = len(rows)
        needle = self.filter_text.lower()
        if needle:
            # a request id is matched whole (its cell may be cut short); a tuple key's
            # names are all cells of their row
            rows = {k: v for k, v in rows.items()
                    if (isinstance(k, str) and needle in k.lower())
                    or any(needle in cell.lower() for cell in v)}
        shown = self._shown
        for key in [k for k in shown if k not in rows]:
            self.remove_row(self._ids[key])
            del shown[key], self._keys[self._ids.pop(key)]
        changed = False
        for key, cells in rows.items():
            before = shown.get(key)
            if before is None:
                self._next_id += 1
                row_id = self._ids[key] = str(self._next_id)
                self._keys[row_id] = key
                self.add_row(*(_cell(c) for c in cells), key=row_id)
            elif before != cells:
                self._set_cells(self._ids[key], before, cells)
                changed = True
            else:
                continue
            shown[key] = cells
        if changed:  # what update_cell does after each cell, once for them all
            self._update_count += 1
            self.refresh()
        if order is not None:
            self._order(order)
        if self._reselect is not None:
            self.select_key(self._reselect)
            self._reselect = None
        elif held is not None and held in shown and self.selected_key != held:
            self.select_key(held)
        self.total = total
        return len(rows)

    def _set_cells(self, row_id: str, before: tuple[str, ...], cells: tuple[str, ...]
                   ) -> None:
        """DataTable.update_cell of each cell of row `row_id` that changed, but for the
        update count and the refresh that `sync` does once (a storm changes a few hundred
        cells a paint, and each update_cell refreshed the whole table)."""
        row_key = DataTableRowKey(row_id)
        data = self._data[row_key]
        for name, old, new in zip(self._column_names, before, cells, strict=True):
            if old != new:
                column_key = ColumnKey(name)
                data[column_key] = _cell(new)
                if name in self._grows:  # its width follows its contents (on idle)
                    self._updated_cells.add(CellKey(row_key, column_key))
                    self._require_update_dimensions = True

    def _order(self, order: Sequence[RowKey]) -> None:
        """Sort the rows into `order` (DataTable sorts by cell values: its rows' cells,
        which hold their keys' columns, are looked up back to their keys)."""
        wanted = tuple(k for k in order if k in self._shown)
        if wanted == self._sorted_as:
            return  # the same rows in the same order: no re-layout
        rank = {self._shown[k]: i for i, k in enumerate(wanted)}
        self.sort(key=lambda cells: rank.get(tuple(cells), len(rank)))
        self._sorted_as = wanted

    def reset(self) -> None:
        """Forget every row (a new model is coming)."""
        self.clear()
        self._forget_rows()

    def _forget_rows(self) -> None:
        self._shown.clear()
        self._ids.clear()
        self._keys.clear()
        self._sorted_as = ()

    @property
    def shown_keys(self) -> list[RowKey]:
        """The keys of the rows shown, top to bottom."""
        return [self._keys[row.key.value or ""] for row in self.ordered_rows]

    def shown_row(self, key: RowKey) -> list[str]:
        """The cells row `key` shows (KeyError: it shows no such row)."""
        return self.get_row(self._ids[key])

    def row_index(self, key: RowKey) -> int:
        """Where row `key` is now, from the top (KeyError: it shows no such row)."""
        return self.get_row_index(self._ids[key])

    def select_key(self, key: RowKey) -> bool:
        row_id = self._ids.get(key)
        if row_id is None:
            return False
        self.move_cursor(row=self.get_row_index(row_id))
        return True

    def _render_cell(self, row_index: int, column_index: int, base_style: Style,
                     width: int, cursor: bool = False, hover: bool = False) -> SegmentLines:
        """A cell as DataTable renders it, cached by what it shows. DataTable keys its
        own cache on a counter that any `update_cell` bumps: one countdown ticking
        re-rendered every visible cell of the table at each paint."""
        row_key = self._row_locations.get_key(row_index)
        if row_key is None or column_index < 0:  # the header, row labels: rare, as before
            return super()._render_cell(row_index, column_index, base_style, width,
                                        cursor, hover)
        column = self.ordered_columns[column_index]
        key = (row_index, column_index, self._data[row_key].get(column.key), base_style,
               width, cursor, hover, self._show_hover_cursor, self._pseudo_class_state,
               self.rows[row_key].height)
        lines = self._cells.get(key)
        if lines is None:
            lines = self._cells[key] = super()._render_cell(
                row_index, column_index, base_style, width, cursor, hover)
        return lines

    def _render_line_in_row(self, row_key: DataTableRowKey, line_no: int, base_style: Style,
                            cursor_location: Coordinate, hover_location: Coordinate
                            ) -> tuple[SegmentLines, SegmentLines]:
        """A row's line, cached by what the row shows, where it is and how wide its
        columns are (DataTable's own cache goes with any `update_cell`, as its cells')."""
        if row_key is self._header_row_key:
            shown: object = tuple(str(c.label) for c in self.columns.values())
        else:
            row = self._keys.get(row_key.value or "")
            shown = None if row is None else self._shown.get(row)
        key = (row_key, shown, self._row_locations.get(row_key), line_no, base_style,
               cursor_location, hover_location, self.cursor_type, self.show_cursor,
               self._show_hover_cursor, self._pseudo_class_state, self.size.width,
               tuple(c.get_render_width(self) for c in self.columns.values()))
        lines = self._rows.get(key)
        if lines is None:
            lines = self._rows[key] = super()._render_line_in_row(
                row_key, line_no, base_style, cursor_location, hover_location)
        return lines

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._cells.clear()
        self._rows.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cells.clear()
        self._rows.clear()


def _cell(text: str) -> str:
    return escape(visible(text))
