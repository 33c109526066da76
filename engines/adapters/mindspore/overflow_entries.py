"""overflow_check's tensor entries for MindSpore: one cheap finiteness test per tensor, where the tensor lives.

The interface of the PyTorch ``OverflowEntries`` (``engines.overflow.session`` drives both). Each tensor a call
touches gets one sum (a NaN or an infinity anywhere makes it non-finite; a finite sum proves the tensor
finite): on the CPU with numpy on the zero-copy view, read at once; on a device a 0-d sum that ``resolve()``
moves with the others of a batch in one transfer. Only a tensor whose sum is not finite gets a closer look (its
min and max, and for NaN its infinities): that cost is paid in overflowing steps alone (docs/decisions/0017-overflow-and-syncing.md).

The entry keeps a reference to its tensor while a call that uses it is open (the session releases it), and a
host copy of the argument an in-place call overwrites, so a flagged call's inputs can be saved as they were. The
bookkeeping and the reading of the facts are framework-neutral (``engines.overflow.entries``).
"""

import math
import weakref
from typing import Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from engines.adapters.mindspore.entries import meta_of
from engines.adapters.mindspore.tensor_bytes import host_copy
from engines.adapters.mindspore.tensor_stats import host_row, raw
from engines.capture.records import EntryColumns
from engines.overflow.entries import OverflowEntriesBase
from engines.store.dtypes import to_float

_sum, _cast, _stack = raw(mint.sum), raw(ops.cast), raw(ops.stack)
_FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64, ms.complex64, ms.complex128)
_FINFO = {"float16": (-65504.0, 65504.0), "bfloat16": (-3.3895313892515355e38, 3.3895313892515355e38),
          "float32": (float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)),
          "float64": (float(np.finfo(np.float64).min), float(np.finfo(np.float64).max))}


def _on_cpu(t: Tensor) -> bool:
    return str(getattr(t, "device", "CPU") or "CPU").upper().startswith("CPU")


def _values(arr: np.ndarray) -> np.ndarray:
    """Host values a test can compute with: half types widened, complex as real pairs."""
    if arr.dtype.name in ("bfloat16", "float16"):
        return arr.astype(np.float32)
    if arr.dtype.kind == "c":
        return arr.view(np.float32 if arr.dtype == np.complex64 else np.float64)
    return arr


class OverflowEntries(OverflowEntriesBase):
    """The MindSpore side of ``OverflowEntriesBase``: numpy on the CPU's zero-copy views, MindSpore ops on a
    device. Entries carry version 0 (MindSpore's counter does not move on in-place writes: ``forget``)."""

    # -- capture ---------------------------------------------------------------------------------------------
    def entry(self, t: Tensor, save: bool = False, fresh: bool = False) -> int:
        key = id(t)
        if not fresh:
            cached = self.cache.get(key)
            if cached is not None and cached[0]() is t:
                e = cached[1]
                if e not in self.held:
                    self._hold(e, t)
                return e
        e = self.n
        self.n += 1
        self.meta.append(meta_of(t))
        self.versions[e] = 0
        self.grad[e] = bool(getattr(t, "_requires_grad", False)) and t.dtype in _FLOATS
        node = getattr(t, "_grad_node", None)
        if node is not None and not node.is_leaf():
            self.computed.add(e)
        self.sums.append(0.0)
        if t.dtype in _FLOATS and int(t.size) > 0:
            self._test(e, t)
        self._hold(e, t)
        try:
            self.cache[key] = (weakref.ref(t), e)
        except TypeError:
            pass
        self._recall(key, t, 0, e)
        return e

    def forget(self, t: Tensor) -> None:
        """``t`` was written in place: its next sight is a new entry."""
        self.cache.pop(id(t), None)

    def _test(self, e: int, t: Tensor) -> None:
        if self.batched or not _on_cpu(t):
            s = _sum(_cast(t, ms.float64 if t.dtype == ms.float64 else ms.float32))
            group = self.pending.setdefault(s.dtype, ([], []))
            group[0].append(s)
            group[1].append(e)
            self.sums[e] = math.nan
            self.deferred = True
            return
        with np.errstate(over="ignore", invalid="ignore"):
            self.sums[e] = float(_values(t.asnumpy()).sum())

    def _nbytes(self, t: Tensor) -> int:
        return int(t.size) * int(t.itemsize)

    def _clone(self, t: Tensor) -> np.ndarray:
        return np.array(t.asnumpy(), copy=True)  # on the host: the check reads copies with numpy

    # -- facts -----------------------------------------------------------------------------------------------
    def resolve(self) -> None:
        """Move the pending finiteness tests to the host: one transfer per dtype."""
        for values, entries in self.pending.values():
            for e, v in zip(entries, _stack(values).asnumpy().astype(np.float64).tolist()):
                self.sums[e] = v
        self.pending = {}

    def _array(self, e: int) -> Optional[np.ndarray]:
        c = self.clones.get(e)
        if c is not None:
            return c
        t = self.held.get(e)
        return None if t is None else t.asnumpy()

    def _readable(self, e: int) -> Optional[Tuple[np.ndarray, str]]:
        arr = self._array(e)
        return None if arr is None else (_values(arr), arr.dtype.name)

    def _float_readable(self, e: int) -> Optional[Tuple[np.ndarray, str]]:
        arr = self._array(e)
        if arr is None or arr.size == 0 or arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
            return None
        return _values(arr), arr.dtype.name

    def _minmax(self, x: Tuple[np.ndarray, str]) -> Tuple[float, float]:
        with np.errstate(invalid="ignore"):
            return float(np.min(x[0])), float(np.max(x[0]))

    def _infinities(self, x: Tuple[np.ndarray, str]) -> Tuple[bool, bool]:
        return bool(np.isposinf(x[0]).any()), bool(np.isneginf(x[0]).any())

    def _limits(self, x: Tuple[np.ndarray, str]) -> Optional[Tuple[float, float]]:
        return _FINFO.get(x[1])

    # -- keeping a flagged call's tensors --------------------------------------------------------------------
    def save(self, e: int) -> bool:
        """Host copy of the entry as it was when the call ran; False (and a reason in ``lost``) if impossible."""
        if e in self.host_data:
            return True
        if self.saving_stopped:
            return False
        clone = self.clones.get(e)
        if clone is not None:
            arr = clone.view(np.uint16) if clone.dtype.name == "bfloat16" else clone
            self.host_data[e] = (arr, self.meta[e][0])
            return True
        t = self.held.get(e)
        if t is None:
            self.lost.setdefault(e, "released before the call was flagged")
            return False
        self.host_data[e] = host_copy(t)
        return True

    # -- step end --------------------------------------------------------------------------------------------
    def finish(self) -> EntryColumns:
        """Columns for the rows that are written: statistics of the kept (host-copied) entries."""
        cols = EntryColumns(self.n)
        for e, (arr, name) in self.host_data.items():
            row = host_row(to_float(arr, name), high=True)
            cols.numel[e] = row[4]
            cols.valid[e] = row[5]
            cols.counts[e] = (row[6], row[7], row[8])
            if row[5]:
                cols.stats[e, 0], cols.stats[e, 1] = row[0], row[1]
                if row[4]:
                    cols.stats[e, 2], cols.stats[e, 3] = float(row[2]) / row[4], row[3]
        return cols


def requires_grad_flag(t: object) -> int:
    """The ``requires_grad`` column of an overflow_check row (MindSpore's autograd flag)."""
    from engines.adapters.mindspore.session import requires_grad

    return 1 if requires_grad(t) else 0
