"""Writer memory over a long run: resident set size (RSS) every 1,000 steps and the peak, per store mode.

    python benchmarks/store_memory.py                     # 5,000 steps of a small statistics step, both modes
    python benchmarks/store_memory.py --workload demo     # the tiny demo under a statistics (L1) capture instead
    python benchmarks/store_memory.py --steps 2000 --modes swmr

Each mode runs in a fresh process. ``store``: per step 70 records and 170 tensor rows of statistics (the tiny
demo's L0 step) through ``DumpWriter``. ``demo``: ``probe-tui``'s zero-code capture of the tiny demo at L1, the
whole path (hooks, statistics, store). A SWMR writer keeps ~60 datasets open for the whole run: with HDF5's
default chunk cache (8 MiB per dataset in HDF5 2.0) it grew by ~30 MB per 1,000 steps; the writer now sizes the
cache to one chunk (none for uncompressed data, engines/store/segment.py).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, resource, sys, tempfile, time
import numpy as np

workload, mode, steps, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
marks = []

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6

def mark(step):
    if step % 1000 == 0 or step == steps - 1:
        marks.append((step, round(rss_mb(), 1)))

t0 = time.time()
if workload == "store":
    from engines.store import DumpWriter
    w = DumpWriter(folder, meta={"framework": "bench"}, mode=mode)
    rng = np.random.default_rng(0)
    names = ["Functional.op%d.0.forward" % i for i in range(70)]
    rec_of_row = np.arange(170) % 70
    for step in range(steps):
        rec = w.add_records(step=step, name=names, kind=0, direction=0, args=[{"i": i} for i in range(70)])
        w.add_tensors(record=rec[rec_of_row], step=step, slot="output.0", dtype="torch.float32",
                      shape=[[2, 8, 32]] * 170, max=rng.random(170), min=rng.random(170), mean=rng.random(170),
                      norm=rng.random(170))
        w.commit_step(step, records=70, tensors=170)
        mark(step)
    w.close()
else:
    from engines.capture.options import CaptureOptions
    from engines.capture.sink import dump_sink_factory
    from engines.capture.summary import CaptureSummary
    from engines.adapters.torch import demo
    from engines.adapters.torch.zero_code import ZeroCodeCapture
    from pathlib import Path

    opts = CaptureOptions(level="L1", store_mode=mode)
    summary = CaptureSummary()
    sinks = dump_sink_factory(lambda r: Path(folder) / ("rank%d" % r), opts, {"framework": "pytorch"}, summary,
                              on_step=lambda step, records, nbytes: mark(step))
    with ZeroCodeCapture(opts, sinks, summary=summary):
        demo.train({"preset": "tiny", "steps": steps})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
print(json.dumps({"marks": marks, "peak_mb": round(peak, 1), "seconds": round(time.time() - t0, 1)}))
'''


def run_mode(workload: str, mode: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PROBE_TUI_STORE_MODE", None)
    with tempfile.TemporaryDirectory(prefix="probe-tui-mem-") as folder:
        done = subprocess.run([sys.executable, "-c", CHILD, workload, mode, str(steps), folder], env=env,
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("store", "demo"), default="store")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--modes", nargs="+", default=["swmr", "per_step"])
    args = parser.parse_args()
    print(f"{args.workload} workload, {args.steps} steps; load average {os.getloadavg()[0]:.2f}")
    for mode in args.modes:
        started = time.time()
        out = run_mode(args.workload, mode, args.steps)
        first, last = out["marks"][0][1], out["marks"][-1][1]
        trail = "  ".join(f"{s}:{mb:.0f}" for s, mb in out["marks"])
        print(f"{mode:9s} RSS MB at step  {trail}")
        print(f"{'':9s} growth {last - first:+.1f} MB, peak {out['peak_mb']:.0f} MB, {out['seconds']:.0f} s "
              f"({time.time() - started:.0f} s with start-up)")


if __name__ == "__main__":
    main()
