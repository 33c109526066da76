"""Compare speed: statistics rows/s and tensor GB/s, on dumps this script generates.

    python benchmarks/compare_speed.py [--rows 1000000] [--tensor-mb 512] [--workers N] [--msprobe] [--keep DIR]
                                       [--no-tensor] [--repeat K]

Statistics mode: two dumps of ``--rows`` tensor rows (our HDF5 format; ``--msprobe`` also dump.json), exact-name
matching, result written as HDF5 only, then HDF5 + CSV (the default output set; docs/decisions/0020-speed-targets.md: "1M rows < 10 s"),
each ``--repeat`` times (the median and the range are printed, with the CPU seconds of this process and of the
CSV writer process), and the time the app needs to open the result (all of ``results``' columns). Tensor mode: two dumps of ``--tensor-mb`` MiB of float32
tensors each (HDF5 pools; ``--msprobe`` also ``.npy`` files), compared with ``--workers`` processes after one
warm-up read; GB/s counts the bytes of both sides (docs/decisions/0020-speed-targets.md: uncompressed, warm cache, all cores).
"""

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.compare.engine import run_compare  # noqa: E402
from engines.compare.hdf5_out import read_results  # noqa: E402
from engines.store import DumpWriter  # noqa: E402

APIS = ("Functional.linear", "Torch.matmul", "Tensor.add", "Functional.gelu", "Functional.layer_norm",
        "Functional.softmax")
META = {"rank": 0, "world_size": 1, "framework": "pytorch"}


def record_names(n_records):
    return ["{}.{}.forward".format(APIS[i % len(APIS)], i // len(APIS)) for i in range(n_records)]


def write_stats_dump(rank_dir, n_rows, noise, seed):
    """n_rows tensor rows: records of 2 inputs + 1 output, statistics only (no tensor data)."""
    rng = np.random.default_rng(seed)
    n_rec = n_rows // 3
    names = record_names(n_rec)
    base = np.random.default_rng(0).random(n_rec * 3) * 10 + 0.1
    with DumpWriter(rank_dir, meta=META) as w:
        step = 100_000
        for lo in range(0, n_rec, step):
            hi = min(n_rec, lo + step)
            rows = w.add_records(step=0, name=names[lo:hi], kind=0, direction=0)
            k = (hi - lo) * 3
            mx = base[lo * 3:hi * 3] * (1 + noise * rng.standard_normal(k))
            w.add_tensors(record=np.repeat(rows, 3), step=0, slot=["input.0", "input.1", "output.0"] * (hi - lo),
                          dtype="torch.float32", shape=[(8, 64, 256)] * k, max=mx, min=-mx, mean=mx / 100,
                          norm=mx * 300, valid=15, requires_grad=0)
        w.commit_step(0)


def write_stats_msprobe(folder, n_rows, noise, seed):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    n_rec = n_rows // 3
    base = np.random.default_rng(0).random(n_rec * 3) * 10 + 0.1
    mx = base * (1 + noise * rng.standard_normal(n_rec * 3))
    data = {}
    it = iter(mx.tolist())
    for name in record_names(n_rec):
        leaves = []
        for _ in range(3):
            m = next(it)
            leaves.append({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [8, 64, 256], "Max": m,
                           "Min": -m, "Mean": m / 100, "Norm": m * 300, "requires_grad": False})
        data[name] = {"input_args": leaves[:2], "input_kwargs": {}, "output": leaves[2:]}
    with open(folder / "dump.json", "w") as fh:
        json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "data": data}, fh)


def write_tensor_dump(rank_dir, n_tensors, numel, noise, seed):
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0).standard_normal(numel).astype(np.float32)
    names = record_names(n_tensors)
    with DumpWriter(rank_dir, meta=META) as w:
        rows = w.add_records(step=0, name=names, kind=0, direction=0)
        for i, row in enumerate(rows):
            x = base * np.float32(1 + 1e-3 * i) + np.float32(noise) * rng.standard_normal(numel, np.float32)
            ref = w.put_tensor(x, "torch.float32")
            w.add_tensors(refs=[ref], record=[row], step=0, slot=["output.0"], dtype="torch.float32",
                          shape=[(numel,)], max=float(x.max()), min=float(x.min()), mean=float(x.mean()),
                          norm=float(np.linalg.norm(x)), valid=15)
        w.commit_step(0)


def write_tensor_msprobe(folder, n_tensors, numel, noise, seed):
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0).standard_normal(numel).astype(np.float32)
    (folder / "dump_tensor_data").mkdir(parents=True)
    data = {}
    for i, name in enumerate(record_names(n_tensors)):
        x = base * np.float32(1 + 1e-3 * i) + np.float32(noise) * rng.standard_normal(numel, np.float32)
        fname = name + ".output.0.npy"
        np.save(folder / "dump_tensor_data" / fname, x)
        data[name] = {"input_args": [], "input_kwargs": {}, "output": [{
            "type": "torch.Tensor", "dtype": "torch.float32", "shape": [numel], "Max": float(x.max()),
            "Min": float(x.min()), "Mean": float(x.mean()), "Norm": float(np.linalg.norm(x)),
            "requires_grad": False, "data_name": fname}]}
    with open(folder / "dump.json", "w") as fh:
        json.dump({"task": "tensor", "level": "L1", "framework": "pytorch", "data": data}, fh)


