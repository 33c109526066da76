"""Compare and parse on our HDF5 dumps (written here with engines.store.DumpWriter as capture writes them), against
each other and against an msprobe-layout dump of the same values written by the test."""

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from engines.compare.engine import run_compare
from engines.compare.hdf5_out import read_results, read_summary
from engines.dumps.opener import open_dump
from engines.parse.inspect import histogram, parse, read_tensor
from engines.runs import create_run
from engines.store import DumpWriter, bfloat16_bits

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 16)).astype(np.float32)
W = RNG.standard_normal((16, 16)).astype(np.float32) * np.float32(0.25)


def model(eps=1e-5, scale=1.0, nan=False):
    """Three ops of a toy layer, as (record, parent, args, [(slot, array)]), in call order."""
    h = X @ W
    mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    ln = ((h - mu) / np.sqrt(var + eps)).astype(np.float32)
    act = np.maximum(ln * np.float32(scale), 0).astype(np.float32)
    if nan:
        act[0, 0] = np.nan
    block = "Module.block.Block.forward.0"
    return [
        (block, "", {"args": [{"tensor": "input.0"}], "kwargs": {}}, [("input.0", X), ("output.0", act)]),
        ("Functional.linear.0.forward", block, {"args": [{"tensor": "input.0"}, {"tensor": "input.1"}],
                                                "kwargs": {}}, [("input.0", X), ("input.1", W), ("output.0", h)]),
        ("Functional.layer_norm.0.forward", block, {"args": [{"tensor": "input.0"}, [16]], "kwargs": {"eps": eps}},
         [("input.0", h), ("output.0", ln)]),
        ("Functional.relu.0.forward", block, {"args": [{"tensor": "input.0"}], "kwargs": {}},
         [("input.0", ln * np.float32(scale)), ("output.0", act)]),
    ]


def stats(a):
    f = a.astype(np.float64)
    fin = f[np.isfinite(f)]
    return dict(max=float(np.max(f)), min=float(np.min(f)), mean=float(np.mean(f)),
                norm=float(np.linalg.norm(fin)) if fin.size == f.size else float("nan"),
                nan_count=int(np.isnan(f).sum()), posinf_count=int(np.isposinf(f).sum()),
                neginf_count=int(np.isneginf(f).sum()))


def write_ours(rank_dir, records, *, steps=(0,), tensors=True, bf16=()):
    with DumpWriter(rank_dir, meta={"rank": 0, "world_size": 1, "framework": "pytorch"}) as w:
        w.add_modules(["block"], ["Block"], [""])
        for step in steps:
            names = [r[0] for r in records]
            rows = w.add_records(step=[step] * len(records), name=names, kind=[1 if n.startswith("Module") else 0
                                                                                for n in names],
                                 direction=[0] * len(records), parent=[r[1] for r in records],
                                 stack=[w.intern_stack(["model.py:{}".format(i)]) for i in range(len(records))],
                                 args=[json.dumps(r[2]) for r in records])
            cols = {k: [] for k in ("record", "slot", "dtype", "shape", "max", "min", "mean", "norm", "valid",
                                    "nan_count", "posinf_count", "neginf_count", "crc32", "requires_grad")}
            refs = []
            for row, (name, _, _, tensors_) in zip(rows, records):
                for slot, arr in tensors_:
                    dtype = "torch.bfloat16" if (name, slot) in bf16 else "torch.float32"
                    data = bfloat16_bits(arr) if dtype == "torch.bfloat16" else arr
                    refs.append(w.put_tensor(data, dtype) if tensors else None)
                    s = stats(arr)
                    cols["record"].append(row)
                    cols["slot"].append(slot)
                    cols["dtype"].append(dtype)
                    cols["shape"].append(arr.shape)
                    for k in ("max", "min", "mean", "norm", "nan_count", "posinf_count", "neginf_count"):
                        cols[k].append(s[k])
                    cols["valid"].append(15 | 16)
                    cols["crc32"].append(zlib.crc32(np.ascontiguousarray(data).tobytes()))
                    cols["requires_grad"].append(0)
            w.add_tensors(refs=refs if tensors else None, step=[step] * len(refs), **cols)
            w.commit_step(step)
    return rank_dir


