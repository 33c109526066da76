"""free_benchmark's native kernels (``fb_compare.c``), framework-free, on dense float32/float16/bfloat16 arrays,
the same bits as the framework path's passes (docs/FREE_BENCHMARK.md, "Figures"): the ratio of one output pair
(the original and the perturbed re-run's) in one read of both, and add_noise / bit_noise with the maximum
magnitude their refusal rule reads, in one read of the input.

``fused_compare()`` gives a ``FusedCompare`` over the cached native library (``build.load``), checked once on
known pairs before its first use; None (one log line) when the library is unavailable or the check fails: the
caller keeps its framework path.
"""

import ctypes
import logging
import math
import struct
import threading
from typing import List, Optional, Sequence, Tuple

from engines.native import build
from engines.native.once import Once

log = logging.getLogger("engines.native")

FLOAT32, FLOAT16, BFLOAT16 = 0, 2, 3
DTYPES = (FLOAT32, FLOAT16, BFLOAT16)

# Below this many elements a pair is compared on one thread; above, on up to the caller's thread count (the
# figures are minima and maxima: the same for any count).
THREADS_FROM = 1 << 20


def f32(value: float) -> float:
    """``value`` rounded to float32 (to nearest even), as a Python float."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


ADD_NOISE, BIT_NOISE = 0, 1


class FusedCompare:
    """``ratio(a_ptr, a_dtype, b_ptr, b_dtype, numel, tol, threads)``: the pair's ratio (inf for a sign flip);
    ``run`` gives the four figures (smallest product, smallest and largest r, ratio); ``noise``: a noise
    perturbation. One instance per thread of use (it keeps its output arrays)."""

    __slots__ = ("fn", "out", "noise_fn", "top")

    def __init__(self, lib: ctypes.CDLL) -> None:
        fn = lib.pt_fb_compare
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float,
                       ctypes.c_float, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
        fn.restype = ctypes.c_int
        self.fn = fn
        self.out = (ctypes.c_double * 4)()
        noise = lib.pt_fb_noise
        noise.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_float,
                          ctypes.c_float, ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        noise.restype = ctypes.c_int
        self.noise_fn = noise
        self.top = ctypes.c_double()

    def noise(self, x_ptr: int, dtype: int, numel: int, mode: int, add: float, thr: float, out_ptr: int) -> float:
        """Writes the perturbed array (``ADD_NOISE``: ``x + add`` where ``|x| > thr``, rounded to the dtype;
        ``BIT_NOISE``: the lowest bit flipped there; x elsewhere) to ``out_ptr``; returns max ``|x|`` (NaN when x
        holds a NaN). ``thr`` must be a value of the dtype (the framework compares in it), ``add`` is taken in
        float32."""
        if self.noise_fn(x_ptr, dtype, numel, mode, add, thr, out_ptr, ctypes.byref(self.top)) != 0:
            raise ValueError("pt_fb_noise: bad arguments (dtype %d, mode %d, %d elements)" % (dtype, mode, numel))
        return self.top.value

    def run(self, a_ptr: int, a_dtype: int, b_ptr: int, b_dtype: int, numel: int, tol: float, threads: int = 1
            ) -> Tuple[float, float, float, float]:
        """(min a*b, min r, max r, ratio); the sign-flip limit is ``-(tol*tol)`` rounded to float32."""
        if self.fn(a_ptr, a_dtype, b_ptr, b_dtype, numel, tol, -(tol * tol), threads, self.out) != 0:
            raise ValueError("pt_fb_compare: bad arguments (dtypes %d/%d, %d elements)" % (a_dtype, b_dtype, numel))
        out = self.out
        return out[0], out[1], out[2], out[3]

    def ratio(self, a_ptr: int, a_dtype: int, b_ptr: int, b_dtype: int, numel: int, tol: float, threads: int = 1
              ) -> float:
        if self.fn(a_ptr, a_dtype, b_ptr, b_dtype, numel, tol, -(tol * tol), threads, self.out) != 0:
            raise ValueError("pt_fb_compare: bad arguments (dtypes %d/%d, %d elements)" % (a_dtype, b_dtype, numel))
        return self.out[3]


def _array(values: Sequence[float]) -> "ctypes.Array[ctypes.c_float]":
    return (ctypes.c_float * len(values))(*values)


def self_check(kernel: FusedCompare) -> None:
    """A wrong build must not record wrong ratios: known pairs, every branch (clamp, NaN, inf, sign flip), in each
    lane position and with a tail, and the float16/bfloat16 widening."""
    inf, nan = float("inf"), float("nan")
    a = [1.0, 2.0, -3.0, 1e-6, 4.0, nan, inf, 0.5]
    b = [1.0, 2.5, -3.0, 2e-6, 5.0, 1.0, 1.0, 0.25]
    # r: 1, 0.8, 1, 1 (both clamped to 1e-4), 0.8, NaN -> 1, inf -> FLT_MAX, 2; products: min is NaN (no flip)
    cases: List[Tuple[list, list, Tuple[float, float, float, float]]] = [
        (a, b, (nan, f32(0.8), f32(3.4028234663852886e38), f32(3.4028234663852886e38))),
        (a[:5], b[:5], (f32(f32(1e-6) * f32(2e-6)), f32(0.8), 1.0, f32(1.0 / f32(0.8)))),
        ([1.0, -2.0] * 9, [1.0, 2.0] * 9, (-4.0, 1.0, 1.0, inf)),  # a sign flip in the tail
    ]
    for xs, ys, want in cases:
        ax, ay = _array(xs), _array(ys)  # kept alive across the call
        got = kernel.run(ctypes.addressof(ax), FLOAT32, ctypes.addressof(ay), FLOAT32, len(xs), 1e-4)
        for g, w in zip(got, want):
            if not (g == w or (math.isnan(g) and math.isnan(w))):
                raise RuntimeError("self-check failed: %s, expected %s" % (list(got), list(want)))
    # bfloat16 1.5 (0x3fc0) and float16 1.5 (0x3e00) against float32 1.25: r = 1.2
    half = (ctypes.c_uint16 * 3)(0x3fc0, 0x3fc0, 0x3fc0)
    f16 = (ctypes.c_uint16 * 3)(0x3e00, 0x3e00, 0x3e00)
    ref = _array([1.25, 1.25, 1.25])
    for ptr, code in ((half, BFLOAT16), (f16, FLOAT16)):
        got = kernel.run(ctypes.addressof(ptr), code, ctypes.addressof(ref), FLOAT32, 3, 1e-2)
        if got[2] != f32(1.5 / 1.25) or got[3] != got[2]:
            raise RuntimeError("self-check failed on dtype %d: %s" % (code, list(got)))
    # the noise on bfloat16 [1.0, -0.0078125, 0.0100708, -0.0100708] (x4) and a NaN: add_noise with eps 1e-4 where
    # |x| > bfloat16(0.01) (1.0 + 1e-4 rounds back to 1.0, 0.0100708 +- 1e-4 moves two steps up, one down),
    # bit_noise where |x| > the smallest normal; the NaN is kept and makes the maximum NaN
    bf = (ctypes.c_uint16 * 17)(*([0x3f80, 0xbc00, 0x3c25, 0xbc25] * 4 + [0x7fc0]))
    out = (ctypes.c_uint16 * 17)()
    for mode, thr, want_bits in ((ADD_NOISE, 0.010009765625, [0x3f80, 0xbc00, 0x3c27, 0xbc23]),
                                 (BIT_NOISE, 2.0 ** -126, [0x3f81, 0xbc01, 0x3c24, 0xbc24])):
        top = kernel.noise(ctypes.addressof(bf), BFLOAT16, 17, mode, 1e-4, thr, ctypes.addressof(out))
        if list(out) != want_bits * 4 + [0x7fc0] or not math.isnan(top):
            raise RuntimeError("self-check failed on noise %d: %s" % (mode, list(out)))
    top = kernel.noise(ctypes.addressof(bf), BFLOAT16, 16, ADD_NOISE, 1e-4, 0.010009765625, ctypes.addressof(out))
    xf = (ctypes.c_float * 2)(1.0, -1e-6)
    fout = (ctypes.c_float * 2)()
    ftop = kernel.noise(ctypes.addressof(xf), FLOAT32, 2, ADD_NOISE, 1e-8, f32(1e-4), ctypes.addressof(fout))
    if top != 1.0 or list(fout) != [f32(1.0 + f32(1e-8)), f32(-1e-6)] or ftop != 1.0:
        raise RuntimeError("self-check failed on noise: %s %s %s" % (top, list(fout), ftop))


_local = threading.local()


def _load() -> Optional[ctypes.CDLL]:
    lib = build.load()
    if lib is None:
        return None  # build.load said why
    try:
        self_check(FusedCompare(lib))
    except Exception as exc:  # noqa: BLE001 - any failure means the framework path, said once
        log.warning("native free_benchmark comparison unavailable (%s); comparison by the framework's passes", exc)
        return None
    return lib


_library: Once[Optional[ctypes.CDLL]] = Once(_load)


def fused_compare() -> Optional[FusedCompare]:
    """This thread's ``FusedCompare`` over the cached library, or None when the kernel is unavailable."""
    kernel = getattr(_local, "kernel", None)
    if kernel is not None:
        return kernel
    lib = _library.get()
    if lib is None:
        return None
    kernel = _local.kernel = FusedCompare(lib)
    return kernel


def reset() -> None:
    """Forget the outcome of the first use (tests)."""
    _library.reset()
    _local.__dict__.clear()


__all__ = ["FusedCompare", "fused_compare", "self_check", "reset", "f32", "FLOAT32", "FLOAT16", "BFLOAT16",
           "THREADS_FROM", "ADD_NOISE", "BIT_NOISE"]
