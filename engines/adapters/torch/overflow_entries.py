"""overflow_check's tensor entries: one cheap finiteness test per tensor version, on the tensor's device.

Each tensor version a call touches gets one ``sum()`` (a NaN or an infinity anywhere makes the sum non-finite;
a finite sum proves the tensor finite). On the CPU the sum is read at once (no synchronisation there); on an
accelerator the 0-d results wait on the device and ``resolve()`` moves them to the host in one transfer per
device and dtype, once per batch of calls (at step end when nothing overflows). Only a tensor whose sum is not
finite gets a closer look (``aminmax`` and, for NaN, ``isinf``), and only then are its extreme values checked:
that cost is paid in overflowing steps alone (DECISIONS 17).

The entry keeps a strong reference to its tensor while a call that uses it is still open (the session releases
it), and the *pre-call* copy of the argument an in-place call overwrites, so a flagged call's inputs can be
saved as they were when it ran. Host copies are made only for the calls that are kept.
"""

import math
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from engines.adapters.torch.tensor_bytes import host_copy
from engines.capture.records import VALID_MAX, VALID_MEAN, VALID_MIN, VALID_NORM, EntryColumns
from engines.capture.summary import CaptureSummary
from engines.overflow import origin as og

_DTYPE_NAMES: Dict[Any, str] = {}
_FINFO: Dict[Any, Tuple[float, float]] = {}


def _finfo(dtype: torch.dtype) -> Tuple[float, float]:
    got = _FINFO.get(dtype)
    if got is None:
        fi = torch.finfo(dtype)
        got = _FINFO[dtype] = (float(fi.min), float(fi.max))
    return got


