"""Every record, row, argument skeleton and stack of a short capture, written out to compare two versions of the code.

    PYTHONPATH=<tree> python benchmarks/capture_identity.py dump OUT.pkl [--steps 2] [--modes ...]
    python benchmarks/capture_identity.py compare A.pkl B.pkl

``dump`` runs issue 21's tiny preset (benchmarks/side_by_side.py) for ``steps`` captured steps in each mode
(statistics L0, L1, mix, L1 + md5, tensor L1; a fresh model for each, same seed) and keeps: every column of the
``records`` and ``tensors`` tables (decoded), each record's stack frames (paths of the tree it ran from made
relative), the stored tensors' bytes (tensor task) and the model's parameters after training. ``compare`` says,
field by field, where two dumps differ (exit status 1 when they do). How issue 21's per-record changes were
checked: a dump with the base commit's tree on PYTHONPATH, one with the changed tree, compared.
"""

import argparse
import hashlib
import json
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # PYTHONPATH wins: the tree under test

MODES = ("statistics L0", "statistics L1", "statistics mix", "L1 + md5", "tensor L1")


def _plain(values: Any) -> List[Any]:
    out = []
    for v in list(values):
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out.append(v)
    return out


def run_mode(mode: str, steps: int, tmp: Path) -> Dict[str, Any]:
    import torch

    import engines
    from benchmarks.side_by_side import PRESETS, _Work, msprobe_config
    from engines.store.dump_reader import DumpReader
    from probe_tui.debugger import PrecisionDebugger

    tree = str(Path(engines.__file__).resolve().parents[1])
    torch.manual_seed(0)
    work = _Work(PRESETS["tiny"])
    dump = tmp / mode.replace(" ", "_").replace("+", "p")
    cfg = tmp / ("%s.json" % dump.name)
    cfg.write_text(json.dumps(msprobe_config(mode, str(dump))))
    debugger = PrecisionDebugger(config_path=str(cfg))
    for _ in range(steps):
        debugger.start(work.model)
        work.step()
        debugger.stop()
        debugger.step()
    debugger.close()
    rank_dirs = [p for p in sorted(dump.glob("*/rank0")) if not p.parent.is_symlink()]
    assert len(rank_dirs) == 1, rank_dirs
    out: Dict[str, Any] = {}
    with DumpReader(rank_dirs[0]) as reader:
        recs = reader.records()
        out["records"] = {k: _plain(v) for k, v in sorted(recs.items())}
        tens = reader.tensors()
        out["tensors"] = {k: _plain(v) for k, v in sorted(tens.items())}
        out["stacks"] = [[f.replace(tree, "<tree>").replace(str(ROOT), "<tree>") for f in reader.stack(s)]
                         for s in out["records"]["stack"]]
        data = []
        for row in out["tensors"]["row"]:
            arr = reader.tensor_data(int(row))
            data.append(None if arr is None else (str(arr.dtype), arr.shape, hashlib.md5(arr.tobytes()).hexdigest()))
        out["tensor_data"] = data
        mods = reader.modules()
        out["modules"] = {k: _plain(v) for k, v in sorted(mods.items())}
    out["parameters"] = {n: hashlib.md5(p.detach().numpy().tobytes()).hexdigest()
                         for n, p in work.model.named_parameters()}
    return out


def dump(path: str, steps: int, modes: List[str]) -> int:
    import torch

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="capture-identity-"))
    try:
        result = {m: run_mode(m, steps, tmp) for m in modes}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(path, "wb") as f:
        pickle.dump(result, f)
    for m, r in result.items():
        print("%s: %d records, %d rows" % (m, len(r["records"]["name"]), len(r["tensors"]["slot"])))
    return 0


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return bool(a == b)


def compare(path_a: str, path_b: str, limit: int = 20) -> int:
    with open(path_a, "rb") as f:
        a = pickle.load(f)
    with open(path_b, "rb") as f:
        b = pickle.load(f)
    bad = 0
    for mode in sorted(set(a) | set(b)):
        if mode not in a or mode not in b:
            print("%s: only in one dump" % mode)
            bad += 1
            continue
        ra, rb = a[mode], b[mode]
        n_fields = 0
        for part in ("records", "tensors", "modules"):
            for col in sorted(set(ra[part]) | set(rb[part])):
                ca, cb = ra[part].get(col), rb[part].get(col)
                if ca is None or cb is None or len(ca) != len(cb):
                    print("%s %s.%s: %s vs %s values" % (mode, part, col, None if ca is None else len(ca),
                                                         None if cb is None else len(cb)))
                    bad += 1
                    continue
                for i, (x, y) in enumerate(zip(ca, cb)):
                    n_fields += 1
                    if not _same(x, y):
                        bad += 1
                        if bad <= limit:
                            print("%s %s.%s[%d]: %r vs %r" % (mode, part, col, i, x, y))
        for part in ("stacks", "tensor_data"):
            if ra[part] != rb[part]:
                bad += 1
                diff = [i for i, (x, y) in enumerate(zip(ra[part], rb[part])) if x != y][:3]
                print("%s %s differ (%d vs %d; first at %s)" % (mode, part, len(ra[part]), len(rb[part]), diff))
            n_fields += len(ra[part])
        if ra["parameters"] != rb["parameters"]:
            bad += 1
            print("%s: parameters after training differ" % mode)
        print("%s: %d records, %d rows, %d fields compared" % (mode, len(ra["records"]["name"]),
                                                               len(ra["tensors"]["slot"]), n_fields))
    print("identical" if not bad else "%d differences" % bad)
    return 1 if bad else 0


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--steps", type=int, default=2)
    d.add_argument("--modes", nargs="*", default=list(MODES))
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = parser.parse_args(argv)
    if args.cmd == "dump":
        return dump(args.out, args.steps, args.modes)
    return compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
