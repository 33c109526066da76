"""Turn result columns into report cells (CSV and xlsx share this): msprobe's headers, display rounding and its
tokens for absent values (``N/A`` unmatched, ``unsupported``, ``shape unmatched``, ``Nan``), numbers as numbers."""

from __future__ import annotations

import math
from typing import Callable, Dict, Iterator, List

import numpy as np

from engines.compare.columns import report_headers
from engines.compare.stats_metrics import NOTE_DIFF, NOTE_NA, STATS
from engines.compare.tensor_metrics import (
    ST_EMPTY,
    ST_NO_DATA,
    ST_NONFINITE,
    ST_READ_ERROR,
    ST_SHAPE,
    ST_UNREADABLE,
    round12,
    round_cosine,
)
from engines.compare.verdicts import UNMATCHED, VERDICTS
from engines.parse.rows import STAT_BITS

TENSOR_COLS = ("cosine", "euc_dist", "max_abs_err", "max_rel_err", "one_thousandth", "five_thousandths")


def _rg(value: int) -> str:
    return "N/A" if value < 0 else ("True" if value else "False")


def _stat_cells(values: np.ndarray, valid: np.ndarray, bit: int, text, matched) -> list:
    out = values.tolist()
    vbits = valid.tolist()
    for i, v in enumerate(out):
        if text is not None and text[i] is not None:
            out[i] = text[i]
        elif matched is not None and not matched[i]:
            out[i] = "N/A"
        elif not vbits[i] & bit:
            out[i] = "None"
        elif v != v:
            out[i] = "Nan"
    return out


def _diff_cells(values: np.ndarray, notes: np.ndarray) -> list:
    out = values.tolist()
    for i in np.flatnonzero(notes != 0).tolist():
        out[i] = "N/A" if notes[i] == NOTE_NA else ("Diff" if notes[i] == NOTE_DIFF else out[i])
    for i in np.flatnonzero(np.isnan(values) & (notes == 0)).tolist():
        out[i] = "Nan"
    return out


def _tensor_cells(cols, name: str) -> list:
    values = cols[name]
    status = cols["status"]
    matched = cols["matched"]
    out = []
    rounder = round_cosine if name == "cosine" else (round12 if name != "euc_dist" else (lambda v: v))
    for i, v in enumerate(values.tolist()):
        if not matched[i]:
            out.append("N/A")
        elif status[i] == ST_SHAPE:
            out.append("shape unmatched")
        elif status[i] == ST_NONFINITE:
            out.append("N/A")
        elif status[i] in (ST_EMPTY, ST_NO_DATA, ST_READ_ERROR, ST_UNREADABLE):
            out.append("unsupported")
        elif math.isnan(v):
            unsupported = cols["cosine_unsupported"][i] if name == "cosine" else (
                cols["ratios_unsupported"][i] and name in ("euc_dist", "one_thousandth", "five_thousandths"))
            out.append("unsupported" if unsupported else ("N/A" if status[i] != 0 else "Nan"))
        else:
            out.append(rounder(v))
    return out


def _first_of_record(records: np.ndarray, stack: np.ndarray) -> list:
    out = []
    prev = None
    for r, s in zip(records.tolist(), stack.tolist()):
        out.append(s if r != prev else "")
        prev = r
    return out


def _inf_text(cells: list, values: np.ndarray) -> list:
    """msprobe writes inf as " inf" so that Excel does not show #NAME?."""
    for i in np.flatnonzero(np.isinf(values)).tolist():
        if isinstance(cells[i], float):
            cells[i] = " inf" if cells[i] > 0 else " -inf"
    return cells


def _safe_text(cells: list) -> list:
    """Text that Excel would run as a formula gets a leading quote."""
    return ["'" + c if isinstance(c, str) and c[:1] in ("=", "+", "@") and len(c) > 1 else c for c in cells]


