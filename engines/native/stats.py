"""The fused statistics kernel (``stats.c``), framework-free: max, min, sum, L2 norm and NaN/+inf/-inf counts of
one contiguous array in one read (decision 28, docs/decisions/0028-fused-statistics.md).

A framework adapter maps its dtypes to the codes below and passes a raw data pointer; ``FusedStats`` keeps one
output array (so one instance per thread of use) and the bound C function (argument types set once).
"""

import ctypes
import mmap
from typing import Optional, Sequence, Tuple

from engines.native import build

FLOAT32, FLOAT64, FLOAT16, BFLOAT16 = 0, 1, 2, 3

# Below this many elements a tensor is summarised on one thread; above, on up to the caller's thread count
# (fixed blocks: the result is the same for any count).
THREADS_FROM = 1 << 20


# The strided walk's scratch: one block (stats.c's BLOCK) of the widest item (float64).
SCRATCH_BYTES = 65536 * 8


def _scratch() -> "Tuple[mmap.mmap, ctypes.Array[ctypes.c_char]]":
    """The strided walk's scratch, an anonymous mapping: its pages become resident only as a walk writes them (a
    float32 walk uses half, a small view a page or two), and it stays out of the heap the training step's tensors
    come from, where a half-MB block allocated at the first captured step split the free space the next steps'
    activations would have reused (issue 21, docs/CAPTURE.md "Memory (issue 21)"). ``create_string_buffer``
    zero-filled all 512 KiB there."""
    region = mmap.mmap(-1, SCRATCH_BYTES)
    return region, (ctypes.c_char * SCRATCH_BYTES).from_buffer(region)


class FusedStats:
    """``run(ptr, numel, dtype, out_dtype, threads)`` fills ``out``: max, min, sum, norm, nan, +inf, -inf.
    ``run_strided(ptr, shape, strides, dtype, out_dtype, threads)``: the same figures of a strided view (strides
    in elements, none negative), equal bit for bit to ``run`` on the view's contiguous copy (any thread count)."""

    __slots__ = ("fn", "fn_strided", "out", "_scratch", "_region")

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.fn = lib.pt_stats
        self.fn_strided = lib.pt_stats_strided
        self.out = (ctypes.c_double * 7)()
        self._scratch: Optional[ctypes.Array[ctypes.c_char]] = None  # mapped at the first strided read
        self._region: Optional[mmap.mmap] = None  # the mapping the scratch lies in

    def run_strided(self, ptr: int, shape: Sequence[int], strides: Sequence[int], dtype: int, out_dtype: int,
                    threads: int = 1) -> "ctypes.Array[ctypes.c_double]":
        scratch = self._scratch
        if scratch is None:
            self._region, scratch = _scratch()
            self._scratch = scratch
        nd = len(shape)
        arr = ctypes.c_int64 * nd
        if self.fn_strided(ptr, nd, arr(*shape), arr(*strides), dtype, out_dtype, threads, scratch, self.out) != 0:
            raise ValueError("pt_stats_strided: bad arguments (dtype %d, shape %s, strides %s)"
                             % (dtype, tuple(shape), tuple(strides)))
        return self.out

    def run(self, ptr: int, numel: int, dtype: int, out_dtype: int, threads: int = 1) -> "ctypes.Array[ctypes.c_double]":
        if self.fn(ptr, numel, dtype, out_dtype, threads, self.out) != 0:
            raise ValueError("pt_stats: bad arguments (dtype %d, out dtype %d, %d elements)" % (dtype, out_dtype,
                                                                                                numel))
        return self.out


def fused_stats() -> Optional[FusedStats]:
    """A new ``FusedStats`` over the cached library, or None when the kernel is unavailable (``build.load``)."""
    lib = build.load()
    return None if lib is None else FusedStats(lib)


__all__ = ["FusedStats", "fused_stats", "FLOAT32", "FLOAT64", "FLOAT16", "BFLOAT16", "THREADS_FROM"]
