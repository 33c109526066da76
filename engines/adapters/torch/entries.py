"""Tensor entries of one step: each captured tensor *version* is summarised once.

The output of one op is usually the input of the next, and a module's parameters appear in every call: keyed on
``(id, version counter)`` with a weak reference to rule out a recycled id, an entry is reused while the tensor is
unchanged, and an in-place write (which bumps the version) makes a new one. Each entry gets its statistics, on
request its CRC32/xhash, and for the tensor task a private host copy for the store (the per-step state is
``engines.capture.entries``').
"""

import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Set, Tuple

import numpy as np
import torch

from engines.adapters.torch.subclasses import local_view
from engines.adapters.torch.tensor_bytes import device_word_sum, host_copy, meta_of, synchronize
from engines.adapters.torch.tensor_stats import StatsBatch, UnsupportedTensor, summarisable
from engines.capture import xhash as xh
from engines.capture.entries import StepEntries, is_volatile, put_hashes
from engines.capture.options import CaptureOptions
from engines.capture.records import VALID_CRC32, VALID_XHASH, EntryColumns
from engines.capture.summary import CaptureSummary
from engines.native import crc32 as native_crc

# Below this many bytes a hash is computed inline: a thread hand-off costs more.
INLINE_HASH_BYTES = 1 << 16
# (dtype, shape) -> the row's (dtype name, shape JSON, "cpu") of a CPU tensor: the same few shapes recur all step
_CPU_META: Dict[Tuple[torch.dtype, torch.Size], Tuple[str, str, str]] = {}
_num_threads = torch.get_num_threads
_STRIDED = torch.strided
_PARAMETER = torch.nn.Parameter


def _hash_job(arr: np.ndarray, dtype_name: str, shape: Tuple[int, ...], crc: bool, xhash: bool):
    flat = arr.reshape(-1)
    c = native_crc.crc32(flat) if crc else None
    x = xh.xhash_bytes(flat, dtype_name, shape) if xhash else None
    return c, x


