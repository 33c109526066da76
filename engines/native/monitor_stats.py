"""The training monitor's fused kernels (``monitor_stats.c``), framework-free: max, min, float64 sum and norm, the
count of ``|x| < eps`` and the NaN / inf counts of one contiguous array in one read, the same of Adam's update
made from its two moments (never stored), and the sign agreement of two arrays (docs/MONITOR.md "Cost").

``monitor_kernel()`` binds the functions from the one cached library (``build.load``), checks it on small
arrays before first use and keeps the outcome for the process; None (with one log line) when the library is
unavailable, lacks the function or fails the check: the caller keeps its framework path.
"""

import ctypes
import logging
import math
import threading
from typing import Any, Optional, Tuple

from engines.native import build
from engines.native.once import Once
from engines.native.stats import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, THREADS_FROM

log = logging.getLogger("engines.native")

# out: max, min, sum, norm, zeros count, NaN count, inf count
Result = Tuple[float, float, float, float, float, float, float]


class MonitorStats:
    """The three functions of ``monitor_stats.c``, bound (argument types set once). Safe to share between
    threads (one output array per thread).

    - ``run(ptr, numel, dtype, eps, threads)``: the seven figures of one array; ``eps`` already rounded to its type;
    - ``adam_update(m_ptr, v_ptr, numel, dtype, c1, c2, adam_eps, eps, threads)``: the same figures of Adam's
      update ``(m / c1) / (sqrt(v / c2) + adam_eps)`` (float32 or float64 moments), computed but never stored;
    - ``sign_agreement(g_ptr, m_ptr, numel, dtype)``: ``(sum of sign(g) * sign(m), NaN count)``, exactly.
    """

    __slots__ = ("fn", "adam_fn", "signs_fn", "_local")

    def __init__(self, fn: Any, adam_fn: Any, signs_fn: Any) -> None:
        self.fn = fn
        self.adam_fn = adam_fn
        self.signs_fn = signs_fn
        self._local = threading.local()

    def _out(self) -> "ctypes.Array[ctypes.c_double]":
        out = getattr(self._local, "out", None)
        if out is None:
            out = self._local.out = (ctypes.c_double * 7)()
        return out

    def run(self, ptr: int, numel: int, dtype: int, eps: float, threads: int = 1) -> Result:
        out = self._out()
        if self.fn(ptr, numel, dtype, eps, threads, out) != 0:
            raise ValueError("pt_monitor_stats: bad arguments (dtype %d, %d elements, eps %r)" % (dtype, numel, eps))
        return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])

    def adam_update(self, m_ptr: int, v_ptr: int, numel: int, dtype: int, c1: float, c2: float, adam_eps: float,
                    eps: float, threads: int = 1) -> Result:
        out = self._out()
        if self.adam_fn(m_ptr, v_ptr, numel, dtype, c1, c2, adam_eps, eps, threads, out) != 0:
            raise ValueError("pt_monitor_adam_update: bad arguments (dtype %d, %d elements)" % (dtype, numel))
        return (out[0], out[1], out[2], out[3], out[4], out[5], out[6])

    def sign_agreement(self, g_ptr: int, m_ptr: int, numel: int, dtype: int) -> Tuple[float, float]:
        out = self._out()
        if self.signs_fn(g_ptr, m_ptr, numel, dtype, out) != 0:
            raise ValueError("pt_monitor_sign_agreement: bad arguments (dtype %d, %d elements)" % (dtype, numel))
        return out[0], out[1]


