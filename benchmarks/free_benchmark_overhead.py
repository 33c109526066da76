"""free_benchmark overhead on the bf16-autocast demo: step time against the same model unchecked, interleaved.

    python benchmarks/free_benchmark_overhead.py [--preset default|tiny] [--rounds 3] [--steps 4] [--preheat]

Arms (forward stage unless said): a one-API list (``Demo.naive_softmax``, the demo's injected low-precision
softmax, and ``matmul``) with improve_precision check; the whole network with improve_precision check and fix,
add_noise, no_change; backward stage improve_precision on a one-API list (``linear``); with ``--preheat`` the
preheat steps of the whole network. Targets: one-API list <= 2.5x, whole network forward improve_precision <= 5x
(msprobe 8.3.3 on this machine: 10.0x whole network; on 7B models 9-14x); whole network check, every
perturbation, <= 2x (issue 21; docs/FREE_BENCHMARK.md, "Figures", says where the time goes). torch runs on one
thread.
"""

import argparse
import json
import statistics
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._workload import Workload, interleaved, peak_rss_mb, reset_peak_rss, session_step  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.frameworks import adapter_module  # noqa: E402
from engines.free_benchmark.options import FreeBenchmarkOptions  # noqa: E402
from engines.free_benchmark.session import build_session  # noqa: E402

ARMS = {
    "one API (naive_softmax), improve_precision": dict(list_patterns=("naive_softmax",)),
    "one API (matmul), improve_precision": dict(list_patterns=("Tensor.matmul",)),
    "whole network, improve_precision": dict(),
    "whole network, improve_precision fix": dict(handler_type="fix"),
    "whole network, add_noise": dict(pert_mode="add_noise"),
    "whole network, no_change": dict(pert_mode="no_change"),
    "backward, one API (linear), improve_precision": dict(fuzz_stage="backward", list_patterns=("linear",)),
}
PREHEAT = {"whole network, preheat steps": dict(if_preheat=True, preheat_step=10**6, max_sample=20)}


def _counter(found):
    return lambda step, rows: found.append(len(rows))


def run_arm(preset: str, arm: dict, rounds: int, steps: int, warmup: int):
    ratios, cpu, rows, base = [], [], [], []
    reset_peak_rss()
    for _ in range(rounds):
        work = Workload(preset, "bf16", {"lowp_softmax": {"layer": 1}})
        fb = FreeBenchmarkOptions(**arm)
        found = []
        session = build_session(partial(adapter_module, "pytorch"), CaptureOptions(level="L1"), fb,
                                on_step=_counter(found), rank=0)
        if fb.preheat:  # measure sampling steps, not the counting step 0
            session_step(session, work)()
        got = interleaved(work, session_step(session, work), steps, warmup)
        session.close()
        ratios.append(got["ratio"])
        cpu.append(got["cpu_ratio"])
        base.append(got["base_s"])
        rows.append(statistics.mean(found) if found else 0)
    return {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
            "cpu_ratio": statistics.median(cpu), "rows_per_step": statistics.median(rows),
            "base_step_s": statistics.median(base), "peak_rss_mb": peak_rss_mb()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=("default", "tiny"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--preheat", action="store_true")
    ap.add_argument("--only", default="", help="run the arms whose name contains this text")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    arms = dict(ARMS, **(PREHEAT if args.preheat else {}))
    results = {}
    for name, arm in arms.items():
        if args.only and args.only not in name:
            continue
        got = run_arm(args.preset, arm, args.rounds, args.steps, args.warmup)
        results[name] = got
        print("%-48s %6.2fx (%.2f-%.2f)  cpu %5.2fx  rows/step %5.0f  base %.3fs  peak %.0f MB" % (
            name, got["ratio"], got["spread"][0], got["spread"][1], got["cpu_ratio"], got["rows_per_step"],
            got["base_step_s"], got["peak_rss_mb"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
