"""A pass decided from one pass over the errors, for the online check (docs/ACC_CHECK.md, "Online check: speed").

``rules.judge_tensor`` computes every metric of an output's standard (the cosine, the ratio ladder, the
benchmark's metrics twice: the device's and the ideal device's). Most outputs of a healthy run are far inside
every threshold; ``judge`` first computes the absolute and relative errors once and, when they prove the full
judgement would pass, returns that pass with the metrics it has (``max_abs_err``, ``max_rel_err``); otherwise it
runs the full judgement. The proof is conservative, so the verdict is always the full judgement's:

- non-finite values, an empty or one-sided output, a float16/bfloat16 device or a non-float output: judged in full;
- equal everywhere (zeros on both sides too): every standard's errors are zero, a pass;
- the cosine gate: ``||d - b|| <= 0.05 ||b||`` bounds the angle's cosine above 0.998 (> 0.99) (the norms are
  skipped when the largest relative error already proves it);
- the ladder: ``max_abs_err < 0.001`` passes it, and so does every relative error below 1/10000;
- the class rule, float32 only (float64 outputs have none): benchmark, both its ratios at most twice the dtype's
  minimum error, so at most 2 whatever the ideal's (mean relative error <= the largest, RMSE <= the largest
  absolute error x 1.0001); ULP, under 5% of the elements possibly above 32 ulp (|d - b| > 2^-20 |b|, or a
  subnormal reference not met exactly), else the rule's own ULP metrics; thousandth, every relative error below 0.001; absolute threshold and
  binary consistency, their exact tests (they are one pass already).
"""

import math
from typing import Optional

import numpy as np

from engines.acc_check import rules
from engines.acc_check import standards as st

_COSINE_GATE = 0.05  # ||d - b|| / ||b||: cosine >= sqrt(1 - 0.05^2) = 0.9987
_MARGIN = 0.99


def judge(name: str, api: str, device: np.ndarray, device_dtype: str, bench: Optional[np.ndarray],
          bench_dtype: str, backward: bool = False) -> rules.OutputResult:
    """``rules.judge_tensor``'s verdict, cheaper when the output clearly passes."""
    quick = prescreen(name, api, device, device_dtype, bench, bench_dtype, backward)
    if quick is not None:
        return quick
    return rules.judge_tensor(name, api, device, device_dtype, bench, bench_dtype, backward)


def prescreen(name: str, api: str, device: np.ndarray, device_dtype: str, bench: Optional[np.ndarray],
              bench_dtype: str, backward: bool = False) -> Optional[rules.OutputResult]:
    """The full judgement's pass, or None when the errors do not prove it."""
    d = st.short_dtype(device_dtype)
    if bench is None or d not in ("float32", "float64") or device.dtype.kind != "f" or bench.dtype.kind != "f":
        return None
    if tuple(device.shape) != tuple(bench.shape) or device.size == 0:
        return None
    standard = rules.api_class(api, d)
    if backward and standard in (rules.ULP, rules.ABSOLUTE, rules.BINARY, rules.THOUSANDTH):
        standard = rules.BENCHMARK
    n = np.asarray(device, dtype=np.float64).reshape(-1)
    b = np.asarray(bench, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = n - b
        if not np.isfinite(diff).all():  # an inf or nan on either side (or an overflowing difference)
            return None
        if not diff.any():  # equal everywhere (all zero on both sides too): every standard's errors are zero
            return _passed(name, device, device_dtype, bench_dtype, standard, 0.0, 0.0 if d == "float32" and
                           standard == rules.BENCHMARK else None)
        if device.size < 2:
            return None
        abs_err = np.abs(diff)
        abs_b = np.abs(b)
        rel_err = abs_err / (abs_b + st.bench_eps(bench_dtype))
    max_abs = float(abs_err.max())
    max_rel = float(rel_err.max())
    if not (max_abs < 0.001 or max_rel < 0.0001):
        return None
    if not _cosine_gate(b, diff, abs_b, max_rel, st.bench_eps(bench_dtype)):
        return None
    c = st.constants(d)
    normal = abs_b > c.small_value
    max_rel_normal = float(rel_err[normal].max()) if normal.any() else 0.0
    if d == "float32" and not _class_passes(standard, n, b, abs_err, abs_b, rel_err, normal, max_abs,
                                            max_rel, max_rel_normal, c):
        return None
    return _passed(name, device, device_dtype, bench_dtype, standard, max_abs,
                   max_rel_normal if d == "float32" and standard == rules.BENCHMARK else None)


def _passed(name: str, device: np.ndarray, device_dtype: str, bench_dtype: str, standard: str, max_abs: float,
            max_rel: Optional[float]) -> rules.OutputResult:
    out = rules.OutputResult(name, bench_dtype, device_dtype, rules.st_shape(device), standard)
    out.metrics["max_abs_err"] = max_abs
    if max_rel is not None:
        out.metrics["max_rel_err"] = max_rel
    return out


def _cosine_gate(b: np.ndarray, diff: np.ndarray, abs_b: np.ndarray, max_rel: float, eps: float) -> bool:
    """``||d - b|| <= 0.05 ||b||`` (and ``b`` not all zero). Without the norms when the relative errors prove it:
    ``|d - b| <= max_rel (|b| + eps)`` element-wise gives ``||d - b|| <= max_rel (||b|| + eps sqrt(N))``, and
    ``||b|| >= max |b|``."""
    top = float(abs_b.max())
    if not top > 0:
        return False
    if max_rel * (1.0 + eps * math.sqrt(b.size) / top) <= _COSINE_GATE * _MARGIN:
        return True
    return float(np.linalg.norm(diff)) <= _COSINE_GATE * float(np.linalg.norm(b))


def _class_passes(standard: str, n: np.ndarray, b: np.ndarray, abs_err: np.ndarray, abs_b: np.ndarray,
                  rel_err: np.ndarray, normal: np.ndarray, max_abs: float, max_rel: float, max_rel_normal: float,
                  c: st.DtypeConstants) -> bool:
    if standard == rules.BENCHMARK:
        limit = 2.0 * c.minimum_err * _MARGIN
        return max_rel_normal <= limit and max_abs <= limit
    if standard == rules.ULP:
        loose = (abs_err > abs_b * 2.0 ** -20) | ((abs_b < 2.0 ** -126) & (abs_err > 0))
        if int(np.count_nonzero(loose)) < 0.05 * n.size * _MARGIN:
            return True
        ulp = st.ulp_error(n, b, "float32")  # the rule itself (a matmul's cancellations)
        return not (ulp["mean_ulp_err"] >= 64 and ulp["ulp_err_proportion"] >= 0.05)
    if standard == rules.THOUSANDTH:
        return max_rel < 0.001
    if standard == rules.ABSOLUTE:
        return not bool(np.any(rel_err[normal] > c.rtol)) and not bool(np.any(abs_err[~normal] > c.abs_atol))
    if standard == rules.BINARY:
        return bool(np.array_equal(n, b.astype(np.float32).astype(np.float64)))
    return False


__all__ = ["judge", "prescreen"]