class OverflowEntries:
    """Drop-in for the capture's ``TensorEntries`` (``entry``, ``meta``, ``finish``, ``take_host_data``, ``clear``,
    ``close``, ``saving_stopped``), with the finiteness facts and references overflow_check needs."""

    def __init__(self, summary: CaptureSummary, batched: bool = False) -> None:
        self.summary = summary
        self.batched = batched
        self.saving_stopped = False
        # Non-finite tensors outlive steps (an optimizer state gone inf at step 3 is still bad at step 4).
        self.remembered: Dict[int, Tuple[weakref.ref, int, int, int]] = {}  # id -> (ref, version, kinds, taint)
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.cache: Dict[int, Tuple[weakref.ref, int, int]] = {}
        self.meta: List[Tuple[str, str, str]] = []
        self.sums: List[float] = []  # finite test per entry: the sum, or nan while on the device
        self.pending: Dict[Tuple[Any, Any], Tuple[List[torch.Tensor], List[int]]] = {}
        self.held: Dict[int, torch.Tensor] = {}
        self.versions: Dict[int, int] = {}
        self.nbytes: Dict[int, int] = {}
        self.grad: Dict[int, bool] = {}
        self.computed: set = set()  # entries of tensors some autograd-tracked computation made (not leaves)
        self.clones: Dict[int, torch.Tensor] = {}
        self.kinds: Dict[int, int] = {}
        self.extremes: Dict[int, int] = {}
        self.taint: Dict[int, int] = {}
        self.host_data: Dict[int, Tuple[np.ndarray, str]] = {}
        self.lost: Dict[int, str] = {}  # entry -> why its data could not be kept
        self.held_bytes = 0
        self.device_copies = False
        self.reads = 0  # tensors read on the host beyond the batched sums (each one a sync on an accelerator)
        self.deferred = False  # some sum waited on the device for a batch transfer

    # -- capture ---------------------------------------------------------------------------------------------
    def entry(self, t: torch.Tensor, save: bool = False, fresh: bool = False) -> int:
        key = id(t)
        try:
            version = t._version
        except RuntimeError:
            version = -1
            fresh = True
        if not fresh:
            cached = self.cache.get(key)
            if cached is not None and cached[1] == version and cached[0]() is t:
                e = cached[2]
                if e not in self.held:
                    self._hold(e, t)
                return e
        e = self.n
        self.n += 1
        dtype = t.dtype
        name = _DTYPE_NAMES.get(dtype)
        if name is None:
            name = _DTYPE_NAMES[dtype] = str(dtype)
        self.meta.append((name, str(list(t.shape)), "cpu" if t.is_cpu else str(t.device)))
        self.versions[e] = version
        self.grad[e] = bool(t.requires_grad)
        if t.grad_fn is not None:
            self.computed.add(e)
        x = t.detach()
        self.sums.append(0.0)
        if (dtype.is_floating_point or dtype.is_complex) and x.numel() > 0 and x.layout is torch.strided \
                and not x.is_meta:
            self._test(e, x)
        self._hold(e, t)
        if version >= 0:
            try:
                self.cache[key] = (weakref.ref(t), version, e)
            except TypeError:
                pass
        remembered = self.remembered.get(key)
        if remembered is not None and remembered[1] == version and remembered[0]() is t:
            self.kinds[e] = remembered[2]
            self.taint[e] = remembered[3]
        return e

    def _test(self, e: int, x: torch.Tensor) -> None:
        if x.is_complex():
            x = torch.view_as_real(x)
        if x.dtype is torch.float16 and not x.is_cpu:
            # a float16 sum of finite values can pass 65504; on a device each false alarm would cost a sync
            s = x.sum(dtype=torch.float32)
        else:
            s = x.sum()
        if self.batched or not s.is_cpu:
            key = (s.device, s.dtype)
            group = self.pending.get(key)
            if group is None:
                group = self.pending[key] = ([], [])
            group[0].append(s)
            group[1].append(e)
            self.sums[e] = math.nan
            self.deferred = True
        else:
            self.sums[e] = s.item()

    def _hold(self, e: int, t: torch.Tensor) -> None:
        self.held[e] = t
        n = self.nbytes.get(e)
        if n is None:
            n = self.nbytes[e] = t.numel() * t.element_size()
        self.held_bytes += n

    def release(self, e: int) -> None:
        t = self.held.pop(e, None)
        if t is not None:
            self.held_bytes -= self.nbytes.get(e, 0)
        c = self.clones.pop(e, None)
        if c is not None:
            self.held_bytes -= self.nbytes.get(e, 0)

    def keep_pre_call(self, e: int, t: torch.Tensor, cap_bytes: int) -> bool:
        """Copy ``t`` before an in-place call overwrites it (under the memory cap)."""
        if e in self.clones:
            return True
        n = self.nbytes.get(e, t.numel() * t.element_size())
        if self.held_bytes + n > cap_bytes:
            self.lost[e] = "overwritten in place; not copied (memory cap)"
            return False
        self.clones[e] = t.detach().clone()
        self.held_bytes += n
        return True

    # -- facts -----------------------------------------------------------------------------------------------
    def resolve(self) -> None:
        """Move the pending finiteness tests to the host: one transfer per (device, dtype)."""
        if not self.pending:
            return
        for values, entries in self.pending.values():
            host = torch.stack(values).to(torch.float64).cpu().tolist()
            for e, v in zip(entries, host):
                self.sums[e] = v
        self.pending = {}

    def nonfinite_hint(self, e: int) -> bool:
        """True when the entry may hold NaN or inf (its sum is not finite)."""
        s = self.sums[e]
        return not math.isfinite(s)

    def approx_kinds(self, e: int) -> int:
        """Kinds read off the sum, with no further work: NaN when it is NaN (NaN, or +inf next to -inf), +inf or
        -inf when it is infinite (that sign, or a sum of finite values past the dtype's range). Exact enough to
        clear most calls (a -inf mask is -inf); a call it flags is judged again with ``kinds_of``."""
        k = self.kinds.get(e)
        if k is not None:
            return k
        return og.kinds_of_value(self.sums[e])

    def kinds_of(self, e: int) -> int:
        """Exact kinds (reads the tensor: a sync on an accelerator)."""
        k = self.kinds.get(e)
        if k is not None:
            return k
        if not self.nonfinite_hint(e):
            self.kinds[e] = 0
            return 0
        t = self._data(e)
        if t is None:  # released before anyone asked: count it as NaN (the safe reading)
            self.kinds[e] = og.NAN
            return og.NAN
        x = t.detach()
        if x.is_complex():
            x = torch.view_as_real(x)
        self.reads += 1
        lo, hi = (v.item() for v in torch.aminmax(x))
        k = og.kinds_from_minmax(lo, hi)
        if k & og.NAN:
            if bool(torch.isposinf(x).any()):
                k |= og.POSINF
            if bool(torch.isneginf(x).any()):
                k |= og.NEGINF
        elif not k:
            self._set_extremes(e, x.dtype, lo, hi)
        self.kinds[e] = k
        return k

    def extremes_of(self, e: int) -> int:
        got = self.extremes.get(e)
        if got is not None:
            return got
        t = self._data(e)
        if t is None or not t.is_floating_point() or t.numel() == 0:
            self.extremes[e] = 0
            return 0
        self.reads += 1
        lo, hi = (v.item() for v in torch.aminmax(t.detach()))
        self._set_extremes(e, t.dtype, lo, hi)
        return self.extremes[e]

    def _set_extremes(self, e: int, dtype: torch.dtype, lo: float, hi: float) -> None:
        if not dtype.is_floating_point:
            self.extremes[e] = 0
            return
        fmin, fmax = _finfo(dtype)
        self.extremes[e] = (og.EXTREME_MAX if hi >= fmax else 0) | (og.EXTREME_MIN if lo <= fmin else 0)

    def taint_of(self, e: int) -> Optional[int]:
        return self.taint.get(e)

    def set_taint(self, e: int, taint: int) -> None:
        if e in self.taint:
            return
        self.taint[e] = taint
        if taint != og.FINITE:
            t = self.held.get(e)
            if t is not None and self.versions.get(e, -1) >= 0:
                try:
                    self.remembered[id(t)] = (weakref.ref(t), self.versions[e], self.approx_kinds(e), taint)
                except TypeError:
                    pass

    def _data(self, e: int) -> Optional[torch.Tensor]:
        c = self.clones.get(e)
        if c is not None:
            return c
        return self.held.get(e)

    # -- keeping a flagged call's tensors --------------------------------------------------------------------
    def save(self, e: int) -> bool:
        """Host copy of the entry as it was when the call ran; False (and a reason in ``lost``) if impossible."""
        if e in self.host_data:
            return True
        if self.saving_stopped:
            return False
        t = self.clones.get(e)
        if t is None:
            t = self.held.get(e)
            if t is None:
                self.lost.setdefault(e, "released before the call was flagged")
                return False
            try:
                if t._version != self.versions.get(e, -1):
                    self.lost.setdefault(e, "overwritten in place after the call")
                    return False
            except RuntimeError:
                pass
        if t.layout is not torch.strided or t.is_meta:
            self.lost.setdefault(e, "not a dense tensor")
            return False
        arr, name = host_copy(t)
        if not t.is_cpu:
            self.device_copies = True
        self.host_data[e] = (arr, name)
        return True

    # -- step end --------------------------------------------------------------------------------------------
    def finish(self) -> EntryColumns:
        """Columns for the rows that are written: statistics of the kept (host-copied) entries."""
        if self.device_copies:
            _synchronize()
        n = self.n
        cols = EntryColumns(n)
        for e, (arr, name) in self.host_data.items():
            _host_stats(cols, e, arr, name)
        return cols

    def take_host_data(self) -> Dict[int, Tuple[np.ndarray, str]]:
        data = self.host_data
        self.host_data = {}
        return data

    def close(self) -> None:
        self.clear()
        self.remembered = {}


