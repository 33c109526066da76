"""Overhead of the training-state monitor on the demo's reference workload (docs/decisions/0021-reference-workload.md).

Arms: no tool; weight-gradient norms of every parameter; activations (inputs, outputs and their gradients) of
every block plus weight-gradient norms; everything (all modules' activations, weight gradients, Adam state,
update and ratio, parameters, every metric). Each arm runs in its own process (so that its peak memory is its
own), arms interleaved, rounds repeated; a step is forward + loss + backward + optimizer step + the tool's
per-step work, torch on one thread. Printed: median step time and its ratio to the baseline with the spread
over rounds, the training thread's CPU-time ratio, the whole process's CPU-time ratio (the store is written by
a background thread, which may use the second core), and the peak host memory.

Targets (the issue): weight-gradient norms <= 1.05x, activations of every block <= 1.3x. msprobe 26.2.0 on this
workload: 4.44x everything, 1.23x weight-gradient norms only (docs/reference/msprobe-baselines.md).

    python benchmarks/monitor_overhead.py [--rounds 3] [--steps 8] [--preset default] [--arms baseline,everything]

``--arms "baseline,everything,everything (torch)"`` adds the everything arm with the native kernels off
(``PROBE_TUI_NATIVE=0``: torch's passes and foreach calls), interleaved with the others.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {
    "baseline": None,
    "weight-grad norms": {"wg_distribution": True, "ops": ["norm"]},
    "block activations": {"wg_distribution": True, "xy_distribution": True, "ops": ["norm"],
                          "targets": {r"blocks\.\d+": {}}},
    "everything": {"wg_distribution": True, "xy_distribution": True, "all_xy": True, "mv_distribution": True,
                   "ur_distribution": True, "param_distribution": True, "mg_direction": True,
                   "ops": ["norm", "min", "max", "mean", "zeros", "nans"]},
}
ARMS["everything (torch)"] = ARMS["everything"]
# Arms run with the native kernels off (the torch passes; not run unless named with --arms).
ARM_ENV = {"everything (torch)": {"PROBE_TUI_NATIVE": "0"}}
WARMUP = 2


def instrument(arm: str, workdir: Path):
    """Install the arm's instrumentation as the monitor engine does; returns a function that removes it."""
    section = ARMS[arm]
    if section is None:
        return lambda: None
    from engines.adapters.torch.monitor import MonitorSession, alert_rules
    from engines.monitor.writer import MetricsWriter
    from engines.monitor.writer_thread import BackgroundWriter
    from schemas import load_config

    body = dict(section, alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0}},
                                          {"rule_name": "AnomalyNan", "args": {}}]})
    job = load_config({"task": "monitor", "monitor": body}, on_warning=lambda *a: None)
    writer = BackgroundWriter(MetricsWriter(workdir / "rank0", rules=alert_rules(job.monitor)))
    session = MonitorSession(job.monitor, writer, loss_from_target=True).install()

    def remove():
        session.remove()
        writer.close()

    return remove


def child(arm: str, steps: int, preset: str) -> None:
    import torch

    torch.set_num_threads(1)
    from engines.adapters.torch.demo import train

    thread_marks, process_marks, wall_marks = [], [], []

    def on_step(step, loss):
        thread_marks.append(time.thread_time())
        process_marks.append(time.process_time())
        wall_marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        remove = instrument(arm, Path(tmp))
        start = (time.thread_time(), time.process_time(), time.perf_counter())
        try:
            train({"preset": preset, "steps": steps + WARMUP}, on_step=on_step)
        finally:
            remove()
    marks = [thread_marks, process_marks, wall_marks]
    deltas = [[b - a for a, b in zip([s] + m[:-1], m)][WARMUP:] for s, m in zip(start, marks)]
    print(json.dumps({"thread": deltas[0], "process": deltas[1], "wall": deltas[2],
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run_arm(script: Path, arm: str, steps: int, preset: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **ARM_ENV.get(arm, {}))
    out = subprocess.run([sys.executable, str(script), "--child", arm, "--steps", str(steps), "--preset", preset],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(arms, results, baseline: str) -> None:
    base = {k: [statistics.median(r[k]) for r in results[baseline]] for k in ("wall", "thread", "process")}
    print(f"{'arm':<20} {'step ms':>8} {'ratio':>7} {'spread':>13} {'thread CPU':>10} {'process CPU':>11} {'peak MB':>8}")
    for arm in arms:
        per_round = {k: [statistics.median(r[k]) for r in results[arm]] for k in ("wall", "thread", "process")}
        ratios = [a / b for a, b in zip(per_round["wall"], base["wall"])]
        cpu = statistics.median(per_round["thread"]) / statistics.median(base["thread"])
        proc = statistics.median(per_round["process"]) / statistics.median(base["process"])
        peak = max(r["peak_rss_mb"] for r in results[arm])
        print(f"{arm:<20} {statistics.median(per_round['wall']) * 1e3:8.1f} {statistics.median(ratios):6.3f}x "
              f"{min(ratios):5.2f}-{max(ratios):5.2f}x {cpu:9.3f}x {proc:10.3f}x {peak:8.0f}")


def main(argv=None, arms=ARMS, script: Path = Path(__file__).resolve()) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="measured steps a run (after 2 warm-up steps)")
    parser.add_argument("--preset", default="default", choices=["default", "tiny"])
    parser.add_argument("--arms", help="comma-separated arms, the first one the reference (default: every arm but "
                                           + ", ".join(repr(a) for a in ARM_ENV) + ")")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.steps, args.preset)
    if args.arms:
        names = [a.strip() for a in args.arms.split(",")]
        unknown = [a for a in names if a not in arms]
        if unknown:
            parser.error("unknown arm(s) %s; arms: %s" % (", ".join(unknown), ", ".join(arms)))
        arms = {a: arms[a] for a in names}
    else:
        arms = {a: section for a, section in arms.items() if a not in ARM_ENV}
    results = {arm: [] for arm in arms}
    started = time.perf_counter()
    for r in range(args.rounds):
        for arm in arms:
            results[arm].append(run_arm(script, arm, args.steps, args.preset))
        print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(f"demo preset {args.preset}, {args.steps} measured steps x {args.rounds} rounds, torch 1 thread")
    report(list(arms), results, next(iter(arms)))


if __name__ == "__main__":
    main()