def write_msprobe(root: Path, records):
    """The same records in msprobe's layout: step0/rank0/{dump,stack,construct}.json + dump_tensor_data/*.npy."""
    folder = root / "step0" / "rank0"
    (folder / "dump_tensor_data").mkdir(parents=True)
    data, construct = {}, {}
    for name, parent, args, tensors in records:
        entry = {"input_args": [], "input_kwargs": {}, "output": []}
        by_slot = dict(tensors)
        for i, a in enumerate(args["args"]):
            entry["input_args"].append(_leaf(name, "input.{}".format(i), by_slot, a, folder))
        for k, a in args["kwargs"].items():
            entry["input_kwargs"][k] = _leaf(name, "input." + k, by_slot, a, folder)
        entry["output"].append(_leaf(name, "output.0", by_slot, {"tensor": "output.0"}, folder))
        data[name] = entry
        construct[name] = parent or None
    (folder / "dump.json").write_text(json.dumps({"task": "tensor", "level": "mix", "framework": "pytorch",
                                                  "dump_data_dir": None, "data": data}))
    (folder / "construct.json").write_text(json.dumps(construct))
    return root


def _leaf(name, slot, by_slot, arg, folder):
    if isinstance(arg, dict) and "tensor" in arg:
        arr = by_slot[slot]
        s = stats(arr)
        fname = "{}.{}.npy".format(name, slot)
        np.save(folder / "dump_tensor_data" / fname, arr)
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(arr.shape), "Max": s["max"],
                "Min": s["min"], "Mean": s["mean"], "Norm": s["norm"], "requires_grad": False,
                "md5": "{:08x}".format(zlib.crc32(arr.tobytes())), "data_name": fname}
    if isinstance(arg, list):
        return [{"type": "int", "value": v} for v in arg]
    return {"type": type(arg).__name__, "value": arg}


def job(target, golden, out, **extra):
    section = {"target_path": str(target), "golden_path": str(golden), "output_path": str(out)}
    section.update(extra)
    return {"task": "compare", "compare": section}


def test_our_dumps_tensor_mode_end_to_end(tmp_path):
    t = write_ours(tmp_path / "t" / "rank0", model(eps=1e-1))
    g = write_ours(tmp_path / "g" / "rank0", model())
    out = run_compare(job(t, g, tmp_path / "out", formats=["hdf5", "csv"]), None)
    assert out.summary["mode"] == "tensor" and out.summary["target_origin"] == "probe-tui"
    top = out.top_suspects[0]
    assert top["record"] == "Functional.layer_norm.0.forward" and top["changed_args"] == "input.eps: 0.1 -> 1e-05"
    res = read_results(out.output_dir)
    names = res["target_name"].tolist()
    assert names[:3] == ["Module.block.Block.forward.0.input.0", "Module.block.Block.forward.0.output.0",
                         "Functional.linear.0.forward.input.0"]
    i = names.index("Functional.layer_norm.0.forward.input.eps")
    codes = read_results(out.output_dir, "verdicts")
    assert codes["name"][res["verdict"][i]] == "error"
    j = names.index("Functional.linear.0.forward.output.0")
    assert res["rel_err"][j] == 0.0 and res["cosine"][j] == pytest.approx(1.0) and res["verdict"][j] == 0
    k = names.index("Functional.layer_norm.0.forward.output.0")
    assert res["rel_err"][k] > 1e-3 and res["stack"][k] == "model.py:2"
    tree = read_results(out.output_dir, "tree")
    block = tree["node"].tolist().index("Module.block.Block.forward.0")
    assert tree["worst_verdict"][block] == 2 and tree["n_rows"][block] == len(names)
    assert tree["parent"][tree["node"].tolist().index("Functional.relu.0.forward")] == \
        "Module.block.Block.forward.0"
    assert read_summary(out.output_dir)["top_suspects"][0]["record"] == "Functional.layer_norm.0.forward"
    page = read_results(out.output_dir, columns=["target_name", "verdict"], rows=slice(2, 4))
    assert page["target_name"].tolist() == names[2:4] and list(page) == ["target_name", "verdict"]


