"""CRC-32 of raw bytes by the native kernel (``crc32.c``: carry-less-multiply folding on the widest vectors the CPU has),
else by ``zlib.crc32``; the same value either way (decision 28, "CRC32").

``crc32(data, value=0)`` is ``zlib.crc32`` for any buffer; ``crc32_at(ptr, nbytes, value=0, threads=1)`` hashes
memory given by its address (a tensor's ``data_ptr()``), on up to ``threads`` threads for large buffers (the pieces'
CRCs combined: the same value). The kernel is used only after it has given zlib's value on a set of buffers (every
method this CPU has, lengths around each block size, unaligned starts, a continued CRC, the threaded path); when
the library is unavailable, the check fails, or the CPU has no carry-less multiply (the kernel's byte tables are
slower than zlib), zlib is used and one log line says why.
"""

import ctypes
import logging
import os
import random
import zlib
from typing import Any, Callable, Optional

import numpy as np

from engines.native import build, fastpath
from engines.native.once import Once

log = logging.getLogger("engines.native")

TABLES, PCLMUL, VPCLMUL256, VPCLMUL512 = 0, 1, 2, 3  # the kernel's methods (pt_crc32_with)
METHOD_NAMES = {TABLES: "tables", PCLMUL: "PCLMULQDQ", VPCLMUL256: "VPCLMULQDQ (AVX2)",
                VPCLMUL512: "VPCLMULQDQ (AVX-512)"}
# Below this many bytes a buffer is hashed on one thread.
THREADS_FROM = 8 << 20


class NativeCrc32:
    """The bound kernel functions (argument types set once)."""

    __slots__ = ("fn", "fn_with", "fn_threads", "fn_combine", "method")

    def __init__(self, lib: ctypes.CDLL) -> None:
        u32, ptr, size = ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t
        self.fn = lib.pt_crc32
        self.fn.argtypes = [u32, ptr, size]
        self.fn.restype = u32
        self.fn_with = lib.pt_crc32_with
        self.fn_with.argtypes = [u32, ptr, size, ctypes.c_int]
        self.fn_with.restype = u32
        self.fn_threads = lib.pt_crc32_threads
        self.fn_threads.argtypes = [u32, ptr, size, ctypes.c_int]
        self.fn_threads.restype = u32
        self.fn_combine = lib.pt_crc32_combine
        self.fn_combine.argtypes = [u32, u32, ctypes.c_uint64]
        self.fn_combine.restype = u32
        method = lib.pt_crc32_method
        method.argtypes = []
        method.restype = ctypes.c_int
        self.method = int(method())

    def at(self, ptr: int, nbytes: int, value: int = 0, threads: int = 1) -> int:
        if threads > 1 and nbytes >= THREADS_FROM:
            return self.fn_threads(value, ptr, nbytes, threads)
        return self.fn(value, ptr, nbytes)

    def __call__(self, data: Any, value: int = 0) -> int:
        arr = _bytes_view(data)
        return self.fn(value, arr.__array_interface__["data"][0], arr.nbytes)

    def combine(self, crc1: int, crc2: int, len2: int) -> int:
        """The CRC of A then B from crc(A), crc(B) and len(B)."""
        return self.fn_combine(crc1, crc2, len2)


def _bytes_view(data: Any) -> np.ndarray:
    """The bytes of a buffer (C-contiguous, as zlib reads it) as a uint8 array, without a copy."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise BufferError("a C-contiguous buffer is required")
        return data.reshape(-1).view(np.uint8) if data.ndim != 1 or data.dtype != np.uint8 else data
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


def self_check(kernel: NativeCrc32) -> None:
    """Raise unless every method this CPU has, and the threaded path, give zlib's value."""
    rng = random.Random(21)
    data = bytes(rng.getrandbits(8) for _ in range(5000)) + os.urandom(3000)
    buf = np.frombuffer(data, dtype=np.uint8)
    base = buf.__array_interface__["data"][0]
    if kernel(b"123456789") != 0xCBF43926:  # the CRC-32 check value
        raise RuntimeError("self-check failed on the check value: %08x" % kernel(b"123456789"))
    lengths = [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 127, 128, 255, 256, 257, 319, 320, 511, 512, 513, 1000, 4097,
               7000]
    for method in range(kernel.method + 1):
        for i, n in enumerate(lengths):
            off = i % 13
            start = (0, 0xFFFFFFFF, 0x9E3779B9)[i % 3]
            got = kernel.fn_with(start, base + off, n, method)
            want = zlib.crc32(data[off:off + n], start)
            if got != want:
                raise RuntimeError("self-check failed (%s, %d bytes at +%d): %08x != %08x"
                                   % (METHOD_NAMES.get(method, method), n, off, got, want))
    raw = os.urandom((1 << 20) + 77)
    big = np.frombuffer(raw, dtype=np.uint8)
    got = kernel.fn_threads(5, big.__array_interface__["data"][0] + 1, big.nbytes - 1, 3)
    if got != zlib.crc32(raw[1:], 5):
        raise RuntimeError("self-check failed on three threads")
    if kernel.combine(zlib.crc32(data[:100]), zlib.crc32(data[100:]), len(data) - 100) != zlib.crc32(data):
        raise RuntimeError("self-check failed on combine")




