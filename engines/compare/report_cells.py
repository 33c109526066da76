"""Turn result columns into report cells (CSV and xlsx share this): msprobe's headers, display rounding and its
tokens for absent values (``N/A`` unmatched, ``unsupported``, ``shape unmatched``, ``Nan``, ``" inf"``), numbers as
numbers.

A numeric column is a :class:`NumCells` (a float array plus token codes for the cells that show a token), so a
million-row report formats its numbers in numpy, not cell by cell.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

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
from engines.dumps.rows import STAT_BITS, factorize

TENSOR_COLS = ("cosine", "euc_dist", "max_abs_err", "max_rel_err", "one_thousandth", "five_thousandths")


class NumCells:
    """A numeric column: ``values`` (float64 or int64) and token codes: ``codes[i]`` > 0 shows
    ``table[codes[i]]`` instead of the number (``table[0]`` is ""). inf and nan without a token show as msprobe
    writes them (``" inf"``, ``" -inf"``, ``"Nan"``)."""

    def __init__(self, values: np.ndarray, codes: Optional[np.ndarray] = None, table: Sequence[str] = ("",),
                 integers: bool = False) -> None:
        self.values = values
        self.integers = integers
        n = values.shape[0]
        self.codes = np.zeros(n, dtype=np.int32) if codes is None else codes
        self.table = list(table)
        if not integers:
            free = self.codes == 0
            with np.errstate(invalid="ignore"):
                odd = free & ~np.isfinite(values)
            if odd.any():
                self.codes = self.codes.copy()
                for text, mask in ((" inf", odd & (values > 0)), (" -inf", odd & (values < 0)),
                                   ("Nan", odd & np.isnan(values))):
                    if mask.any():
                        self.codes[mask] = self._code(text)

    def _code(self, text: str) -> int:
        if text not in self.table:
            self.table.append(text)
        return self.table.index(text)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def tokens(self) -> np.ndarray:
        """The token of each cell ("" where the number shows)."""
        return np.array(self.table, dtype=object)[self.codes]

    def cells(self) -> List[Any]:
        """Python values: numbers, or the token where there is one (xlsx)."""
        out = self.values.tolist()
        for i in np.flatnonzero(self.codes).tolist():
            out[i] = self.table[self.codes[i]]
        return out


class Tokens:
    """Token codes of a numeric column being built: later :meth:`set` calls win."""

    def __init__(self, n: int) -> None:
        self.codes = np.zeros(n, dtype=np.int32)
        self.table = [""]

    def set(self, mask: np.ndarray, text: str) -> None:
        if not mask.any():
            return
        if text not in self.table:
            self.table.append(text)
        self.codes[mask] = self.table.index(text)

    def set_texts(self, mask: np.ndarray, texts: np.ndarray) -> None:
        """Per-row texts (an object column) where ``mask``."""
        rows = np.flatnonzero(mask)
        if not rows.size:
            return
        codes, uniques = factorize(texts[rows])
        base = len(self.table)
        self.table.extend(str(u) for u in uniques.tolist())
        self.codes[rows] = codes + base

    def cells(self, values: np.ndarray) -> NumCells:
        return NumCells(values, self.codes, self.table)


Cells = Union[List[Any], NumCells]


def _rg(value: int) -> str:
    return "N/A" if value < 0 else ("True" if value else "False")


def _stat_cells(values: np.ndarray, valid: np.ndarray, bit: int, text: Optional[np.ndarray],
                matched: Optional[np.ndarray]) -> NumCells:
    tok = Tokens(values.shape[0])
    missing = (valid & bit) == 0
    tok.set(missing, "None")
    tok.set(np.isnan(values) & ~missing, "Nan")
    if matched is not None:
        tok.set(~matched, "N/A")
    if text is not None:
        # numpy's stubs take no None operand; an object array compares with it element by element
        tok.set_texts(np.not_equal(text, None), text)  # type: ignore[call-overload]
    return tok.cells(values)


def _side_stat_cells(cols: Dict[str, np.ndarray], side: str, s: str, matched: np.ndarray) -> NumCells:
    """Statistic ``s`` of side ``t`` (target) or ``g`` (golden, N/A where unmatched)."""
    return _stat_cells(cols[side + "_" + s], cols[side + "_valid"], STAT_BITS[s], cols.get(side + "_text"),
                       matched if side == "g" else None)


def _diff_cells(values: np.ndarray, notes: np.ndarray) -> NumCells:
    tok = Tokens(values.shape[0])
    tok.set(notes == NOTE_NA, "N/A")
    tok.set(notes == NOTE_DIFF, "Diff")
    return tok.cells(values)


def _named_diff_cells(cols: Dict[str, np.ndarray], values: str, notes: str) -> NumCells:
    return _diff_cells(cols[values], cols[notes])


def _tensor_cells(cols: Dict[str, np.ndarray], name: str) -> NumCells:
    values = cols[name].copy()
    status = cols["status"]
    n = values.shape[0]
    tok = Tokens(n)
    nan = np.isnan(values)
    if name == "cosine":
        unsupported = cols["cosine_unsupported"]
    elif name in ("euc_dist", "one_thousandth", "five_thousandths"):
        unsupported = cols["ratios_unsupported"]
    else:
        unsupported = np.zeros(n, dtype=bool)
    tok.set(nan & unsupported, "unsupported")
    tok.set(nan & ~unsupported & (status != 0), "N/A")
    tok.set(np.isin(status, (ST_EMPTY, ST_NO_DATA, ST_READ_ERROR, ST_UNREADABLE)), "unsupported")
    tok.set(status == ST_NONFINITE, "N/A")
    tok.set(status == ST_SHAPE, "shape unmatched")
    tok.set(~cols["matched"], "N/A")
    if name != "euc_dist":
        rounder = round_cosine if name == "cosine" else round12
        show = np.flatnonzero(~nan & (tok.codes == 0))
        values[show] = [rounder(v) for v in values[show].tolist()]
    return tok.cells(values)


def _first_of_record(records: np.ndarray, stack: np.ndarray) -> List[str]:
    out: List[str] = []
    prev = None
    for r, s in zip(records.tolist(), stack.tolist()):
        out.append(s if r != prev else "")
        prev = r
    return out


def _safe_text(cells: List[Any]) -> List[Any]:
    """Text that Excel would run as a formula gets a leading quote."""
    return ["'" + c if isinstance(c, str) and c[:1] in ("=", "+", "@") and len(c) > 1 else c for c in cells]


def cell_builders(cols: Dict[str, np.ndarray], classic: bool) -> Dict[str, Callable[[], Cells]]:
    matched = cols["matched"]
    m_list = matched.tolist()

    def golden(name: str) -> List[Any]:
        return [g if m else "N/A" for g, m in zip(cols[name].tolist(), m_list)]

    b: Dict[str, Callable[[], Cells]] = {
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
            b["{} {}".format(label, head)] = partial(_side_stat_cells, cols, side, s, matched)
    for s, d_head, r_head in zip(STATS, ("Max diff", "Min diff", "Mean diff", "L2norm diff"),
                                 ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")):
        b[d_head] = partial(_named_diff_cells, cols, s + "_diff", s + "_note")
        b[r_head] = partial(_named_diff_cells, cols, s + "_rel", s + "_note")
    for name, head in zip(TENSOR_COLS, ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr@tensor",
                                        "One Thousandth Err Ratio", "Five Thousandths Err Ratio")):
        b[head] = partial(_tensor_cells, cols, name)
    b["NPU MD5"] = lambda: [c or "N/A" for c in cols["target_crc32"].tolist()]
    b["BENCH MD5"] = lambda: [c if m and c else "N/A" for c, m in zip(cols["golden_crc32"].tolist(), m_list)]
    b["Requires_grad Consistent"] = lambda: ["N/A" if v < 0 else ("True" if v else "False")
                                             for v in cols["requires_grad_equal"].tolist()]
    b["Result"] = lambda: [VERDICTS[v] for v in cols["verdict"].tolist()]

    def err_message() -> List[Any]:
        reasons = cols["reasons"].tolist()
        if classic and "classic_messages" in cols:
            reasons = [r + ("\n" + c if r and c else c) for r, c in zip(reasons, cols["classic_messages"].tolist())]
        return _safe_text(["No bench data matched." if v == UNMATCHED and not r else r
                           for v, r in zip(cols["verdict"].tolist(), reasons)])

    def rel_err() -> NumCells:
        tok = Tokens(cols["rel_err"].shape[0])
        tok.set(np.isnan(cols["rel_err"]), "N/A")
        return tok.cells(cols["rel_err"])

    b["Err_message"] = err_message
    b["Accuracy Reached or Not"] = lambda: cols["classic_accuracy"].tolist()
    b["NPU_Stack_Info"] = lambda: _safe_text(_first_of_record(cols["record"], cols["stack"]))
    b["Data_name"] = lambda: cols["data_name"].tolist()
    b["RelErr"] = rel_err
    b["Rank"] = lambda: NumCells(cols["rank"], integers=True)
    b["Step"] = lambda: NumCells(cols["step"], integers=True)
    return b


def report_columns(cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Dict[str, Cells]:
    """Header -> cells (a list, or :class:`NumCells` for numbers), for the headers of ``mode`` only."""
    builders = cell_builders(cols, classic)
    out: Dict[str, Cells] = {}
    for head in report_headers(mode, stack=stack, classic=classic):
        key = head + "@tensor" if (head == "MaxRelativeErr" and mode == "tensor") else head
        out[head] = builders[key]()
    return out


def report_rows(cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Iterator[List[Any]]:
    """Header row, then one list of Python cells per result row (xlsx)."""
    headers = report_headers(mode, stack=stack, classic=classic)
    cells = report_columns(cols, mode, stack=stack, classic=classic)
    yield list(headers)
    columns = [c.cells() if isinstance(c, NumCells) else c for c in (cells[h] for h in headers)]
    yield from map(list, zip(*columns))
