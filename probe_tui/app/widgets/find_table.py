"""A table that can be searched and filtered, and says how many rows it shows (home, alerts, grad compare,
free_benchmark, overflow; the compare and dump browsers have their own, over millions of rows).

:class:`FindTable` keeps every row it was given (:meth:`FindTable.set_rows`) and shows those that contain the
search text (any cell, case-insensitive) and pass the current filter. ``/`` opens a one-line search field above
the table (enter goes back to the table, escape clears it), ``f`` cycles the filters the screen gave. The count
("12 of 40 rows · filter: errors") goes to a label of the screen (``counter``), after its ``title``.
"""

from itertools import zip_longest
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text
from textual._types import SegmentLines
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.widgets import DataTable, Input, Label
from textual.widgets.data_table import DuplicateKey, RowKey
from textual.widgets.data_table import Row as TableRow

from probe_tui.app.actions import bindings_for
from probe_tui.app.widgets.table_cells import one_line_cell

Row = Tuple[str, Sequence[RenderableType]]
Filter = Tuple[str, Callable[[str], bool]]
"""(name, predicate on the row key)."""


def cell_text(cell: RenderableType) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def row_index(event: DataTable.RowHighlighted) -> Optional[int]:
    """The number a row's key holds (rows keyed by their place in the screen's list), None for another key."""
    key = event.row_key.value if event.row_key is not None else None
    try:
        return int(str(key))
    except ValueError:
        return None


