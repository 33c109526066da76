"""A theme switch recolours the text already on screen.

The views build their text with role colours (``styles.themed``) when they draw or update, so after a switch of
theme (palette, ``app.theme``) what was already drawn kept the old theme's colours until its view redrew. On a
switch :func:`recolour_app` walks every screen of the stack and swaps, in the Rich text the widgets hold, each
colour of the old theme's roles for the same role's colour in the new theme:

- ``Static`` (and ``Label``) content: a ``Text``, or a Rich ``Table``, ``Group``, ``Padding`` or ``Panel`` of them,
  or the lines of a pre-rendered detail (``widgets/detail_pane.py``);
- ``DataTable`` cells (and a ``FindTable``'s full row list, which its search refills from);
- ``Tree`` node labels;
- widgets that draw their colours at render time (``VirtualTable``, ``MetricChart``) drop their line caches and
  redraw.

A widget or screen that keeps role-coloured text anywhere else defines ``theme_changed(self)``; it is called
after the walk.
"""

from typing import Any, Callable, Dict, Iterable, List

from rich.color import Color as RichColor
from rich.console import Group
from rich.padding import Padding
from rich.panel import Panel
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Span, Text
from textual.app import App
from textual.widget import Widget
from textual.widgets import DataTable, Static, Tree

from probe_tui.app.styles import theme_colours
from probe_tui.app.widgets.detail_pane import Prerendered

ColourMap = Dict[RichColor, RichColor]


def colour_map(app: App, old_theme: str, new_theme: str) -> ColourMap:
    """Each role's colour in ``old_theme`` -> the same role's colour in ``new_theme`` (changed ones only)."""
    old, new = theme_colours(app, old_theme), theme_colours(app, new_theme)
    mapping: ColourMap = {}
    for role, colour in old.items():
        if colour not in mapping and new[role] != colour:
            mapping[colour] = new[role]
    return mapping


def recolour_style(style: Any, mapping: ColourMap) -> Any:
    """``style`` (a Style; a string style names no role colour) with its colour swapped."""
    if isinstance(style, Style) and style.color is not None and style.color in mapping:
        return style + Style(color=mapping[style.color])
    return style


def recolour_text(text: Text, mapping: ColourMap) -> bool:
    """Swap the colours of ``text`` in place; whether anything changed."""
    changed = False
    style = recolour_style(text.style, mapping)
    if style is not text.style:
        text.style, changed = style, True
    spans: List[Span] = []
    for span in text.spans:
        new = recolour_style(span.style, mapping)
        changed = changed or new is not span.style
        spans.append(Span(span.start, span.end, new) if new is not span.style else span)
    if changed:
        text.spans = spans
    return changed


def recolour_renderable(renderable: Any, mapping: ColourMap) -> bool:
    """Swap the colours of a Text or of the Texts inside a Rich Table, Group, Padding or Panel."""
    if isinstance(renderable, Text):
        return recolour_text(renderable, mapping)
    if isinstance(renderable, Prerendered):  # its lines, and what they were drawn from (a resize draws it again)
        changed = recolour_renderable(renderable.source, mapping)
        for line in renderable.lines:
            for n, segment in enumerate(line):
                style = recolour_style(segment.style, mapping)
                if style is not segment.style:
                    line[n], changed = Segment(segment.text, style, segment.control), True
        return changed
    parts: Iterable[Any] = ()
    if isinstance(renderable, Table):
        parts = [cell for column in renderable.columns for cell in column._cells]
        parts = [*parts, *(column.header for column in renderable.columns)]
    elif isinstance(renderable, Group):
        parts = renderable.renderables
    elif isinstance(renderable, (Padding, Panel)):
        parts = [renderable.renderable]
    changed = False
    for part in parts:
        changed = recolour_renderable(part, mapping) or changed
    return changed


def recolour_widget(widget: Widget, mapping: ColourMap) -> None:
    if isinstance(widget, Static):
        content = widget.content
        if recolour_renderable(content, mapping):
            widget.update(content)
    elif isinstance(widget, DataTable):
        for row in widget._data.values():
            for cell in row.values():
                recolour_renderable(cell, mapping)
        for _key, cells in getattr(widget, "source", ()):  # FindTable: every row, shown or not
            for cell in cells:
                recolour_renderable(cell, mapping)
        widget._clear_caches()
        widget.refresh()
    elif isinstance(widget, Tree):
        for node in widget._tree_nodes.values():
            recolour_renderable(node._label, mapping)
        widget._invalidate()
    else:
        cache = getattr(widget, "_line_cache", None)
        if isinstance(cache, dict):
            cache.clear()
        widget.refresh()


def recolour_app(app: App, old_theme: str, new_theme: str) -> None:
    """Recolour every screen of ``app``'s stack from ``old_theme``'s role colours to ``new_theme``'s."""
    if old_theme == new_theme:
        return
    try:
        mapping = colour_map(app, old_theme, new_theme)
    except KeyError:  # a theme that is gone: nothing to map from
        return
    hooks: List[Callable[[], Any]] = []
    for screen in app.screen_stack:
        for widget in screen.walk_children(with_self=False):
            if mapping:
                recolour_widget(widget, mapping)
            hook = getattr(widget, "theme_changed", None)
            if callable(hook):
                hooks.append(hook)
        hook = getattr(screen, "theme_changed", None)
        if callable(hook):
            hooks.append(hook)
    for hook in hooks:
        hook()