class TensorEntries(StepEntries):
    def __init__(self, options: CaptureOptions, summary: CaptureSummary, force_batched: bool = False) -> None:
        self.force_batched = force_batched
        self._crc = native_crc.kernel()
        self._crc_at = native_crc.fast_at() if self._crc is not None else None
        self._pool: Optional[ThreadPoolExecutor] = None
        # Full-tensor copies held this step pass this many bytes: they go to ``spill`` (the session's hook that
        # writes them now) before the next copy is kept (output.memory_budget).
        self.memory_budget = options.memory_budget
        self.spill: Optional[Callable[[Dict[int, Tuple[np.ndarray, str]]], None]] = None
        super().__init__(options, summary,
                         StatsBatch(high_precision=options.precision == "high", force_batched=force_batched))

    def clear(self) -> None:
        super().clear()
        self.device_sums: Dict[int, Tuple[torch.Tensor, int, str, Tuple[int, ...]]] = {}
        self.crcs: Dict[int, int] = {}  # entry -> CRC32 computed in place (md5 mode, CPU tensors)
        self.device_copies = False
        self.held_bytes = 0  # bytes of the host copies in host_data
        self.spilled: Set[int] = set()  # entries whose copies were handed to ``spill`` this step

    def take_host_data(self) -> Dict[int, Tuple[np.ndarray, str]]:
        self.held_bytes = 0
        return super().take_host_data()

    # -- capture ---------------------------------------------------------------------------------------------
    def entry(self, t: torch.Tensor, save: bool = False, fresh: bool = False) -> int:
        """Entry id for the current version of ``t`` (created on first sight)."""
        key = id(t)
        try:
            version = t._version
        except RuntimeError:  # inference tensors keep no version counter
            version = -1
            fresh = True
        if self.volatile and is_volatile(self.volatile, key, t):
            version = -1
            fresh = True
        if not fresh:
            cached = self.cache.get(key)
            if cached is not None and cached[1] == version and cached[0]() is t:
                e = cached[2]
                if save and e not in self.host_data and not self.saving_stopped:
                    self._save(e, local_view(t)[0])
                return e
        e = self.n
        self.n += 1
        if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:  # what local_view returns as it is
            local = t
        else:
            local, dist = local_view(t)  # a DTensor's local shard, an AsyncCollectiveTensor's result
            if dist:
                self.dist[e] = dist
        if local.is_cpu:  # (dtype, shape, device) text made once per dtype and shape
            mkey = (local.dtype, local.shape)
            meta = _CPU_META.get(mkey)
            if meta is None:
                if len(_CPU_META) > 4096:
                    _CPU_META.clear()
                meta = _CPU_META[mkey] = meta_of(local)
            self.meta.append(meta)
        else:
            self.meta.append(meta_of(local))
        # Detached only where the tensor's values go further than the statistics (a host copy, a hash): the
        # statistics detach it themselves where torch's reductions run (``StatsBatch.add``), and the native kernel
        # reads memory (a detach is ~0.3 us and a new tensor object to free)
        base = local.detach() if save or self.want_crc or self.want_xhash else local
        cls = type(base)
        if (cls is not torch.Tensor and cls is not _PARAMETER) or base.layout is not _STRIDED or base.is_meta \
                or base.is_quantized or base.is_nested:  # ``summarisable``'s tests of a plain tensor inline
            try:
                base = summarisable(base)
            except UnsupportedTensor as exc:
                self.summary.unsupported(str(exc))
                return e
        stats = self.stats
        hot = stats.host_row  # ``StatsBatch.add`` without its frame
        row = hot(base, stats.high) if hot is not None else None
        if row is None:
            stats.add_general(e, base)
            self.numels[e] = base.numel()
        else:
            stats.host[e] = row
            self.numels[e] = row[4]
        if save and not self.saving_stopped:
            self._save(e, base)
        if self.want_crc or self.want_xhash:
            self._hash(e, base)
        if version >= 0:
            try:
                self.cache[key] = (weakref.ref(t), version, e)
            except TypeError:
                pass
        return e

    def _save(self, e: int, t: torch.Tensor) -> None:
        if e in self.spilled:  # already written this step
            return
        arr, name = host_copy(t)
        if not t.is_cpu:
            self.device_copies = True
        if self.spill is not None and self.host_data and self.held_bytes + arr.nbytes > self.memory_budget:
            self._spill()
        self.host_data[e] = (arr, name)
        self.held_bytes += arr.nbytes

    def _spill(self) -> None:
        """Hand the copies held so far to the store now: peak memory stays near the budget, not a step's data."""
        assert self.spill is not None
        if self.device_copies:
            synchronize()  # the non-blocking copies must land before the writer reads them
        data = self.take_host_data()
        self.spilled.update(data)
        try:
            self.spill(data)
        except Exception as exc:  # never break training: these tensors are lost, their rows keep statistics
            self.summary.failed("writing tensors early", exc)

    def _hash(self, e: int, t: torch.Tensor) -> None:
        if not self.want_xhash and self._crc is not None and t.is_cpu and not self.force_batched and not t.is_conj() \
                and not t.is_neg():
            # CRC32 alone of a CPU tensor (msprobe's md5): the native kernel reads the tensor's own memory now, on
            # this thread (~25 GB/s, the values still in cache from the statistics' read), in place of a private
            # copy hashed on the hash thread (the copy alone cost more than this read).
            c = t if t.is_contiguous() else t.contiguous()
            nbytes = c.numel() * c.element_size()
            try:
                ptr = c.data_ptr() if nbytes else 0
            except RuntimeError:  # no readable pointer: the copy below
                pass
            else:
                fast = self._crc_at
                if fast is not None and nbytes < native_crc.THREADS_FROM:  # one thread: no ctypes call
                    self.crcs[e] = fast(ptr, nbytes)
                else:
                    self.crcs[e] = self._crc.at(ptr, nbytes, 0, _num_threads() if nbytes >= native_crc.THREADS_FROM
                                                else 1)
                return
        shape = tuple(t.shape)
        name = str(t.dtype)
        if not self.want_crc and (not t.is_cpu or self.force_batched):
            s, m = device_word_sum(t)
            self.device_sums[e] = (s, m, name, shape)
            return
        if e in self.host_data:
            arr = self.host_data[e][0]
        else:
            arr, name = host_copy(t)
            if not t.is_cpu:
                self.device_copies = True
        if arr.nbytes <= INLINE_HASH_BYTES and t.is_cpu:
            self.hashes[e] = _hash_job(arr, name, shape, self.want_crc, self.want_xhash)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe-tui-hash")
        if not t.is_cpu:
            # The non-blocking copy must land before the worker reads it.
            self.hashes[e] = ("sync", arr, name, shape)
            return
        self.hashes[e] = self._pool.submit(_hash_job, arr, name, shape, self.want_crc, self.want_xhash)

    # -- step end --------------------------------------------------------------------------------------------
    def finish(self) -> EntryColumns:
        """Move every result to the host (one transfer per device and dtype) and fill the entry columns."""
        if self.device_copies:
            synchronize()
        cols = self.columns()
        if self.device_sums:
            self._finish_device_sums(cols)
        if self.crcs:  # one assignment for the step's in-place CRCs
            idx = np.fromiter(self.crcs.keys(), dtype=np.int64, count=len(self.crcs))
            cols.crc32[idx] = np.fromiter(self.crcs.values(), dtype=np.int64, count=len(self.crcs))
            cols.valid[idx] |= VALID_CRC32
        for e, h in self.hashes.items():
            if isinstance(h, tuple) and len(h) == 4 and h[0] == "sync":
                h = _hash_job(h[1], h[2], h[3], self.want_crc, self.want_xhash)
            elif isinstance(h, Future):
                h = h.result()
            put_hashes(cols, e, *h)
        return cols

    def _finish_device_sums(self, cols: EntryColumns) -> None:
        by_device: Dict[torch.device, List[int]] = {}
        for e, (s, _, _, _) in self.device_sums.items():
            by_device.setdefault(s.device, []).append(e)
        for entries in by_device.values():
            sums = torch.stack([self.device_sums[e][0] for e in entries]).cpu().tolist()
            for e, s in zip(entries, sums):
                _, m, name, shape = self.device_sums[e]
                cols.xhash[e] = xh.finish(s & xh.MASK64, m, name, shape)
                cols.valid[e] |= VALID_XHASH

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
