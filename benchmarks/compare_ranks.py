"""Compare of many rank pairs: wall time and peak memory with 1 and more worker processes.

    python benchmarks/compare_ranks.py [--ranks 64] [--rows 200000] [--workers 1,2] [--formats hdf5]
                                       [--dir DIR] [--keep] [--compare-ranks N]

Writes (once; reused from ``--dir``) two synthetic statistics dumps of ``--ranks`` rank folders, ``--rows`` tensor
rows a rank (one step; records of two inputs and one output, the target's statistics off by a relative 1e-3, one
rank with ten records off by 10%), with ``engines.store.DumpWriter`` and numpy. Then, for each worker count, runs
the compare (statistics mode, ``workers: W``) in a child process, a small driver that prints the wall time, the CPU
seconds and peak RSS of the compare's process (``RUSAGE_SELF``) and of its workers (``RUSAGE_CHILDREN``: the CPU
of all, the peak RSS of the largest). The runs' results are checked to be the same (row and verdict counts, top
suspects). Both dumps are read once before each run (warm page cache). ``uptime`` is printed before and after: on a
shared machine wall times follow the load, CPU seconds are the steadier figure. ``--compare-ranks N`` compares the first N ranks only: the peak memory against the rank
count.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APIS = ("Functional.linear", "Torch.matmul", "Tensor.add", "Functional.gelu", "Functional.layer_norm",
        "Functional.softmax")
BATCH = 100_000  # records written per call

# The driver run in a child process: the compare, then the peak RSS of this process and of its largest child.
DRIVER = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from engines.compare.engine import run_compare
section = json.loads(sys.argv[2])
t0 = time.perf_counter()
out = run_compare({"task": "compare", "compare": section}, None)
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "rss_parent_mb": me.ru_maxrss / 1024, "rss_worker_mb": kids.ru_maxrss / 1024,
                  "cpu_parent_s": me.ru_utime + me.ru_stime, "cpu_workers_s": kids.ru_utime + kids.ru_stime,
                  "rows": out.summary["rows"], "verdicts": out.summary["verdicts"],
                  "top": [(t["rank"], t["record"]) for t in out.summary["top_suspects"]]}))
"""


def write_rank(rank_dir: Path, rank: int, world: int, n_rows: int, noise: float, seed: int, fault: bool) -> None:
    from engines.store import DumpWriter

    n_rec = n_rows // 3
    names = np.array(["{}.{}.forward".format(APIS[i % len(APIS)], i // len(APIS)) for i in range(n_rec)],
                     dtype=object)
    base = np.random.default_rng(rank).random(n_rec * 3) * 10 + 0.1  # the same on both sides
    rng = np.random.default_rng(seed)
    slots = np.array(["input.0", "input.1", "output.0"], dtype=object)
    meta = {"rank": rank, "world_size": world, "framework": "pytorch"}
    with DumpWriter(rank_dir, meta=meta) as w:
        for lo in range(0, n_rec, BATCH):
            hi = min(n_rec, lo + BATCH)
            rows = w.add_records(step=0, name=list(names[lo:hi]), kind=0, direction=0)
            k = (hi - lo) * 3
            mx = base[lo * 3:hi * 3] * (1 + noise * rng.standard_normal(k)) if noise else base[lo * 3:hi * 3].copy()
            if fault and lo == 0:
                mx[3 * 1000:3 * 1010] *= 1.1  # ten records past the error limit
            w.add_tensors(record=np.repeat(rows, 3), step=0, slot=list(np.tile(slots, hi - lo)),
                          dtype="torch.float32", shape=[(8, 64, 256)] * k, max=mx, min=-mx, mean=mx / 100,
                          norm=mx * 300, valid=15, requires_grad=0)
        w.commit_step(0)


def write_dumps(work: Path, ranks: int, rows: int) -> None:
    stamp = work / "dumps.json"
    want = {"ranks": ranks, "rows": rows}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        print("reusing the dumps in {}".format(work))
        return
    shutil.rmtree(work / "target", ignore_errors=True)
    shutil.rmtree(work / "golden", ignore_errors=True)
    t0 = time.perf_counter()
    for r in range(ranks):
        write_rank(work / "target" / "rank{}".format(r), r, ranks, rows, 1e-3, 1000 + r, fault=r == ranks // 2)
        write_rank(work / "golden" / "rank{}".format(r), r, ranks, rows, 0.0, 2000 + r, fault=False)
    stamp.write_text(json.dumps(want))
    print("wrote 2 x {} ranks x {:,} rows in {:.1f} s".format(ranks, rows, time.perf_counter() - t0))


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def warm(work: Path) -> None:
    """Read both dumps once, so that every run starts from the page cache (the first run after writing results
    otherwise reads from disk: 2x on the development machine)."""
    for side in ("target", "golden"):
        for path in sorted((work / side).rglob("*")):
            if path.is_file():
                with open(path, "rb") as fh:
                    while fh.read(64 << 20):
                        pass


def run_once(work: Path, workers: int, formats, timeout: float, ranks: int = 0) -> dict:
    out = work / "out_w{}".format(workers)
    shutil.rmtree(out, ignore_errors=True)
    warm(work)
    section = {"target_path": str(work / "target"), "golden_path": str(work / "golden"), "output_path": str(out),
               "mode": "statistics", "formats": formats, "workers": workers}
    if ranks:
        section["rank"] = list(range(ranks))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(ROOT), json.dumps(section)], capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode not in (0, 3):
        raise SystemExit("compare with {} worker(s) failed (exit {}):\n{}".format(workers, proc.returncode,
                                                                                 proc.stderr[-2000:]))
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rows", type=int, default=200_000, help="tensor rows a rank")
    ap.add_argument("--workers", default="1,2", help="worker counts to time, comma-separated")
    ap.add_argument("--formats", default="hdf5", help="result files (hdf5, csv, xlsx; the CSV of 12.8M rows is ~6 GB)")
    ap.add_argument("--dir", help="work folder (default: $TMPDIR/probe-tui-compare-ranks); the dumps are reused")
    ap.add_argument("--keep", action="store_true", help="keep the dumps after the run")
    ap.add_argument("--compare-ranks", type=int, default=0,
                    help="compare only the first N ranks of the dumps (peak memory against the rank count)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds a compare may take")
    args = ap.parse_args()
    work = Path(args.dir) if args.dir else Path(tempfile.gettempdir()) / "probe-tui-compare-ranks"
    work.mkdir(parents=True, exist_ok=True)
    formats = [f for f in args.formats.split(",") if f]
    print("{} cores; {}".format(os.cpu_count(), uptime()))
    try:
        write_dumps(work, args.ranks, args.rows)
        first = None
        for w in [int(x) for x in args.workers.split(",") if x]:
            res = run_once(work, w, formats, args.timeout, args.compare_ranks)
            print("workers {}: {:,} rows in {:.1f} s ({:,.0f} rows/s); CPU s parent {:.1f}, workers {:.1f}; "
                  "peak RSS parent {:.0f} MB, largest worker {:.0f} MB".format(
                      w, res["rows"], res["wall_s"], res["rows"] / res["wall_s"], res["cpu_parent_s"],
                      res["cpu_workers_s"], res["rss_parent_mb"], res["rss_worker_mb"]))
            key = (res["rows"], res["verdicts"], res["top"])
            if first is None:
                first = key
            elif key != first:
                raise SystemExit("the result with {} workers differs from the first run's".format(w))
        print(uptime())
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
