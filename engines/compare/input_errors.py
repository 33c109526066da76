"""The error an op's inputs carry, as the first-divergence ranking needs it (docs/COMPARE.md, "First divergence").

A score is ``out_err / max(gain · in_err, floor)``. Three things make the plain ``in_err`` (the largest ``rel_err``
among the op's floating inputs) too small, and an innocent op outrank the one that made the error:

- **unknown bounds**: a statistics row whose mean or norm is ±inf on both sides (an attention mask filled with
  -inf or ``finfo.min``) has no relative error: ‖g‖ is infinite, and equal infinities say nothing about the finite
  values. Its error is unknown (NaN), not 0.
- **loose bounds**: a statistics ``rel_err`` is a lower bound of ‖t−g‖/‖g‖, and some ops hide the error in their
  output's statistics (a softmax keeps max, min 0 and mean 1/n). Statistics cannot tell an error an op removed from
  one they no longer see, so an input row measured by statistics also carries the error that flowed into the op
  that produced it (its dataflow producer, engines/compare/dataflow.py), walked back while the rows are statistics.
  A producer row measured from tensors is exact: its error is taken and the walk stops there.
- **gain**: some ops amplify relative error by a factor their maths gives: ``pow(x, p)`` by |p| (``square``, ``x*x``
  and ``addcmul(v, g, g)`` by 2), a division by rms(b)/min|b| of its divisor b (how far its smallest values lie
  below its typical ones; unbounded when b takes both signs or 0). ``gain`` (≥ 1) multiplies their input error.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from engines.compare.dataflow import fingerprints, out_slot_rows
from engines.compare.tensor_metrics import ST_NONFINITE
from engines.dumps.rows import DIR_FORWARD, IO_INPUT, IO_PARAM, group_reduce

POW_APIS = frozenset(("pow", "pow_", "__pow__", "float_power", "float_power_"))
SQUARE_APIS = frozenset(("square", "square_"))
MUL_APIS = frozenset(("mul", "mul_", "__mul__", "__rmul__", "multiply", "multiply_"))
ADDCMUL_APIS = frozenset(("addcmul", "addcmul_"))
# the slot of the divisor of each division
DIVISOR_SLOT = {"div": "input.1", "div_": "input.1", "__truediv__": "input.1", "__itruediv__": "input.1",
                "true_divide": "input.1", "true_divide_": "input.1", "divide": "input.1", "divide_": "input.1",
                "__rtruediv__": "input.0", "reciprocal": "input.0", "reciprocal_": "input.0",
                "addcdiv": "input.2", "addcdiv_": "input.2"}


def measured_rows(cols: Dict[str, np.ndarray]) -> np.ndarray:
    """Rows whose ``rel_err`` comes from the tensors themselves (exact), not from their statistics (a bound)."""
    n = cols["rel_err"].shape[0]
    euc = cols.get("euc_dist")
    if euc is None:
        return np.zeros(n, dtype=bool)
    measured = np.isfinite(np.asarray(euc, dtype=np.float64))
    status = cols.get("status")
    if status is not None:
        measured |= status == ST_NONFINITE
    return measured


def unknown_rows(cols: Dict[str, np.ndarray], measured: np.ndarray) -> np.ndarray:
    """Statistics rows whose error is unknown: mean or norm non-finite on both sides, no one-sided difference."""
    rel = cols["rel_err"]
    both = np.zeros(rel.shape[0], dtype=bool)
    with np.errstate(invalid="ignore"):
        for s in ("mean", "norm"):
            t, g = np.asarray(cols["t_" + s], np.float64), np.asarray(cols["g_" + s], np.float64)
            both |= np.isinf(t) & np.isinf(g)
    return both & ~measured & cols["matched"] & np.isfinite(rel)


@dataclass
class InputErrors:
    """Per record: the input error the ranking uses, whether an input's error stayed unknown, the gain, and
    whether the walk back raised the input error (the op's own inputs carry a loose bound)."""

    in_err: np.ndarray
    unknown: np.ndarray
    gain: np.ndarray  # filled by ``gains`` for the records that need it
    carried: np.ndarray
    rel: np.ndarray  # per row: rel_err with unknown bounds as NaN
    measured: np.ndarray  # per row: rel_err from the tensors (exact), not from statistics

    def carried_by(self, rows: np.ndarray, record_codes: np.ndarray) -> np.ndarray:
        """The error output ``rows`` carry to their consumers: exact when measured, else their own bound or what
        flowed into their record, the larger."""
        own = self.rel[rows]
        upstream = self.in_err[record_codes[rows]]
        return np.where(self.measured[rows], own, np.fmax(own, upstream))


def input_errors(cols: Dict[str, np.ndarray], record_codes: np.ndarray, k: int, is_float: np.ndarray,
                 producer: np.ndarray) -> InputErrors:
    """The input error of each of ``k`` records (``record_codes``: each row's record), see the module docstring.
    ``producer``: each input row's producer row (-1 none, engines.compare.dataflow.producers)."""
    measured = measured_rows(cols)
    unknown = unknown_rows(cols, measured)
    rel = np.where(unknown, np.nan, cols["rel_err"])
    io = cols["io"]
    inputs = cols["matched"] & is_float & ((io == IO_INPUT) | (io == IO_PARAM)) & ~out_slot_rows(cols)
    in_rows = np.flatnonzero(inputs & ~np.isnan(rel))
    plain = group_reduce(np.fmax, record_codes[in_rows], rel[in_rows], k, np.nan)
    in_err = plain.copy()
    unresolved = inputs & unknown
    walk = np.flatnonzero(inputs & ~measured & (producer >= 0))
    if walk.size:
        walk = walk[np.argsort(cols["order"][walk], kind="stable")]  # producers come first
        err: List[float] = in_err.tolist()
        for row, r, p, pr, exact in zip(walk.tolist(), record_codes[walk].tolist(),
                                        record_codes[producer[walk]].tolist(), rel[producer[walk]].tolist(),
                                        measured[producer[walk]].tolist()):
            # a producer row measured from tensors: its exact error, the walk stops; else what flowed into the
            # producer, or that row's own bound, the larger
            v = pr if exact else err[p]
            if v != v or (pr == pr and pr > v):
                v = pr
            if v != v:
                continue
            unresolved[row] = False
            cur = err[r]
            if cur != cur or v > cur:
                err[r] = v
        in_err = np.asarray(err, dtype=np.float64)
    open_unknown = np.zeros(k, dtype=bool)
    np.logical_or.at(open_unknown, record_codes, unresolved)
    with np.errstate(invalid="ignore"):
        carried = ~np.isnan(in_err) & (np.isnan(plain) | (in_err > plain))
    return InputErrors(in_err, open_unknown, np.ones(k), carried, rel, measured)


def _api_base(record: str) -> str:
    """``Tensor.pow.0.forward`` -> ``pow``."""
    return str(record).partition(".")[2].partition(".")[0]


def gains(cols: Dict[str, np.ndarray], record_codes: np.ndarray, k: int, is_float: np.ndarray,
          records: np.ndarray) -> np.ndarray:
    """Per record, the factor by which its maths amplifies relative input error (1: none known), looked up for
    ``records`` (the codes of the records that could rank above 1: a name test per record costs)."""
    gain = np.ones(k)
    names = np.empty(k, dtype=object)
    names[record_codes] = cols["record"]
    forward = np.zeros(k, dtype=bool)
    forward[record_codes] = cols["direction"] == DIR_FORWARD
    wanted = POW_APIS | SQUARE_APIS | MUL_APIS | ADDCMUL_APIS | frozenset(DIVISOR_SLOT)
    fwd = records[forward[records]]
    picked = [c for c, name in zip(fwd.tolist(), names[fwd].tolist()) if _api_base(name) in wanted]
    if not picked:
        return gain
    rows_of: Dict[int, List[int]] = {}
    keep = np.isin(record_codes, np.asarray(picked, dtype=np.int64))
    for i in np.flatnonzero(keep).tolist():
        rows_of.setdefault(int(record_codes[i]), []).append(i)
    fp = fingerprints(cols)
    for c in picked:
        base = _api_base(names[c])
        slots = {str(cols["slot"][i]): i for i in rows_of.get(c, [])}
        g: Optional[float] = None
        if base in SQUARE_APIS:
            g = 2.0
        elif base in POW_APIS:
            i = slots.get("input.1", slots.get("input.exponent"))
            if i is not None and not is_float[i]:
                v = float(cols["t_max"][i])
                g = abs(v) if math.isfinite(v) else None
        elif base in MUL_APIS or base in ADDCMUL_APIS:
            a, b = ("input.0", "input.1") if base in MUL_APIS else ("input.1", "input.2")
            if a in slots and b in slots and is_float[slots[a]] and fp[slots[a]] != 0 and \
                    fp[slots[a]] == fp[slots[b]]:
                g = 2.0  # x * x
        else:
            i = slots.get(DIVISOR_SLOT[base])
            if i is not None and is_float[i]:
                g = _division_gain(cols, i)
        if g is not None and g > 1.0:
            gain[c] = g
    return gain


def _division_gain(cols: Dict[str, np.ndarray], i: int) -> float:
    """rms(b)/min|b| of a divisor row (golden statistics); inf when b takes both signs or 0."""
    lo, hi, norm = float(cols["g_min"][i]), float(cols["g_max"][i]), float(cols["g_norm"][i])
    numel = _numel(cols, i)
    if not all(math.isfinite(v) for v in (lo, hi, norm)) or numel <= 0:
        return 1.0
    if lo <= 0.0 <= hi:
        return math.inf
    smallest = min(abs(lo), abs(hi))
    return norm / math.sqrt(numel) / smallest


def _numel(cols: Dict[str, np.ndarray], i: int) -> int:
    numel = cols.get("numel")
    if numel is not None and int(numel[i]) >= 0:
        return int(numel[i])
    try:
        dims = json.loads(str(cols["target_shape"][i]))
    except ValueError:
        return -1
    return int(np.prod(dims)) if isinstance(dims, list) else -1
