"""Statistics of captured tensors, computed on the tensor's own device without a host sync per tensor.

Rules (docs/reference/msprobe-tasks.md §5.2 / §14 S1 / S2, docs/CAPTURE.md):

- float16/bfloat16/float32/float64 on the CPU, at least one dimension (the common case): one fused read by the
  native kernel (a dense block, contiguous or a transposed contiguous block, in memory order; any other strided
  view by the kernel's strided walk, in logical order: the kernel's figures of ``t.contiguous()``) (decision 28, ``engines/native/``): max and min exactly, sum and sum of squares
  accumulated in float64, sum and norm rounded once to the tensor's dtype (``precision: low``) or to float32 for
  the half types (``precision: high``). Without the kernel (no compiler, ``PROBE_TUI_NATIVE=0``), and for other
  layouts and devices, torch's reductions: sum and L2 norm in the tensor's dtype or accumulated and returned in
  float32 (``high``). mean = sum / numel in float64.
- float64 always in float64 (never downcast). Float8 types are widened to float32 (exact).
- integers: max/min exactly, sum in int64 (exact), norm in float64.
- bool: max = any, min = all; mean and norm absent.
- complex: statistics of ``abs()``.
- 0-d: max = min = mean = norm = the value (msprobe's rule). Empty: no statistics.
- nan / +inf / -inf counts: exact. On the CPU they are counted only when the sum is not finite (the sum already
  tells; the kernel counts in a second read only then); on accelerators they are computed on the device with
  everything else.

On an accelerator every result stays a 0-d device tensor; ``finish()`` stacks them per (device, dtype) and moves
each stack to the host once. On the CPU, where reading a value costs no synchronisation, values are read at once.
"""

import logging
import math
from typing import Any, List, Optional

import torch

from engines.capture.entries import MAX, MIN, NORM, SUM, StatsBatchBase, new_row
from engines.capture.records import VALID_MAX, VALID_MIN, VALID_NORM, VALID_STATS
from engines.native import build as native_build
from engines.native import fastpath
from engines.native.fastpath import HostRow
from engines.native.once import Once
from engines.native.stats import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, THREADS_FROM, fused_stats

_HALF = (torch.float16, torch.bfloat16)
_FLOAT_FAST_MINMAX = (torch.float32, torch.float64)
_FLOAT_HOST = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))
_norm = torch.linalg.vector_norm
_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                         "float8_e8m0fnu") if hasattr(torch, n))
_INF = float("inf")
# dtype -> (kernel code, item size - 1: the pointer must be aligned to the item)
_NATIVE_CODE = {torch.float32: (FLOAT32, 3), torch.float64: (FLOAT64, 7), torch.float16: (FLOAT16, 1),
                torch.bfloat16: (BFLOAT16, 1)}
_num_threads = torch.get_num_threads

# Below this many elements one aminmax kernel beats amax + amin for float32/float64 (measured on CPU).
_AMINMAX_BELOW = 16384


log = logging.getLogger("engines.native")


def _rows_equal(a: Any, b: Any) -> bool:
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


def _bind_host_row() -> Optional[HostRow]:
    """The fast path's ``host_row`` configured with this adapter's dtype codes and checked against
    ``add_general`` on every float type (NaN, infinities, a half type's overflow, both precisions), or None."""
    module, lib = fastpath.module(), native_build.load()
    if module is None or lib is None:
        return None
    try:
        fastpath.configure(module, lib, _NATIVE_CODE, FLOAT32, FLOAT16, THREADS_FROM, _num_threads, VALID_STATS)
        fn = module.host_row
        values = [1.0, -2.5, 3.0, 0.5, 60000.0, 70000.0, -1e-3]
        cases = [torch.tensor(values, dtype=d) for d in _NATIVE_CODE]
        cases += [torch.tensor([1.0, float("nan"), float("inf"), -float("inf")], dtype=torch.float32),
                  torch.arange(12, dtype=torch.float64).reshape(3, 4)]
        for high in (False, True):
            ref = StatsBatch(high, fast=False)
            for i, t in enumerate(cases):
                ref.add_general(i, t)
                row = fn(t, high)
                if row is None or not _rows_equal(row, ref.host[i]):
                    raise RuntimeError("self-check failed on %s: %s, not %s" % (t.dtype, row, ref.host[i]))
            if fn(torch.zeros(3, dtype=torch.int64), high) is not None or fn(cases[-1].t(), high) is not None:
                raise RuntimeError("self-check failed: a case for the Python path was taken")
        return fn
    except Exception as exc:  # noqa: BLE001 - the Python path, said once
        log.warning("statistics fast path unavailable (%s); the Python path", exc)
        return None


