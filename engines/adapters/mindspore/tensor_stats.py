"""Statistics of captured MindSpore tensors, computed where the tensor lives, moved to the host once a step.

Two paths, one definition (docs/MINDSPORE.md):

- **device** (Ascend, GPU, or ``force_batched``): each statistic is a 0-d tensor computed with ops that have a
  kernel on every device (``max``/``min``/``sum``/``mul``/``sqrt``/``isnan``/``isinf`` — never ``mint.norm``, which
  has no CPU kernel); ``finish()`` stacks them per dtype and moves each stack with one ``asnumpy``.
- **host** (the CPU device): the tensor's memory *is* host memory, and ``asnumpy`` is a zero-copy view, so numpy
  reads it in place; launching a MindSpore kernel per statistic costs 10-100x more on the CPU.

Rules, both paths: max and min exact; sum and L2 norm accumulated in float32 for float16/bfloat16/float32
(``precision: low``) or float64 (``precision: high``), float64 tensors always in float64; mean = sum / numel;
integers: exact max/min and int64 sum, norm in float64; bool: max = any, min = all, no mean/norm; complex:
statistics of the modulus; 0-d: max = min = mean = norm = the value; empty: none; a NaN anywhere makes max and min
NaN. nan/+inf/-inf counts are
exact (the host path counts only when the sum is not finite, which is when there is something to count).
"""

import math
from typing import Any, List

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from engines.capture.entries import MAX, MIN, NAN, NEGINF, NORM, POSINF, SUM, StatsBatchBase, new_row
from engines.capture.records import VALID_MAX, VALID_MIN, VALID_STATS

_NAN, _POSINF, _NEGINF = NAN, POSINF, NEGINF


def raw(fn: Any) -> Any:
    """The original of a function the API capture may have wrapped (wrappers carry ``__wrapped__``)."""
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


# Unwrapped ops for the device path: the tool's own calls are never captured.
_max, _min, _sum, _mul, _sqrt = raw(mint.max), raw(mint.min), raw(mint.sum), raw(mint.mul), raw(mint.sqrt)
_isnan, _isinf, _abs, _stack = raw(mint.isnan), raw(mint.isinf), raw(mint.abs), raw(ops.stack)
_cast, _gt, _lt, _and = raw(ops.cast), raw(mint.gt), raw(mint.lt), raw(mint.logical_and)

_HALF = (ms.float16, ms.bfloat16)
_FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_COMPLEX = (ms.complex64, ms.complex128)
_NP_HALF = ("float16", "bfloat16")


class UnsupportedTensor(Exception):
    """A tensor the tool cannot summarise (no data yet, a meta tensor); its row keeps dtype and shape."""


def host_view(t: Tensor) -> np.ndarray:
    """The tensor's values as numpy, without a copy on the CPU (bfloat16 widened to float32, exactly)."""
    try:
        if getattr(t, "is_meta", False):
            raise UnsupportedTensor("meta tensor")
        if t.has_init:
            raise UnsupportedTensor("uninitialised parameter")
    except AttributeError:
        pass
    arr = t.asnumpy()
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    return arr


def host_row(arr: np.ndarray, high: bool) -> List[Any]:
    """[max, min, sum, norm, numel, valid, nan, +inf, -inf] of a numpy array."""
    numel = int(arr.size)
    row = new_row(numel)
    if numel == 0:
        return row
    kind = arr.dtype.kind
    if kind == "b":
        row[MAX], row[MIN] = float(arr.any()), float(arr.all())
        row[5] = VALID_MAX | VALID_MIN
        return row
    if kind == "c":
        arr = np.abs(arr)
        kind = "f"
    row[5] = VALID_STATS
    if arr.ndim == 0:
        v = arr.item()
        row[MAX] = row[MIN] = row[SUM] = row[NORM] = v
        if kind == "f" and not math.isfinite(v):
            row[_NAN], row[_POSINF], row[_NEGINF] = int(v != v), int(v == math.inf), int(v == -math.inf)
        return row
    flat = arr.reshape(-1)
    if kind == "f":
        if flat.dtype.name in _NP_HALF:
            flat = flat.astype(np.float32)
        if high or flat.dtype == np.float64:
            acc = flat.astype(np.float64, copy=False)
        else:
            acc = flat
        row[MAX], row[MIN] = flat.max().item(), flat.min().item()
        s = acc.sum().item()
        row[SUM] = s
        row[NORM] = math.sqrt(np.dot(acc, acc).item()) if math.isfinite(s) else _norm_nonfinite(acc)
        if not math.isfinite(s):
            row[_NAN] = int(np.isnan(flat).sum())
            row[_POSINF] = int(np.isposinf(flat).sum())
            row[_NEGINF] = int(np.isneginf(flat).sum())
        return row
    row[MAX], row[MIN] = flat.max().item(), flat.min().item()
    row[SUM] = int(flat.sum(dtype=np.int64))
    as64 = flat.astype(np.float64)
    row[NORM] = math.sqrt(np.dot(as64, as64).item())
    return row


