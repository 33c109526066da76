"""Tensor entries of one step: each captured MindSpore tensor is summarised once while it is unchanged.

The output of one op is usually the input of the next, and a cell's parameters appear in every call: keyed on
``id`` with a weak reference to rule out a recycled id, an entry is reused. MindSpore's version counter does not
move on in-place ops in PyNative, so the API capture calls ``forget(t)`` on the target of every in-place call
(``add_``, ``__setitem__``, ``assign``...) and the next sight of that tensor makes a new entry. Each entry gets its
statistics, on request its CRC32/xhash, and for the tensor task a private host copy for the store (the per-step
state is ``engines.capture.entries``').
"""

import weakref
from typing import Dict, Tuple

import numpy as np
from mindspore import Tensor

from engines.adapters.mindspore.tensor_bytes import hashes, host_copy
from engines.adapters.mindspore.tensor_stats import StatsBatch, UnsupportedTensor
from engines.capture.entries import StepEntries, put_hashes
from engines.capture.options import CaptureOptions
from engines.capture.records import EntryColumns
from engines.capture.summary import CaptureSummary
from engines.store.dtypes import to_float

_DTYPE_NAMES: Dict[object, str] = {}


def dtype_name(t: Tensor) -> str:
    dtype = t.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def meta_of(t: Tensor) -> Tuple[str, str, str]:
    """(dtype name, shape JSON, device) of a row, as the store writes them."""
    return dtype_name(t), str(list(t.shape)), str(getattr(t, "device", "CPU") or "CPU").lower()


class TensorEntries(StepEntries):
    def __init__(self, options: CaptureOptions, summary: CaptureSummary, force_batched: bool = False) -> None:
        super().__init__(options, summary,
                         StatsBatch(high_precision=options.precision == "high", force_batched=force_batched))

    # -- capture ---------------------------------------------------------------------------------------------
    def entry(self, t: Tensor, save: bool = False, fresh: bool = False) -> int:
        """Entry id for ``t`` as it is now (created on first sight, or when ``fresh``)."""
        key = id(t)
        if not fresh:
            cached = self.cache.get(key)
            if cached is not None and cached[0]() is t:
                e = cached[1]
                if save and e not in self.host_data and not self.saving_stopped:
                    self._save(e, t)
                return e
        e = self.n
        self.n += 1
        shape = tuple(t.shape)
        self.meta.append(meta_of(t))
        try:
            self.cache[key] = (weakref.ref(t), e)
        except TypeError:
            pass
        try:
            if save and not self.saving_stopped:
                arr = self._save(e, t)
                self.stats.add_array(e, to_float(arr, self.host_data[e][1]))
            else:
                self.stats.add(e, t)
        except UnsupportedTensor as exc:
            self.summary.unsupported(str(exc))
            return e
        self.numels[e] = int(np.prod(shape)) if shape else 1
        if self.want_crc or self.want_xhash:
            arr, name = self.host_data[e] if e in self.host_data else host_copy(t)
            self.hashes[e] = hashes(arr, name, shape, self.want_crc, self.want_xhash)
        return e

    def forget(self, t: Tensor) -> None:
        """``t`` was written in place: its next sight is a new entry."""
        self.cache.pop(id(t), None)

    def _save(self, e: int, t: Tensor) -> np.ndarray:
        arr, name = host_copy(t)
        self.host_data[e] = (arr, name)
        return arr

    # -- step end --------------------------------------------------------------------------------------------
    def finish(self) -> EntryColumns:
        """Move every result to the host (one transfer per dtype on a device) and fill the entry columns."""
        cols = self.columns()
        for e, (c, x) in self.hashes.items():
            put_hashes(cols, e, c, x)
        return cols