class FindInput(Input):
    """The search field of a :class:`FindTable`: typing filters at once, enter returns to the table, escape
    clears the search and closes the field."""

    BINDINGS = [Binding("escape", "close", "Clear search", show=True)]

    DEFAULT_CSS = """
    FindInput {
        height: 1;
        border: none;
        padding: 0 1;
        background: $panel;
        /* over the last line of the table's pane, on a layer of its own (its dock takes no room from the table)
           drawn over the rest: opening the field resizes nothing, so the table does not draw its rows again */
        layer: table-find;
        dock: bottom;
        overlay: screen;
        &:focus {
            border: none;
        }
    }
    """

    def __init__(self, table: "FindTable") -> None:
        super().__init__(value=table.search, placeholder="search the rows", classes="table-find")
        self.table = table

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.table.search_for(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.table.focus()

    def action_close(self) -> None:
        self.table.search_for("")
        self.table.focus()
        self.remove()


class FindTable(DataTable):
    BINDINGS = bindings_for("table")


    class Found(Message):
        """The rows shown changed (search, filter or new rows)."""

        def __init__(self, table: "FindTable") -> None:
            super().__init__()
            self.table = table

    def __init__(self, *, id: Optional[str] = None, filters: Sequence[Filter] = (), counter: Optional[str] = None,
                 title: str = "", **options) -> None:
        options.setdefault("cursor_type", "row")
        options.setdefault("zebra_stripes", True)
        super().__init__(id=id, **options)
        self.source: List[Row] = []
        self.search = ""
        self.filters: List[Optional[Filter]] = [None] + list(filters)
        self.filter_index = 0
        self.counter = counter
        self.title = title
        self.shown = 0

    # ---- rows ---------------------------------------------------------------------------------------------
    def set_rows(self, rows: Sequence[Row]) -> None:
        """Every row (key, cells); those that match are shown, the cursor stays on its row when it still is."""
        self.source = list(rows)
        self.refill()

    def matches(self, key: str, cells: Sequence[RenderableType]) -> bool:
        chosen = self.filters[self.filter_index]
        if chosen is not None and not chosen[1](key):
            return False
        if not self.search:
            return True
        needle = self.search.lower()
        return any(needle in cell_text(c).lower() for c in cells)

    def refill(self) -> None:
        keep = self.cursor_key()
        self.clear()
        self.add_rows_at_once([(key, cells) for key, cells in self.source if self.matches(key, cells)])
        self.shown = self.row_count
        if keep is not None and keep in self.rows:
            self.move_cursor(row=self.get_row_index(keep))
        self.show_count()
        self.call_after_refresh(self.show_count)  # again once laid out: are columns cut?
        self.post_message(self.Found(self))

    def add_rows_at_once(self, rows: Sequence[Row]) -> None:
        """Add one-line rows (key, cells) at the bottom, as ``add_row`` one by one would, with the cursor set
        once. ``add_row`` sets the cursor reactive (validated, watched) and lists the ordered columns twice for
        each row: ~half of a 338-row fill (an acc_check result opening)."""
        if not rows:
            return
        columns = self.ordered_columns
        was_empty = self.row_count == 0
        for key, cells in rows:
            row_key = RowKey(key)
            if row_key in self._row_locations:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            if len(cells) > len(columns):
                raise ValueError("More values provided than there are columns.")
            self._row_locations[row_key] = len(self.rows)
            self._data[row_key] = {column.key: cell for column, cell in zip_longest(columns, cells)}
            self.rows[row_key] = TableRow(row_key, 1, None, False)
            self._new_rows.add(row_key)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if was_empty and len(self.columns) > 0 and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()  # a cell to show the cursor on where there was none
        self._update_count += len(rows)
        self.check_idle()

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """The table's size once rows were added. ``fill_table`` sizes every column, yet Textual measures every
        cell of every new row (on each search keystroke, filter and sort: a full refill) to widen auto-width
        columns: ~3 ms a row. With no auto-width column and plain one-line rows only the size is left to set."""
        rows = [self.rows.get(key) for key in new_rows]
        if (not self.columns or any(c.auto_width for c in self.columns.values())
                or any(r is not None and (r.label is not None or r.auto_height) for r in rows)):
            super()._update_dimensions(new_rows)
            return
        width = sum(c.get_render_width(self) for c in self.columns.values()) + self._row_label_column_width
        self.virtual_size = Size(width, self._total_row_height + (self.header_height if self.show_header else 0))

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int, cursor: bool = False,
                     hover: bool = False) -> SegmentLines:
        """A body cell of a one-line row holding a one-line text that fits is drawn by :func:`one_line_cell`
        (the same line as Textual's general path, ~5x cheaper: most of a view's first frame); anything else,
        the header and fixed rows and columns, by Textual."""
        if row_index < self.fixed_rows or column_index < self.fixed_columns or row_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        cache_key = (row_key, column_key, base_style, cursor, hover, self._show_hover_cursor, self._update_count,
                     self._pseudo_class_state)
        lines = self._cell_render_cache.get(cache_key)
        if lines is not None:
            return lines
        row = self.rows.get(row_key) if row_key is not None else None
        if row is not None and row.height == 1:
            cell = self._get_row_renderables(row_index).cells[column_index]
            component_style, post_style = self._get_styles_to_render_cell(
                False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
                self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
            pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
            lines = one_line_cell(self.app.console, cell, width, self.cell_padding, pre_style, post_style)
            if lines is not None:
                self._cell_render_cache[cache_key] = lines
                return lines
        return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)

    def cursor_key(self) -> Optional[str]:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None
        return None if key is None else str(key)

    # ---- count, search, filter ----------------------------------------------------------------------------
    def count_text(self) -> str:
        total = len(self.source)
        noun = "row" if total == 1 else "rows"
        parts = ["{:,} {}".format(total, noun) if self.shown == total else "{:,} of {:,} {}".format(self.shown, total,
                                                                                                 noun)]
        chosen = self.filters[self.filter_index]
        if chosen is not None:
            parts.append("filter: " + chosen[0])
        if self.search:
            parts.append("search: " + self.search)
        if self.columns_cut():
            parts.append("→ more columns")
        return " · ".join(parts)

    def columns_cut(self) -> bool:
        """Columns go past the right edge (the table scrolls sideways to them)."""
        width = self.scrollable_content_region.width
        return bool(width) and self.virtual_size.width > width

    def on_resize(self) -> None:
        self.call_after_refresh(self.show_count)

    def show_count(self) -> None:
        if self.counter is None or not self.is_attached:
            return
        try:
            label = self.screen.query_one(self.counter, Label)
        except Exception:
            return
        text = (self.title + " · " if self.title else "") + self.count_text()
        if text != label.content:  # an update lays the screen out again
            label.update(text)

    def search_for(self, text: str) -> None:
        if text != self.search:
            self.search = text
            self.refill()

    def action_find(self) -> None:
        """Open (or return to) the search field, over the last line of the table's pane."""
        parent = self.parent
        if parent is None:
            return
        existing = [w for w in parent.children if isinstance(w, FindInput) and w.table is self]
        if existing:
            existing[0].focus()
            return
        field = FindInput(self)
        parent.mount(field)
        field.focus()

    def action_next_filter(self) -> None:
        if len(self.filters) == 1:
            self.notify("This table has no filters: / searches its rows.", timeout=3)
            return
        self.filter_index = (self.filter_index + 1) % len(self.filters)
        self.refill()
