"""Reader cost on a many-step dump: wall time and peak memory of parse and compare.

    python benchmarks/reader_scale.py [--steps 5000] [--records 400] [--tensor-every 0] [--dir DIR] [--skip-compare]

Builds (once; reused from ``--dir``, default ``$TMPDIR/probe-tui-reader-scale``) a statistics dump of ``--steps``
steps written with ``engines.store.DumpWriter`` directly: each step holds ``--records`` records like the demo's L1
dump (API calls, module calls, parameter gradients; inputs, outputs and parameters, about 2.3 tensor rows a
record, scalar arguments in ``args``, shared call stacks). ``--tensor-every K`` also stores the tensor data of
every K-th tensor row (small float32 tensors). Then runs each command in a child process and prints its wall time
and peak RSS (``os.wait4``):

- ``probe-tui parse DUMP --limit 1``
- ``probe-tui parse DUMP --name RECORD`` (one record name, every step holds it; default listing of 200 rows)
- ``probe-tui parse DUMP --name RECORD --step S``
- ``probe-tui compare DUMP DUMP -o OUT`` (statistics mode, the dump against itself)
"""

import argparse
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

from engines.store import DumpWriter  # noqa: E402

META = {"rank": 0, "world_size": 1, "framework": "pytorch"}
APIS = ("Functional.linear", "Torch.matmul", "Tensor.add", "Functional.gelu", "Functional.layer_norm",
        "Functional.softmax", "Tensor.mul", "Functional.dropout")


