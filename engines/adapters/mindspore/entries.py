"""Tensor entries of one step: each captured MindSpore tensor is summarised once while it is unchanged.

The output of one op is usually the input of the next, and a cell's parameters appear in every call: keyed on
``id`` with a weak reference to rule out a recycled id, an entry is reused. MindSpore's version counter does not
move on in-place ops in PyNative, so the API capture calls ``forget(t)`` on the target of every in-place call
(``add_``, ``__setitem__``, ``assign``...) and the next sight of that tensor makes a new entry. Each entry gets its
statistics, on request its CRC32/xhash, and for the tensor task a private host copy for the store.
"""

import weakref
from typing import Dict, List, Tuple

import numpy as np
from mindspore import Tensor

from engines.adapters.mindspore.tensor_bytes import hashes, host_copy
from engines.adapters.mindspore.tensor_stats import StatsBatch, UnsupportedTensor
from engines.capture.options import CaptureOptions
from engines.capture.records import VALID_CRC32, VALID_XHASH, EntryColumns
from engines.capture.summary import CaptureSummary
from engines.store.dtypes import to_float

_DTYPE_NAMES: Dict[object, str] = {}


def dtype_name(t: Tensor) -> str:
    dtype = t.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


class TensorEntries:
    def __init__(self, options: CaptureOptions, summary: CaptureSummary, force_batched: bool = False) -> None:
        self.options = options
        self.summary = summary
        self.want_crc = options.wants_crc32
        self.want_xhash = options.wants_xhash
        self.stats = StatsBatch(high_precision=options.precision == "high", force_batched=force_batched)
        self.saving_stopped = False
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.cache: Dict[int, Tuple[weakref.ref, int]] = {}
        self.stats.clear()
        self.host_data: Dict[int, Tuple[np.ndarray, str]] = {}
        self.hashes: Dict[int, Tuple] = {}
        self.numels: Dict[int, int] = {}
        self.meta: List[Tuple[str, str, str]] = []  # entry -> (dtype, shape JSON, device)

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
        self.meta.append((dtype_name(t), str(list(shape)), str(getattr(t, "device", "CPU") or "CPU").lower()))
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
        n = self.n
        cols = EntryColumns(n)
        cols.stats, cols.valid, cols.counts = self.stats.finish(n)
        for e, numel in self.numels.items():
            cols.numel[e] = numel
        for e, (c, x) in self.hashes.items():
            if c is not None:
                cols.crc32[e] = c
                cols.valid[e] |= VALID_CRC32
            if x is not None:
                cols.xhash[e] = x
                cols.valid[e] |= VALID_XHASH
        return cols

    def take_host_data(self) -> Dict[int, Tuple[np.ndarray, str]]:
        data = self.host_data
        self.host_data = {}
        return data

    def close(self) -> None:
        return None
