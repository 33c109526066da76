"""Online check overhead on the fp32 demo with the injected low-precision softmax: step time against the same
model uninstrumented, interleaved step by step (docs/ACC_CHECK.md, "Online check").

    python benchmarks/online_check_overhead.py [--preset default|tiny] [--rounds 3] [--steps 4]

Arms: the capture session alone (statistics, nothing written: what the check rides on), a one-API list
(``naive_softmax``), the whole network, and the whole network judged without the pre-screen
(``engines/acc_check/prescreen.py``: every output through every standard, as before it). Each prints the median
wall and CPU-time ratios against the uninstrumented step, the calls judged per step (forward + backward) and the
machine load (``uptime``). torch runs on one thread.
"""

import argparse
import os
import statistics
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks._workload import Workload, interleaved, session_step  # noqa: E402
from engines.acc_check import online as oc  # noqa: E402
from engines.acc_check import prescreen  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.frameworks import adapter_module  # noqa: E402

ARMS = {
    "capture session only (no online check)": None,
    "online check, one API (naive_softmax)": ["naive_softmax"],
    "online check, whole network": [],
    "online check, whole network, no pre-screen": [],
}


def _count(judged: list, step: int, rows: list) -> None:
    judged.append(len({r["name"] for r in rows}))


def run_arm(preset: str, patterns, rounds: int, steps: int, warmup: int):
    adapter = partial(adapter_module, "pytorch")
    ratios, cpu, calls, base = [], [], [], []
    for _ in range(rounds):
        work = Workload(preset, "fp32", {"lowp_softmax": {"layer": 1}})
        session = adapter("session").Session(CaptureOptions(level="L1"), None, rank=0)
        judged: list = []
        if patterns is not None:
            oc.build(adapter, session, patterns, partial(_count, judged))
        got = interleaved(work, session_step(session, work), steps, warmup)
        session.close()
        ratios.append(got["ratio"])
        cpu.append(got["cpu_ratio"])
        base.append(got["base_s"])
        calls.append(statistics.mean(judged) if judged else 0)
    return {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
            "cpu_ratio": statistics.median(cpu), "calls_per_step": statistics.median(calls),
            "base_step_s": statistics.median(base)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=("default", "tiny"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    quick = prescreen.prescreen
    for name, patterns in ARMS.items():
        prescreen.prescreen = (lambda *a, **k: None) if "no pre-screen" in name else quick  # type: ignore
        got = run_arm(args.preset, patterns, args.rounds, args.steps, args.warmup)
        load = os.getloadavg()
        print("%-42s %6.2fx (%.2f-%.2f)  cpu %5.2fx  calls judged/step %5.0f  base %.3fs  load %.2f %.2f %.2f" % (
            name, got["ratio"], got["spread"][0], got["spread"][1], got["cpu_ratio"], got["calls_per_step"],
            got["base_step_s"], *load), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
