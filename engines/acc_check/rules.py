"""Which standard judges an API, and the judging of one output: the metrics of its standard and the ladder, the
status (pass / warning / error / SKIP) and the reason. One rule per API class (docs/ACC_CHECK.md, "Rules").

An output arrives as the dump's array (the device under test) and the reference replay's array, with their
dtypes; a non-tensor output arrives as a Python value.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.acc_check import standards as st

BENCHMARK, ABSOLUTE, BINARY, ULP, THOUSANDTH = "benchmark", "absolute", "binary", "ulp", "thousandth"

# msprobe's classic lists (api_precision_standard.yaml): element-wise arithmetic with one rounding (absolute
# threshold), exact ops (binary consistency), matrix products (ULP), convolutions (thousandth ratio).
_ABSOLUTE = frozenset((
    "mul", "mul_", "__mul__", "__imul__", "__rmul__", "add", "add_", "__add__", "__iadd__", "__radd__", "div",
    "div_", "__div__", "__idiv__", "__truediv__", "__rtruediv__", "divide", "divide_", "leaky_relu", "leaky_relu_",
    "prelu", "reciprocal", "reciprocal_", "rsqrt", "rsqrt_", "square", "square_", "sub", "sub_", "rsub", "__isub__",
    "__sub__", "__rsub__"))
_BINARY = frozenset((
    "abs", "abs_", "absolute", "absolute_", "argmin", "argmax", "bitwise_and", "bitwise_and_", "broadcast_to",
    "ceil", "ceil_", "equal", "fill_", "flatten", "floor", "floor_", "gather", "greater", "greater_",
    "greater_equal", "greater_equal_", "histc", "isfinite", "isnan", "less", "less_", "less_equal", "less_equal_",
    "logical_and", "logical_and_", "logical_not", "logical_not_", "logical_or", "logical_or_", "masked_fill",
    "masked_fill_", "max_pool3d", "maximum", "minimum", "neg", "neg_", "nonzero", "not_equal", "not_equal_",
    "one_hot", "pad", "relu", "reshape", "round", "round_", "select", "sign", "sign_", "sort", "tile", "topk",
    "transpose", "transpose_", "tril", "tril_", "triu", "triu_", "type_as", "view", "permute", "contiguous",
    "__getitem__", "split", "chunk", "unsqueeze", "squeeze", "expand", "cat", "stack", "t", "narrow", "clone",
    "embedding", "zeros_like", "ones_like"))
_ULP = frozenset(("__matmul__", "addbmm", "addbmm_", "addmm", "addmm_", "baddbmm", "baddbmm_", "bilinear", "bmm",
                  "chain_matmul", "hspmm", "linear", "matmul", "mm", "mv", "smm", "sspaddmm"))
_THOUSANDTH = frozenset(("conv1d", "conv2d"))

COLUMNS = ("cosine", "max_abs_err", "hundredth", "thousandth", "ten_thousandth", "binary_error_rate", "eb", "rmse",
           "small_value_err_ratio", "max_rel_err", "mean_rel_err", "inf_nan_error_ratio", "rel_err_ratio",
           "abs_err_ratio", "max_ulp_err", "mean_ulp_err", "ulp_err_proportion")


def api_class(api: str, device_dtype: str) -> str:
    """The standard judging an output of API ``api`` (its short name: ``softmax``, ``add_``) of this dtype."""
    d = st.short_dtype(device_dtype)
    if d not in st.STANDARD_DTYPES and d != "float64":
        return BINARY
    if api in _BINARY:
        return BINARY
    if api in _ABSOLUTE:
        return ABSOLUTE
    if api in _ULP:
        return ULP
    if api in _THOUSANDTH:
        return THOUSANDTH
    return BENCHMARK


class OutputResult:
    """The judging of one output: metrics (``COLUMNS``, NaN where not computed), status and reason."""

    __slots__ = ("name", "bench_dtype", "device_dtype", "shape", "standard", "metrics", "status", "message")

    def __init__(self, name: str, bench_dtype: str, device_dtype: str, shape: str, standard: str = "") -> None:
        self.name = name
        self.bench_dtype = bench_dtype
        self.device_dtype = device_dtype
        self.shape = shape
        self.standard = standard
        self.metrics: Dict[str, float] = {c: math.nan for c in COLUMNS}
        self.status = st.PASS
        self.message = ""

    def set(self, status: str, message: str = "") -> "OutputResult":
        self.status = status
        self.message = message
        return self


def judge_value(name: str, device: Any, bench: Any) -> OutputResult:
    """A non-tensor output (bool, int, float, str): equal or an error."""
    out = OutputResult(name, type(bench).__name__, type(device).__name__, "[]", BINARY)
    same = device == bench or (isinstance(device, float) and isinstance(bench, float) and math.isnan(device)
                               and math.isnan(bench))
    out.metrics["binary_error_rate"] = 0.0 if same else 1.0
    return out if same else out.set(st.ERROR, "the outputs differ: %r vs the reference's %r" % (device, bench))


def judge_tensor(name: str, api: str, device: np.ndarray, device_dtype: str, bench: Optional[np.ndarray],
                 bench_dtype: str, backward: bool = False) -> OutputResult:
    """The status of one tensor output against the reference's (``bench`` None: the reference returned none).
    Gradients (``backward``) of float outputs are judged as benchmark outputs whatever the API's class: the
    gradient of an exact or one-rounding op is a sum wherever its input was broadcast or repeated (embedding's
    weight, a broadcast add's smaller operand), and a bias gradient's cancellation turns the ULP metric, relative
    to the result, into millions of ulps."""
    shape = st_shape(device)
    d = st.short_dtype(device_dtype)
    standard = api_class(api, d)
    if backward and standard in (ULP, ABSOLUTE, BINARY, THOUSANDTH) and d in st.STANDARD_DTYPES + ("float64",):
        standard = BENCHMARK
    out = OutputResult(name, bench_dtype, device_dtype, shape, standard)
    if bench is None:
        return out.set(st.SKIP, "Bench output is None, skip this test.")
    if tuple(device.shape) != tuple(bench.shape):
        return out.set(st.ERROR, "shape %s differs from the reference's %s" % (shape, st_shape(bench)))
    if device.size == 0:
        return out.set(st.SKIP, "empty output, nothing to compare")
    if device.dtype.kind == "c" or bench.dtype.kind == "c":  # complex: real and imaginary parts as pairs
        device = np.stack([np.real(device), np.imag(device)], axis=-1).astype(np.float64)
        bench = np.stack([np.real(bench), np.imag(bench)], axis=-1).astype(np.float64)
        d = "float64"
    if device.dtype.kind not in "fc" or d not in st.STANDARD_DTYPES + ("float64",):
        return _judge_exact(out, device, bench)
    if bench.dtype.kind not in "fc":
        return out.set(st.ERROR, "the reference output is %s, the device's %s" % (bench.dtype, device_dtype))
    m = st.Masks(device, bench, d, bench_dtype)
    _nonfinite = _nonfinite_mismatch(m)
    if _nonfinite:
        return out.set(st.ERROR, _nonfinite)
    out.metrics["max_abs_err"] = float(np.max(np.where(m.finite, m.abs_err, 0.0)))
    cos, note = st.checker_cosine(np.where(m.finite, m.n, 0.0), np.where(m.finite, m.b, 0.0))
    out.metrics["cosine"] = math.nan if cos is None else cos
    hundredth, thousandth, ten_thousandth = st.error_ratios(m)
    out.metrics.update(hundredth=hundredth, thousandth=thousandth, ten_thousandth=ten_thousandth)
    if d in st.STANDARD_DTYPES:
        out.metrics.update(st.benchmark(m))
    status, reason = st.ladder(cos, note, out.metrics["max_abs_err"], hundredth, thousandth, ten_thousandth, d)
    extra = _class_rule(out, standard, m, device, bench, d)
    if extra is not None and _rank(extra[0]) > _rank(status):
        status, reason = extra
    return out.set(status, reason)


def _rank(status: str) -> int:
    return {st.PASS: 0, st.WARNING: 1, st.ERROR: 2}.get(status, 0)


def _class_rule(out: OutputResult, standard: str, m: st.Masks, device: np.ndarray, bench: np.ndarray,
                d: str) -> Optional[Tuple[str, str]]:
    """The class's own rule on top of the ladder (the worse of the two wins)."""
    if d not in st.STANDARD_DTYPES:
        return None
    if d in ("float16", "bfloat16") and standard in (BENCHMARK, ULP, THOUSANDTH):
        # the float32 reference rounded to the device dtype is what a kernel computing inside in float32 gives:
        # more than 1 ulp away on 0.1% of the normal elements is a kernel computing in the low dtype itself (the
        # small ones, |reference| <= small_value, are left to the ladder: near zero, the rounding a cancellation
        # leaves is many ulps of the result)
        out.metrics.update(st.ulp_error(device, bench, d))
        normal = st.ulp_error(m.n[m.normal], m.b[m.normal], d)
        if normal["ulp_err_proportion"] >= 0.001:
            return st.ERROR, "ULP: %.4g%% of the normal elements more than 1 ulp from the reference (>= 0.1%%; max " \
                             "%.3g ulp)" % (100 * normal["ulp_err_proportion"], normal["max_ulp_err"])
        return None
    if standard == BINARY:
        rate = st.binary_error_rate(device, _device_rounded(bench, d))
        out.metrics["binary_error_rate"] = rate
        if rate:
            return st.ERROR, "binary consistency: %.4g%% of elements differ from the reference (exact op)" % (
                100 * rate)
    elif standard == ABSOLUTE:
        trio = st.absolute_threshold(m)
        out.metrics.update(trio)
        bad = [k for k in ("inf_nan_error_ratio", "rel_err_ratio", "abs_err_ratio") if trio[k] > 0]
        if bad:
            return st.ERROR, "absolute threshold: %s" % ", ".join("%s %.4g" % (k, trio[k]) for k in bad)
    elif standard == ULP:
        ulp = st.ulp_error(device, bench, d)
        out.metrics.update(ulp)
        if ulp["mean_ulp_err"] >= 64 and ulp["ulp_err_proportion"] >= 0.05:
            return st.ERROR, "ULP: mean %.4g ulp (>= 64) and %.4g%% above 32 ulp (>= 5%%)" % (
                ulp["mean_ulp_err"], 100 * ulp["ulp_err_proportion"])
    elif standard == BENCHMARK:
        return _benchmark_rule(out, m, bench, d)
    elif standard == THOUSANDTH:
        ratio = st.thousandth_ratio(m)
        out.metrics["thousandth"] = ratio
        if ratio < 0.999:
            return st.ERROR, "thousandth ratio %.6g < 0.999" % ratio
    return None


BENCHMARK_LIMITS = (("mean_rel_err", 2.0), ("rmse", 2.0))


def _benchmark_rule(out: OutputResult, m: st.Masks, bench: np.ndarray, d: str) -> Optional[Tuple[str, str]]:
    """msprobe's benchmark ratios (api_precision_compare) with the reference rounded to the device dtype as the
    second device: the mean relative error and the RMSE may be at most twice the ideal's (each floored at the
    dtype's minimum error). The small-value and maximum relative error ratios are left to a real second device:
    against an ideal one, the few elements a cancellation leaves near zero dominate them."""
    ideal = st.Masks(_device_rounded(bench, d), bench, d, out.bench_dtype)
    ideal_metrics = st.benchmark(ideal)
    bad = []
    for key, limit in BENCHMARK_LIMITS:
        ratio = st.precision_ratio(out.metrics[key], ideal_metrics[key], d)
        if ratio > limit:
            bad.append("%s %.3g is %.3g x the ideal's (> %g)" % (key, out.metrics[key], ratio, limit))
    if bad:
        return st.ERROR, "benchmark: " + "; ".join(bad)
    return None


def _device_rounded(bench: np.ndarray, d: str) -> np.ndarray:
    return st._as_device(np.asarray(bench, dtype=np.float64).reshape(-1), d).reshape(bench.shape)


def _judge_exact(out: OutputResult, device: np.ndarray, bench: np.ndarray) -> OutputResult:
    out.standard = BINARY
    if device.dtype.kind in "fc" and bench.dtype.kind in "fc":
        bench = bench.astype(device.dtype)
    rate = st.binary_error_rate(device, bench)
    out.metrics["binary_error_rate"] = rate
    if rate:
        return out.set(st.ERROR, "binary consistency: %.4g%% of elements differ from the reference" % (100 * rate))
    return out


def _nonfinite_mismatch(m: st.Masks) -> str:
    """Non-finite values must sit at the same places with the same values on both sides."""
    n_bad, b_bad = ~np.isfinite(m.n), ~np.isfinite(m.b)
    if not (n_bad.any() or b_bad.any()):
        return ""
    same = (n_bad == b_bad) & ((m.n == m.b) | (np.isnan(m.n) & np.isnan(m.b)) | ~n_bad)
    if not bool(np.all(same)):
        return "inf/nan at %d place(s) where the reference differs" % int(np.count_nonzero(~same))
    return ""


def st_shape(a: np.ndarray) -> str:
    return "[%s]" % ", ".join(str(int(s)) for s in a.shape)


def aggregate(statuses: List[str]) -> str:
    return st.worst(statuses)
