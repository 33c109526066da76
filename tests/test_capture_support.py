"""Helpers shared by the capture tests (this module holds no tests).

Everything here drives the real pieces: the torch adapter, the HDF5 store and the demo model.
"""

import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from engines.adapters.torch.session import TorchCaptureSession
from engines.adapters.torch.zero_code import ZeroCodeCapture
from tests import dump_support
from tests.dump_support import STAT_COLUMNS, TINY, Dump, rank_dirs, row_stats  # noqa: F401 (re-exported)


def make_session(root: Path, rank: int = 0, force_dispatch: bool = False, **options: Any) -> TorchCaptureSession:
    opts, sinks, summary = dump_support.capture_sinks(root, "pytorch", **options)
    return TorchCaptureSession(opts, sinks, summary=summary, rank=rank, force_dispatch=force_dispatch)


def run_demo(root: Path, knobs: Optional[Dict[str, Any]] = None, **options: Any):
    """The demo trained under zero-code capture: (Dump of rank 0, summary, DemoResult)."""
    from engines.adapters.torch import demo

    return dump_support.run_zero_code(root, ZeroCodeCapture, demo, "pytorch", knobs, **options)


_NATIVE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def native_stats_on() -> bool:
    """Whether this process summarises CPU float tensors with the fused kernel (decision 28)."""
    from engines.native import build

    return build.load() is not None


def fused_path(t: torch.Tensor) -> bool:
    """Whether the capture summarises ``t`` with the fused kernel: a CPU float tensor of at least one dimension,
    of any strided layout (a dense block read in place, any other view by the strided walk), not a negative
    view."""
    return (native_stats_on() and t.device.type == "cpu" and t.dtype in _NATIVE_DTYPES and t.dim() > 0
            and not t.is_neg())


def round_to(v: float, dtype: torch.dtype) -> float:
    """``v`` rounded once to the nearest value of ``dtype`` (ties to even; inf past the largest), in exact
    arithmetic: the reference for the kernel's rounding of its float64 sum and norm."""
    if dtype is torch.float64 or not math.isfinite(v) or v == 0:
        return v
    mant, emin, largest = {torch.float32: (23, -126, (2 - 2 ** -23) * 2.0 ** 127),
                           torch.float16: (10, -14, 65504.0),
                           torch.bfloat16: (7, -126, (2 - 2 ** -7) * 2.0 ** 127)}[dtype]
    e = max(math.frexp(v)[1] - 1, emin)
    q = round(Fraction(v) / Fraction(2) ** (e - mant))  # round() of a Fraction: half to even
    r = float(q * Fraction(2) ** (e - mant))
    return math.copysign(math.inf, v) if abs(r) > largest else r


def fused_stats(t: torch.Tensor, precision: str = "low"):
    """(max, min, sum, norm) by decision 28's definition, computed independently: exact sum (math.fsum) and sum
    of squares in float64 (exact for every type but float64), rounded once to the tensor's dtype (float32 for
    the half types at ``precision: high``)."""
    values = t.double().flatten().tolist()
    out = t.dtype if not (precision == "high" and t.dtype in (torch.float16, torch.bfloat16)) else torch.float32
    if any(math.isnan(v) for v in values):
        mx = mn = math.nan
    else:
        mx, mn = max(values), min(values)
    s = round_to(math.fsum(values), out)
    n = round_to(math.sqrt(math.fsum(v * v for v in values)), out)
    return mx, mn, s, n


def expected_stats(t: torch.Tensor, precision: str = "low", fused: Optional[bool] = None):
    """(max, min, mean, norm) as docs/CAPTURE.md defines them, computed directly; NaN where absent. ``fused``:
    whether the value was summarised by the fused kernel (default: as the capture would summarise ``t``)."""
    t = t.detach()
    if fused is None:
        fused = fused_path(t)
    if fused and t.numel() and t.dim():
        mx, mn, s, n = fused_stats(t, precision)
        return (mx, mn, s / t.numel(), n)
    nan = math.nan
    if t.numel() == 0:
        return (nan, nan, nan, nan)
    if t.dtype is torch.bool:
        return (float(t.any()), float(t.all()), nan, nan)
    if t.is_complex():
        t = t.abs()
    if t.dim() == 0:
        v = float(t)
        return (v, v, v, v)
    if t.dtype.is_floating_point:
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            t = t.float()
        if precision == "high" and t.dtype in (torch.float16, torch.bfloat16):
            s = float(t.sum(dtype=torch.float32))
            n = float(torch.linalg.vector_norm(t, dtype=torch.float32))
        else:
            s = float(t.sum())
            n = float(torch.linalg.vector_norm(t))
        return (float(t.max()), float(t.min()), s / t.numel(), n)
    s = int(t.sum(dtype=torch.int64))
    return (float(t.max()), float(t.min()), s / t.numel(), float(torch.linalg.vector_norm(t.double())))


def stats_match(got, want, t: torch.Tensor, fused: Optional[bool] = None) -> bool:
    """Equal, NaN for NaN; a float64 tensor's fused sum and norm (float64 accumulation in the kernel's order, the
    reference's exact) to 1e-12 relative, every other value exactly."""
    loose = t.dtype is torch.float64 and (fused_path(t) if fused is None else fused)
    for i, (g, w) in enumerate(zip(got, want)):
        if math.isnan(w):
            if not math.isnan(g):
                return False
        elif not (g == w or (loose and i >= 2 and abs(g - w) <= 1e-12 * abs(w))):
            return False
    return True


def assert_stats_equal(row: Dict[str, Any], t: torch.Tensor, precision: str = "low") -> None:
    got = row_stats(row)
    want = expected_stats(t, precision)
    assert str(row["dtype"]) == str(t.dtype)
    assert str(row["shape"]) == str(list(t.shape))
    assert stats_match(got, want, t.detach()), "%s: %r != %r" % (STAT_COLUMNS, got, want)
