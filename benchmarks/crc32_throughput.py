"""CRC-32 throughput: the native kernel (engines/native/crc32.c, each method this CPU has) against zlib.crc32.

    python benchmarks/crc32_throughput.py [--repeat 7] [--threads 2]

Per buffer size (4 KiB to 64 MiB; up to 1 MiB the buffer stays in cache across repeats, as a tensor just read by
the statistics kernel does; 64 MiB comes from memory): GB/s of ``zlib.crc32``, of the kernel by byte tables,
PCLMULQDQ and VPCLMULQDQ (AVX-512) where the CPU has them, of the kernel's threaded path with ``--threads``
threads, and of ``zlib.crc32`` over a copy made first (what md5 mode paid per tensor before: a private host copy,
then zlib). The best of ``--repeat`` timings (the machine is shared: the minimum is the least disturbed). Every
value is checked equal to zlib's first.
"""

import argparse
import sys
import timeit
import zlib
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.native import crc32 as nc  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20]


def gbps(fn: Callable[[], object], nbytes: int, repeat: int) -> float:
    number = max(1, (256 << 20) // nbytes)
    return nbytes * number / min(timeit.repeat(fn, number=number, repeat=repeat)) / 1e9


def row(k: nc.NativeCrc32, buf: np.ndarray, threads: int, repeat: int) -> List[float]:
    """GB/s of each way of hashing ``buf``, in the table's column order (each checked against zlib first)."""
    size = buf.nbytes
    ptr = buf.__array_interface__["data"][0]
    want = zlib.crc32(buf)
    runs: List[Callable[[], object]] = [lambda: zlib.crc32(buf), lambda: zlib.crc32(buf.copy())]
    runs += [lambda m=m: k.fn_with(0, ptr, size, m) for m in range(k.method + 1)]
    runs.append(lambda: k.fn_threads(0, ptr, size, threads))
    for fn in runs[2:]:
        assert fn() == want
    return [gbps(fn, size, repeat) for fn in runs]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    k = nc.kernel()
    if k is None:
        print("the native CRC32 kernel is not in use here (see the log line above); nothing to compare")
        return 1
    print("kernel: %s" % nc.method_name())
    cols = ["zlib", "copy + zlib"] + [nc.METHOD_NAMES[m] for m in range(k.method + 1)] + \
        ["%s, %d threads" % (nc.METHOD_NAMES[k.method], args.threads)]
    print("| size | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    rng = np.random.default_rng(0)
    for size in SIZES:
        figures = row(k, rng.integers(0, 256, size=size, dtype=np.uint8), args.threads, args.repeat)
        label = "%d KiB" % (size >> 10) if size < (1 << 20) else "%d MiB" % (size >> 20)
        print("| %s | " % label + " | ".join("%.1f" % f for f in figures) + " |")
    print("(GB/s; the threaded path cuts a buffer into pieces of at least 256 KiB; the capture asks for threads "
          "only from %d MiB)" % (nc.THREADS_FROM >> 20))
    return 0


if __name__ == "__main__":
    sys.exit(main())
