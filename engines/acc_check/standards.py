"""The accuracy standards of the API pre-check, as numpy functions: per-dtype constants, the metrics of each standard
(binary consistency, absolute threshold, ULP error, thousandth ratio, benchmark with small values, RMSE and error
balance), the cosine and ratio ladder every float output gets, and the ratio of two devices' metrics.

Formulas and constants: docs/ACC_CHECK.md ("Standards"), after msprobe 26.2 (docs/reference/msprobe-analysis.md
section 2). ``device`` is the output of the dump under test, ``bench`` the reference replay's output (float64 for
float32 devices, float32 for float16/bfloat16); both arrive as numpy arrays, bfloat16 already widened to float32.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

PASS, WARNING, ERROR, SKIP = "pass", "warning", "error", "SKIP"
_RANK = {PASS: 0, SKIP: -1, WARNING: 1, ERROR: 2}


class DtypeConstants:
    """The per-dtype constants of the standards (float32 is also the default)."""

    __slots__ = ("small_value", "abs_atol", "bench_atol", "rtol", "minimum_err", "ulp_min_eb", "ulp_exponent",
                 "ulp_threshold")

    def __init__(self, small_value: float, abs_atol: float, bench_atol: float, rtol: float, minimum_err: float,
                 ulp: Tuple[int, int, float]) -> None:
        self.small_value = small_value
        self.abs_atol = abs_atol
        self.bench_atol = bench_atol
        self.rtol = rtol
        self.minimum_err = minimum_err
        self.ulp_min_eb, self.ulp_exponent, self.ulp_threshold = ulp


CONSTANTS: Dict[str, DtypeConstants] = {
    "float16": DtypeConstants(2.0 ** -10, 2.0 ** -16, 1e-16, 2.0 ** -10, 2.0 ** -11, (-14, 10, 1.0)),
    "bfloat16": DtypeConstants(2.0 ** -10, 2.0 ** -16, 1e-16, 2.0 ** -8, 2.0 ** -8, (-126, 7, 1.0)),
    "float32": DtypeConstants(2.0 ** -20, 2.0 ** -30, 2.0 ** -30, 2.0 ** -20, 2.0 ** -14, (-126, 23, 32.0)),
}
STANDARD_DTYPES = tuple(CONSTANTS)


def constants(dtype: str) -> DtypeConstants:
    return CONSTANTS.get(short_dtype(dtype), CONSTANTS["float32"])


def short_dtype(dtype: str) -> str:
    """``torch.float32`` / ``Float32`` / ``float32`` -> ``float32``."""
    text = str(dtype).rsplit(".", 1)[-1].lower()
    return {"half": "float16", "float": "float32", "double": "float64", "bf16": "bfloat16"}.get(text, text)


def bench_eps(bench_dtype: str) -> float:
    """The epsilon added to |bench| in relative errors: the machine epsilon of the bench dtype (bfloat16: 2^-8)."""
    return {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -8}.get(
        short_dtype(bench_dtype), 2.0 ** -23)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).reshape(-1)


class Masks:
    """What every standard shares: absolute errors and the finite / small / normal element masks."""

    def __init__(self, device: np.ndarray, bench: np.ndarray, device_dtype: str, bench_dtype: str,
                 small_value: Optional[float] = None) -> None:
        self.n = _f64(device)
        self.b = _f64(bench)
        self.device_dtype = short_dtype(device_dtype)
        c = constants(device_dtype)
        self.small_value = c.small_value if small_value is None else small_value
        with np.errstate(invalid="ignore", over="ignore"):
            self.abs_err = np.abs(self.n - self.b)
            self.abs_bench_eps = np.abs(self.b) + bench_eps(bench_dtype)
            self.finite = np.isfinite(self.n) & np.isfinite(self.b)
            self.infnan = ~self.finite
            self.small = (np.abs(self.b) <= self.small_value) & self.finite
            self.normal = self.finite & ~self.small
            self.rel_err = self.abs_err / self.abs_bench_eps

    @property
    def size(self) -> int:
        return int(self.n.size)


def _ratio(count: int, total: int) -> float:
    return float(count) / total if total else 0.0


# -- binary consistency --------------------------------------------------------------------------------------------
def binary_error_rate(device: np.ndarray, bench: np.ndarray) -> float:
    """Fraction of elements that differ (NaN equals NaN)."""
    n, b = np.asarray(device).reshape(-1), np.asarray(bench).reshape(-1)
    if n.size == 0:
        return 0.0
    differ = n != b
    if n.dtype.kind in "fc" and b.dtype.kind in "fc":
        differ &= ~(np.isnan(n) & np.isnan(b))
    return float(np.count_nonzero(differ)) / n.size


# -- absolute threshold --------------------------------------------------------------------------------------------
def absolute_threshold(m: Masks, rtol: Optional[float] = None, atol: Optional[float] = None,
                       finfo_max: Optional[float] = None) -> Dict[str, float]:
    """``inf_nan_error_ratio``, ``rel_err_ratio`` (RE > rtol among normal values) and ``abs_err_ratio`` (|err| >
    atol among small values)."""
    c = constants(m.device_dtype)
    rtol = c.rtol if rtol is None else rtol
    atol = c.abs_atol if atol is None else atol
    top = finfo_max if finfo_max is not None else _finfo_max(m.device_dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        n = np.clip(m.n, -top, top)
        b = np.clip(m.b, -top, top)
        ok = (np.abs(n - b) / m.abs_bench_eps <= rtol) | (np.isnan(m.n) & np.isnan(m.b))
    infnan = int(np.count_nonzero(m.infnan))
    return {
        "inf_nan_error_ratio": _ratio(int(np.count_nonzero(~ok & m.infnan)), infnan),
        "rel_err_ratio": _ratio(int(np.count_nonzero((m.rel_err > rtol) & m.normal)), int(np.count_nonzero(m.normal))),
        "abs_err_ratio": _ratio(int(np.count_nonzero((m.abs_err > atol) & m.small)), int(np.count_nonzero(m.small))),
    }


def _finfo_max(dtype: str) -> float:
    return {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}.get(
        short_dtype(dtype), 1.7976931348623157e308)


# -- benchmark -----------------------------------------------------------------------------------------------------
def benchmark(m: Masks, atol: Optional[float] = None) -> Dict[str, float]:
    """Small-value error ratio, RMSE, error balance and the maximum and mean relative error of normal values."""
    atol = constants(m.device_dtype).bench_atol if atol is None else atol
    small = int(np.count_nonzero(m.small))
    out = {"small_value_err_ratio": _ratio(int(np.count_nonzero(m.small & (m.abs_err > atol))), small)}
    size = m.size
    if size == 0:
        return dict(out, rmse=0.0, eb=0.0, max_rel_err=0.0, mean_rel_err=0.0)
    drop = m.infnan | m.small
    k = int(np.count_nonzero(drop))
    err = np.where(drop, 0.0, m.abs_err)
    out["rmse"] = math.sqrt(float(np.mean(err * err)) * (size / (size - k + 1e-4) + 1e-4))
    with np.errstate(invalid="ignore"):
        diff = m.n - _as_device(m.b, m.device_dtype)
    out["eb"] = abs(int(np.count_nonzero(diff > 0)) - int(np.count_nonzero(diff < 0))) / size
    rel = np.where(drop, -1.0, m.rel_err)
    top = float(np.max(rel))
    out["max_rel_err"] = top if top >= 0 else 0.0
    kept = rel[rel >= 0]
    out["mean_rel_err"] = float(np.mean(kept)) if kept.size else 0.0
    return out


def _as_device(b: np.ndarray, dtype: str) -> np.ndarray:
    """The bench cast to the device dtype (bfloat16: rounded to 8 significant bits), back in float64."""
    d = short_dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if d == "float16":
            return b.astype(np.float16).astype(np.float64)
        if d == "float32":
            return b.astype(np.float32).astype(np.float64)
        if d == "bfloat16":
            return round_bf16(b.astype(np.float32)).astype(np.float64)
    return b


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    out = ((bits + rounding) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x), x, out)


# -- ULP -----------------------------------------------------------------------------------------------------------
def ulp_error(device: np.ndarray, bench: np.ndarray, device_dtype: str) -> Dict[str, float]:
    """Errors in units of the device dtype's last place at the bench value: max, mean and the fraction above the
    dtype's threshold (float32 in float64, float16/bfloat16 in float32)."""
    c = constants(device_dtype)
    wide: Any = np.float64 if short_dtype(device_dtype) == "float32" else np.float32
    n: np.ndarray = np.asarray(device, dtype=wide).reshape(-1)
    b: np.ndarray = np.asarray(bench, dtype=wide).reshape(-1)
    if n.size == 0:
        return {"max_ulp_err": 0.0, "mean_ulp_err": 0.0, "ulp_err_proportion": 0.0}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eb = np.where(b == 0, 0.0, np.floor(np.log2(np.abs(b))))
        eb = np.maximum(eb, c.ulp_min_eb)
        ulp = np.abs((n - b) * np.exp2(-eb + c.ulp_exponent).astype(wide))
    return {"max_ulp_err": float(np.max(ulp)), "mean_ulp_err": float(np.mean(ulp)),
            "ulp_err_proportion": float(np.count_nonzero(ulp > c.ulp_threshold)) / ulp.size}