_host_row: Once[Optional[HostRow]] = Once(_bind_host_row)


def host_row() -> Optional[HostRow]:
    """The checked fast path (``_bind_host_row``), decided once a process."""
    return _host_row.get()


class UnsupportedTensor(Exception):
    """A tensor the tool cannot summarise (meta, sparse, quantized, nested...); its row keeps dtype and shape."""


def summarisable(t: torch.Tensor) -> torch.Tensor:
    """The dense tensor whose values are summarised, or UnsupportedTensor. Distributed subclasses arrive
    unwrapped (``engines.adapters.torch.subclasses.local_view``)."""
    cls = type(t)
    if cls is not torch.Tensor and cls is not torch.nn.Parameter:
        if cls.__name__ in ("FakeTensor", "FunctionalTensor"):
            raise UnsupportedTensor(cls.__name__)
        if not isinstance(t, torch.nn.Parameter) and hasattr(cls, "__torch_dispatch__") \
                and cls.__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
            raise UnsupportedTensor(cls.__name__)
    if t.layout is not torch.strided:
        raise UnsupportedTensor("%s tensor" % str(t.layout).replace("torch.", ""))
    if t.is_meta:
        raise UnsupportedTensor("meta tensor")
    if t.is_quantized:
        raise UnsupportedTensor("quantized tensor")
    if t.is_nested:
        raise UnsupportedTensor("nested tensor")
    return t


