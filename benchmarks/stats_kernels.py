"""What the statistics of one tensor cost on the CPU: each torch kernel alone, and ``StatsBatch.add`` whole.

    python benchmarks/stats_kernels.py [--repeat 7]

Per shape (tiny-preset and default-preset sizes, float32, one torch thread): ``aminmax``, ``amax`` + ``amin``,
``sum``, ``linalg.vector_norm``, one ``.item()``, and ``StatsBatch.add`` (what a new tensor entry pays), in µs,
the best of ``--repeat`` timings (the machine is shared: the minimum is the least disturbed). ``sum`` alone is
about what one fused read of the tensor would cost (docs/CAPTURE.md, "Three reads, not one").
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


def best_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    import torch

    from engines.adapters.torch.tensor_stats import StatsBatch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    norm = torch.linalg.vector_norm
    stats = StatsBatch()
    one = torch.tensor(1.0)
    print("load: " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    print("| shape | elements | aminmax | amax + amin | sum | vector_norm | .item() | StatsBatch.add |")
    print("|---|---|---|---|---|---|---|---|")
    def measure(t: "torch.Tensor") -> List[float]:
        def add() -> None:
            stats.add(0, t)
            stats.clear()

        n = 2000 if t.numel() < 100_000 else 50
        return [best_us(f, n, args.repeat) for f in (lambda: torch.aminmax(t), lambda: (t.amax(), t.amin()),
                                                     lambda: t.sum(), lambda: norm(t), lambda: one.item(), add)]

    for shape in SHAPES:
        t = torch.randn(shape)
        row = measure(t)
        print("| %s | %d | %s |" % ("x".join(map(str, shape)), t.numel(), " | ".join("%.1f" % v for v in row)))
    print("(µs, best of %d; pid %d)" % (args.repeat, os.getpid()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
