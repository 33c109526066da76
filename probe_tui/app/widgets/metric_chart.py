"""Line charts of monitor series, drawn by plotext (``textual-plotext``: no numpy 2 needed, 256 colours).

Long series are reduced to the chart's width as a min/max envelope per column, so a spike of one step is never
dropped by the reduction and drawing costs the same for a hundred steps or a million.
"""

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from textual_plotext import PlotextPlot

COLORS = ("cyan", "orange", "magenta", "green", "yellow", "blue", "red", "white")
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


class MetricChart(PlotextPlot):
    """The selected series over a step window; :meth:`show` redraws. A series given as ``(steps, values, low,
    high)`` is drawn as its line with the band's edges dotted in the same colour (min and max over ranks)."""

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.message = "waiting for the first step…"

    def show(self, series: Dict[str, Tuple[np.ndarray, ...]], *, window: Optional[Tuple[int, int]] = None,
             log: bool = False, mark_step: Optional[int] = None, order: Sequence[str] = (),
             hline: Optional[float] = None, ylim: Optional[Tuple[float, float]] = None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        columns = max(10, self.size.width - 10)
        drawn = 0
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
                plt.plot(lx.tolist(), ly.tolist(), marker="braille" if i == 0 else "·",
                         color=COLORS[n % len(COLORS)], label=short_key(key) if i == 0 else None)
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
            plt.vline(mark_step, "red")
        if hline is not None:
            plt.hline(hline, "red")
        if ylim is not None:
            plt.ylim(*ylim)
        plt.xlabel("step")
        if not drawn:
            plt.title(self.message)
        self.refresh()