class StatsBatch(StatsBatchBase):
    """Statistics of one step's tensor entries (``engines.capture.entries.StatsBatchBase``); on the CPU values
    are read at once, on an accelerator they wait per (device, dtype)."""

    def __init__(self, high_precision: bool = False, force_batched: bool = False, fast: bool = True) -> None:
        super().__init__(high_precision, force_batched)
        self._fused = None if force_batched else fused_stats()
        # The first case of ``add_general`` as one C call (``engines/native/pyext/fastpath.c``), or None
        self.host_row: Optional[HostRow] = None if self._fused is None or not fast else host_row()

    def add(self, entry: int, t: torch.Tensor) -> None:
        """Summarise tensor ``t`` (summarisable; detached here before any torch reduction runs on it, so that
        the statistics never add to the autograd graph) as ``entry``: by the fast path's C call where it
        applies (the same row as ``add_general``'s first case), else ``add_general``."""
        hot = self.host_row
        if hot is not None:
            row = hot(t, self.high)
            if row is not None:
                self.host[entry] = row
                return
        self.add_general(entry, t)

    def add_general(self, entry: int, t: torch.Tensor) -> None:
        """``add`` in Python. The per-entry path: a CPU float tensor's fused read (``_add_host_float``'s first case: a contiguous
        block, aligned) runs here, calling the kernel's C function directly (``FusedStats.run`` without its
        frame; a failing call goes on as ``run``'s ValueError did: to torch's reductions); a CPU float 0-d tensor
        (an optimizer's step count, a loss) is read once. The values are those of the general paths."""
        dtype = t.dtype
        if dtype in _FLOAT_HOST and not self.force_batched and t.is_cpu:
            if t.dim():
                fused = self._fused
                if fused is not None and t.is_contiguous() and not t.is_neg():
                    numel = t.numel()
                    code, align = _NATIVE_CODE[dtype]
                    if numel:
                        try:
                            ptr = t.data_ptr()
                        except RuntimeError:  # no readable pointer: ``_add_host_float``'s torch reductions
                            ptr = 1
                        if not ptr & align:
                            out = fused.out
                            if fused.fn(ptr, numel, code, FLOAT32 if self.high and code >= FLOAT16 else code,
                                        _num_threads() if numel >= THREADS_FROM else 1, out) == 0:
                                # a tuple: complete, and of plain numbers, so the collector stops tracking it
                                # (a step's rows live until its end: fewer objects for every collection to
                                # walk and to promote)
                                self.host[entry] = (out[0], out[1], out[2], out[3], numel, VALID_STATS,
                                                    int(out[4]), int(out[5]), int(out[6]))
                                return
                self._add_host_float(entry, t.detach(), dtype)
                return
            # 0-d: max = min = sum = norm = the value (``_put`` of each, below), NaN/inf counted from it
            v = t.item()
            if math.isfinite(v):
                self.host[entry] = (v, v, v, v, 1, VALID_STATS, 0, 0, 0)
            elif v != v:
                self.host[entry] = (v, v, v, v, 1, VALID_STATS, 1, 0, 0)
            elif v > 0:
                self.host[entry] = (v, v, v, v, 1, VALID_STATS, 0, 1, 0)
            else:
                self.host[entry] = (v, v, v, v, 1, VALID_STATS, 0, 0, 1)
            return
        t = t.detach()
        numel = t.numel()
        row = new_row(numel)
        self.host[entry] = row
        if numel == 0:
            return
        if dtype is torch.bool:
            row[5] = VALID_MAX | VALID_MIN
            self._put(entry, row, MAX, t.any())
            self._put(entry, row, MIN, t.all())
            return
        if t.is_complex():
            t = t.abs()
            dtype = t.dtype
        elif dtype in _FP8:
            t = t.float()
            dtype = torch.float32
        row[5] = VALID_STATS
        if t.dim() == 0:
            self._put(entry, row, MAX, t)
            self._put(entry, row, MIN, t)
            self._put(entry, row, SUM, t)
            self._put(entry, row, NORM, t)
            if dtype.is_floating_point:
                self._counts(entry, row, t, t)
            return
        if dtype.is_floating_point:
            if dtype in _FLOAT_FAST_MINMAX and numel >= _AMINMAX_BELOW:
                mx, mn = t.amax(), t.amin()
            else:  # one kernel; faster for small float32 tensors and for half types at any size
                mn, mx = torch.aminmax(t)
            if self.high and dtype in _HALF:
                s = t.sum(dtype=torch.float32)
                n = torch.linalg.vector_norm(t, dtype=torch.float32)
            else:
                s = t.sum()
                n = torch.linalg.vector_norm(t)
            self._put(entry, row, MAX, mx)
            self._put(entry, row, MIN, mn)
            self._put(entry, row, SUM, s)
            self._put(entry, row, NORM, n)
            self._counts(entry, row, t, s)
            return
        # Integer types: exact max/min and sum; norm in float64.
        self._put(entry, row, MAX, t.amax())
        self._put(entry, row, MIN, t.amin())
        self._put(entry, row, SUM, t.sum(dtype=torch.int64))
        self._put(entry, row, NORM, torch.linalg.vector_norm(t.double()))

    def _add_host_float(self, entry: int, t: torch.Tensor, dtype: torch.dtype) -> None:
        """The common case, a float tensor of at least one dimension on the CPU: one fused read by the native
        kernel (one dense block, contiguous or contiguous once its last two dimensions are swapped, in memory
        order; any other strided view by the strided walk), else torch's reductions; read at once into the row."""
        numel = t.numel()
        if numel == 0:
            self.host[entry] = new_row(0)
            return
        fused = self._fused
        if fused is not None and (t.is_contiguous() or (t.dim() >= 2 and t.mT.is_contiguous())) \
                and not t.is_neg():
            # contiguous, or a transposed contiguous block (a weight's .t()): numel values from data_ptr(); not a
            # negative view (the memory holds the values negated)
            code, align = _NATIVE_CODE[dtype]
            try:
                ptr = t.data_ptr()
                if not ptr & align:  # aligned to the item (a torch.frombuffer may not be)
                    out = fused.run(ptr, numel, code, FLOAT32 if self.high and code >= FLOAT16 else code,
                                    _num_threads() if numel >= THREADS_FROM else 1)
                    self.host[entry] = [out[0], out[1], out[2], out[3], numel, VALID_STATS, int(out[4]),
                                        int(out[5]), int(out[6])]
                    return
            except (RuntimeError, ValueError):  # no readable pointer: torch's reductions below
                pass
        elif fused is not None and not t.is_neg():
            # any other strided view (a slice, a transpose of more than the last two dimensions, an expanded
            # tensor): read in place in its logical order, the same bits as the kernel on t.contiguous()
            code, align = _NATIVE_CODE[dtype]
            try:
                ptr = t.data_ptr()
                if not ptr & align:
                    out = fused.run_strided(ptr, t.shape, t.stride(), code,
                                            FLOAT32 if self.high and code >= FLOAT16 else code,
                                            _num_threads() if numel >= THREADS_FROM else 1)
                    self.host[entry] = [out[0], out[1], out[2], out[3], numel, VALID_STATS, int(out[4]),
                                        int(out[5]), int(out[6])]
                    return
            except (RuntimeError, ValueError):  # no readable pointer, or a layout the walk refuses: torch's
                pass
        self._add_host_float_torch(entry, t, dtype, numel)

    def _add_host_float_torch(self, entry: int, t: torch.Tensor, dtype: torch.dtype, numel: int) -> None:
        """``_add_host_float`` without the kernel: the same kernels as ``add``'s general path (so the same
        values), with no per-value dispatch."""
        if dtype in _FLOAT_FAST_MINMAX and numel >= _AMINMAX_BELOW:
            mx = t.amax().item()
            mn = t.amin().item()
        else:
            lo, hi = torch.aminmax(t)
            mx = hi.item()
            mn = lo.item()
        if self.high and dtype in _HALF:
            s = t.sum(dtype=torch.float32).item()
            n = _norm(t, dtype=torch.float32).item()
        else:
            s = t.sum().item()
            n = _norm(t).item()
        row = [mx, mn, s, n, numel, VALID_STATS, 0, 0, 0]
        if not math.isfinite(s):  # the sum tells whether there is anything to count
            row[6] = int(torch.isnan(t).sum())
            row[7] = int(torch.isposinf(t).sum())
            row[8] = int(torch.isneginf(t).sum())
        self.host[entry] = row

    # -- internals -------------------------------------------------------------------------------------------
    def _batched(self, value: torch.Tensor) -> bool:
        return self.force_batched or not value.is_cpu

    def _put(self, entry: int, row: List[Any], col: int, value: torch.Tensor) -> None:
        if not self._batched(value):
            row[col] = value.item()
            return
        self._pend((value.device, value.dtype), value, entry, col)

    def _counts(self, entry: int, row: List[Any], t: torch.Tensor, total: torch.Tensor) -> None:
        if not self._batched(total):
            s = row[SUM]
            if math.isfinite(s):
                return
            row[6] = int(torch.isnan(t).sum())
            row[7] = int(torch.isposinf(t).sum())
            row[8] = int(torch.isneginf(t).sum())
            return
        for col, v in ((6, torch.isnan(t).sum()), (7, torch.isposinf(t).sum()), (8, torch.isneginf(t).sum())):
            self._put(entry, row, col, v)

    def _host_values(self, values: List[torch.Tensor]) -> List[Any]:
        stacked = torch.stack(values)
        if stacked.dtype is torch.bool:
            stacked = stacked.to(torch.uint8)
        return stacked.to(torch.float64 if stacked.is_floating_point() else torch.int64).cpu().tolist()


__all__ = ["StatsBatch", "UnsupportedTensor", "summarisable", "VALID_NORM"]
