"""The monitor's metrics of MindSpore tensors (docs/reference/msprobe-tasks.md §10.3), one host transfer per step.

Same definitions as the PyTorch monitor (``engines.monitor.metrics``): min / max as stored; mean and norm in
float64; zeros = fraction of ``|x| < eps``; nans / infs = counts; id = the value of a 0-dim tensor. On the CPU a
tensor's values are read in place (``asnumpy`` is a view there) and measured with numpy at once; on a device each
metric is a 0-d tensor computed with ops every device has, and ``collect()`` stacks them and moves them once.
"""

import math
from typing import List, Sequence, Tuple, Union

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from engines.adapters.mindspore.tensor_stats import raw

_cast, _stack, _max, _min, _sum, _mul, _sqrt, _abs = (raw(ops.cast), raw(ops.stack), raw(mint.max), raw(mint.min),
                                                      raw(mint.sum), raw(mint.mul), raw(mint.sqrt), raw(mint.abs))
_isnan, _isinf, _lt, _cat = raw(mint.isnan), raw(mint.isinf), raw(mint.lt), raw(ops.cat)


def _on_cpu(t: Tensor) -> bool:
    return str(getattr(t, "device", "CPU") or "CPU").upper().startswith("CPU")


def host_metrics(arr: np.ndarray, ops_: Sequence[str], eps: float) -> List[float]:
    if arr.dtype.name == "bfloat16" or arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    if arr.dtype.kind == "c":
        arr = np.abs(arr)
    elif arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    n = arr.size
    if n == 0:
        return [math.nan] * len(ops_)
    flat = arr.reshape(-1)
    a64 = flat.astype(np.float64, copy=False)
    out: List[float] = []
    with np.errstate(invalid="ignore", over="ignore"):
        for op in ops_:
            if op == "min":
                out.append(float(flat.min()))
            elif op == "max":
                out.append(float(flat.max()))
            elif op == "mean":
                out.append(float(a64.mean()))
            elif op == "norm":
                out.append(float(np.sqrt(np.dot(a64, a64))))
            elif op == "zeros":
                out.append(float(np.count_nonzero(np.abs(flat) < eps)) / n)
            elif op == "nans":
                out.append(float(np.count_nonzero(np.isnan(flat))))
            elif op == "infs":
                out.append(float(np.count_nonzero(np.isinf(flat))))
            elif op == "id":
                out.append(float(flat[0]) if arr.ndim == 0 else math.nan)
            else:
                raise ValueError("unknown monitor op %r" % op)
    return out


def device_metrics(t: Tensor, ops_: Sequence[str], eps: float) -> Tensor:
    """A float64 device tensor with one value per op."""
    x = t
    if x.dtype in (ms.complex64, ms.complex128):
        x = _abs(x)
    x = _cast(x, ms.float64 if x.dtype == ms.float64 else ms.float32)
    n = int(x.size)
    if n == 0:
        return Tensor(np.full(len(ops_), np.nan), ms.float64)
    values = []
    for op in ops_:
        if op == "min":
            values.append(_min(x))
        elif op == "max":
            values.append(_max(x))
        elif op == "mean":
            values.append(_sum(_cast(x, ms.float64)) / n)
        elif op == "norm":
            x64 = _cast(x, ms.float64)
            values.append(_sqrt(_sum(_mul(x64, x64))))
        elif op == "zeros":
            values.append(_sum(_cast(_lt(_abs(x), eps), ms.float64)) / n)
        elif op == "nans":
            values.append(_sum(_cast(_isnan(x), ms.float64)))
        elif op == "infs":
            values.append(_sum(_cast(_isinf(x), ms.float64)))
        elif op == "id":
            values.append(x.reshape(()) if t.ndim == 0 else Tensor(np.nan, ms.float64))
        else:
            raise ValueError("unknown monitor op %r" % op)
    return _stack([_cast(v, ms.float64) for v in values])


def _shape(t: Tensor) -> str:
    return "[" + ", ".join(str(int(s)) for s in t.shape) + "]"


class StepMetrics:
    """What one step measured, with series keys ``(tag, name, metric)``; device values moved at ``collect()``."""

    def __init__(self) -> None:
        self._blocks: List[Tuple[bool, Union[np.ndarray, Tensor]]] = []  # (on host, numpy array or device tensor)
        self.keys: List[Tuple[str, str, str]] = []
        self.shapes: List[str] = []
        self.dtypes: List[str] = []

    def __len__(self) -> int:
        return len(self.keys)

    def add_tensor(self, tag: str, name: str, tensor: Tensor, ops_: Sequence[str], eps: float) -> None:
        if _on_cpu(tensor):
            block = (True, np.asarray(host_metrics(tensor.asnumpy(), ops_, eps), dtype=np.float64))
        else:
            block = (False, device_metrics(tensor, ops_, eps))
        self._blocks.append(block)
        self.keys += [(tag, name, op) for op in ops_]
        self.shapes += [_shape(tensor)] * len(ops_)
        self.dtypes += [str(tensor.dtype)] * len(ops_)

    def add_value(self, tag: str, name: str, metric: str, value: Union[float, Tensor]) -> None:
        if isinstance(value, Tensor):
            block = (True, value.asnumpy().astype(np.float64).reshape(1)) if _on_cpu(value) else \
                (False, _cast(value, ms.float64).reshape((1,)))
        else:
            block = (True, np.array([float(value)], dtype=np.float64))
        self._blocks.append(block)
        self.keys.append((tag, name, metric))
        self.shapes.append("[]")
        self.dtypes.append("Float64")

    def collect(self) -> np.ndarray:
        """All values on the host: the device blocks concatenated and moved with one copy."""
        if not self._blocks:
            return np.zeros(0, dtype=np.float64)
        device = [b for host, b in self._blocks if not host]
        moved: List[np.ndarray] = []
        if device:
            flat = _cat([b.reshape((-1,)) for b in device]).asnumpy()
            moved = np.split(flat, np.cumsum([int(b.size) for b in device])[:-1])
        it = iter(moved)
        parts = [b if host else next(it) for host, b in self._blocks]
        return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])
