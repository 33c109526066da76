"""The consistency metric of free_benchmark for MindSpore (docs/reference/msprobe-tasks.md §8.4, the chunk bug fixed), as the PyTorch
side computes it (``engines.adapters.torch.free_benchmark_compare``).

Per compared output element, both sides in the perturbed side's float type (float32 for half types) and in flat
chunks (``chunk_count``): a sign flip (``min(a*b) < -tol^2``) is an infinite ratio; else
``r = nan_to_num(clamp(|a|, tol) / clamp(|b|, tol), nan=1)`` and the chunk's ratio is ``max(max r, 1/min r)``;
the output's ratio is the largest over all chunks. On the CPU it is computed with numpy on the tensors' memory;
on a device with MindSpore ops, the 0-d ratios waiting until ``resolve`` moves a step's worth at once.
"""

import math
from typing import Any, List, Optional, Tuple, Union

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from engines.adapters.mindspore.tensor_stats import raw
from engines.free_benchmark import structure
from engines.free_benchmark.metric import scalar_ratio  # noqa: F401 (this module's interface)
from engines.free_benchmark.thresholds import chunk_count

Ratio = Union[float, Tensor]
_INF = float("inf")
_FLOATING = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_cast, _mul, _min, _max, _abs, _clamp, _div, _stack = (raw(ops.cast), raw(mint.mul), raw(mint.min), raw(mint.max),
                                                       raw(mint.abs), raw(mint.clamp), raw(mint.div),
                                                       raw(ops.stack))
_isnan, _masked_fill, _maximum, _reshape = (raw(mint.isnan), raw(ops.masked_fill), raw(mint.maximum),
                                            raw(ops.reshape))


def output_items(out: Any) -> List[Tuple[int, Any]]:
    """(output_index, value) of every element that is compared."""
    return structure.output_items(out, _is_tensor)


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def _on_cpu(t: Tensor) -> bool:
    return str(getattr(t, "device", "CPU") or "CPU").upper().startswith("CPU")


def _host_chunk_ratio(a: np.ndarray, b: np.ndarray, tol: float) -> float:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if (a * b).min() < -(tol * tol):
            return _INF
        r = np.nan_to_num(np.maximum(np.abs(a), tol) / np.maximum(np.abs(b), tol), nan=1.0)
        return float(max(r.max(), 1.0 / r.min()))


def _device_chunk_ratio(a: Tensor, b: Tensor, tol: float) -> Tensor:
    flip = _min(_mul(a, b)) < -(tol * tol)
    r = _div(_clamp(_abs(a), min=tol), _clamp(_abs(b), min=tol))
    r = _masked_fill(r, _isnan(r), 1.0)
    ratio = _maximum(_max(r), 1.0 / _min(r))
    return _masked_fill(ratio, flip, _INF)


def tensor_ratio(original: Tensor, perturbed: Tensor, tol: float, on_device: Optional[bool] = None) -> Ratio:
    """The ratio of one output tensor pair, max over all chunks (``on_device`` forces a path; None: by device)."""
    if perturbed.dtype not in _FLOATING:
        same = tuple(original.shape) == tuple(perturbed.shape) and \
            bool(np.array_equal(original.asnumpy(), perturbed.asnumpy()))
        return 1.0 if same else _INF
    if tuple(original.shape) != tuple(perturbed.shape):
        return _INF
    numel = int(perturbed.size)
    if numel == 0:
        return 1.0
    n = chunk_count(numel * int(perturbed.itemsize))
    if on_device is None:
        on_device = not (_on_cpu(original) and _on_cpu(perturbed))
    if not on_device:
        work = np.float64 if perturbed.dtype == ms.float64 else np.float32
        a = original.asnumpy().astype(work).reshape(-1)
        b = perturbed.asnumpy().astype(work).reshape(-1)
        return max(_host_chunk_ratio(x, y, tol) for x, y in zip(np.array_split(a, n), np.array_split(b, n)))
    work = ms.float64 if perturbed.dtype == ms.float64 else ms.float32
    a = _reshape(_cast(original, work), (-1,))
    b = _reshape(_cast(perturbed, work), (-1,))
    if n == 1:
        return _device_chunk_ratio(a, b, tol)
    size = math.ceil(numel / n)
    parts = [_device_chunk_ratio(a[i:i + size], b[i:i + size], tol) for i in range(0, numel, size)]
    return _max(_stack(parts))


def resolve(values: List[Ratio]) -> List[float]:
    """Host floats of a batch of ratios: the device ones stacked and moved at once."""
    out: List[float] = [0.0] * len(values)
    device = [i for i, v in enumerate(values) if isinstance(v, Tensor)]
    for i, v in enumerate(values):
        if not isinstance(v, Tensor):
            out[i] = float(v)
    if device:
        host = _stack([_cast(values[i], ms.float64) for i in device]).asnumpy().tolist()
        for i, h in zip(device, host):
            out[i] = float(h)
    return out