def timed_compare(target, golden, out, **section):
    section.update(target_path=str(target), golden_path=str(golden), output_path=str(out))
    t0 = time.perf_counter()
    outcome = run_compare({"task": "compare", "compare": section}, None)
    return time.perf_counter() - t0, outcome


def _children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def statistics_runs(work, formats, repeat):
    """Wall seconds of ``repeat`` compares, with this process's and the child processes' CPU seconds."""
    walls, cpus, kids, out = [], [], [], None
    for k in range(repeat):
        folder = work / "out_{}_{}".format("_".join(formats), k)
        c0, k0 = time.process_time(), _children_cpu()
        dt, out = timed_compare(work / "st" / "rank0", work / "sg" / "rank0", folder, mode="statistics",
                                formats=formats)
        cpus.append(time.process_time() - c0)
        kids.append(_children_cpu() - k0)
        walls.append(dt)
        if k < repeat - 1:
            shutil.rmtree(folder, ignore_errors=True)
    return walls, cpus, kids, out


def warm(folder):
    for p in Path(folder).rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                while fh.read(64 << 20):
                    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--tensor-mb", type=int, default=512, help="MiB of tensors per side")
    ap.add_argument("--tensor-numel", type=int, default=1 << 22, help="elements per tensor")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--msprobe", action="store_true", help="also time msprobe-format inputs")
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one, removed)")
    ap.add_argument("--no-tensor", action="store_true", help="statistics mode only")
    ap.add_argument("--repeat", type=int, default=3, help="statistics compares per output set (median printed)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="compare_speed_"))
    work.mkdir(parents=True, exist_ok=True)
    print("work folder {}; {} cores, workers {}".format(work, os.cpu_count(), args.workers))
    try:
        # -- statistics --------------------------------------------------------------------------------
        t0 = time.perf_counter()
        write_stats_dump(work / "st" / "rank0", args.rows, 1e-3, 1)
        write_stats_dump(work / "sg" / "rank0", args.rows, 0.0, 2)
        print("generated 2 x {:,} statistics rows in {:.1f} s".format(args.rows, time.perf_counter() - t0))
        for formats in (["hdf5"], ["hdf5", "csv"]):
            walls, cpus, kids, out = statistics_runs(work, formats, args.repeat)
            rows = out.summary["rows"]
            med = float(np.median(walls))
            print("statistics, ours, {:<9} {:>9,} rows in {:6.2f} s (range {:.2f}-{:.2f}) = {:>10,.0f} rows/s; CPU s: "
                  "this process {:.2f}, CSV writer {:.2f}".format("+".join(formats), rows, med, min(walls),
                                                                 max(walls), rows / med, float(np.median(cpus)),
                                                                 float(np.median(kids))))
        print("  load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        t0 = time.perf_counter()
        res = read_results(out.output_dir)
        print("app: open and read all {} result columns of {:,} rows in {:.2f} s".format(
            len(res), len(res["verdict"]), time.perf_counter() - t0))
        if args.msprobe:
            write_stats_msprobe(work / "mt", args.rows, 1e-3, 1)
            write_stats_msprobe(work / "mg", args.rows, 0.0, 2)
            dt, out = timed_compare(work / "mt", work / "mg", work / "out_m", mode="statistics", formats=["hdf5"])
            print("statistics, msprobe dump.json, hdf5 {:>9,} rows in {:6.2f} s = {:>10,.0f} rows/s".format(
                out.summary["rows"], dt, out.summary["rows"] / dt))
        if args.no_tensor:
            return
        # -- tensors ---------------------------------------------------------------------------------------
        n_tensors = max(1, (args.tensor_mb << 20) // (args.tensor_numel * 4))
        t0 = time.perf_counter()
        write_tensor_dump(work / "tt" / "rank0", n_tensors, args.tensor_numel, 1e-3, 3)
        write_tensor_dump(work / "tg" / "rank0", n_tensors, args.tensor_numel, 0.0, 4)
        nbytes = 2 * n_tensors * args.tensor_numel * 4
        print("generated 2 x {} tensors of {:,} float32 ({:.2f} GB both sides) in {:.1f} s".format(
            n_tensors, args.tensor_numel, nbytes / 1e9, time.perf_counter() - t0))
        sides = [("ours (HDF5 pools)", work / "tt" / "rank0", work / "tg" / "rank0")]
        if args.msprobe:
            write_tensor_msprobe(work / "nt", n_tensors, args.tensor_numel, 1e-3, 3)
            write_tensor_msprobe(work / "ng", n_tensors, args.tensor_numel, 0.0, 4)
            sides.append(("msprobe (.npy)", work / "nt", work / "ng"))
        for label, t, g in sides:
            warm(t)
            warm(g)
            dt, out = timed_compare(t, g, work / ("out_t_" + label.split()[0]), mode="tensor", formats=["hdf5"],
                                    workers=args.workers)
            print("tensor, {:<18} {:.2f} GB in {:6.2f} s = {:5.2f} GB/s ({} rows, {})".format(
                label, nbytes / 1e9, dt, nbytes / dt / 1e9, out.summary["rows"], out.summary["verdicts"]))
        print("peak memory of this process: {:.0f} MB".format(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
