"""One-line table cells drawn without Rich's general path.

A DataTable draws each cell through ``console.render_lines(Styled(Padding(cell, (0, pad)), ...))``: measuring,
wrapping, cropping and padding a renderable of any kind, ~80 µs a cell, 10-16 ms for the first frame of a view's
table (most of that frame). A plain one-line :class:`~rich.text.Text` that fits its column needs none of it: its
segments, the padding on both sides and the two styles layered over them make the same line (the same characters
in the same styles; ``tests/test_app_table_cells.py`` checks it against the general path). Anything else (a
wrapped, cut or justified cell, another renderable) returns None and takes the general path.
"""

from typing import List, Optional

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

_PLAIN_JUSTIFY = (None, "default", "left")
_NEWLINE = Text("\n")


def one_line_cell(console: Console, cell: object, width: int, pad: int, pre_style: Style,
                  post_style: Style) -> Optional[List[List[Segment]]]:
    """The cell's one line of segments, as the DataTable's general path draws it, or None when that path is
    needed."""
    if type(cell) is not Text:
        return None
    plain = cell.plain
    inner = width - 2 * pad
    if inner < 0 or "\n" in plain or "\t" in plain or cell.justify not in _PLAIN_JUSTIFY or cell.end not in ("", "\n"):
        return None
    used = cell_len(plain)
    if used > inner or (cell.justify == "left" and used < inner):
        return None
    null = Style()
    segments: List[Segment] = []
    if pad:
        segments.append(Segment(" " * pad, null))
    # (as Text's own drawing does, its base style becomes a span of a joined copy: ``render`` alone drops it)
    segments.extend(s for s in _NEWLINE.join((cell,)).render(console, end="") if s.text)
    if used < inner:
        segments.append(Segment(" " * (inner - used), null))
    if pad:
        segments.append(Segment(" " * pad, null))
    return [list(Segment.apply_style(segments, style=pre_style, post_style=post_style))]
