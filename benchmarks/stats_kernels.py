"""What the statistics of one tensor cost on the CPU: each torch kernel alone, and ``StatsBatch.add`` whole.

    python benchmarks/stats_kernels.py [--repeat 7]

Per shape (tiny-preset and default-preset sizes, float32 unless ``--dtype``, one torch thread unless
``--threads``): ``aminmax``, ``amax`` + ``amin``, ``sum``, ``linalg.vector_norm``, one ``.item()``, the native fused
kernel alone (``engines/native``: one read, decision 28), and ``StatsBatch.add`` (what a new tensor entry pays)
with the kernel and without it (torch's reductions, the fallback), in µs, the best of ``--repeat`` timings (the
machine is shared: the minimum is the least disturbed). ``sum`` alone is about what one read of the tensor costs
(docs/CAPTURE.md, "One read, not three"). Then attention's strided views of the default preset (a q slice of
the qkv output, its heads, k transposed for q @ k^T): the fused column is the kernel's strided walk.
"""

import argparse
import os
import subprocess
import sys
import timeit
from pathlib import Path
from typing import Callable, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(16, 32), (2, 8, 100), (8, 64, 256), (8, 4, 64, 64), (512, 1024)]
# (label, view of a fresh (8, 64, 768) tensor): the strided views the default preset records at L1
VIEWS = [("q slice 8x64x256 of 8x64x768", lambda x: x[..., :256]),
         ("q heads 8x4x64x64, inner stride 1", lambda x: x.view(8, 64, 3, 4, 64)[:, :, 0].transpose(1, 2)),
         ("k^T 8x4x64x64, inner stride 768", lambda x: x.view(8, 64, 3, 4, 64)[:, :, 1].permute(0, 2, 3, 1))]


def best_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--large", action="store_true", help="also a 4096 x 4096 tensor")
    args = parser.parse_args(argv)
    import torch

    from engines.adapters.torch import tensor_stats
    from engines.adapters.torch.tensor_stats import StatsBatch
    from engines.native.stats import fused_stats

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    kernel = fused_stats()
    if kernel is None:
        print("the native kernel is unavailable here: its columns show the fallback")
    torch.manual_seed(0)
    norm = torch.linalg.vector_norm
    stats = StatsBatch()
    fallback = StatsBatch()
    fallback._fused = None
    one = torch.tensor(1.0)
    code = tensor_stats._NATIVE_CODE[dtype][0]
    print("load: " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    print("%s, %d torch thread(s)" % (args.dtype, args.threads))
    print("| shape | elements | aminmax | amax + amin | sum | vector_norm | .item() | fused kernel | StatsBatch.add "
          "| add, torch fallback |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def measure(t: "torch.Tensor") -> List[float]:
        def add() -> None:
            stats.add(0, t)
            stats.clear()

        def add_fallback() -> None:
            fallback.add(0, t)
            fallback.clear()

        def fused() -> None:
            if kernel is not None:
                if t.is_contiguous():
                    kernel.run(t.data_ptr(), t.numel(), code, code, args.threads)
                else:
                    kernel.run_strided(t.data_ptr(), t.shape, t.stride(), code, code, args.threads)

        n = 2000 if t.numel() < 100_000 else (50 if t.numel() < 4_000_000 else 3)
        return [best_us(f, n, args.repeat) for f in (lambda: torch.aminmax(t), lambda: (t.amax(), t.amin()),
                                                     lambda: t.sum(), lambda: norm(t), lambda: one.item(), fused,
                                                     add, add_fallback)]

    for shape in SHAPES + ([(4096, 4096)] if args.large else []):
        t = torch.randn(shape).to(dtype)
        row = measure(t)
        print("| %s | %d | %s |" % ("x".join(map(str, shape)), t.numel(), " | ".join("%.1f" % v for v in row)))
    for label, make in VIEWS:
        t = make(torch.randn(8, 64, 768).to(dtype))
        row = measure(t)
        print("| %s | %d | %s |" % (label, t.numel(), " | ".join("%.1f" % v for v in row)))
    print("(µs, best of %d; pid %d)" % (args.repeat, os.getpid()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