def _norm_nonfinite(acc: np.ndarray) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.sqrt(np.dot(acc, acc)))


class StatsBatch(StatsBatchBase):
    """Statistics of one step's tensor entries (``engines.capture.entries.StatsBatchBase``): numpy rows on the
    CPU, device values waiting per dtype elsewhere."""

    def batched(self, t: Tensor) -> bool:
        if self.force_batched:
            return True
        device = str(getattr(t, "device", "CPU") or "CPU")
        return not device.upper().startswith("CPU")

    def add(self, entry: int, t: Tensor) -> None:
        """Summarise tensor ``t`` as ``entry``."""
        if not self.batched(t):
            self.host[entry] = host_row(host_view(t), self.high)
            return
        self._add_device(entry, t)

    def add_array(self, entry: int, arr: np.ndarray) -> None:
        """Summarise a host copy the caller already made (the tensor task; bfloat16 already widened)."""
        self.host[entry] = host_row(arr, self.high)

    # -- device path -----------------------------------------------------------------------------------------
    def _add_device(self, entry: int, t: Tensor) -> None:
        numel = int(t.size)
        row = new_row(numel)
        self.host[entry] = row
        if numel == 0:
            return
        dtype = t.dtype
        if dtype == ms.bool_:
            row[5] = VALID_MAX | VALID_MIN
            as_int = _cast(t, ms.int32)
            self._put(entry, MAX, _max(as_int))
            self._put(entry, MIN, _min(as_int))
            return
        if dtype in _COMPLEX:
            t = _abs(t)
            dtype = t.dtype
        elif dtype in _HALF:
            t = _cast(t, ms.float32)  # exact; half-precision kernels are missing on some devices (bf16 on CPU)
            dtype = ms.float32
        row[5] = VALID_STATS
        if t.ndim == 0:
            value = _cast(t, ms.float64 if dtype == ms.float64 else ms.float32) if dtype in _FLOATS else t
            for col in (MAX, MIN, SUM, NORM):
                self._put(entry, col, value)
            if dtype in _FLOATS:
                inf = _isinf(t)
                self._put(entry, _NAN, _cast(_isnan(t), ms.int32))
                self._put(entry, _POSINF, _cast(_and(inf, _gt(t, 0)), ms.int32))
                self._put(entry, _NEGINF, _cast(_and(inf, _lt(t, 0)), ms.int32))
            return
        if dtype in _FLOATS:
            acc_dtype = ms.float64 if (self.high or dtype == ms.float64) else ms.float32
            acc = t if dtype == acc_dtype else _cast(t, acc_dtype)
            self._put(entry, MAX, _max(t))
            self._put(entry, MIN, _min(t))
            self._put(entry, SUM, _sum(acc))
            self._put(entry, NORM, _sqrt(_sum(_mul(acc, acc))))
            self._put(entry, _NAN, _sum(_cast(_isnan(t), ms.int32)))
            inf = _isinf(t)
            self._put(entry, _POSINF, _sum(_cast(_and(inf, _gt(t, 0)), ms.int32)))
            self._put(entry, _NEGINF, _sum(_cast(_and(inf, _lt(t, 0)), ms.int32)))
            return
        self._put(entry, MAX, _max(t))
        self._put(entry, MIN, _min(t))
        self._put(entry, SUM, _sum(_cast(t, ms.int64)))
        as64 = _cast(t, ms.float64)
        self._put(entry, NORM, _sqrt(_sum(_mul(as64, as64))))

    def _put(self, entry: int, col: int, value: Tensor) -> None:
        self._pend(value.dtype, value, entry, col)

    def _host_values(self, values: List[Tensor]) -> List[Any]:
        host = _stack(values).asnumpy()
        if host.dtype.name == "bfloat16":
            host = host.astype(np.float32)
        return host.tolist()
