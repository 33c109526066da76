"""Statistics-mode compare: diffs and relative errors of max/min/mean/norm, vectorised over all rows.

msprobe 26.2's rule table (docs/reference/msprobe-analysis.md §1.8 and §8.4 S8) with numbers instead of strings (docs/decisions/0018-follow-the-wheel-numbers.md):

====================================  ===========  =====================
case                                  diff         relative error
====================================  ===========  =====================
equal values (also inf == inf)        0            0
a NaN involved                        NaN          NaN
target ±inf, or golden ±inf           N − B (±inf) the diff (±inf)
golden 0, target not                  N − B        inf
otherwise                             N − B        |N − B| / |B|
equal texts (device, str args, …)     0            0
two devices that differ               N/A          N/A
a text against anything else          Diff         Diff
a side missing                        N/A          N/A
====================================  ===========  =====================

Relative errors are fractions (msprobe writes ``'50.0%'``; we store 0.5). "N/A" and "Diff" are NaN in the numeric
column plus a code in the per-stat note column (:data:`NOTE_NA`, :data:`NOTE_DIFF`).

For verdicts and ranking we also compute **scale-aware** relative errors (:func:`scaled_stat_errors`): each
statistic's difference over ``max(|B stat|, rms(B), small_value)`` where rms = norm/√numel. A mean near zero then
no longer explodes (docs/reference/diagnosis-notes.md item 4), and each one is a lower bound of the norm-wise relative error
‖x−y‖/‖y‖ (|Δmean|·√n ≤ ‖x−y‖, |Δmax| ≤ ‖x−y‖, |Δnorm| ≤ ‖x−y‖).
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

import numpy as np

STATS = ("max", "min", "mean", "norm")

NOTE_NUM = 0
NOTE_NA = 1
NOTE_DIFF = 2

_DEVICE = re.compile(r"^(cpu|cuda|npu|xpu|mps|meta|hpu|xla|Ascend|GPU|CPU)(:\d+)?$")


def is_device_text(text: object) -> bool:
    return isinstance(text, str) and bool(_DEVICE.match(text))


def stat_diff(n: np.ndarray, b: np.ndarray, n_text: Optional[np.ndarray] = None,
              b_text: Optional[np.ndarray] = None, matched: Optional[np.ndarray] = None,
              small_value: float = 0.0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Diff, relative error and note code of one statistic for every row.

    ``n``/``b``: float64 values (NaN where absent or not numeric); ``n_text``/``b_text``: object arrays holding
    the text of non-numeric values (None elsewhere); ``matched``: bool, False for rows without a golden row;
    ``small_value``: where ``|B| <= small_value`` the relative error is the absolute difference (0: never).
    """
    n = np.asarray(n, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    rows = n.shape[0]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = n - b
        rel = np.abs(diff / b)
        if small_value > 0:
            tiny = np.abs(b) <= small_value
            rel[tiny] = np.abs(diff[tiny])
        nonfinite = ~np.isfinite(diff) & ~np.isnan(n) & ~np.isnan(b)
        rel[nonfinite] = diff[nonfinite]
        equal = n == b
        diff[equal] = 0.0
        rel[equal] = 0.0
    note = np.zeros(rows, dtype=np.uint8)
    if n_text is not None or b_text is not None:
        nt = n_text if n_text is not None else np.full(rows, None, dtype=object)
        bt = b_text if b_text is not None else np.full(rows, None, dtype=object)
        # numpy's stubs take no None operand; object arrays compare with it element by element
        has_text = np.not_equal(nt, None) | np.not_equal(bt, None)  # type: ignore[call-overload]
        for i in np.flatnonzero(has_text):
            d, r, code = _text_rule(nt[i], bt[i], n[i], b[i])
            diff[i], rel[i], note[i] = d, r, code
    if matched is not None:
        unmatched = ~np.asarray(matched, dtype=bool)
        diff[unmatched] = np.nan
        rel[unmatched] = np.nan
        note[unmatched] = NOTE_NA
    return diff, rel, note


def _text_rule(nt: Optional[str], bt: Optional[str], nv: float, bv: float) -> Tuple[float, float, int]:
    """msprobe 26.2's rule for non-numeric statistic cells (S8)."""
    n_missing = nt is None and np.isnan(nv)
    b_missing = bt is None and np.isnan(bv)
    if nt == "N/A" or bt == "N/A" or n_missing or b_missing:
        return np.nan, np.nan, NOTE_NA
    n_str = nt if nt is not None else _num_text(nv)
    b_str = bt if bt is not None else _num_text(bv)
    if n_str == b_str:
        return 0.0, 0.0, NOTE_NUM
    if is_device_text(nt) and is_device_text(bt):
        return np.nan, np.nan, NOTE_NA
    return np.nan, np.nan, NOTE_DIFF


def _num_text(v: float) -> str:
    return repr(float(v))


def stats_table(n_stats: Dict[str, np.ndarray], b_stats: Dict[str, np.ndarray],
                n_text: Optional[Dict[str, np.ndarray]] = None, b_text: Optional[Dict[str, np.ndarray]] = None,
                matched: Optional[np.ndarray] = None, small_value: float = 0.0,
                unknown: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
    """``{stat}_diff``, ``{stat}_rel`` and ``{stat}_note`` for the four statistics. ``unknown``: per statistic,
    the rows where a side does not know it (msprobe leaves an integer tensor's Mean and Norm empty, a bool's mean
    is none): N/A there, never a difference."""
    out: Dict[str, np.ndarray] = {}
    n_text = n_text or {}
    b_text = b_text or {}
    for s in STATS:
        d, r, note = stat_diff(n_stats[s], b_stats[s], n_text.get(s), b_text.get(s), matched, small_value)
        missing = (unknown or {}).get(s)
        if missing is not None and missing.any():
            d[missing] = np.nan
            r[missing] = np.nan
            note[missing] = NOTE_NA
        out[s + "_diff"] = d
        out[s + "_rel"] = r
        out[s + "_note"] = note
    return out


def scaled_stat_errors(n_stats: Dict[str, np.ndarray], b_stats: Dict[str, np.ndarray], numel: np.ndarray,
                       small_value: float, scale_norm: Optional[np.ndarray] = None) -> np.ndarray:
    """Largest scale-aware relative error over the four statistics (a lower bound of ‖x−y‖/‖y‖).

    NaN where nothing numeric can be compared. A row where a statistic is non-finite on exactly one side, or
    non-finite on both with different values, gets inf. ``scale_norm``: the golden norm that sets the scale (default
    ``b_stats["norm"]``).
    """
    numel = np.asarray(numel, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        norm = b_stats["norm"] if scale_norm is None else scale_norm
        rms = np.abs(norm) / np.sqrt(np.where(numel > 0, numel, 1.0))
        rms = np.where(np.isfinite(rms), rms, 0.0)
        worst = np.full(numel.shape[0], np.nan)
        for s in STATS:
            nv = np.asarray(n_stats[s], dtype=np.float64)
            bv = np.asarray(b_stats[s], dtype=np.float64)
            scale = np.maximum(np.maximum(np.abs(bv), rms), small_value)
            if s == "mean":
                # |Δmean|·√n ≤ ‖x−y‖: compare the mean shift against the rms of the golden tensor
                scale = np.maximum(rms, small_value)
            err = np.abs(nv - bv) / scale
            same = nv == bv
            err[same] = 0.0
            one_sided = np.isfinite(nv) != np.isfinite(bv)
            both_nan = np.isnan(nv) & np.isnan(bv)
            err[one_sided & ~np.isnan(nv) & ~np.isnan(bv)] = np.inf
            err[np.isnan(nv) != np.isnan(bv)] = np.inf
            err[both_nan] = np.nan
            worst = np.fmax(worst, err)
    return worst
