"""Helpers shared by the capture tests (this module holds no tests).

Everything here drives the real pieces: the torch adapter, the HDF5 store and the demo model.
"""

import math
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


def expected_stats(t: torch.Tensor, precision: str = "low"):
    """(max, min, mean, norm) as docs/CAPTURE.md defines them, computed directly; NaN where absent."""
    t = t.detach()
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


def assert_stats_equal(row: Dict[str, Any], t: torch.Tensor, precision: str = "low") -> None:
    got = row_stats(row)
    want = expected_stats(t, precision)
    assert str(row["dtype"]) == str(t.dtype)
    assert str(row["shape"]) == str(list(t.shape))
    for g, w, c in zip(got, want, STAT_COLUMNS):
        if math.isnan(w):
            assert math.isnan(g), "%s: expected absent, got %r" % (c, g)
        else:
            assert g == w, "%s: %r != %r" % (c, g, w)
