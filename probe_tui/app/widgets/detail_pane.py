"""A detail pane whose text is drawn off the UI thread.

A row's detail (a few Rich tables: statistics, dtypes, metrics) is drawn twice by Textual on each update: once to
measure its height, once to paint it; on the compare browser that was most of what a cursor move cost. The screen's
worker draws it once instead (:func:`prerender`, at the pane's width) and the pane shows the lines
(:class:`Prerendered`); the UI thread only copies segments. :meth:`DetailPane.show` updates without a screen
layout when the pane's box stays (``in_place.update_in_place``). When the pane's width changes (a resize, the
narrow layout), the lines drawn for the old width are drawn again from the original renderable.

A detail of another height does lay the screen out once; Textual then laid it out a second time because the
layout had changed the pane's and its scrolling container's ``virtual_size``, a reactive that asks for a layout.
That second layout changes nothing here (the pane has no children, the container keeps its box and its scrollbar
with ``overflow-y: scroll``, and its scrollbar takes the new size without a layout), so :class:`DetailPane` and
:class:`DetailScroll` take the size the layout gives them without asking for another (``_size_updated``).
"""

import io
from typing import Any, List, Optional, Tuple

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from textual.containers import ScrollableContainer, VerticalScroll
from textual.geometry import Size
from textual.widgets import Static

from probe_tui.app.widgets.in_place import update_in_place


class Prerendered:
    """``source`` drawn at ``width`` columns: its lines of segments; ``fits``: what it was drawn for (the pane's
    width without a scrollbar and its height)."""

    def __init__(self, source: RenderableType, width: int, lines: List[List[Segment]],
                 fits: Tuple[int, int] = (0, 0)) -> None:
        self.source, self.width, self.lines, self.fits = source, width, lines, fits

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        newline = Segment.line()
        for line in self.lines:
            yield from line
            yield newline

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width)


class DrawnOnce:
    """``source`` for a pane not laid out yet: Textual draws a Rich renderable twice in the pane's first layout and
    frame (to measure its height, then to paint it), at the same width; this draws it once per width and copies
    the lines the second time (a Rich group of tables: ~6 ms of CPU at a key that opens a view)."""

    def __init__(self, source: RenderableType) -> None:
        self.source = source
        self._drawn: Optional[Tuple[int, List[List[Segment]]]] = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self._drawn is None or self._drawn[0] != width:
            self._drawn = (width, console.render_lines(self.source, options.update(height=None), pad=False))
        newline = Segment.line()
        for line in self._drawn[1]:
            yield from line
            yield newline

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.source)


def _draw(renderable: RenderableType, width: int) -> List[List[Segment]]:
    width = max(1, width)
    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system="truecolor",
                      legacy_windows=False, highlight=False)
    return console.render_lines(renderable, console.options.update(width=width, highlight=False), pad=False)


def prerender(renderable: RenderableType, room: Optional[Tuple[int, int, int]]) -> Any:
    """Draw ``renderable`` (any thread: a console of its own) for a pane of ``room`` (``DetailPane.room``: width
    without a scrollbar, height, scrollbar width): narrower by the scrollbar when it is taller than the pane.
    Without a room (the pane not laid out yet) the renderable, drawn once at the width the layout gives it
    (:class:`DrawnOnce`)."""
    if room is None:
        return DrawnOnce(renderable)
    width, height, gutter = room
    lines = _draw(renderable, width)
    if len(lines) > height and gutter:
        width -= gutter
        lines = _draw(renderable, width)
    return Prerendered(renderable, width, lines, (room[0], room[1]))


class DetailScroll(VerticalScroll):
    """The scrolling container of a :class:`DetailPane` (give it ``overflow-y: scroll``): a detail of another
    height lays the screen out once, not twice."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)


class DetailPane(Static):
    """A Static in a scrolling pane, for a detail that changes with the cursor: :meth:`show` a renderable,
    pre-rendered (:func:`prerender` with :meth:`room`) or not.

    Give the pane ``overflow-y: scroll``: a scrollbar that comes and goes with the detail's length lays the
    screen out three times (the pane's height, the scrollbar, the narrower text) and draws the text again; one
    that stays costs one layout of the pane when the detail's height changes, none when it keeps its height."""

    def room(self) -> Optional[Tuple[int, int, int]]:
        """(width without a scrollbar, height, scrollbar width) of the pane; None before the first layout."""
        pane = self.parent
        width = self.content_size.width
        if width <= 0 or not isinstance(pane, ScrollableContainer):
            return None
        if pane.styles.overflow_y != "auto":  # a scrollbar always there (scroll) or never (hidden): one width
            return width, pane.scrollable_content_region.height, 0
        gutter = pane.styles.scrollbar_size_vertical
        if pane.show_vertical_scrollbar:
            width += gutter
        return width, pane.scrollable_content_region.height, gutter

    def show(self, content: Any) -> None:
        if isinstance(content, Prerendered):
            room = self.room()
            if room is None or content.fits != room[:2]:
                content = content.source  # drawn for another size of the pane
        update_in_place(self, content)

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # the layout that set this size placed the pane: no second one for its virtual_size (module doc)
        return super()._size_updated(size, virtual_size, container_size, layout=False)

    def on_resize(self) -> None:
        # once the layout settles: a scrollbar that comes or goes resizes the pane twice (its height, its width)
        self.call_after_refresh(self._check_width)

    def _check_width(self) -> None:
        content = self.content
        if isinstance(content, Prerendered) and content.width != self.content_size.width:
            self.update(content.source)