def _builders(cols: Dict[str, np.ndarray], classic: bool) -> Dict[str, Callable[[], list]]:
    matched = cols["matched"]
    m_list = matched.tolist()

    def golden(name):
        return [g if m else "N/A" for g, m in zip(cols[name].tolist(), m_list)]

    b: Dict[str, Callable[[], list]] = {
        "NPU Name": lambda: _safe_text(cols["target_name"].tolist()),
        "Bench Name": lambda: _safe_text(golden("golden_name")),
        "NPU Dtype": lambda: cols["target_dtype"].tolist(),
        "Bench Dtype": lambda: golden("golden_dtype"),
        "NPU Tensor Shape": lambda: cols["target_shape"].tolist(),
        "Bench Tensor Shape": lambda: golden("golden_shape"),
        "NPU Requires_grad": lambda: [_rg(v) for v in cols["target_requires_grad"].tolist()],
        "Bench Requires_grad": lambda: [_rg(v) if m else "N/A" for v, m in
                                        zip(cols["golden_requires_grad"].tolist(), m_list)],
    }
    for side, label in (("t", "NPU"), ("g", "Bench")):
        for s, head in zip(STATS, ("max", "min", "mean", "l2norm")):
            def stat(side=side, s=s):
                vals = cols[side + "_" + s]
                cells = _stat_cells(vals, cols[side + "_valid"], STAT_BITS[s], cols.get(side + "_text"),
                                    matched if side == "g" else None)
                return _inf_text(cells, vals)
            b["{} {}".format(label, head)] = stat
    for s, d_head, r_head in zip(STATS, ("Max diff", "Min diff", "Mean diff", "L2norm diff"),
                                 ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")):
        b[d_head] = (lambda s=s: _inf_text(_diff_cells(cols[s + "_diff"], cols[s + "_note"]), cols[s + "_diff"]))
        b[r_head] = (lambda s=s: _inf_text(_diff_cells(cols[s + "_rel"], cols[s + "_note"]), cols[s + "_rel"]))
    for name, head in zip(TENSOR_COLS, ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr@tensor",
                                        "One Thousandth Err Ratio", "Five Thousandths Err Ratio")):
        b[head] = (lambda name=name: _inf_text(_tensor_cells(cols, name), cols[name]))
    b["NPU MD5"] = lambda: [c or "N/A" for c in cols["target_crc32"].tolist()]
    b["BENCH MD5"] = lambda: [c if m and c else "N/A" for c, m in zip(cols["golden_crc32"].tolist(), m_list)]
    b["Requires_grad Consistent"] = lambda: ["N/A" if v < 0 else ("True" if v else "False")
                                             for v in cols["requires_grad_equal"].tolist()]
    b["Result"] = lambda: [VERDICTS[v] for v in cols["verdict"].tolist()]

    def err_message():
        reasons = cols["reasons"].tolist()
        if classic and "classic_messages" in cols:
            reasons = [r + ("\n" + c if r and c else c) for r, c in zip(reasons, cols["classic_messages"].tolist())]
        return _safe_text(["No bench data matched." if v == UNMATCHED and not r else r
                           for v, r in zip(cols["verdict"].tolist(), reasons)])

    b["Err_message"] = err_message
    b["Accuracy Reached or Not"] = lambda: cols["classic_accuracy"].tolist()
    b["NPU_Stack_Info"] = lambda: _safe_text(_first_of_record(cols["record"], cols["stack"]))
    b["Data_name"] = lambda: cols["data_name"].tolist()
    b["RelErr"] = lambda: _inf_text(["N/A" if v != v else v for v in cols["rel_err"].tolist()], cols["rel_err"])
    b["Rank"] = lambda: cols["rank"].tolist()
    b["Step"] = lambda: cols["step"].tolist()
    return b


def report_columns(cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Dict[str, list]:
    """Header -> list of cells, for the headers of ``mode`` only."""
    builders = _builders(cols, classic)
    out = {}
    for head in report_headers(mode, stack=stack, classic=classic):
        key = head + "@tensor" if (head == "MaxRelativeErr" and mode == "tensor") else head
        out[head] = builders[key]()
    return out


def report_rows(cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Iterator[List]:
    """Header row, then one list of cells per result row."""
    headers = report_headers(mode, stack=stack, classic=classic)
    cells = report_columns(cols, mode, stack=stack, classic=classic)
    yield list(headers)
    yield from map(list, zip(*(cells[h] for h in headers)))
