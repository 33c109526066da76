"""overflow_check's tensor entries for MindSpore: one cheap finiteness test per tensor, where the tensor lives.

The interface of the PyTorch ``OverflowEntries`` (``engines.overflow.session`` drives both). Each tensor a call
touches gets one sum (a NaN or an infinity anywhere makes it non-finite; a finite sum proves the tensor
finite): on the CPU with numpy on the zero-copy view, read at once; on a device a 0-d sum that ``resolve()``
moves with the others of a batch in one transfer. Only a tensor whose sum is not finite gets a closer look (its
min and max, and for NaN its infinities): that cost is paid in overflowing steps alone (DECISIONS 17).

The entry keeps a reference to its tensor while a call that uses it is open (the session releases it), and a
host copy of the argument an in-place call overwrites, so a flagged call's inputs can be saved as they were.
"""

import math
import weakref
from typing import Any, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from engines.adapters.mindspore.entries import dtype_name
from engines.adapters.mindspore.tensor_bytes import host_copy
from engines.adapters.mindspore.tensor_stats import host_row, raw
from engines.capture.records import EntryColumns
from engines.capture.summary import CaptureSummary
from engines.overflow import origin as og
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


class OverflowEntries:
    """Drop-in for the capture's ``TensorEntries`` with the finiteness facts overflow_check needs."""

    def __init__(self, summary: CaptureSummary, batched: bool = False) -> None:
        self.summary = summary
        self.batched = batched
        self.saving_stopped = False
        # Non-finite tensors outlive steps (an optimizer state gone inf at step 3 is still bad at step 4).
        self.remembered: Dict[int, Tuple[weakref.ref, int, int]] = {}  # id -> (ref, kinds, taint)
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.cache: Dict[int, Tuple[weakref.ref, int]] = {}
        self.meta: List[Tuple[str, str, str]] = []
        self.sums: List[float] = []
        self.pending: Dict[Any, Tuple[List[Tensor], List[int]]] = {}
        self.held: Dict[int, Tensor] = {}
        self.nbytes: Dict[int, int] = {}
        self.grad: Dict[int, bool] = {}
        self.computed: set = set()  # entries of tensors an autograd-tracked computation made (not leaves)
        self.clones: Dict[int, np.ndarray] = {}
        self.kinds: Dict[int, int] = {}
        self.extremes: Dict[int, int] = {}
        self.taint: Dict[int, int] = {}
        self.host_data: Dict[int, Tuple[np.ndarray, str]] = {}
        self.lost: Dict[int, str] = {}
        self.held_bytes = 0
        self.reads = 0
        self.deferred = False

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
        shape = tuple(t.shape)
        self.meta.append((dtype_name(t), str(list(shape)), str(getattr(t, "device", "CPU") or "CPU").lower()))
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
        remembered = self.remembered.get(key)
        if remembered is not None and remembered[0]() is t:
            self.kinds[e] = remembered[1]
            self.taint[e] = remembered[2]
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

    def _hold(self, e: int, t: Tensor) -> None:
        self.held[e] = t
        n = self.nbytes.get(e)
        if n is None:
            n = self.nbytes[e] = int(t.size) * int(t.itemsize)
        self.held_bytes += n

    def release(self, e: int) -> None:
        if self.held.pop(e, None) is not None:
            self.held_bytes -= self.nbytes.get(e, 0)
        if self.clones.pop(e, None) is not None:
            self.held_bytes -= self.nbytes.get(e, 0)

    def keep_pre_call(self, e: int, t: Tensor, cap_bytes: int) -> bool:
        """A host copy of ``t`` before an in-place call overwrites it (under the memory cap)."""
        if e in self.clones:
            return True
        n = self.nbytes.get(e, int(t.size) * int(t.itemsize))
        if self.held_bytes + n > cap_bytes:
            self.lost[e] = "overwritten in place; not copied (memory cap)"
            return False
        self.clones[e] = np.array(t.asnumpy(), copy=True)
        self.held_bytes += n
        return True

    # -- facts -----------------------------------------------------------------------------------------------
    def resolve(self) -> None:
        """Move the pending finiteness tests to the host: one transfer per dtype."""
        for values, entries in self.pending.values():
            for e, v in zip(entries, _stack(values).asnumpy().astype(np.float64).tolist()):
                self.sums[e] = v
        self.pending = {}

    def nonfinite_hint(self, e: int) -> bool:
        return not math.isfinite(self.sums[e])

    def approx_kinds(self, e: int) -> int:
        k = self.kinds.get(e)
        if k is not None:
            return k
        return og.kinds_of_value(self.sums[e])

    def _array(self, e: int) -> Optional[np.ndarray]:
        c = self.clones.get(e)
        if c is not None:
            return c
        t = self.held.get(e)
        return None if t is None else t.asnumpy()

    def kinds_of(self, e: int) -> int:
        """Exact kinds (reads the tensor: a sync on an accelerator)."""
        k = self.kinds.get(e)
        if k is not None:
            return k
        if not self.nonfinite_hint(e):
            self.kinds[e] = 0
            return 0
        arr = self._array(e)
        if arr is None:  # released before anyone asked: the safe reading
            self.kinds[e] = og.NAN
            return og.NAN
        self.reads += 1
        x = _values(arr)
        with np.errstate(invalid="ignore"):
            lo, hi = float(np.min(x)), float(np.max(x))
        k = og.kinds_from_minmax(lo, hi)
        if k & og.NAN:
            if np.isposinf(x).any():
                k |= og.POSINF
            if np.isneginf(x).any():
                k |= og.NEGINF
        elif not k:
            self._set_extremes(e, arr.dtype.name, lo, hi)
        self.kinds[e] = k
        return k

    def extremes_of(self, e: int) -> int:
        got = self.extremes.get(e)
        if got is not None:
            return got
        arr = self._array(e)
        if arr is None or arr.size == 0 or arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
            self.extremes[e] = 0
            return 0
        self.reads += 1
        x = _values(arr)
        self._set_extremes(e, arr.dtype.name, float(x.min()), float(x.max()))
        return self.extremes[e]

    def _set_extremes(self, e: int, name: str, lo: float, hi: float) -> None:
        limits = _FINFO.get(name)
        if limits is None:
            self.extremes[e] = 0
            return
        self.extremes[e] = (og.EXTREME_MAX if hi >= limits[1] else 0) | (og.EXTREME_MIN if lo <= limits[0] else 0)

    def taint_of(self, e: int) -> Optional[int]:
        return self.taint.get(e)

    def set_taint(self, e: int, taint: int) -> None:
        if e in self.taint:
            return
        self.taint[e] = taint
        if taint != og.FINITE:
            t = self.held.get(e)
            if t is not None:
                try:
                    self.remembered[id(t)] = (weakref.ref(t), self.approx_kinds(e), taint)
                except TypeError:
                    pass

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

    def take_host_data(self) -> Dict[int, Tuple[np.ndarray, str]]:
        data = self.host_data
        self.host_data = {}
        return data

    def close(self) -> None:
        self.clear()
        self.remembered = {}