def _load() -> Optional[NativeCrc32]:
    lib = build.load()  # None: build.load logged why (off, no compiler, build failed)
    if lib is None:
        log.info("native CRC32 kernel: no native library; CRC32 by zlib")
        return None
    try:
        kernel = NativeCrc32(lib)
        if kernel.method == TABLES:
            log.info("native CRC32 kernel: no carry-less multiply on this CPU; CRC32 by zlib")
            return None
        self_check(kernel)
        return kernel
    except Exception as exc:  # noqa: BLE001 - any failure means zlib, said once
        log.warning("native CRC32 kernel unavailable (%s); CRC32 by zlib", exc)
        return None


_kernel: Once[Optional[NativeCrc32]] = Once(_load)


def kernel() -> Optional[NativeCrc32]:
    """The checked native kernel, or None (zlib then); decided once a process."""
    return _kernel.get()


def reset() -> None:
    """Forget the outcome of ``kernel()`` and ``fast_at()`` (tests)."""
    _kernel.reset()
    _fast_at.reset()


def crc32(data: Any, value: int = 0) -> int:
    """``zlib.crc32(data, value)`` of a C-contiguous buffer, by the native kernel when it is available."""
    k = kernel()
    if k is None:
        return zlib.crc32(data, value)
    return k(data, value)


def crc32_at(ptr: int, nbytes: int, value: int = 0, threads: int = 1) -> int:
    """The CRC-32 of ``nbytes`` bytes at address ``ptr`` (memory the caller keeps alive and unchanged meanwhile)."""
    k = kernel()
    if k is not None:
        return k.at(ptr, nbytes, value, threads)
    if nbytes == 0:
        return value & 0xFFFFFFFF
    return zlib.crc32((ctypes.c_char * nbytes).from_address(ptr), value)


def _bind_fast_at() -> Optional[Callable[[int, int], int]]:
    """The fast path's ``crc32_at(ptr, nbytes)`` (``engines/native/pyext/fastpath.c``: the kernel's ``pt_crc32``
    without a ctypes call), checked against the kernel on buffers around its block sizes, or None."""
    k = kernel()
    module = fastpath.module() if k is not None else None
    lib = build.load()
    if k is None or module is None or lib is None:
        return None
    try:
        fastpath.configure_crc(module, lib)
        fn = module.crc32_at
        raw = os.urandom(300000)
        buf = np.frombuffer(raw, dtype=np.uint8)
        base = buf.__array_interface__["data"][0]
        for off, n in ((0, 0), (1, 1), (3, 63), (0, 64), (5, 513), (7, 4097), (0, 262144), (9, 299990)):
            if fn(base + off, n) != zlib.crc32(raw[off:off + n]):
                raise RuntimeError("self-check failed (%d bytes at +%d)" % (n, off))
        return fn
    except Exception as exc:  # noqa: BLE001 - NativeCrc32.at then, said once
        log.warning("CRC32 fast path unavailable (%s); the ctypes call", exc)
        return None


_fast_at: Once[Optional[Callable[[int, int], int]]] = Once(_bind_fast_at)


def fast_at() -> Optional[Callable[[int, int], int]]:
    """``crc32_at(ptr, nbytes)`` on one thread from 0 without a ctypes call, or None; decided once a process."""
    return _fast_at.get()


def method_name() -> str:
    """How CRC32 is computed in this process: the kernel's method, or "zlib"."""
    k = kernel()
    return "zlib" if k is None else METHOD_NAMES.get(k.method, str(k.method))


__all__ = ["NativeCrc32", "kernel", "fast_at", "reset", "crc32", "crc32_at", "self_check", "method_name", "THREADS_FROM",
           "TABLES", "PCLMUL", "VPCLMUL256", "VPCLMUL512"]