def _self_check(kernel: MonitorStats) -> None:
    """A wrong build must not record wrong metrics: every figure of small float32, float16 and bfloat16 arrays."""
    values = (ctypes.c_float * 6)(1.0, -2.0, 0.0, 3.0, 1e-9, 0.5)
    got = kernel.run(ctypes.addressof(values), 6, FLOAT32, 1e-8)
    tiny = float(values[4])
    total = ((((1.0 - 2.0) + 0.0) + 3.0) + tiny) + 0.5  # one element a lane, lanes added in order
    squares = ((((1.0 + 4.0) + 0.0) + 9.0) + tiny * tiny) + 0.25
    if got != (3.0, -2.0, total, math.sqrt(squares), 2.0, 0.0, 0.0):
        raise RuntimeError("self-check failed: %s" % (got,))
    special = (ctypes.c_double * 4)(float("nan"), float("inf"), -1.0, float("-inf"))
    got = kernel.run(ctypes.addressof(special), 4, FLOAT64, 0.5)
    if not (math.isnan(got[0]) and math.isnan(got[1])) or got[4:] != (0.0, 1.0, 2.0):
        raise RuntimeError("self-check failed on NaN/inf: %s" % (got,))
    # float16 1.0, -2.0, 0.0, 65504; bfloat16 the same four values: 0x3f80, 0xc000, 0x0000, 0x477f (65280)
    halves = (ctypes.c_uint16 * 4)(0x3C00, 0xC000, 0x0000, 0x7BFF)
    got = kernel.run(ctypes.addressof(halves), 4, FLOAT16, 0.0)
    if got[:5] != (65504.0, -2.0, 65503.0, math.sqrt(1.0 + 4.0 + 65504.0 ** 2), 0.0):
        raise RuntimeError("self-check failed on float16: %s" % (got,))
    brains = (ctypes.c_uint16 * 4)(0x3F80, 0xC000, 0x0000, 0x477F)
    got = kernel.run(ctypes.addressof(brains), 4, BFLOAT16, 0.25)
    if got[:5] != (65280.0, -2.0, 65279.0, math.sqrt(1.0 + 4.0 + 65280.0 ** 2), 1.0):
        raise RuntimeError("self-check failed on bfloat16: %s" % (got,))
    # Adam's update of m = (0.5, -1, 0), v = (0.25, 4, 1) with c1 = 0.5, c2 = 0.25, eps 0: (1/1, -2/4, 0/2)
    m = (ctypes.c_double * 3)(0.5, -1.0, 0.0)
    v = (ctypes.c_double * 3)(0.25, 4.0, 1.0)
    got = kernel.adam_update(ctypes.addressof(m), ctypes.addressof(v), 3, FLOAT64, 0.5, 0.25, 0.0, 0.1)
    if got != (1.0, -0.5, 0.5, math.sqrt(1.25), 1.0, 0.0, 0.0):
        raise RuntimeError("self-check failed on the Adam update: %s" % (got,))
    g = (ctypes.c_float * 5)(1.0, -2.0, 0.0, 3.0, float("nan"))
    mom = (ctypes.c_float * 5)(2.0, 1.0, 5.0, 0.5, 1.0)
    got2 = kernel.sign_agreement(ctypes.addressof(g), ctypes.addressof(mom), 5, FLOAT32)
    if got2 != (1.0, 1.0):
        raise RuntimeError("self-check failed on sign agreement: %s" % (got2,))


def bind(lib: ctypes.CDLL) -> MonitorStats:
    """The functions of a built library, unchecked (``_self_check``)."""
    double, i64, i32, ptr = ctypes.c_double, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    out = ctypes.POINTER(ctypes.c_double)
    fn = lib.pt_monitor_stats
    fn.argtypes = [ptr, i64, i32, double, i32, out]
    adam_fn = lib.pt_monitor_adam_update
    adam_fn.argtypes = [ptr, ptr, i64, i32, double, double, double, double, i32, out]
    signs_fn = lib.pt_monitor_sign_agreement
    signs_fn.argtypes = [ptr, ptr, i64, i32, out]
    for f in (fn, adam_fn, signs_fn):
        f.restype = ctypes.c_int
    return MonitorStats(fn, adam_fn, signs_fn)


def _bind() -> Optional[MonitorStats]:
    lib = build.load()
    if lib is None:  # build.load said why
        return None
    try:
        kernel = bind(lib)
        _self_check(kernel)
        return kernel
    except Exception as exc:  # noqa: BLE001 - any failure means the framework path, said once
        log.warning("native monitor kernel unavailable (%s); monitor metrics by the framework's reductions", exc)
        return None


_kernel: Once[Optional[MonitorStats]] = Once(_bind)


def monitor_kernel() -> Optional[MonitorStats]:
    """The checked kernel, or None; the outcome is kept for the process."""
    return _kernel.get()


def reset() -> None:
    """Forget the outcome of ``monitor_kernel()`` (tests; with ``build.reset()`` to rebuild or reload)."""
    _kernel.reset()


__all__ = ["MonitorStats", "monitor_kernel", "bind", "reset", "FLOAT32", "FLOAT64", "FLOAT16", "BFLOAT16", "THREADS_FROM"]