# -- thousandth ----------------------------------------------------------------------------------------------------
def thousandth_ratio(m: Masks) -> float:
    """Fraction of elements whose relative error is below 0.001."""
    return _ratio(int(np.count_nonzero(m.rel_err < 0.001)), m.size)


# -- the cosine and ratio ladder (every float output) --------------------------------------------------------------
def checker_cosine(device: np.ndarray, bench: np.ndarray) -> Tuple[Optional[float], str]:
    """Cosine with each side first divided by its own max |value|; (None, why) when it does not apply: one element,
    or all zero on both sides (both pass this gate), all zero on one side (an error)."""
    n, b = _f64(device), _f64(bench)
    if n.size <= 1:
        return None, ""
    n_top, b_top = float(np.max(np.abs(n))), float(np.max(np.abs(b)))
    if n_top == 0 and b_top == 0:
        return None, ""
    if n_top == 0 or b_top == 0:
        return None, "all the data is zero on one side only"
    n, b = n / n_top, b / b_top
    denom = float(np.linalg.norm(n) * np.linalg.norm(b))
    return (float(np.dot(n, b)) / denom if denom else None), ""


def error_ratios(m: Masks) -> Tuple[float, float, float]:
    """Fractions of elements with relative error below 1/100, 1/1000 and 1/10000 (legacy ``RE``)."""
    size = m.size or 1
    return (float(np.count_nonzero(m.rel_err < 0.01)) / size, float(np.count_nonzero(m.rel_err < 0.001)) / size,
            float(np.count_nonzero(m.rel_err < 0.0001)) / size)


