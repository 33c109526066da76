"""Median step time of the demo model: both size presets, fp32 and bf16 autocast, torch on one thread.

    python benchmarks/demo_speed.py [--repeats 3] [--json]

One step = zero_grad + forward + loss + backward + AdamW step + loss.item(), timed inside the demo loop.
Each configuration runs ``repeats`` times (interleaved); the first ``warmup`` steps of each run are dropped.
Reported: median step time over all kept steps, the spread (min-max of the per-run medians), and the peak
host memory of the process. fp16 autocast is left out by default: on a CPU without native float16 matmul it
is about 15x slower than fp32 (``--with-fp16`` adds the tiny preset in fp16).
"""

import argparse
import json
import os
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engines.adapters.torch.demo import train  # noqa: E402
from engines.demo.knobs import resolve_knobs  # noqa: E402
from engines.demo.weights import parameter_count  # noqa: E402

CONFIGS = {
    "default fp32": {"preset": "default", "dtype": "fp32", "steps": 12},
    "default bf16": {"preset": "default", "dtype": "bf16", "steps": 12},
    "tiny fp32": {"preset": "tiny", "dtype": "fp32", "steps": 60},
    "tiny bf16": {"preset": "tiny", "dtype": "bf16", "steps": 60},
}
FP16 = {"tiny fp16": {"preset": "tiny", "dtype": "fp16", "steps": 30}}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--with-fp16", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    configs = dict(CONFIGS, **(FP16 if args.with_fp16 else {}))

    kept = {name: [] for name in configs}
    run_medians = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, knobs in configs.items():  # interleaved
            times = train(knobs).step_times_s[args.warmup:]
            kept[name] += times
            run_medians[name].append(statistics.median(times))

    rows = {}
    for name, knobs in configs.items():
        rows[name] = {
            "params": parameter_count(resolve_knobs(knobs)),
            "median_ms": round(1000 * statistics.median(kept[name]), 3),
            "spread_ms": [round(1000 * min(run_medians[name]), 3), round(1000 * max(run_medians[name]), 3)],
            "steps_timed": len(kept[name]),
        }
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "peak_rss_mb": round(peak_rss_mb(), 1), "configs": rows}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"demo step time, torch {report['torch']}, {report['threads']} thread, "
          f"median over {args.repeats} interleaved runs")
    print(f"{'config':<14} {'params':>10} {'median ms':>10} {'spread ms':>18}")
    for name, row in rows.items():
        lo, hi = row["spread_ms"]
        print(f"{name:<14} {row['params']:>10,} {row['median_ms']:>10.2f} {lo:>8.2f} - {hi:<8.2f}")
    print(f"peak host memory {report['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
