"""A one-line label whose text changes (a table's title and row count, a status line): sized by the layout, not
by its text.

A ``Label`` is as wide as its text, so each ``update`` lays the whole screen out again (~25-40 ms of CPU on the
acc_check view, most of what a sort key cost there); this one keeps its box (one line, its container's width) and
is redrawn alone. Its text is cut at the pane's edge, as the Label's was.
"""

from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Label


class LineLabel(Label):
    """One line, its container's width; :meth:`update` (and :meth:`set_text`) redraw it without a layout."""

    DEFAULT_CSS = """
    LineLabel {
        width: 1fr;
        height: 1;
        text-wrap: nowrap;
        text-overflow: clip;
    }
    """

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        super().update(content, layout=False)  # its box does not depend on its text

    def set_text(self, text: Text) -> None:
        """``update``, unless the same text is shown (a status redrawn on a timer, by every key)."""
        if not same_text(self.content, text):
            self.update(text)


def same_text(shown: object, text: Text) -> bool:
    """``text`` is what ``shown`` (a Static's content) already is: the same characters, spans and style (rich's
    ``==`` leaves the style out)."""
    return (isinstance(shown, Text) and shown.plain == text.plain and shown.spans == text.spans
            and shown.style == text.style)
