"""overflow_check's tensor entries: one cheap finiteness test per tensor version, on the tensor's device.

Each tensor version a call touches gets one ``sum()`` (a NaN or an infinity anywhere makes the sum non-finite;
a finite sum proves the tensor finite). On the CPU the sum is read at once (no synchronisation there); on an
accelerator the 0-d results wait on the device and ``resolve()`` moves them to the host in one transfer per
device and dtype, once per batch of calls (at step end when nothing overflows). Only a tensor whose sum is not
finite gets a closer look (``aminmax`` and, for NaN, ``isinf``), and only then are its extreme values checked:
that cost is paid in overflowing steps alone (docs/decisions/0017-overflow-and-syncing.md).

The entry keeps a strong reference to its tensor while a call that uses it is still open (the session releases
it), and the *pre-call* copy of the argument an in-place call overwrites, so a flagged call's inputs can be
saved as they were when it ran. Host copies are made only for the calls that are kept. The bookkeeping and the
reading of the facts are framework-neutral (``engines.overflow.entries``).
"""

import math
import weakref
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from engines.adapters.torch.subclasses import local_view
from engines.adapters.torch.tensor_bytes import host_copy, meta_of, synchronize
from engines.capture.entries import is_volatile
from engines.capture.records import VALID_MAX, VALID_MEAN, VALID_MIN, VALID_NORM, EntryColumns
from engines.overflow.entries import OverflowEntriesBase

_FINFO: Dict[Any, Tuple[float, float]] = {}


def _finfo(dtype: torch.dtype) -> Tuple[float, float]:
    got = _FINFO.get(dtype)
    if got is None:
        fi = torch.finfo(dtype)
        got = _FINFO[dtype] = (float(fi.min), float(fi.max))
    return got


class OverflowEntries(OverflowEntriesBase):
    """The torch side of ``OverflowEntriesBase``: sums and reads with torch ops on the tensor's device."""

    # -- capture ---------------------------------------------------------------------------------------------
    def clear(self) -> None:
        super().clear()
        self.device_copies = False

    def entry(self, t: torch.Tensor, save: bool = False, fresh: bool = False) -> int:
        key = id(t)
        try:
            version = t._version
        except RuntimeError:
            version = -1
            fresh = True
        if self.volatile and is_volatile(self.volatile, key, t):
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
        local, dist = local_view(t)  # a DTensor's local shard: an op on the DTensor could launch a collective
        dtype = local.dtype
        self.meta.append(meta_of(local))
        if dist:
            self.dist[e] = dist
        self.versions[e] = version
        self.grad[e] = bool(t.requires_grad)
        if t.grad_fn is not None:
            self.computed.add(e)
        x = local.detach()
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
        self._recall(key, t, version, e)
        if self.uninitialised:
            self._still_uninitialised(key, t, version, e)
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

    def _nbytes(self, t: torch.Tensor) -> int:
        local = local_view(t)[0]
        return local.numel() * local.element_size()

    def _clone(self, t: torch.Tensor) -> torch.Tensor:
        return local_view(t)[0].detach().clone()

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

    def _data(self, e: int) -> Optional[torch.Tensor]:
        """The entry's values as a plain tensor (its pre-call copy, else the local view of the held tensor)."""
        c = self.clones.get(e)
        if c is not None:
            return c
        t = self.held.get(e)
        return None if t is None else local_view(t)[0]

    def _readable(self, e: int) -> Optional[torch.Tensor]:
        t = self._data(e)
        if t is None:
            return None
        x = t.detach()
        return torch.view_as_real(x) if x.is_complex() else x

    def _float_readable(self, e: int) -> Optional[torch.Tensor]:
        t = self._data(e)
        if t is None or not t.is_floating_point() or t.numel() == 0:
            return None
        return t.detach()

    def _minmax(self, x: torch.Tensor) -> Tuple[float, float]:
        lo, hi = (v.item() for v in torch.aminmax(x))
        return lo, hi

    def _infinities(self, x: torch.Tensor) -> Tuple[bool, bool]:
        return bool(torch.isposinf(x).any()), bool(torch.isneginf(x).any())

    def _limits(self, x: torch.Tensor) -> Optional[Tuple[float, float]]:
        return _finfo(x.dtype) if x.dtype.is_floating_point else None

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
        t = local_view(t)[0]
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
            synchronize()
        n = self.n
        cols = EntryColumns(n)
        cols.dist = self.dist
        for e, (arr, name) in self.host_data.items():
            _host_stats(cols, e, arr, name)
        return cols


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



def requires_grad_flag(t: torch.Tensor) -> int:
    """The ``requires_grad`` column of an overflow_check row."""
    return 1 if t.requires_grad else 0