def ladder(cosine: Optional[float], cosine_note: str, max_abs: float, hundredth: float, thousandth: float,
           ten_thousandth: float, device_dtype: str) -> Tuple[str, str]:
    """(status, reason) of msprobe run_ut's per-output ladder: cosine <= 0.99 is an error; max |err| < 0.001 a
    pass; float16/bfloat16 need > 99% of elements within 1% (else error) and > 99.9% within 0.1% (else warning);
    float32/64 need > 99.9% within 0.1% (else error) and > 99.99% within 0.01% (else warning)."""
    if cosine_note:
        return ERROR, cosine_note
    if cosine is not None and (math.isnan(cosine) or cosine <= 0.99):
        return ERROR, "cosine %.6g <= 0.99" % cosine
    if max_abs < 0.001:
        return PASS, ""
    if short_dtype(device_dtype) in ("float16", "bfloat16"):
        if hundredth <= 0.99:
            return ERROR, "only %.4g%% of elements within 1%% relative error (needs > 99%%)" % (100 * hundredth)
        if thousandth <= 0.999:
            return WARNING, "only %.4g%% of elements within 0.1%% relative error (needs > 99.9%%)" % (
                100 * thousandth)
        return PASS, ""
    if thousandth <= 0.999:
        return ERROR, "only %.4g%% of elements within 0.1%% relative error (needs > 99.9%%)" % (100 * thousandth)
    if ten_thousandth <= 0.9999:
        return WARNING, "only %.4g%% of elements within 0.01%% relative error (needs > 99.99%%)" % (
            100 * ten_thousandth)
    return PASS, ""


def worst(statuses: List[str]) -> str:
    """API aggregation: no status gives ' ' (not checked); all SKIP gives SKIP; else the worst of the others."""
    if not statuses:
        return " "
    judged = [s for s in statuses if s != SKIP]
    if not judged:
        return SKIP
    return max(judged, key=lambda s: _RANK.get(s, 0))


def precision_ratio(x: float, y: float, dtype: str) -> float:
    """Ratio of a metric of the device under test to the same metric of another device (api_precision_compare):
    |x| / max(|y|, the dtype's minimum error)."""
    return abs(x) / max(abs(y), constants(dtype).minimum_err)
