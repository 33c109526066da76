"""Helpers shared by the MindSpore tests (this module holds no tests).

Everything here drives the real pieces: the MindSpore adapter, the HDF5 store and the MindSpore demo model.
Importing it needs MindSpore; test modules import it after ``pytest.importorskip("mindspore")``.
"""

import math
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from mindspore import Tensor  # noqa: E402

from engines.adapters.mindspore.session import MindSporeCaptureSession  # noqa: E402
from engines.adapters.mindspore.zero_code import ZeroCodeCapture  # noqa: E402
from tests import dump_support  # noqa: E402
from tests.dump_support import STAT_COLUMNS, TINY, Dump, rank_dirs, row_stats  # noqa: E402,F401 (re-exported)

ONE_STEP = {"preset": "tiny", "steps": 1}


def make_session(root: Path, rank: int = 0, force_batched: bool = False, **options: Any) -> MindSporeCaptureSession:
    opts, sinks, summary = dump_support.capture_sinks(root, "mindspore", **options)
    return MindSporeCaptureSession(opts, sinks, summary=summary, rank=rank, force_batched=force_batched)


def run_demo(root: Path, knobs: Optional[Dict[str, Any]] = None, **options: Any):
    """The MindSpore demo trained under zero-code capture: (Dump of rank 0, summary, DemoResult)."""
    from engines.adapters.mindspore import demo

    return dump_support.run_zero_code(root, ZeroCodeCapture, demo, "mindspore", knobs, **options)


def as_array(t: Any) -> np.ndarray:
    arr = t.asnumpy() if hasattr(t, "asnumpy") else np.asarray(t)
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    return arr


def expected_stats(t: Any):
    """(max, min, mean, norm) of a tensor, computed here in float64 from its values; NaN where absent."""
    a = as_array(t)
    nan = math.nan
    if a.size == 0:
        return (nan, nan, nan, nan)
    if a.dtype == np.bool_:
        return (float(a.any()), float(a.all()), nan, nan)
    if a.ndim == 0:
        v = float(a)
        return (v, v, v, v)
    a64 = a.astype(np.float64)
    return (float(a.max()), float(a.min()), float(a64.mean()), float(np.sqrt((a64 * a64).sum())))


def assert_stats_equal(row: Dict[str, Any], t: Any, rtol: float = 2e-5) -> None:
    """Same dtype and shape; max and min exact; mean and norm to float32 accumulation error."""
    got = row_stats(row)
    want = expected_stats(t)
    assert str(row["dtype"]) == str(t.dtype)
    assert str(row["shape"]) == str(list(t.shape))
    for g, w, c in zip(got, want, STAT_COLUMNS):
        if math.isnan(w):
            assert math.isnan(g), "%s: expected absent, got %r" % (c, g)
        elif c in ("max", "min"):
            assert g == w, "%s: %r != %r" % (c, g, w)
        else:
            assert g == pytest.approx(w, rel=rtol, abs=1e-6 * max(1.0, abs(want[3]))), "%s: %r != %r" % (c, g, w)


def reference_step(knobs: Optional[Dict[str, Any]] = None):
    """The demo's first step without capture; every cell's tensors kept by MindSpore's own cell hooks.

    Returns (model, seen[path] = {input, output, grad_input, grad_output}, grads[param], params[param], loss).
    """
    from engines.adapters.mindspore import demo
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs

    knobs = resolve_knobs(dict(knobs or ONE_STEP))
    demo.ensure_pynative()
    model = demo.build_model(knobs)
    model.set_train(True)
    params = {p.name: p.asnumpy().copy() for p in model.trainable_params()}
    tokens, targets = [(Tensor(x), Tensor(y)) for x, y in batches(knobs)][0]
    seen: Dict[str, Dict[str, Any]] = {}
    handles = []
    for path, cell in model.cells_and_names():
        if not path or path == "blocks":
            continue

        def fwd(cell, args, out, path=path):
            seen[path] = {"input": [a.asnumpy().copy() if isinstance(a, Tensor) else a for a in args],
                          "output": out.asnumpy().copy()}

        def bwd(cell, grad_input, grad_output, path=path):
            seen[path]["grad_input"] = [None if g is None else g.asnumpy().copy() for g in grad_input]
            seen[path]["grad_output"] = [g.asnumpy().copy() for g in grad_output]

        handles.append(cell.register_forward_hook(fwd))
        handles.append(cell.register_backward_hook(bwd))
    forward = demo.loss_function(model, knobs.vocab, False)
    weights = model.trainable_params()
    loss, grads = ms.value_and_grad(forward, None, weights)(tokens, targets)
    for h in handles:
        h.remove()
    grads = {p.name: g.asnumpy().copy() for p, g in zip(weights, grads)}
    return model, seen, grads, params, float(loss.asnumpy())


class Values:
    """A numpy array that reports a MindSpore dtype name (what the dump row says) for ``assert_stats_equal``."""

    def __init__(self, array: np.ndarray, dtype: str = "Float32") -> None:
        self.array = array
        self.dtype = dtype
        self.shape = array.shape

    def asnumpy(self) -> np.ndarray:
        return self.array


def values(array: Any, dtype: str = "Float32") -> Values:
    return Values(np.asarray(array), dtype)
