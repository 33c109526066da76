"""Capture overhead on the demo: step time against the same model uninstrumented, the two interleaved.

    python benchmarks/dump_overhead.py [--preset default|tiny|both] [--rounds 3] [--steps 3] [--json FILE]

Arms: imported but disabled, statistics L0 / L1 / mix, statistics L1 with ``summary_mode: hash`` (CRC32 +
xhash) and with ``md5`` (CRC32 only, msprobe's md5), tensor L1. Each measured step of an arm is followed by an uninstrumented step of the same model and
optimizer (so drift and machine noise hit both alike); a step is zero_grad + forward + loss + backward + AdamW
+ the tool's step end (statistics moved to the host, rows committed to the HDF5 store). torch runs on one thread;
the tool's own threads (hashing, async writing) may use another core, which the CPU-time ratio (process CPU
time, all threads) shows.

Reported per arm: median wall ratio (and its spread over rounds), median CPU-time ratio, records, bytes and
files per step per rank, peak resident memory while the arm ran, and the overhead per captured record in
microseconds (the figure that matters on fast accelerators, where the tiny preset lives).

msprobe 26.2.0 on this kind of machine (docs/reference/msprobe-baselines.md): statistics L0 1.65x, L1 3.79x,
mix 4.47x, L1+md5 6.50x, tensor L1 22.7x (1,572 files a step); tiny preset L0 ~12x, L1 ~49x, mix ~72x,
L1 md5 ~137x, tensor L1 ~282x. Our targets: overhead (ratio - 1) at most a third of those.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._workload import (  # noqa: E402
    STATISTICS_ARMS,
    Workload,
    arm_rounds,
    each_arm,
    peak_rss_mb,
    reset_peak_rss,
    session_step,
    timed,
)
from engines.adapters.torch.session import TorchCaptureSession  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.capture.sink import dump_sink_factory  # noqa: E402
from engines.capture.summary import CaptureSummary  # noqa: E402
from probe_tui.formatting import format_bytes  # noqa: E402

ARMS = {
    **STATISTICS_ARMS,
    "statistics L1 md5": dict(level="L1", summary_mode="md5"),
    "tensor L1": dict(level="L1", task="tensor"),
}
MSPROBE = {
    "default": {"disabled": 1.0, "statistics L0": 1.65, "statistics L1": 3.79, "statistics mix": 4.47,
                "statistics L1 hash": 6.50, "statistics L1 md5": 6.50, "tensor L1": 22.7},
    "tiny": {"disabled": 1.0, "statistics L0": 12.0, "statistics L1": 49.0, "statistics mix": 72.0,
             "statistics L1 hash": 137.0, "statistics L1 md5": 137.0, "tensor L1": 282.0},
}


def run_arm(work: Workload, arm: str, rounds: int, steps: int, warmup: int, root: Path):
    options = ARMS[arm]

    def open_round(r: int):
        folder = root / ("%s-%d" % (arm.replace(" ", "_"), r))
        summary = CaptureSummary()
        if options is None:
            return work.step, lambda: None, summary, folder  # imported, nothing started: no mode, no hook
        opts = CaptureOptions(**options)
        session = TorchCaptureSession(opts, dump_sink_factory(lambda rank: folder / ("rank%d" % rank), opts,
                                                               {"framework": "pytorch"}, summary),
                                      summary=summary, rank=0)
        return session_step(session, work), session.close, summary, folder

    reset_peak_rss()
    base_rss = peak_rss_mb()
    out = arm_rounds(work, open_round, rounds, steps, warmup)
    out["us_per_record"] = out.pop("s_per_record") * 1e6
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_growth_mb"] = out["peak_rss_mb"] - base_rss
    return out


def run_preset(preset: str, arms, rounds: int, steps: int, warmup: int):
    work = Workload(preset)
    for _ in range(warmup):
        work.step()
    base = statistics.median(timed(work.step)[0] for _ in range(max(steps, 3)))
    out = {"baseline_step_ms": base * 1e3}
    out.update(each_arm(arms, lambda arm, root: run_arm(work, arm, rounds, steps, warmup, root),
                        lambda arm, r: _print_row(preset, arm, r), "probe-tui-overhead-"))
    return out


def _print_row(preset: str, arm: str, r) -> None:
    ms = MSPROBE[preset].get(arm)
    target = 1 + (ms - 1) / 3 if ms else None
    print("%-8s %-19s %6.2fx (%5.2f-%5.2f)  cpu %5.2fx  %6.0f rec  %9s  %4.1f files  %7.1f us/rec  peak %6.0f MB%s"
          % (preset, arm, r["ratio"], r["ratio_min"], r["ratio_max"], r["cpu_ratio"], r["records_per_step"],
             format_bytes(r["bytes_per_step"]), r["files_per_step"], r["us_per_record"], r["peak_rss_mb"],
             ("   target <= %.2fx (msprobe %.2fx)" % (target, ms)) if target and arm != "disabled" else
             "   target <= 1.02x" if arm == "disabled" else ""), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("default", "tiny", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="measured steps per round (after warm-up)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error("--arms: unknown arm %r" % unknown[0])
    presets = ("default", "tiny") if args.preset == "both" else (args.preset,)
    results = {}
    for preset in presets:
        steps = args.steps if preset == "default" else args.steps * 10
        results[preset] = run_preset(preset, arms, args.rounds, steps, args.warmup)
        print("%-8s baseline step %.1f ms" % (preset, results[preset]["baseline_step_ms"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
