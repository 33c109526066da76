"""Real-data (tensor) compare metrics, streamable and mergeable.

The six msprobe columns (Cosine, EucDist, MaxAbsErr, MaxRelativeErr, one- and five-thousandths error ratios) are
computed exactly as msprobe 26.2 does (docs/reference/msprobe-analysis.md §1.7), plus our norm-wise relative error ‖x−y‖/‖y‖ in float64,
which ranks and judges rows (docs/reference/diagnosis-notes.md items 3, 4).

Everything is accumulated chunk by chunk in a :class:`TensorPartial`, so a tensor of any size streams through
bounded memory and pieces computed in different processes merge (:meth:`TensorPartial.merge`). The caller hands
1-D chunks of the two tensors in their *native* dtypes: the element-wise relative error is computed in
``result_type(x, y, float32)`` like msprobe (V3), everything else in float64.

Deliberate differences from msprobe, documented in docs/COMPARE.md:

- inf at the same position with opposite signs is a mismatch (msprobe ignores the sign);
- values are kept unrounded; msprobe's display rounding is :func:`display_value`;
- our ``rel_err`` excludes positions where both sides hold the same non-finite or extreme value (mask fills such as
  ``-inf`` or ``finfo.min``): masks are not faults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
from numpy.typing import DTypeLike

EPS64 = float(np.finfo(np.float64).eps)
BLOCK = 1 << 16  # elements per inner block: keeps the temporaries in cache

# Row status codes (why a metric may be absent). Stored in the result table as uint8.
ST_OK = 0
ST_UNMATCHED = 1  # no golden row
ST_SHAPE = 2  # shapes differ
ST_NONFINITE = 3  # inf/nan positions differ
ST_EMPTY = 4  # zero elements
ST_NO_DATA = 5  # a side has no tensor data (statistics-only row in tensor mode)
ST_READ_ERROR = 6  # a tensor file could not be read
ST_UNREADABLE = 7  # not convertible to float (complex, strings)
ST_DTYPE_GATE = 8  # dtypes of incompatible classes: golden treated as unmatched (msprobe's dtype gate)
ST_NOT_TENSOR = 9  # a scalar argument row (compared by value)
STATUS_NAMES = (
    "ok", "unmatched", "shape unmatched", "nonfinite mismatch", "empty", "no data", "read error",
    "unreadable", "dtype gated", "scalar",
)

MSG_EMPTY = "This is empty data, can not compare."
MSG_SHAPE = "Shape of NPU and bench tensor do not match. Skipped."
MSG_NONFINITE = "The position of inf or nan in NPU and bench Tensor do not match."
MSG_ZERO_D = ("This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' "
              "and 'Five Thousandths Err Ratio'.")
MSG_LEN1 = "This is a 1-d tensor of length 1."
MSG_NPU_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
MSG_BENCH_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
MSG_COS_NAN = "Cannot compare by Cosine Similarity, the dump data has NaN."
MSG_DTYPE = "Dtype of NPU and bench tensor do not match."
MSG_UNREADABLE = "Data is unreadable."


def compute_dtype(x_dtype: np.dtype, y_dtype: np.dtype) -> np.dtype:
    """The dtype msprobe 26.2 computes the element-wise relative error in."""
    return np.result_type(x_dtype, y_dtype, np.float32)


def _extreme_limit(dtype: np.dtype) -> float:
    """Magnitude from which a value counts as a fill (``finfo.min``-style mask); inf for non-floats."""
    if np.issubdtype(dtype, np.floating):
        return float(np.finfo(dtype).max) / 2.0
    return math.inf


@dataclass
class TensorPartial:
    """Mergeable sums over element pairs; :meth:`finish` turns them into metrics."""

    n: int = 0
    xy: float = 0.0
    xx: float = 0.0
    yy: float = 0.0
    dd: float = 0.0
    max_abs: float = -math.inf
    max_rel: float = -math.inf
    below_1e3: int = 0
    below_5e3: int = 0
    any_nan_metric: bool = False  # a NaN reached MaxAbsErr (cannot happen after masking; kept for safety)
    nonfinite_mismatch: bool = False
    nonfinite_matched: int = 0  # positions where both sides hold the same inf/nan (zeroed, msprobe rule)
    core_yy: float = 0.0  # golden energy without matched extreme (fill) positions: rel_err's denominator
    fill_count: int = 0

    def merge(self, other: "TensorPartial") -> "TensorPartial":
        self.n += other.n
        self.xy += other.xy
        self.xx += other.xx
        self.yy += other.yy
        self.dd += other.dd
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.below_1e3 += other.below_1e3
        self.below_5e3 += other.below_5e3
        self.any_nan_metric |= other.any_nan_metric
        self.nonfinite_mismatch |= other.nonfinite_mismatch
        self.nonfinite_matched += other.nonfinite_matched
        self.core_yy += other.core_yy
        self.fill_count += other.fill_count
        return self


def _clean_nonfinite(x: np.ndarray, y: np.ndarray, part: TensorPartial) -> Tuple[np.ndarray, np.ndarray, bool]:
    """Zero positions where both sides are the same inf/nan; flag a mismatch otherwise.

    msprobe requires equal isinf and isnan masks and ignores the sign of inf; we also require the same sign
    (+inf against -inf at one position is a real difference).
    """
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(y.dtype, np.floating)):
        return x, y, False
    bad_x = ~np.isfinite(x)
    bad_y = ~np.isfinite(y)
    if not (bad_x.any() or bad_y.any()):
        return x, y, False
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    same = (nan_x == nan_y) & (bad_x == bad_y)
    inf_both = bad_x & bad_y & ~nan_x & ~nan_y
    if inf_both.any():
        same &= ~inf_both | (x == y)
    if not same.all():
        part.nonfinite_mismatch = True
        return x, y, True
    both = bad_x & bad_y
    part.nonfinite_matched += int(np.count_nonzero(both))
    x = np.where(both, 0, x).astype(x.dtype, copy=False)
    y = np.where(both, 0, y).astype(y.dtype, copy=False)
    return x, y, False


class TensorAccumulator:
    """Feeds chunks of a tensor pair into a :class:`TensorPartial`.

    ``rel_eps``: the epsilon added where the golden value is 0 (msprobe: ``x' = x+ε, y' = y+ε`` there). ``None``
    means the machine epsilon of the compute dtype, as msprobe 26.2 (1.19e-7 for float32 data, 2.2e-16 for
    float64). ``small_value``: where ``|golden| <= small_value`` the element's relative error is its absolute
    error (0, the default: never).
    """

    def __init__(self, x_dtype: DTypeLike, y_dtype: DTypeLike, rel_eps: Optional[float] = None,
                 small_value: float = 0.0) -> None:
        self.x_dtype = np.dtype(x_dtype)
        self.y_dtype = np.dtype(y_dtype)
        self.cdt = compute_dtype(self.x_dtype, self.y_dtype)
        self.rel_eps = self.cdt.type(np.finfo(self.cdt).eps if rel_eps is None else rel_eps)
        self.limit = min(_extreme_limit(self.x_dtype), _extreme_limit(self.y_dtype))
        self.small_value = float(small_value)
        self.part = TensorPartial()
        self._buf: Optional[Dict[str, np.ndarray]] = None

    def _buffers(self) -> Dict[str, np.ndarray]:
        """Work arrays reused for every block: fresh 0.5 MiB temporaries would cost a page fault storm."""
        if self._buf is None:
            self._buf = {"x64": np.empty(BLOCK), "y64": np.empty(BLOCK), "d64": np.empty(BLOCK),
                         "rel": np.empty(BLOCK, self.cdt), "ay": np.empty(BLOCK, self.cdt),
                         "xc": np.empty(BLOCK, self.cdt), "yc": np.empty(BLOCK, self.cdt),
                         "mask": np.empty(BLOCK, bool)}
        return self._buf

    def update(self, x: np.ndarray, y: np.ndarray) -> None:
        x = np.ravel(x)
        y = np.ravel(y)
        if x.shape != y.shape:
            raise ValueError("chunks of different lengths")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for start in range(0, x.size, BLOCK):
                self._update_block(x[start:start + BLOCK], y[start:start + BLOCK])

    def _update_block(self, x: np.ndarray, y: np.ndarray) -> None:
        part = self.part
        n = x.size
        if part.nonfinite_mismatch or n == 0:
            part.n += n
            return
        buf = self._buffers()
        x64, y64, d64 = buf["x64"][:n], buf["y64"][:n], buf["d64"][:n]
        np.copyto(x64, x, casting="unsafe")
        np.copyto(y64, y, casting="unsafe")
        xx = float(np.dot(x64, x64))
        yy = float(np.dot(y64, y64))
        if not (math.isfinite(xx) and math.isfinite(yy)):
            x, y, mismatch = _clean_nonfinite(x, y, part)
            if mismatch:
                part.n += n
                return
            np.copyto(x64, x, casting="unsafe")
            np.copyto(y64, y, casting="unsafe")
            xx = float(np.dot(x64, x64))
            yy = float(np.dot(y64, y64))
        part.n += n
        part.xx += xx
        part.yy += yy
        part.xy += float(np.dot(x64, y64))
        np.subtract(x64, y64, out=d64)
        part.dd += float(np.dot(d64, d64))
        part.max_abs = max(part.max_abs, float(d64.max()), -float(d64.min()))
        if yy >= self.limit * self.limit or xx >= self.limit * self.limit:
            part.core_yy += self._core_energy(x, y)
        else:
            part.core_yy += yy
        self._update_rel(x, y, buf, n)

    def _core_energy(self, x: np.ndarray, y: np.ndarray) -> float:
        """Golden energy without positions where both sides hold the same extreme (fill) value."""
        y64 = y.astype(np.float64)
        fill = (np.abs(y64) >= self.limit) & (x.astype(np.float64) == y64)
        self.part.fill_count += int(np.count_nonzero(fill))
        keep = y64[~fill]
        return float(np.dot(keep, keep))

    def _update_rel(self, x: np.ndarray, y: np.ndarray, buf: dict, n: int) -> None:
        """Element-wise relative error in the compute dtype (msprobe 26.2): max and the two ratio counts."""
        part = self.part
        if x.dtype == self.cdt and y.dtype == self.cdt:
            xc, yc = x, y
        elif self.cdt == np.float64:
            xc, yc = buf["x64"][:n], buf["y64"][:n]  # still the exact float64 copies of x and y
        else:
            xc, yc = buf["xc"][:n], buf["yc"][:n]
            np.copyto(xc, x, casting="unsafe")
            np.copyto(yc, y, casting="unsafe")
        rel, ay, mask = buf["rel"][:n], buf["ay"][:n], buf["mask"][:n]
        np.subtract(xc, yc, out=rel)
        np.abs(rel, out=rel)
        np.abs(yc, out=ay)
        np.divide(rel, ay, out=rel)
        top = rel.max()
        if not np.isfinite(top):
            zero = yc == 0
            eps = self.rel_eps
            xs = xc[zero] + eps
            ys = yc[zero] + eps
            rel[zero] = np.abs((xs - ys) / ys)
            top = rel.max()
        if self.small_value > 0:
            tiny = ay <= self.small_value
            rel[tiny] = np.abs(xc[tiny] - yc[tiny])
            top = rel.max()
        if np.isnan(top):
            part.any_nan_metric = True
        else:
            part.max_rel = max(part.max_rel, float(top))
        np.less(rel, 0.001, out=mask)
        part.below_1e3 += int(np.count_nonzero(mask))
        np.less(rel, 0.005, out=mask)
        part.below_5e3 += int(np.count_nonzero(mask))


@dataclass
class TensorMetrics:
    """Final metrics of one row pair. NaN means absent; ``status`` and ``messages`` say why."""

    cosine: float = math.nan
    euc_dist: float = math.nan
    max_abs_err: float = math.nan
    max_rel_err: float = math.nan
    one_thousandth: float = math.nan
    five_thousandths: float = math.nan
    rel_err: float = math.nan  # ‖x−y‖ / ‖y‖, float64, fills excluded
    status: int = ST_OK
    messages: List[str] = field(default_factory=list)
    zero_side: int = 0  # 1 target all zero, 2 golden all zero (and the other side is not)
    nonfinite_matched: int = 0
    cosine_unsupported: bool = False  # length-1 or 0-d: msprobe shows "unsupported"
    ratios_unsupported: bool = False  # 0-d: EucDist and the ratios are "unsupported"

    def as_tuple(self) -> Tuple[float, float, float, float, float, float]:
        return (self.cosine, self.euc_dist, self.max_abs_err, self.max_rel_err, self.one_thousandth,
                self.five_thousandths)


def finish(part: TensorPartial, shape: Tuple[int, ...], *, dtype_differs: bool = False) -> TensorMetrics:
    """Turn accumulated sums into the metrics of a row pair with the given (common) shape."""
    m = TensorMetrics(nonfinite_matched=part.nonfinite_matched)
    if part.n == 0:
        m.status = ST_EMPTY
        m.messages.append(MSG_EMPTY)
        return m
    if part.nonfinite_mismatch:
        m.status = ST_NONFINITE
        m.messages.append(MSG_NONFINITE)
        return m
    zero_d = len(shape) == 0
    m.max_abs_err = part.max_abs
    m.max_rel_err = part.max_rel if not part.any_nan_metric else math.nan
    nx, ny = math.sqrt(part.xx), math.sqrt(part.yy)
    if part.core_yy > 0:
        m.rel_err = math.sqrt(part.dd) / math.sqrt(part.core_yy)
    elif part.dd == 0:
        m.rel_err = 0.0
    else:
        m.rel_err = math.inf
    if nx <= EPS64 < ny:
        m.zero_side = 1
    elif ny <= EPS64 < nx:
        m.zero_side = 2
    if zero_d:
        m.cosine_unsupported = True
        m.ratios_unsupported = True
        m.messages.append(MSG_ZERO_D)
    else:
        m.euc_dist = math.sqrt(part.dd)
        m.one_thousandth = part.below_1e3 / part.n
        m.five_thousandths = part.below_5e3 / part.n
        if part.n == 1:
            m.cosine_unsupported = True
            m.messages.append(MSG_LEN1)
        elif nx <= EPS64 and ny <= EPS64:
            m.cosine = 1.0
        elif nx <= EPS64:
            m.messages.append(MSG_NPU_ZERO)
        elif ny <= EPS64:
            m.messages.append(MSG_BENCH_ZERO)
        else:
            cos = part.xy / (nx * ny)
            if math.isnan(cos):
                m.messages.append(MSG_COS_NAN)
            else:
                m.cosine = cos
    if dtype_differs:
        m.messages.append(MSG_DTYPE)
    return m


def compare_arrays(x: np.ndarray, y: np.ndarray, *, rel_eps: Optional[float] = None,
                   small_value: float = 0.0) -> TensorMetrics:
    """Metrics of two whole arrays (the parse tool and tests; compare streams through the accumulator)."""
    x = np.asarray(x)
    y = np.asarray(y)
    if x.shape != y.shape:
        return TensorMetrics(status=ST_SHAPE, messages=[MSG_SHAPE])
    if not _float_convertible(x.dtype) or not _float_convertible(y.dtype):
        return TensorMetrics(status=ST_UNREADABLE, messages=[MSG_UNREADABLE])
    acc = TensorAccumulator(x.dtype, y.dtype, rel_eps, small_value)
    acc.update(x, y)
    return finish(acc.part, x.shape, dtype_differs=x.dtype != y.dtype)


def _float_convertible(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf"


def round_cosine(value: float) -> float:
    """msprobe's display rounding of Cosine: 12 decimals, 6 when above 0.9999 (V19)."""
    if math.isnan(value):
        return value
    value = float("{:.12f}".format(value))
    return round(value, 6) if value > 0.9999 else value