def _host_stats(cols: EntryColumns, e: int, arr: np.ndarray, dtype_name: str) -> None:
    """max/min/mean/norm and nan/inf counts of a kept tensor, from its host copy (float64 arithmetic)."""
    from engines.store import to_float

    values = to_float(arr, dtype_name)
    if values.size == 0:
        return
    if values.dtype == np.bool_:
        cols.stats[e, 0] = float(values.any())
        cols.stats[e, 1] = float(values.all())
        cols.valid[e] = VALID_MAX | VALID_MIN
        return
    if np.iscomplexobj(values):
        values = np.abs(values)
    v = values.astype(np.float64, copy=False).reshape(-1)
    with np.errstate(all="ignore"):
        cols.stats[e] = (v.max(), v.min(), v.sum() / v.size, np.sqrt(np.dot(v, v)) if np.isfinite(v).all()
                         else np.linalg.norm(v))
    cols.valid[e] = VALID_MAX | VALID_MIN | VALID_MEAN | VALID_NORM
    if np.issubdtype(values.dtype, np.floating):
        cols.counts[e] = (int(np.isnan(v).sum()), int(np.isposinf(v).sum()), int(np.isneginf(v).sum()))
    else:
        cols.counts[e] = (0, 0, 0)
    cols.numel[e] = v.size


def _synchronize() -> None:
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "synchronize"):
        try:
            if acc.is_available():
                acc.synchronize()
                return
        except Exception:
            pass
    if torch.cuda.is_available():
        torch.cuda.synchronize()
