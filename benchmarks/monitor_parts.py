"""Where the monitor's time goes in a step: training-thread CPU time of each part of the "everything" arm of
``monitor_overhead.py`` (activation measurements, before and after the optimizer step and their Adam-state,
update and ``mg_direction`` parts, the step's collect and hand-over), by thread-time wrappers around each part.

    python benchmarks/monitor_parts.py [--steps 6] [--arm everything] [--native 0]

``--native 0`` runs with the native kernels off (``PROBE_TUI_NATIVE=0``: torch's passes). One process, the
default demo preset, torch on one thread; the first step is a warm-up.
"""

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARTS = [
    ("engines.monitor.session", "MonitorSessionBase", "_measure", "activation measurements"),
    ("engines.adapters.torch.monitor", "MonitorSession", "_record_pre", "before the optimizer step"),
    ("engines.adapters.torch.monitor_optim", None, "record_mg_direction", "  mg_direction"),
    ("engines.adapters.torch.monitor", "MonitorSession", "_post_step", "after the optimizer step (+ step end)"),
    ("engines.adapters.torch.monitor_optim", None, "record_adam_state", "  Adam state"),
    ("engines.adapters.torch.monitor_optim", None, "record_update", "  update and update ratio"),
    ("engines.monitor.session", "MonitorSessionBase", "_end_step", "  step end: collect, hand-over"),
]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="measured steps (after one warm-up step)")
    parser.add_argument("--arm", default="everything")
    parser.add_argument("--native", choices=["0", "1"], default="1")
    args = parser.parse_args(argv)
    if args.native == "0":
        os.environ["PROBE_TUI_NATIVE"] = "0"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import importlib

    import torch

    torch.set_num_threads(1)
    from benchmarks import monitor_overhead
    from engines.adapters.torch.demo import train

    spent: Dict[str, float] = collections.defaultdict(float)
    timing = [False]

    def wrap(owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed(*a, **k):
            start = time.thread_time()
            try:
                return real(*a, **k)
            finally:
                if timing[0]:
                    spent[label] += time.thread_time() - start

        setattr(owner, name, timed)

    for module, cls, name, label in PARTS:
        owner = importlib.import_module(module)
        wrap(getattr(owner, cls) if cls else owner, name, label)
    marks = []

    def on_step(step, loss):
        marks.append(time.thread_time())
        timing[0] = 1 <= step < 1 + args.steps

    with tempfile.TemporaryDirectory() as tmp:
        remove = monitor_overhead.instrument(args.arm, Path(tmp))
        try:
            train({"preset": "default", "steps": args.steps + 2}, on_step=on_step)
        finally:
            remove()
    n = args.steps
    print(f"arm {args.arm}, native kernels {'on' if args.native == '1' else 'off'}, load {os.getloadavg()[0]:.2f}: "
          f"training-thread CPU {(marks[n + 1] - marks[1]) / n * 1e3:.1f} ms a step")
    for _, _, _, label in PARTS:
        print(f"{label:<40} {spent[label] / n * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
