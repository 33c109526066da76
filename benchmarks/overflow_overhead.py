"""overflow_check overhead on the healthy demo, against statistics at the same level, step time interleaved with
the bare model (docs/decisions/0021-reference-workload.md).

    python benchmarks/overflow_overhead.py [--preset default|tiny] [--dtype fp32|fp16|bf16] [--rounds 3] [--steps 4]

Arms: statistics L1 (the capture's own arm, for reference), overflow_check L0 / L1 / mix, and overflow_check L1
with the finiteness tests batched as on an accelerator (``batched``: one host transfer per step; on the CPU a
value is read for free, so the default path reads at once). Target: overflow_check L1 overhead no more than
statistics L1's (msprobe 8.3.3 on this machine: overflow_check L1 21.7x, statistics L1 18.1x).
"""

import argparse
import json
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._workload import Workload, interleaved, peak_rss_mb, reset_peak_rss, session_step  # noqa: E402
from engines.adapters.torch.session import TorchCaptureSession  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.capture.sink import dump_sink_factory  # noqa: E402
from engines.capture.summary import CaptureSummary  # noqa: E402
from engines.frameworks import adapter_module  # noqa: E402
from engines.overflow.session import build_session  # noqa: E402

ARMS = {
    "statistics L1": ("statistics", "L1", False),
    "overflow_check L0": ("overflow", "L0", False),
    "overflow_check L1": ("overflow", "L1", False),
    "overflow_check mix": ("overflow", "mix", False),
    "overflow_check L1 batched": ("overflow", "L1", True),
}


def _session(kind: str, level: str, batched: bool, folder: Path):
    options = CaptureOptions(level=level)
    summary = CaptureSummary()
    sinks = dump_sink_factory(lambda rank: folder / ("rank%d" % rank), options, {"framework": "pytorch"}, summary)
    if kind == "statistics":
        return TorchCaptureSession(options, sinks, summary=summary, rank=0)
    return build_session(partial(adapter_module, "pytorch"), options, sinks, summary=summary, overflow_nums=-1, rank=0,
                         batched=batched)


def run_arm(preset: str, dtype: str, arm, rounds: int, steps: int, warmup: int):
    kind, level, batched = arm
    ratios, cpu, syncs = [], [], []
    reset_peak_rss()
    for _ in range(rounds):
        work = Workload(preset, dtype)
        with tempfile.TemporaryDirectory(prefix="probe-ovf-bench-") as tmp:
            session = _session(kind, level, batched, Path(tmp))
            got = interleaved(work, session_step(session, work), steps, warmup)
            session.close()
        ratios.append(got["ratio"])
        cpu.append(got["cpu_ratio"])
        if kind == "overflow":
            syncs.append(session.processor.syncs / float(steps + warmup))
    return {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
            "cpu_ratio": statistics.median(cpu), "syncs_per_step": statistics.median(syncs) if syncs else None,
            "peak_rss_mb": peak_rss_mb()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=("default", "tiny"))
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {}
    for name, arm in ARMS.items():
        got = run_arm(args.preset, args.dtype, arm, args.rounds, args.steps, args.warmup)
        results[name] = got
        sync = "" if got["syncs_per_step"] is None else "  syncs/step %.1f" % got["syncs_per_step"]
        print("%-28s %6.2fx (%.2f-%.2f)  cpu %5.2fx  peak %.0f MB%s" % (
            name, got["ratio"], got["spread"][0], got["spread"][1], got["cpu_ratio"], got["peak_rss_mb"], sync),
            flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