def test_msprobe_layout_against_ours(tmp_path):
    ours = write_ours(tmp_path / "ours" / "rank0", model())
    theirs = write_msprobe(tmp_path / "msprobe", model())
    for k, (t, g) in enumerate(((theirs, ours), (ours, theirs))):
        out = run_compare(job(t, g, tmp_path / "out{}".format(k), formats=["csv"]), None)
        assert out.summary["mode"] == "tensor"
        assert out.summary["verdicts"]["pass"] == out.summary["rows"], out.summary["verdicts"]
        assert out.summary["golden_only_rows"] == 0
    changed = write_msprobe(tmp_path / "msprobe2", model(scale=1.05))
    out = run_compare(job(changed, ours, tmp_path / "o3", formats=["csv"]), None)
    assert out.top_suspects[0]["record"] == "Functional.relu.0.forward"
    assert out.summary["first_differing_op"] == "Functional.relu.0.forward"


def test_statistics_mode_and_hash_equality_on_our_dumps(tmp_path):
    t = write_ours(tmp_path / "t" / "rank0", model(scale=1.5), tensors=False)
    g = write_ours(tmp_path / "g" / "rank0", model(), tensors=False)
    out = run_compare(job(t, g, tmp_path / "out", formats=["hdf5"]), None)
    assert out.summary["mode"] == "statistics"
    res = out.results
    hash_eq = dict(zip(res["target_name"].tolist(), res["hash_equal"].tolist()))
    assert hash_eq["Functional.linear.0.forward.output.0"] == 1
    assert hash_eq["Functional.relu.0.forward.output.0"] == 0
    assert out.top_suspects[0]["record"] == "Functional.relu.0.forward"
    with pytest.raises(Exception, match="tensor needs full tensors"):
        run_compare(job(t, g, tmp_path / "o2", mode="tensor"), None)


def test_bf16_tensors_compare_as_float(tmp_path):
    rec = model()
    t = write_ours(tmp_path / "t" / "rank0", rec, bf16={("Functional.relu.0.forward", "output.0")})
    g = write_ours(tmp_path / "g" / "rank0", rec)
    out = run_compare(job(t, g, tmp_path / "out", formats=["csv"]), None)
    r = out.results
    i = r["target_name"].tolist().index("Functional.relu.0.forward.output.0")
    assert r["target_dtype"][i] == "torch.bfloat16" and 0 < r["rel_err"][i] < 2 ** -8
    assert r["verdict"][i] == 1 and "dtype differs" in r["reasons"][i]


def test_run_folders_ranks_by_id_and_latest(tmp_path):
    for side, ranks, scale in (("t", (0, 3), 2.0), ("g", (3, 4), 1.0)):
        run = create_run(tmp_path / side, task="tensor", config={}, framework="pytorch")
        for r in ranks:
            write_ours(run.rank_dir(r), model(scale=scale))
        run.finish("finished", 0)
    src = open_dump(tmp_path / "t" / "latest")
    assert src.ranks() == [0, 3]
    out = run_compare(job(tmp_path / "t", tmp_path / "g" / "latest", tmp_path / "out", formats=["csv"]), None)
    assert out.summary["pieces"] == [{"rank": 3, "target_step": 0, "golden_step": 0}]
    assert any("rank 0 only in the target" in n for n in out.summary["notes"])


