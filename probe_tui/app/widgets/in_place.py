"""Updating a pane's text without laying the whole screen out again.

``Static.update`` asks for a layout of the whole screen (its height may change), and a layout re-renders every
widget whose box it touches: on the compare browser that was ~100 ms of CPU a cursor move (the detail pane follows
the cursor), most of a key's cost. :func:`update_in_place` measures the new content at the widget's width first
and asks for a layout only when the widget's box changes. A detail pane whose text keeps its height from row to
row never asks; one whose text is a line longer or shorter from row to row keeps its box with ``min-height:
100%`` (in a scrolling pane: the pane's height) as long as the text fits the pane.
"""

from textual.visual import VisualType, visualize
from textual.widgets import Static

_MEASURED = "_in_place_measured"
"""Attribute of a widget: (the content update_in_place gave it, that content's height)."""


def update_in_place(widget: Static, content: VisualType) -> None:
    """``widget.update(content)``, with a screen layout only when its box changes (its width is set by the
    layout, not by its content)."""
    width = widget.content_size.width
    rule_width, rule_height = widget.styles.width, widget.styles.height  # None: the container's size
    if not widget.is_mounted or width <= 0 or (rule_width is not None and rule_width.is_auto):
        widget.update(content)
        return
    if rule_height is None or not rule_height.is_auto:
        widget.update(content, layout=False)  # the layout sets its height too
        return
    height = visualize(widget, content, markup=widget._render_markup).get_height(widget.styles, width)
    box = widget.content_size.height
    previous = getattr(widget, _MEASURED, None)
    if previous is not None and previous[0] is widget.content and previous[1] < box:
        new_box = max(height, box)  # a min-height holds the box taller than its text
    else:
        new_box = height
    widget.update(content, layout=new_box != box)
    setattr(widget, _MEASURED, (content, height))
