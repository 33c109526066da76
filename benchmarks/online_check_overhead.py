"""Online check overhead on the fp32 demo with the injected low-precision softmax: step time against the same
model uninstrumented, interleaved step by step (docs/ACC_CHECK.md, "Online check").

    python benchmarks/online_check_overhead.py [--preset default|tiny] [--rounds 3] [--steps 4]

Arms: the capture session alone (statistics, nothing written: what the check rides on), a one-API list
(``naive_softmax``), the whole network, and the whole network judged without the pre-screen
(``engines/acc_check/prescreen.py``: every output through every standard, as before it); then the dispatch level
(``online_check.level: aten``): a one-op list (``naive_softmax``: the ``Demo.naive_softmax.default`` op) and every
aten op of the step (forward, backward and optimizer). ``--arms capture,aten`` runs only the arms naming a word. Each prints the median
wall and CPU-time ratios against the uninstrumented step, the calls judged per step (forward + backward) and the
machine load (``uptime``). torch runs on one thread.

Then the judging alone, steadier on a loaded machine: every output the whole network's check judged in one step
(forward and backward), judged again in full and with the pre-screen, alternately, ``--rounds`` times; the
medians of each pass's CPU time and how many outputs the pre-screen decided.
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

# name -> (api_list or None for no check, online_check.level)
ARMS = {
    "capture session only (no online check)": (None, "api"),
    "online check, one API (naive_softmax)": (["naive_softmax"], "api"),
    "online check, whole network": ([], "api"),
    "online check, whole network, no pre-screen": ([], "api"),
    "aten level, one op (naive_softmax)": (["naive_softmax"], "aten"),
    "aten level, whole network": ([], "aten"),
}


def _count(judged: list, step: int, rows: list) -> None:
    judged.append(len({r["name"] for r in rows}))


def run_arm(preset: str, patterns, rounds: int, steps: int, warmup: int, level: str = "api"):
    adapter = partial(adapter_module, "pytorch")
    ratios, cpu, calls, base = [], [], [], []
    for _ in range(rounds):
        work = Workload(preset, "fp32", {"lowp_softmax": {"layer": 1}})
        session = adapter("session").Session(CaptureOptions(level="L1"), None, rank=0)
        judged: list = []
        if patterns is not None:
            oc.build(adapter, session, patterns, partial(_count, judged), level)
        got = interleaved(work, session_step(session, work), steps, warmup)
        session.close()
        ratios.append(got["ratio"])
        cpu.append(got["cpu_ratio"])
        base.append(got["base_s"])
        calls.append(statistics.mean(judged) if judged else 0)
    return {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
            "cpu_ratio": statistics.median(cpu), "calls_per_step": statistics.median(calls),
            "base_step_s": statistics.median(base)}


def judging_alone(preset: str, rounds: int) -> dict:
    """Per-step judging cost of the whole network: full judgement against pre-screen + full, same outputs."""
    import time

    from engines.acc_check import rules

    adapter = partial(adapter_module, "pytorch")
    seen: list = []
    judge = prescreen.judge

    def spy(*a, **k):
        # copies: a device array may share memory with a tensor the step changes in place later (AdamW)
        seen.append((tuple(x.copy() if hasattr(x, "copy") else x for x in a), k))
        return judge(*a, **k)

    prescreen.judge = spy  # type: ignore
    try:
        work = Workload(preset, "fp32", {"lowp_softmax": {"layer": 1}})
        session = adapter("session").Session(CaptureOptions(level="L1"), None, rank=0)
        oc.build(adapter, session, [])
        session_step(session, work)()
        session.close()
    finally:
        prescreen.judge = judge  # type: ignore
    full_s, quick_s = [], []
    for _ in range(rounds):
        for fn, into in ((rules.judge_tensor, full_s), (prescreen.judge, quick_s)):
            t0 = time.process_time()
            for a, k in seen:
                fn(*a, **k)
            into.append(time.process_time() - t0)
    decided = sum(1 for a, k in seen if prescreen.prescreen(*a, **k) is not None)
    return {"outputs": len(seen), "decided": decided, "full_s": statistics.median(full_s),
            "quick_s": statistics.median(quick_s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=("default", "tiny"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--judging-only", action="store_true", help="only the judging-alone measure")
    ap.add_argument("--arms", default="", help="only the arms whose name contains one of these comma-separated "
                                              "words (capture,aten...); the judging-alone measure is then skipped")
    args = ap.parse_args()
    torch.set_num_threads(1)
    quick = prescreen.prescreen
    words = [w for w in args.arms.split(",") if w]
    for name, (patterns, level) in ({} if args.judging_only else ARMS).items():
        if words and not any(w in name for w in words):
            continue
        prescreen.prescreen = (lambda *a, **k: None) if "no pre-screen" in name else quick  # type: ignore
        got = run_arm(args.preset, patterns, args.rounds, args.steps, args.warmup, level)
        load = os.getloadavg()
        print("%-44s %6.2fx (%.2f-%.2f)  cpu %5.2fx  calls judged/step %5.0f  base %.3fs  load %.2f %.2f %.2f" % (
            name, got["ratio"], got["spread"][0], got["spread"][1], got["cpu_ratio"], got["calls_per_step"],
            got["base_step_s"], *load), flush=True)
    prescreen.prescreen = quick  # type: ignore
    if words:
        return 0
    got = judging_alone(args.preset, args.rounds)
    load = os.getloadavg()
    print("judging alone, one whole-network step: %d outputs, pre-screen decides %d; cpu %.2fs in full, %.2fs with "
          "the pre-screen (%.1fx less)  load %.2f %.2f %.2f" % (
              got["outputs"], got["decided"], got["full_s"], got["quick_s"], got["full_s"] / got["quick_s"], *load),
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
