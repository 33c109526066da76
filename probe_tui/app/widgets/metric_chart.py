"""Line charts of monitor series, drawn by plotext (``textual-plotext``: no numpy 2 needed, 256 colours).

The legend is a line of its own under the plot (plotext draws its legend over the data, where it hid spikes).
Long series are reduced to the chart's width as a min/max envelope per column, so a spike of one step is never
dropped by the reduction and drawing costs the same for a hundred steps or a million.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from rich.console import RenderableType
from rich.text import Text
from textual_plotext import PlotextPlot

from probe_tui.app.styles import plot_colour

COLORS = ("cyan", "orange", "magenta", "green", "yellow", "blue", "red", "white")
RICH_COLORS = {"orange": "dark_orange"}  # plotext's colour names that Rich spells otherwise
MAX_LINES = len(COLORS)


def envelope(steps: np.ndarray, values: np.ndarray, columns: int) -> Tuple[np.ndarray, np.ndarray]:
    """At most ``2 * columns`` points that keep each column's smallest and largest value (NaN/inf dropped)."""
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    if steps.size <= 2 * max(1, columns):
        return steps, values
    edges = np.linspace(steps[0], steps[-1], columns + 1)
    bucket = np.clip(np.searchsorted(edges, steps, "right") - 1, 0, columns - 1)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    lows = np.minimum.reduceat(values, starts)
    highs = np.maximum.reduceat(values, starts)
    mids = steps[starts]
    xs = np.repeat(mids, 2)
    ys = np.empty(xs.size)
    ys[0::2], ys[1::2] = lows, highs
    return xs, ys


def short_key(key: str, limit: int = 36) -> str:
    """``grad_reduced/blocks.1.mlp.fc1.weight/norm`` -> the name and metric (the tag is in the picker)."""
    parts = key.split("/")
    text = "/".join(parts[1:]) if len(parts) == 3 and parts[0] else key
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def picker_label(key: str, width: int) -> Text:
    """A series' name that fits ``width`` cells and still tells it apart from its neighbours: the module path
    loses its leading words first (never its layer numbers nor its last two words), then its middle; the tag
    follows, dim, when there is room (the full key is the filter's match and the alert's series)."""
    parts = key.split("/")
    tag, name, metric = (parts[0], parts[1], parts[2]) if len(parts) == 3 else ("", key, "")
    suffix = "/" + metric if metric else ""
    words = name.split(".")
    dropped = [False] * len(words)

    def joined() -> str:
        out: List[str] = []
        for word, gone in zip(words, dropped):
            if not gone:
                out.append(word)
            elif not out or out[-1] != "…":
                out.append("…")
        return ".".join(out).replace("….", "…")

    for i in range(max(0, len(words) - 2)):
        if len(joined()) + len(suffix) <= width:
            break
        if not words[i].isdigit():
            dropped[i] = True
    text = joined() + suffix
    if len(text) > width:  # still too long: cut its middle, keep the end (the metric and the last words)
        keep = max(1, width - 1)
        head = keep // 3
        text = text[:head] + "…" + text[len(text) - (keep - head):]
    label = Text(text)
    if tag and len(text) + 1 + len(tag) <= width:
        label.append(" " + tag, style="dim")
    return label


class MetricChart(PlotextPlot):
    """The selected series over a step window; :meth:`show` redraws. A series given as ``(steps, values, low,
    high)`` is drawn as its line with the band's edges dotted in the same colour (min and max over ranks)."""

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.message = "waiting for the first step…"
        self.labels: List[Tuple[str, str]] = []
        """(label, colour) of each series drawn, for the legend line."""

    def legend(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for label, color in self.labels:
            if text:
                text.append("  ")
            text.append("━━ ", style=RICH_COLORS.get(color, color))
            text.append(label)
        text.truncate(max(1, self.size.width), overflow="ellipsis")
        return text

    def render(self) -> RenderableType:
        if not self.labels or self.size.height < 4:
            return super().render()
        width, height = self.size.width, self.size.height - 1
        self._plot.plotsize(width, height)
        self._plot._set_size(width, height)  # as PlotextPlot.render does (its resizing needs both)
        self._plot.theme(self._get_plotext_theme_name(self.app.theme))
        return Text.assemble(Text.from_ansi(self._plot.build().rstrip("\n")), "\n", self.legend())

    def show(self, series: Dict[str, Tuple[np.ndarray, ...]], *, window: Optional[Tuple[int, int]] = None,
             log: bool = False, mark_step: Optional[int] = None, order: Sequence[str] = (),
             hline: Optional[float] = None, ylim: Optional[Tuple[float, float]] = None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        columns = max(10, self.size.width - 10)
        drawn = 0
        self.labels = []
        lo_all, hi_all = None, None
        keys = [k for k in order if k in series] + [k for k in series if k not in order]
        for n, key in enumerate(keys[:MAX_LINES]):
            steps, values, *band = series[key]
            steps = np.asarray(steps, dtype=np.float64)
            lines = [np.asarray(v, dtype=np.float64) for v in [values] + band[:2]]
            if window is not None:
                keep = (steps >= window[0]) & (steps <= window[1])
                steps, lines = steps[keep], [v[keep] for v in lines]
            xs = np.zeros(0)
            for i, values in enumerate(lines):  # the line, then its band's low and high edges (dotted)
                line_steps = steps
                if log:
                    keep = values > 0
                    line_steps, values = steps[keep], values[keep]
                lx, ly = envelope(line_steps, values, columns)
                if not lx.size:
                    continue
                color = COLORS[n % len(COLORS)]
                plt.plot(lx.tolist(), ly.tolist(), marker="braille" if i == 0 else "·", color=color)
                if i == 0:
                    self.labels.append((short_key(key), color))
                xs = lx if not xs.size else np.r_[min(xs[0], lx[0]), max(xs[-1], lx[-1])]
            if not xs.size:
                continue
            drawn += 1
            lo_all = xs[0] if lo_all is None else min(lo_all, xs[0])
            hi_all = xs[-1] if hi_all is None else max(hi_all, xs[-1])
        if window is not None:
            plt.xlim(window[0], max(window[1], window[0] + 1))
        if lo_all is not None and hi_all - lo_all <= 12:  # few steps: whole-step ticks, not 0.25, 0.5, ...
            first = int(window[0]) if window is not None else int(lo_all)
            last = int(window[1]) if window is not None else int(hi_all)
            plt.xticks(list(range(first, last + 1)))
        if log:
            plt.yscale("log")
        if mark_step is not None:
            plt.vline(mark_step, plot_colour("error"))
        if hline is not None:
            plt.hline(hline, plot_colour("error"))
        if ylim is not None:
            plt.ylim(*ylim)
        plt.xlabel("step")
        if not drawn:
            plt.title(self.message)
        self.refresh()