def round12(value: float) -> float:
    """msprobe's 12-decimal display rounding (MaxAbsErr, MaxRelativeErr, the ratios)."""
    if not math.isfinite(value):
        return value
    return float("{:.12f}".format(value))


def classic_accuracy(cosine: Union[float, str, None], max_abs: Union[float, str, None]) -> str:
    """msprobe (classic) "Accuracy Reached or Not" from a Cosine and a MaxAbsErr cell (docs/reference/msprobe-analysis.md §1.10.1).

    Cells may be numbers or msprobe's strings (``"N/A"``, ``"None"``, ``"unsupported"``, ``"shape unmatched"``).
    Kept for users of the classic report; our verdicts are in :mod:`engines.compare.verdicts`.
    """
    if cosine == "shape unmatched" or max_abs == "shape unmatched":
        return "Unmatched"
    if cosine is None or cosine == "None" or max_abs is None or max_abs == "None":
        return "None"
    if cosine == "N/A" or max_abs == "N/A":
        return "No"
    try:
        cos_v, abs_v = float(cosine), float(max_abs)
    except (TypeError, ValueError):
        return "None"
    if cos_v < 0.99 and abs_v > 0.001:
        return "No"
    if cos_v < 0.9 or abs_v > 1:
        return "No"
    return "Yes"
