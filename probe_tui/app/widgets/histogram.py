"""A histogram drawn with block characters: one column per bin, eighth blocks for the tops, a value axis below."""

from typing import Sequence

import numpy as np
from rich.text import Text

from probe_tui.app.styles import themed
from probe_tui.formatting import number_text

BLOCKS = " ▁▂▃▄▅▆▇█"


def bars(counts: Sequence[int], height: int = 6, bar_width: int = 1, style: str = "info") -> Text:
    """``height`` lines of bars, the tallest bin full height; a non-empty bin shows at least a sliver. ``style``: a
    spec of probe_tui/app/styles.py."""
    counts = np.asarray(counts, dtype=np.float64)
    top = float(counts.max()) if counts.size else 0.0
    eighths = np.zeros(counts.shape, dtype=np.int64) if top <= 0 else np.ceil(counts / top * height * 8).astype(int)
    lines = []
    for level in range(height, 0, -1):
        floor = (level - 1) * 8
        cells = []
        for e in eighths.tolist():
            fill = min(8, max(0, e - floor))
            cells.append(BLOCKS[fill] * bar_width)
        lines.append("".join(cells))
    out = Text("\n".join(lines))
    out.stylize(themed(style))
    return out


def histogram_text(counts: Sequence[int], edges: Sequence[float], *, width: int = 40, height: int = 6,
                   log: bool = False, nan: int = 0, posinf: int = 0, neginf: int = 0, zeros: int = 0) -> Text:
    """The bars, the first and last edge under them, and the values the bins leave out."""
    counts = np.asarray(counts)
    n = max(1, len(counts))
    bar_width = max(1, min(3, width // n))
    out = bars(counts, height, bar_width)
    span = n * bar_width
    left = number_text(edges[0], 3) if len(edges) else ""
    right = number_text(edges[-1], 3) if len(edges) else ""
    axis = left + " " * max(1, span - len(left) - len(right)) + right
    out.append("\n" + axis, style="dim")
    scale = "log10|x| of the non-zero values" if log else "values"
    notes = ["{} · {:,} counted · peak {:,}".format(scale, int(counts.sum()), int(counts.max()) if counts.size else 0)]
    extra = [("nan", nan), ("+inf", posinf), ("-inf", neginf)] + ([("zeros", zeros)] if log else [])
    shown = [f"{label} {count:,}" for label, count in extra if count]
    if shown:
        notes.append(" · ".join(shown))
    out.append("\n" + "\n".join(notes), style="dim")
    if nan or posinf or neginf:
        out.stylize(themed("bold error"), len(out.plain) - len(notes[-1]), len(out.plain))
    return out
