"""Lay a hidden pane out ahead of time, so that the first time it shows costs one layout of the screen, not four.

A widget Textual lays out for the first time gets a new ``virtual_size`` and ``container_size`` (``virtual_size`` is
a reactive that asks for another layout of the screen), and a scrolling widget's scrollbars appear (another layout,
then one for the scrollbars' own first size). A tab pane that was shown once and hidden keeps those sizes, so each
later time it shows, its own first layout places everything. :func:`presize` gives a hidden pane's widgets those
sizes while the app is idle: it arranges the pane on a compositor of its own at the size of the pane shown in its
place, as the screen's layout would, until the sizes settle (a scrollbar that appears changes the arrangement).
Nothing is drawn; no event is sent (the pane's widgets get their Show and Resize when it shows, as before).
"""

from __future__ import annotations

from textual._compositor import Compositor
from textual.widget import Widget


def presize(pane: Widget, shown: Widget, passes: int = 3) -> int:
    """Give the hidden ``pane`` the sizes its widgets take when it shows in place of ``shown`` (a pane on screen
    now, laid out in the same box). Returns the number of widgets whose size changed (0: nothing to do)."""
    if pane.display or not pane.is_mounted or not shown.is_mounted:
        return 0
    geometry = shown.screen._compositor.full_map.get(shown)
    if geometry is None:
        return 0
    changed = 0
    for _ in range(passes):
        compositor = Compositor()
        compositor.reflow(pane, geometry.region.size)
        now = 0
        for widget, placed in compositor.full_map.items():
            now += bool(widget._size_updated(placed.region.size, placed.virtual_size, placed.container_size,
                                             layout=False))
        changed += now
        if not now:
            break
    return changed
