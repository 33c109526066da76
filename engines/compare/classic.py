"""msprobe's classic highlight rules (``-hl``, docs/reference/msprobe-analysis.md §1.10.3) and its statistics "Warning" (§1.8), as an option.

Rows are grouped by record; "inputs" are input and parameter rows, "outputs" output rows. Red beats yellow.
Three deliberate fixes (docs/COMPARE.md): an output row already red through R1/R2 is not judged again by
R3/R4/Y1-Y4 (msprobe means to skip it but its check never fires), each message appears once per row (msprobe
repeats it per input), and unmatched rows do not get the requires_grad yellow (their N/A is not a mismatch).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Tuple

import numpy as np

from engines.compare.tensor_metrics import ST_NONFINITE, ST_OK, ST_SHAPE, classic_accuracy
from engines.dumps.rows import IO_INPUT, IO_OUTPUT, IO_PARAM, V_MAX, V_MIN

NONE, YELLOW, RED = 0, 1, 2
COLOURS = ("", "yellow", "red")

R1 = "maximum or minimum is nan, -inf, or inf"
R2 = "maximum absolute error exceeds 1e+10"
R3 = "The input/parameter's one thousandth err ratio exceeds 0.9, while the output's is below 0.6"
R4 = "maximum relative error exceeds 0.5"
Y1 = ("maximum absolute error of both input/parameters and output exceed 1, with the output larger by an order "
      "of magnitude")
Y2 = "The output's one thousandth err ratio decreases by more than 0.1 compared to the input/parameter's"
Y3 = "The output's maximum relative error exceeds 0.1, while the input/parameter's is below 0.01"
Y4 = "The output's cosine decreases by more than 0.1 compared to the input/parameter's"
Y5 = "requires_grad is inconsistent"


def _num(v: object) -> bool:
    return isinstance(v, (float, int, np.floating)) and not math.isnan(v)


def highlight(cols: Dict[str, np.ndarray], tensor_mode: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Colour code (:data:`COLOURS`) and messages for every row.

    Columns used: ``record``, ``io``, ``matched``, ``t_max``, ``t_min``, ``t_valid``, ``g_max``, ``requires_grad_equal``
    (-1 unknown), and ``max_abs_err``, ``one_thousandth``, ``cosine`` (tensor) or ``max_diff``, ``max_rel``
    (statistics; the largest of the four relative errors is msprobe's MaxRelativeErr there).
    """
    n = cols["record"].shape[0]
    colour = np.zeros(n, dtype=np.uint8)
    msgs: List[List[str]] = [[] for _ in range(n)]

    def mark(i: int, level: int, msg: str) -> None:
        colour[i] = max(colour[i], level)
        if msg not in msgs[i]:
            msgs[i].append(msg)

    abs_col = cols["max_abs_err"] if tensor_mode else cols["max_diff"]
    for i in range(n):
        if not cols["matched"][i]:
            continue
        valid = int(cols["t_valid"][i])
        if (valid & V_MAX and not math.isfinite(cols["t_max"][i])) or (
                valid & V_MIN and not math.isfinite(cols["t_min"][i])):
            mark(i, RED, R1)
        elif _num(abs_col[i]) and abs(abs_col[i]) > 1e10:
            mark(i, RED, R2)
        if cols["requires_grad_equal"][i] == 0:
            mark(i, YELLOW, Y5)
    records = cols["record"]
    start = 0
    while start < n:
        stop = start + 1
        while stop < n and records[stop] == records[start]:
            stop += 1
        _group(cols, range(start, stop), tensor_mode, abs_col, colour, mark)
        start = stop
    # red beats yellow: a red row shows only its red reasons
    reds = {R1, R2, R3, R4}
    texts = ["\n".join([x for x in m if x in reds] if colour[i] == RED else m) for i, m in enumerate(msgs)]
    return colour, np.array(texts, dtype=object)


def _group(cols: Dict[str, np.ndarray], rows: range, tensor_mode: bool, abs_col: np.ndarray, colour: np.ndarray,
           mark: Callable[[int, int, str], None]) -> None:
    io = cols["io"]
    inputs = [i for i in rows if io[i] in (IO_INPUT, IO_PARAM) and cols["matched"][i]]
    outputs = [i for i in rows if io[i] == IO_OUTPUT and cols["matched"][i]]

    def numeric(i: int) -> bool:
        return _num(cols["t_max"][i]) and _num(cols["g_max"][i]) and _num(abs_col[i])

    for o in outputs:
        if colour[o] == RED or not numeric(o):
            continue
        if not tensor_mode and _num(cols["max_rel"][o]) and cols["max_rel"][o] > 0.5:
            mark(o, RED, R4)
        for i in inputs:
            if not numeric(i):
                continue
            a_in, a_out = abs(abs_col[i]), abs(abs_col[o])
            if a_in <= a_out and a_in > 1 and a_out > 1 and math.log10(a_out) - math.log10(a_in) >= 1:
                mark(o, YELLOW, Y1)
            if tensor_mode:
                t_in, t_out = cols["one_thousandth"][i], cols["one_thousandth"][o]
                if _num(t_in) and _num(t_out):
                    if t_in > 0.9 and t_out < 0.6:
                        mark(o, RED, R3)
                    elif t_in - t_out > 0.1:
                        mark(o, YELLOW, Y2)
                c_in, c_out = cols["cosine"][i], cols["cosine"][o]
                if _num(c_in) and _num(c_out) and c_in - c_out > 0.1:
                    mark(o, YELLOW, Y4)
            else:
                r_in, r_out = cols["max_rel"][i], cols["max_rel"][o]
                if _num(r_in) and _num(r_out) and r_out > 0.1 and r_in < 0.01:
                    mark(o, YELLOW, Y3)


def classic_accuracy_cell(cols: Dict[str, np.ndarray], i: int) -> str:
    """msprobe classic's "Accuracy Reached or Not" for row ``i`` of a tensor-mode result."""
    status = int(cols["status"][i])
    if status == ST_SHAPE:
        return "Unmatched"
    if status == ST_NONFINITE:
        return "No"
    if not cols["matched"][i] or status != ST_OK or cols["cosine_unsupported"][i]:
        return "None"
    return classic_accuracy(float(cols["cosine"][i]), float(cols["max_abs_err"][i]))


def classic_stats_warning(n_stats: Dict[str, np.ndarray], b_stats: Dict[str, np.ndarray]) -> np.ndarray:
    """msprobe classic's statistics Result "Warning": some ``|N−B| / (|max(N, B)| + 1e-10)`` > 0.5.

    The code uses the signed maximum (so N=−3.2, B=−2.0 gives 0.6 and warns, S2); we reproduce it as is.
    """
    warn = np.zeros(n_stats["max"].shape[0], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for s in ("max", "min", "mean", "norm"):
            nv, bv = n_stats[s], b_stats[s]
            mag = np.abs(nv - bv) / (np.abs(np.maximum(nv, bv)) + 1e-10)
            warn |= mag > 0.5
    return warn
