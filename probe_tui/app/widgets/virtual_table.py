"""A table that renders only the rows on screen, for results of millions of rows.

A DataTable holds every row as Python objects and lays them all out; a million rows take seconds and gigabytes.
:class:`VirtualTable` is a Line API widget (``ScrollView.render_line``): it asks its :class:`RowSource` for the
cells of the visible rows only, so opening and scrolling cost the same for ten rows or ten million. The source
holds columnar arrays and a view index (sorting and filtering are numpy work done by the caller); the table
keeps the cursor on a view row and posts :class:`VirtualTable.CursorMoved` / :class:`VirtualTable.Selected`.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from probe_tui.app.styles import themed

Cell = Union[str, Text]


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    justify: str = "left"
    """``left`` or ``right`` (numbers)."""
    overflow: str = "end"
    """Where a long cell is cut: ``end``, ``middle``, or ``start`` (record names: their tail says the most)."""


class RowSource:
    """What a :class:`VirtualTable` shows: ``len()`` view rows, the cells and the style of one of them."""

    def __len__(self) -> int:
        return 0

    def cells(self, row: int) -> Sequence[Cell]:
        raise NotImplementedError

    def row_style(self, row: int) -> str:
        return ""


class ListSource(RowSource):
    """Rows held as lists of cells (small tables: alerts, suspects of a small result, tests)."""

    def __init__(self, rows: Optional[List[Sequence[Cell]]] = None, styles: Optional[List[str]] = None) -> None:
        self.rows: List[Sequence[Cell]] = list(rows or [])
        self.styles: List[str] = list(styles or [""] * len(self.rows))

    def __len__(self) -> int:
        return len(self.rows)

    def cells(self, row: int) -> Sequence[Cell]:
        return self.rows[row]

    def row_style(self, row: int) -> str:
        return self.styles[row] if row < len(self.styles) else ""

    def append(self, cells: Sequence[Cell], style: str = "") -> None:
        self.rows.append(cells)
        self.styles.append(style)


def parse_style(style: Union[str, Style]) -> Style:
    """A row's or cell's style: a spec of probe_tui/app/styles.py (roles take the current theme's colours)."""
    if isinstance(style, Style):
        return style
    return themed(style) if style else Style()


def fit_text(text: str, width: int, justify: str = "left", overflow: str = "end") -> str:
    """``text`` padded or cut to exactly ``width`` terminal cells (an ellipsis marks a cut)."""
    length = cell_len(text)
    if length == width:
        return text
    if length < width:
        pad = " " * (width - length)
        return pad + text if justify == "right" else text + pad
    if width <= 1:
        return "…"[:width]
    if overflow == "middle" and width > 8 and length == len(text):
        head = (width - 1) // 2
        return text[:head] + "…" + text[length - (width - 1 - head):]
    if overflow == "start" and length == len(text):
        return "…" + text[length - (width - 1):]
    return set_cell_size(text, width - 1) + "…"


def cell_parts(cell: Cell) -> "tuple[str, str]":
    """(plain text, style) of a cell: a str, or a rich Text whose own style applies to all of it."""
    if isinstance(cell, Text):
        style = cell.style if isinstance(cell.style, str) else str(cell.style)
        if not style and cell.spans:
            span_style = cell.spans[0].style
            style = span_style if isinstance(span_style, str) else str(span_style)
        return cell.plain, style
    return str(cell), ""


def fit(cell: Cell, width: int, justify: str = "left", overflow: str = "end") -> Text:
    """A cell as a Text of exactly ``width`` cells (tests and small tables)."""
    plain, style = cell_parts(cell)
    return Text(fit_text(plain, width, justify, overflow), style=style)


class RowMessage(Message):
    """What a :class:`VirtualTable` says about one of its rows."""

    def __init__(self, table: "VirtualTable", row: int) -> None:
        super().__init__()
        self.table = table
        self.row = row

    @property
    def control(self) -> "VirtualTable":
        return self.table


class VirtualTable(ScrollView, can_focus=True):
    """A header line and the visible rows of a :class:`RowSource`; a row cursor moved with the keyboard."""

    DEFAULT_CSS = """
    VirtualTable {
        height: 1fr;
        background: $surface;
    }
    VirtualTable > .virtual-table--header {
        text-style: bold;
        background: $panel;
    }
    VirtualTable > .virtual-table--cursor {
        background: $block-cursor-background;
        color: $block-cursor-foreground;
        text-style: bold;
    }
    VirtualTable > .virtual-table--cursor-blurred {
        background: $block-cursor-blurred-background;
    }
    """
    COMPONENT_CLASSES = {"virtual-table--header", "virtual-table--cursor", "virtual-table--cursor-blurred"}

    # Navigation keys of the widget itself (like DataTable's); the screens' actions live in the registry.
    BINDINGS = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
        Binding("enter", "select", "Select", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, always_update=True, init=False)

    class CursorMoved(RowMessage):
        """The cursor moved to a row."""

    class Selected(RowMessage):
        """Enter on a row."""

    def __init__(self, *, name: Optional[str] = None, id: Optional[str] = None,
                 classes: Optional[str] = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns: List[Column] = []
        self.source: RowSource = RowSource()
        self.empty_text = ""
        self._version = 0
        self._line_cache: Dict[tuple, Strip] = {}
        self._base_style: Optional[Style] = None

    # ---- data ---------------------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self.source)

    def set_source(self, columns: Sequence[Column], source: RowSource, *, cursor: Optional[int] = None) -> None:
        """Show ``source``; the cursor goes to ``cursor`` (default: kept, clamped)."""
        self.columns = list(columns)
        self.source = source
        self._version += 1
        width = sum(c.width for c in self.columns) + max(0, len(self.columns) - 1)
        self.virtual_size = Size(width, len(source) + 1)
        row = self.cursor_row if cursor is None else cursor
        self.cursor_row = max(0, min(row, len(source) - 1)) if len(source) else 0
        self.refresh()

    def rows_changed(self) -> None:
        """The source grew or its rows changed in place: repaint, keep the cursor."""
        self._version += 1
        self.virtual_size = Size(self.virtual_size.width, len(self.source) + 1)
        self.refresh()

    # ---- cursor -------------------------------------------------------------------------------------------
    @property
    def page_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def watch_cursor_row(self, row: int) -> None:
        self._scroll_to_cursor()
        self.refresh()
        if len(self.source):
            self.post_message(self.CursorMoved(self, row))

    def _scroll_to_cursor(self) -> None:
        row = self.cursor_row
        top = int(self.scroll_offset.y)
        page = self.page_rows
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True)
        elif row >= top + page:
            self.scroll_to(y=row - page + 1, animate=False, immediate=True)

    def move_cursor(self, row: int) -> None:
        if not len(self.source):
            return
        self.cursor_row = max(0, min(int(row), len(self.source) - 1))

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - self.page_rows)

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + self.page_rows)

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self.source) - 1)

    def action_scroll_left(self) -> None:
        self.scroll_to(x=max(0, self.scroll_offset.x - 8), animate=False)

    def action_scroll_right(self) -> None:
        self.scroll_to(x=self.scroll_offset.x + 8, animate=False)

    def action_select(self) -> None:
        if len(self.source):
            self.post_message(self.Selected(self, self.cursor_row))

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.move_cursor(int(self.scroll_offset.y) + event.y - 1)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # ---- rendering ----------------------------------------------------------------------------------------
    def _segments(self, cells: Sequence[Cell], row_style: Style) -> List[Segment]:
        """One line as segments: each cell fitted to its column, separated by a space (no rich Text: a page of
        rows renders in a few milliseconds)."""
        out: List[Segment] = []
        space = Segment(" ", row_style)
        for n, column in enumerate(self.columns):
            if n:
                out.append(space)
            plain, style = cell_parts(cells[n]) if n < len(cells) else ("", "")
            text = fit_text(plain, column.width, column.justify, column.overflow)
            out.append(Segment(text, row_style + parse_style(style) if style else row_style))
        return out

    def _finish(self, segments: List[Segment], base: Style) -> Strip:
        width = self.scrollable_content_region.width
        x = int(self.scroll_offset.x)
        if x == 0:  # the common case: one Strip, no crop (each Strip costs its caches)
            return Strip(Segment.adjust_line_length(segments, width, base), width)
        return Strip(segments).crop_extend(x, x + width, base)

    def render_lines(self, crop: Region) -> List[Strip]:
        self._base_style = self.rich_style  # once a repaint, not once a line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self._base_style if self._base_style is not None else self.rich_style
        if y == 0:
            header = base + self.get_component_rich_style("virtual-table--header")
            return self._finish(self._segments([c.label for c in self.columns], header), header)
        row = int(self.scroll_offset.y) + y - 1
        if row >= len(self.source):
            if row == 0 and self.empty_text:
                return self._finish([Segment(" " + self.empty_text, base + Style(italic=True))], base)
            return Strip.blank(width, base)
        cursor = row == self.cursor_row
        key = (row, cursor, cursor and self.has_focus, self._version, width, int(self.scroll_offset.x))
        cached = self._line_cache.get(key)
        if cached is not None:
            return cached
        style = base + parse_style(self.source.row_style(row))
        if cursor:
            component = "virtual-table--cursor" if self.has_focus else "virtual-table--cursor-blurred"
            segments = self._segments(self.source.cells(row), style)
            cursor_style = self.get_component_rich_style(component)
            segments = [Segment(seg.text, (seg.style or style) + cursor_style) for seg in segments]
        else:
            segments = self._segments(self.source.cells(row), style)
        strip = self._finish(segments, base)
        if len(self._line_cache) > 4 * max(40, self.page_rows):
            self._line_cache.clear()
        self._line_cache[key] = strip
        return strip

    def visible_text(self) -> List[str]:
        """The plain text of the header and the rows on screen (tests, tmux captures)."""
        def line(cells: Sequence[Cell]) -> str:
            parts = []
            for n, col in enumerate(self.columns):
                plain = cell_parts(cells[n])[0] if n < len(cells) else ""
                parts.append(fit_text(plain, col.width, col.justify, col.overflow))
            return " ".join(parts)

        lines = [line([c.label for c in self.columns])]
        top = int(self.scroll_offset.y)
        for row in range(top, min(len(self.source), top + self.page_rows)):
            lines.append(line(self.source.cells(row)))
        return lines


def plain_segments(strip: Strip) -> str:
    """The text of a rendered line (tests)."""
    return "".join(s.text for s in strip if isinstance(s, Segment))