def test_parse_our_dump(tmp_path):
    d = write_ours(tmp_path / "run" / "rank0", model(nan=True), steps=(0, 1))
    out = parse(d, name="relu", step=1)
    assert out.summary["origin"] == "probe-tui" and out.summary["steps"] == [0, 1]
    assert [r["name"] for r in out.summary["listed"]] == ["Functional.relu.0.forward.input.0",
                                                         "Functional.relu.0.forward.output.0"]
    nonfinite = parse(d, nonfinite=True, step=0)
    assert {r["name"] for r in nonfinite.summary["listed"]} == {"Module.block.Block.forward.0.output.0",
                                                                "Functional.relu.0.forward.output.0"}
    assert nonfinite.summary["listed"][0]["nonfinite"] == 1
    arr = read_tensor(d, "Functional.linear.0.forward.output.0", step=0)
    assert arr.shape == (4, 16) and np.allclose(arr, X @ W)
    h = histogram(d, "Functional.relu.0.forward.output.0", step=0, bins=4)
    assert h.nan == 1 and h.counts.sum() == 63
    exported = parse(d, name="layer_norm", export_npy=tmp_path / "npy")
    assert exported.summary["exported"] == 4  # 2 tensors x 2 steps, in rank0/step<S>/ folders
    assert (tmp_path / "npy" / "rank0" / "step1" / "Functional.layer_norm.0.forward.output.0.npy").exists()
    scalar = parse(d, name="eps", step=0).summary["listed"][0]
    assert scalar["max"] == pytest.approx(1e-5) and scalar["dtype"] == "<class 'float'>"


def _op(name, shape, k):
    """A binary op record: two inputs and the product."""
    a = np.full(shape, 1.0 + k, np.float32)
    b = np.full(shape, 2.0 + k, np.float32)
    return (name, "", {"args": [{"tensor": "input.0"}, {"tensor": "input.1"}], "kwargs": {}},
            [("input.0", a), ("input.1", b), ("output.0", a * b)])


def test_msprobe_dunder_names_pair_with_ours(tmp_path):
    # call order: a * b, c.mul(d), relu, 2 * e, a * b again, (msprobe only: one more a * b), a *= b
    ours = [_op("Tensor.mul.0.forward", (2, 3), 0), _op("Tensor.mul.1.forward", (4,), 1),
            _op("Functional.relu.0.forward", (3,), 2), _op("Tensor.mul.2.forward", (5,), 3),
            _op("Tensor.mul.3.forward", (2, 3), 4), _op("Tensor.mul_.0.forward", (2, 3), 6)]
    theirs = [_op("Tensor.__mul__.0.forward", (2, 3), 0), _op("Tensor.mul.0.forward", (4,), 1),
              _op("Functional.relu.0.forward", (3,), 2), _op("Tensor.__rmul__.0.forward", (5,), 3),
              _op("Tensor.__mul__.1.forward", (2, 3), 4), _op("Tensor.__mul__.2.forward", (7,), 5),
              _op("Tensor.__imul__.0.forward", (2, 3), 6)]
    o = write_ours(tmp_path / "ours" / "rank0", ours, tensors=False)
    m = write_msprobe(tmp_path / "ms", theirs)
    want = {"Tensor.mul.0.forward": "Tensor.__mul__.0.forward", "Tensor.mul.1.forward": "Tensor.mul.0.forward",
            "Tensor.mul.2.forward": "Tensor.__rmul__.0.forward", "Tensor.mul.3.forward": "Tensor.__mul__.1.forward",
            "Tensor.mul_.0.forward": "Tensor.__imul__.0.forward"}
    out = run_compare(job(o, m, tmp_path / "a", mode="statistics", formats=["hdf5"]), None)
    r = out.results
    paired = {rec: g.rsplit(".", 2)[0] for rec, g in zip(r["record"], r["golden_name"]) if rec in want}
    assert paired == want
    assert (r["verdict"][np.isin(r["record"], list(want))] == 0).all()
    assert out.summary["golden_only_rows"] == 3  # Tensor.__mul__.2: a call only msprobe recorded
    # msprobe's dump as the run under test: the same pairs, the other way round
    out = run_compare(job(m, o, tmp_path / "b", mode="statistics", formats=["hdf5"]), None)
    r = out.results
    paired = {g.rsplit(".", 2)[0]: rec for rec, g in zip(r["record"], r["golden_name"]) if g}
    assert all(paired[k] == v for k, v in want.items())
    lonely = r["verdict"][r["record"] == "Tensor.__mul__.2.forward"]
    assert len(lonely) == 3 and (lonely == 3).all()  # unmatched
