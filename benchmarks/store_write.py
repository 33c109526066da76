"""Store throughput: rows/s appended, MB/s of tensors written, rows/s read, per mode and compression.

    python benchmarks/store_write.py                      # both modes x none/lzf/gzip, ~1 minute on 2 cores
    python benchmarks/store_write.py --sweep-chunks       # table chunk rows and pool chunk sizes (SWMR, none)

The workload is a dump: per step ``--records`` records, three tensor rows each (20 statistics columns), and
``--tensor-mb`` MB of tensors in total (float32 activations, bf16 bits, int64 indices) over the run.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.store import DumpReader, DumpWriter, StoreReader, bfloat16_bits  # noqa: E402
from engines.store import spec as store_spec  # noqa: E402


def make_step(step, records, rng):
    names = [f"Functional.op{i % 400}.{i // 400}.forward" for i in range(records)]
    n_t = records * 3
    stats = {
        "step": step, "slot": [("input.0", "input.1", "output.0")[i % 3] for i in range(n_t)],
        "dtype": "torch.float32", "shape": ["[8, 64, 256]"] * n_t,
        "max": rng.random(n_t), "min": rng.random(n_t), "mean": rng.random(n_t), "norm": rng.random(n_t),
        "valid": 15, "nan_count": 0, "posinf_count": 0, "neginf_count": 0, "requires_grad": 1,
        "crc32": rng.integers(0, 2 ** 32, n_t), "numel": 131072,
    }
    return names, stats


def make_tensors(total_mb, steps, rng):
    per_step = int(total_mb * 2 ** 20 / steps)
    act = rng.standard_normal(8 * 64 * 256).astype(np.float32).reshape(8, 64, 256)  # 512 KiB activation
    bf = bfloat16_bits(rng.standard_normal(64 * 256).astype(np.float32)).reshape(64, 256)
    idx = rng.integers(0, 1000, (8, 64)).astype(np.int64)
    out, size = [], 0
    while size < per_step:
        for arr, name in ((act, "torch.float32"), (bf, "torch.bfloat16"), (idx, "torch.int64")):
            out.append((arr, name))
            size += arr.nbytes
    return out, size


def run(directory, mode, compression, args, chunk_rows=None, pool_chunk=None):
    rng = np.random.default_rng(0)
    tensors, tensor_bytes = make_tensors(args.tensor_mb, args.steps, rng)
    steps = [make_step(s, args.records, rng) for s in range(args.steps)]
    opts = {}
    if chunk_rows:
        opts["chunk_rows"] = chunk_rows
    if pool_chunk:
        opts["pool_chunk_bytes"] = pool_chunk
    t_rows = t_tensors = t_commit = 0.0
    t0 = time.perf_counter()
    w = DumpWriter(directory, meta={"framework": "bench"}, mode=mode, compression=compression, **opts)
    for step, (names, stats) in enumerate(steps):
        a = time.perf_counter()
        refs = [w.put_tensor(arr, name) for arr, name in tensors]
        b = time.perf_counter()
        rec = w.add_records(step=step, name=names, kind=0, direction=0, args=[{"i": i} for i in range(len(names))])
        refs += [None] * (3 * len(names) - len(refs))
        refs = refs[:3 * len(names)]
        stats["shape"] = [list(r.shape) if r is not None else [8, 64, 256] for r in refs]
        stats["dtype"] = [r.dtype if r is not None else "torch.float32" for r in refs]
        w.add_tensors(refs=refs, record=np.repeat(rec, 3), **stats)
        c = time.perf_counter()
        w.commit_step(step)
        d = time.perf_counter()
        t_tensors += b - a
        t_rows += c - b
        t_commit += d - c
    w.close()
    t_write = time.perf_counter() - t0
    rows = w.rows["records"] + w.rows["tensors"]
    disk = sum(p.stat().st_size for p in Path(directory).glob("*.h5"))

    a = time.perf_counter()
    r = DumpReader(directory)
    cols = r.tensors()
    n_read = len(cols["row"])
    b = time.perf_counter()
    names = r.row_names()
    c = time.perf_counter()
    refs = r.tensors(step=args.steps - 1, columns=["pool", "offset", "numel", "shape"])
    read_bytes = 0
    for i in np.flatnonzero(refs["offset"] >= 0):
        read_bytes += r.store.read_array({k: refs[k][i] for k in ("pool", "offset", "numel", "shape")}).nbytes
    d = time.perf_counter()
    r.close()
    assert len(names) == n_read
    return {
        "rows/s append": rows / t_rows,
        "ms/commit": 1000 * t_commit / args.steps,
        "store MB/s": w.bytes_written / 2 ** 20 / t_write,
        "disk/logical": disk / max(1, w.bytes_written),
        "rows/s read (all columns)": n_read / (b - a),
        "rows/s row_names": n_read / (c - b),
        "tensor MB/s read": read_bytes / 2 ** 20 / (d - c),
    }


def tensor_throughput(directory, mode, compression, args):
    """Tensors only: MB/s from put_tensor to committed on disk (page cache)."""
    rng = np.random.default_rng(2)
    tensors, tensor_bytes = make_tensors(args.tensor_mb, args.steps, rng)
    t0 = time.perf_counter()
    w = DumpWriter(directory, meta={}, mode=mode, compression=compression)
    for step in range(args.steps):
        for arr, name in tensors:
            w.put_tensor(arr, name)
        w.commit_step(step)
    w.close()
    return tensor_bytes * args.steps / 2 ** 20 / (time.perf_counter() - t0)


def one_million_rows(directory):
    """Read speed on a 1M-row table: all columns decoded, then one str column alone."""
    rng = np.random.default_rng(1)
    w = DumpWriter(directory, meta={}, mode="swmr")
    n_steps, per = 20, 50_000
    for step in range(n_steps):
        rec = w.add_records(step=step, name=[f"Functional.op{i % 5000}.forward" for i in range(per // 3)])
        w.add_tensors(record=np.repeat(rec, 3)[:per] if len(rec) * 3 >= per else np.resize(rec, per),
                      step=step, slot=[("input.0", "input.1", "output.0")[i % 3] for i in range(per)],
                      dtype="torch.float32", shape=["[4, 4]"] * per, max=rng.random(per), numel=16)
        w.commit_step(step)
    w.close()
    r = StoreReader(directory, "dump")
    a = time.perf_counter()
    cols = r.read("tensors")
    b = time.perf_counter()
    slot = r.read("tensors", ["slot"])
    c = time.perf_counter()
    names = DumpReader(directory).row_names()
    d = time.perf_counter()
    n = len(cols["slot"])
    assert len(slot["slot"]) == n == len(names)
    print(f"1M-row read: {n} rows, all 20 columns {n / (b - a):,.0f} rows/s ({b - a:.2f} s); "
          f"one str column {n / (c - b):,.0f} rows/s; row_names {n / (d - c):,.0f} rows/s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--tensor-mb", type=float, default=96)
    p.add_argument("--modes", default="swmr,per_step")
    p.add_argument("--compressions", default="none,lzf,gzip")
    p.add_argument("--sweep-chunks", action="store_true")
    p.add_argument("--skip-1m", action="store_true")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = p.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="store-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"# {args.steps} steps x {args.records} records (+{3 * args.records} tensor rows), "
          f"{args.tensor_mb} MB of tensors; defaults: chunk_rows={store_spec.TABLE_CHUNK_ROWS}, "
          f"pool chunk={store_spec.POOL_CHUNK_BYTES // 1024} KiB; in {root}")
    try:
        if args.sweep_chunks:
            for comp in args.compressions.split(","):
                for chunk_rows in (4096, 16384, 65536):
                    for pool_kib in (256, 1024, 4096):
                        d = root / f"sweep-{chunk_rows}-{pool_kib}"
                        res = run(d, "swmr", comp, args, chunk_rows, pool_kib * 1024)
                        print(f"{comp:5s} chunk_rows={chunk_rows:6d} pool={pool_kib:5d}KiB " + _fmt(res))
                        shutil.rmtree(d)
            return
        for mode in args.modes.split(","):
            for comp in args.compressions.split(","):
                d = root / f"{mode}-{comp}"
                res = run(d, mode, comp, args)
                shutil.rmtree(d)
                res["tensor MB/s put+commit"] = tensor_throughput(d, mode, comp, args)
                shutil.rmtree(d)
                print(f"{mode:8s} {comp:5s} " + _fmt(res))
        if not args.skip_1m:
            one_million_rows(root / "one-million")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


def _fmt(res):
    return "  ".join(f"{k} {v:,.1f}" if v >= 10 else f"{k} {v:.2f}" for k, v in res.items())


if __name__ == "__main__":
    os.environ.pop("PROBE_TUI_STORE_MODE", None)  # the benchmark picks each mode itself
    main()
