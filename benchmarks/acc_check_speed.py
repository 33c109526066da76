"""acc_check speed: APIs checked per second on the demo's tensor dump, with 1 and 2 workers.

    python benchmarks/acc_check_speed.py [--preset tiny|default] [--workers 1 2] [--rounds 1]
                                         [--framework pytorch|mindspore]

A tensor dump of one step of the demo (forward and backward, every API) is captured once; each arm then runs the
whole check into a new folder (replay on the CPU reference, judging, journal, CSVs and result store). Worker
processes are spawned (torch imports in each: a fixed cost, counted). Prints APIs/s per arm and the ratio of each
arm to one worker, with the load average (a busy machine slows every arm).
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.events import NullSink  # noqa: E402
from engines.runner import run_job  # noqa: E402
from schemas import load_config  # noqa: E402


def _dump(folder: Path, preset: str, framework: str) -> Path:
    job = load_config({"task": "tensor", "dump_path": str(folder), "level": "L1", "framework": framework,
                       "target": {"demo": {"preset": preset, "steps": 1}},
                       "tensor": {"data_mode": ["all"], "summary_mode": "statistics"}})
    run_job(job, events=NullSink())
    return folder / "latest"


def _check(dump: Path, out: Path, workers: int) -> tuple:
    job = load_config({"task": "acc_check", "acc_check": {"path": str(dump), "output_path": str(out),
                                                          "workers": workers}})
    started = time.perf_counter()
    outcome = run_job(job, events=NullSink())
    elapsed = time.perf_counter() - started
    return outcome.summary["checked"], elapsed, outcome.summary["errors"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=("tiny", "default"))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--framework", default="pytorch", choices=("pytorch", "mindspore"),
                        help="the demo whose dump is checked (MindSpore: a PyNative dump, replayed with MindSpore)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dump = _dump(root / "dump", args.preset, args.framework)
        results = {}
        for r in range(args.rounds):
            for w in args.workers:
                apis, elapsed, errors = _check(dump, root / ("out-%d-%d" % (w, r)), w)
                results.setdefault(w, []).append(apis / elapsed)
                print("workers %d round %d: %d APIs in %.2f s (%.1f APIs/s, %d errors)" % (
                    w, r, apis, elapsed, apis / elapsed, errors), flush=True)
    base = max(results.get(1, [0.0])) or None
    summary = {"framework": args.framework, "preset": args.preset, "load_average": [round(x, 2) for x in os.getloadavg()],
               "apis_per_s": {w: round(max(v), 2) for w, v in results.items()},
               "vs_one_worker": {w: round(max(v) / base, 2) for w, v in results.items()} if base else {}}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