def step_template(n_records: int):
    """Columns of one step's records and tensor rows (the same names every step, as a training loop dumps)."""
    names, kinds, directions, parents, args, stacks = [], [], [], [], [], []
    t_rec, t_slot, t_shape, t_dtype = [], [], [], []
    layer = 0
    i = 0
    while len(names) < n_records:
        module = "Module.layers.{}.Block".format(layer)
        names.append(module + ".forward.0")
        kinds.append(1)
        directions.append(0)
        parents.append("")
        args.append("{}")
        stacks.append(layer % 4)
        mod_pos = len(names) - 1
        t_rec += [mod_pos, mod_pos]
        t_slot += ["input.0", "output.0"]
        t_shape += [[8, 64, 256]] * 2
        t_dtype += ["torch.float32"] * 2
        for _ in range(10):
            if len(names) >= n_records:
                break
            api = APIS[i % len(APIS)]
            names.append("{}.{}.forward".format(api, i // len(APIS)))
            kinds.append(0)
            directions.append(0)
            parents.append(module + ".forward.0")
            stacks.append(4 + i % 8)
            if api == "Functional.layer_norm":
                args.append('{"args":[{"tensor":"input.0"},[256]],"kwargs":{"eps":1e-05}}')
            elif api == "Functional.dropout":
                args.append('{"args":[{"tensor":"input.0"}],"kwargs":{"p":0.1,"training":true}}')
            else:
                args.append('{"args":[{"tensor":"input.0"},{"tensor":"input.1"}],"kwargs":{}}')
            pos = len(names) - 1
            slots = ["input.0", "input.1", "output.0"] if api in ("Functional.linear", "Torch.matmul",
                                                                   "Tensor.add", "Tensor.mul") else ["input.0",
                                                                                                     "output.0"]
            t_rec += [pos] * len(slots)
            t_slot += slots
            t_shape += [[8, 64, 256]] * len(slots)
            t_dtype += ["torch.bfloat16" if i % 5 == 0 else "torch.float32"] * len(slots)
            i += 1
        if len(names) < n_records:
            names.append(module + ".parameters_grad.0")
            kinds.append(2)
            directions.append(1)
            parents.append("")
            args.append("{}")
            stacks.append(-1)
            pos = len(names) - 1
            t_rec += [pos, pos]
            t_slot += ["weight", "bias"]
            t_shape += [[256, 256], [256]]
            t_dtype += ["torch.float32"] * 2
        layer += 1
    return dict(names=names, kinds=kinds, directions=directions, parents=parents, args=args, stacks=stacks,
                t_rec=np.array(t_rec, dtype=np.int64), t_slot=t_slot, t_shape=t_shape, t_dtype=t_dtype)


def build_dump(rank_dir: Path, steps: int, n_records: int, tensor_every: int) -> None:
    tpl = step_template(n_records)
    n_t = len(tpl["t_slot"])
    rng = np.random.default_rng(0)
    base = rng.random(n_t) * 10 + 0.1
    t0 = time.time()
    with DumpWriter(rank_dir, meta=META, mode="swmr") as w:
        stack_rows = [w.intern_stack(['File "train.py", line {}, in step'.format(10 + k),
                                      'File "model.py", line {}, in forward'.format(100 + k)]) for k in range(12)]
        stack_ids = [stack_rows[s] if s >= 0 else -1 for s in tpl["stacks"]]
        w.add_modules(["layers.{}".format(k) for k in range(64)], ["Block"] * 64)
        for step in range(steps):
            rows = w.add_records(step=step, name=tpl["names"], kind=tpl["kinds"], direction=tpl["directions"],
                                 parent=tpl["parents"], stack=stack_ids, args=tpl["args"])
            mx = base * (1 + 0.01 * rng.standard_normal(n_t))
            refs = None
            if tensor_every:
                refs = [w.put_tensor(rng.standard_normal(64).astype(np.float32), "torch.float32")
                        if k % tensor_every == 0 else None for k in range(n_t)]
            w.add_tensors(refs=refs, record=rows[tpl["t_rec"]], step=step, slot=tpl["t_slot"],
                          dtype=tpl["t_dtype"], shape=tpl["t_shape"], max=mx, min=-mx, mean=mx / 100,
                          norm=mx * 300, valid=15 | 16, nan_count=0, posinf_count=0, neginf_count=0,
                          requires_grad=0, crc32=(mx * 1e6).astype(np.int64) & 0xFFFFFFFF)
            w.commit_step(step)
            if step % 500 == 499:
                print("  wrote {} steps ({:.0f} s)".format(step + 1, time.time() - t0), flush=True)


def dump_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(cmd, env):
    """(wall seconds, peak RSS MiB, exit code, last output line) of a child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = out.decode("utf-8", "replace").strip().splitlines()
    return wall, usage.ru_maxrss / 1024.0, proc.returncode, lines[-1] if lines else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--tensor-every", type=int, default=0, help="store tensor data of every K-th row (0: none)")
    ap.add_argument("--dir", help="cache folder for the dump (default: $TMPDIR/probe-tui-reader-scale)")
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--build-only", metavar="RANK_DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        build_dump(Path(args.build_only), args.steps, args.records, args.tensor_every)
        return 0
    cache = Path(args.dir or Path(tempfile.gettempdir()) / "probe-tui-reader-scale")
    dump = cache / "s{}-r{}-t{}".format(args.steps, args.records, args.tensor_every)
    rank_dir = dump / "rank0"
    if args.rebuild and dump.exists():
        shutil.rmtree(dump)
    if not (rank_dir / "segments.jsonl").exists() or '"close"' not in (rank_dir / "segments.jsonl").read_text():
        if dump.exists():
            shutil.rmtree(dump)
        rank_dir.mkdir(parents=True)
        print("building {} ({} steps x {} records)".format(dump, args.steps, args.records), flush=True)
        t0 = time.time()
        # in a child process: a child's peak RSS counts the memory of the process it was forked from
        subprocess.run([sys.executable, __file__, "--build-only", str(rank_dir), "--steps", str(args.steps),
                        "--records", str(args.records), "--tensor-every", str(args.tensor_every)], check=True)
        print("built in {:.1f} s".format(time.time() - t0))
    tpl = step_template(args.records)
    print("dump {}: {} steps, {} records and {} tensor rows a step, {:.0f} MB".format(
        dump, args.steps, args.records, len(tpl["t_slot"]), dump_bytes(dump) / 1e6))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cli = [sys.executable, "-m", "probe_tui"]
    record = tpl["names"][5]
    runs = [("parse --limit 1", cli + ["parse", str(dump), "--limit", "1", "--json"]),
            ("parse --name RECORD", cli + ["parse", str(dump), "--name", record, "--json"]),
            ("parse --name RECORD --step S", cli + ["parse", str(dump), "--name", record, "--step",
                                                    str(args.steps // 2), "--json"])]
    out_dir = None
    if not args.skip_compare:
        out_dir = Path(tempfile.mkdtemp(prefix="reader-scale-out-"))
        runs.append(("compare DUMP DUMP", cli + ["compare", str(dump), str(dump), "-o", str(out_dir / "cmp")]))
    print("load: {}".format(os.getloadavg()))
    print("{:<32} {:>9} {:>12} {:>4}".format("command", "wall s", "peak RSS MB", "rc"))
    try:
        for label, cmd in runs:
            wall, rss, rc, last = measure(cmd, env)
            print("{:<32} {:>9.2f} {:>12.0f} {:>4}".format(label, wall, rss, rc), flush=True)
            if rc != 0:
                print("   ", last[:300])
    finally:
        if out_dir is not None:
            shutil.rmtree(out_dir, ignore_errors=True)
    print("load: {}".format(os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
