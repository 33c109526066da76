"""Compare across parallel layouts on synthetic dumps written with engines.store.DumpWriter: a TP=2 run (shards
with their recorded placements, or plain shards with a layout description, Megatron style) and a PP=2 run,
against one process (docs/COMPARE.md, "Across parallel layouts")."""

import json
import math
import zlib

import numpy as np
import pytest

from engines.compare.engine import run_compare
from engines.compare.options import CompareError
from engines.compare.shard_merge import Part, Recipe, Unmergeable, infer_shard_dim, parse_placement
from engines.runs import create_run
from engines.store import DumpWriter

RNG = np.random.default_rng(3)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W_UP = RNG.standard_normal((16, 8)).astype(np.float32)
W_DOWN = RNG.standard_normal((8, 16)).astype(np.float32)


def dist(global_shape, placement, coord, mesh=(0, 1)):
    return json.dumps({"global_shape": list(global_shape), "placements": [placement], "mesh": [list(mesh)],
                       "mesh_dims": ["tp"], "coord": [coord]})


def golden_records():
    h = X @ W_UP.T
    r = np.maximum(h, 0)
    y = r @ W_DOWN.T
    return [("Functional.linear.0.forward", [("input.0", X, ""), ("input.1", W_UP, ""), ("output.0", h, "")]),
            ("Functional.relu.0.forward", [("input.0", h, ""), ("output.0", r, "")]),
            ("Functional.linear.1.forward", [("input.0", r, ""), ("input.1", W_DOWN, ""), ("output.0", y, "")])]


def tp_records(rank, fault=1.0, placements=True, noise=0.0):
    """Rank ``rank`` of 2 of the same model, column-parallel up, row-parallel down (``noise``: relative float noise
    a different kernel adds; ``fault``: rank 1 scales its shard of the up output)."""
    cols = slice(8 * rank, 8 * rank + 8)
    w_up = W_UP[cols]
    h = X @ w_up.T
    h = (h * (1 + noise * (rank + 1))).astype(np.float32)
    if rank == 1:
        h = (h * np.float32(fault)).astype(np.float32)
    r = np.maximum(h, 0)
    w_down = W_DOWN[:, cols]
    partial = r @ w_down.T

    def d(shape, p):
        return dist(shape, p, rank) if placements else ""

    return [("Functional.linear.0.forward", [("input.0", X, d((4, 8), "R")), ("input.1", w_up, d((16, 8), "S(0)")),
                                             ("output.0", h, d((4, 16), "S(1)"))]),
            ("Functional.relu.0.forward", [("input.0", h, ""), ("output.0", r, "")]),
            ("Functional.linear.1.forward", [("input.0", r, d((4, 16), "S(1)")),
                                             ("input.1", w_down, d((8, 16), "S(1)")),
                                             ("output.0", partial, d((4, 8), "P(sum)"))])]


def write_rank(rank_dir, records, *, tensors=True, step=0, parents=None):
    with DumpWriter(rank_dir, meta={"framework": "pytorch"}) as w:
        names = [r[0] for r in records]
        rows = w.add_records(step=[step] * len(names), name=names, kind=[1 if n.startswith("Module") else 0
                                                                        for n in names],
                             direction=[1 if n.endswith("backward") else 0 for n in names],
                             parent=parents or [""] * len(names), stack=[-1] * len(names), args=[""] * len(names))
        cols = {k: [] for k in ("record", "slot", "dtype", "shape", "max", "min", "mean", "norm", "valid",
                                "nan_count", "posinf_count", "neginf_count", "crc32", "requires_grad", "dist")}
        refs = []
        for row, (_, tensors_) in zip(rows, records):
            for slot, arr, dist_text in tensors_:
                arr = np.ascontiguousarray(arr, dtype=np.float32)
                refs.append(w.put_tensor(arr, "torch.float32") if tensors else None)
                f = arr.astype(np.float64)
                cols["record"].append(row)
                cols["slot"].append(slot)
                cols["dtype"].append("torch.float32")
                cols["shape"].append(arr.shape)
                for k, v in (("max", f.max()), ("min", f.min()), ("mean", f.mean()), ("norm", np.linalg.norm(f)),
                             ("nan_count", 0), ("posinf_count", 0), ("neginf_count", 0)):
                    cols[k].append(v)
                cols["valid"].append(15 | 16)
                cols["crc32"].append(zlib.crc32(arr.tobytes()))
                cols["requires_grad"].append(0)
                cols["dist"].append(dist_text)
        w.add_tensors(refs=refs if tensors else None, step=[step] * len(refs), **cols)
        w.commit_step(step)


def run_of(root, per_rank, **kw):
    run = create_run(root, task="tensor", config={}, framework="pytorch")
    for rank, records in per_rank.items():
        write_rank(run.rank_dir(rank), records, **kw)
    run.finish("finished", 0)
    return run.path


def job(target, golden, out, **extra):
    section = {"target_path": str(target), "golden_path": str(golden), "output_path": str(out), "formats": ["hdf5"]}
    section.update(extra)
    return {"task": "compare", "compare": section}


def by_name(out):
    r = out.results
    return {n: i for i, n in enumerate(r["target_name"].tolist())}, r


def test_tp2_against_one_process_merges_shards_row_for_row(tmp_path):
    golden = run_of(tmp_path / "g", {0: golden_records()})
    target = run_of(tmp_path / "t", {r: tp_records(r, noise=1e-7) for r in (0, 1)})
    out = run_compare(job(target, golden, tmp_path / "out"), None)
    index, r = by_name(out)
    assert len(index) == 8 and out.summary["unmatched"] == 0 and out.summary["golden_only_rows"] == 0
    assert out.summary["verdicts"]["pass"] == 8, out.summary["verdicts"]
    assert any("target ranks merged" in n for n in out.summary["notes"])
    i = index["Functional.linear.0.forward.output.0"]
    assert r["target_shape"][i] == "[4, 16]" and 0 < r["rel_err"][i] < 1e-6 and r["target_crc32"][i] == ""
    # the partial sum of the row-parallel linear is summed; plain relu shards are recognised from the golden shape
    assert r["rel_err"][index["Functional.linear.1.forward.output.0"]] < 1e-6
    assert r["target_shape"][index["Functional.relu.0.forward.output.0"]] == "[4, 16]"
    assert np.nanmax(r["rel_err"]) < 1e-6


def test_fault_in_one_ranks_shard_names_the_op_and_the_rank(tmp_path):
    golden = run_of(tmp_path / "g", {0: golden_records()})
    target = run_of(tmp_path / "t", {r: tp_records(r, fault=1.01, noise=1e-7) for r in (0, 1)})
    out = run_compare(job(target, golden, tmp_path / "out"), None)
    top = out.top_suspects[0]
    assert top["record"] == "Functional.linear.0.forward" and top["rank"] == 1, out.top_suspects[:3]
    index, r = by_name(out)
    reasons = r["reasons"][index["Functional.linear.0.forward.output.0"]]
    assert "shards against the golden: rank 0" in reasons and "rank 1 0.0" in reasons, reasons


def test_statistics_merge_exactly_and_say_what_cannot(tmp_path):
    golden = run_of(tmp_path / "g", {0: golden_records()}, tensors=False)
    target = run_of(tmp_path / "t", {r: tp_records(r) for r in (0, 1)}, tensors=False)
    out = run_compare(job(target, golden, tmp_path / "out"), None)
    assert out.summary["mode"] == "statistics" and out.summary["errors"] == 0, out.summary["verdicts"]
    index, r = by_name(out)
    whole = X @ W_UP.T
    i = index["Functional.linear.0.forward.output.0"]
    f = whole.astype(np.float64)
    assert r["t_max"][i] == f.max() and r["t_min"][i] == f.min()
    assert r["t_mean"][i] == pytest.approx(f.mean(), rel=1e-12) and r["t_norm"][i] == pytest.approx(
        np.linalg.norm(f), rel=1e-12)
    assert r["target_crc32"][i] == "" and r["hash_equal"][i] == -1  # a whole tensor's hash is not known
    j = index["Functional.linear.1.forward.output.0"]  # Partial(sum): the mean only
    assert math.isnan(r["t_max"][j]) and math.isnan(r["t_norm"][j])
    y = (np.maximum(whole, 0) @ W_DOWN.T).astype(np.float64)
    assert r["t_mean"][j] == pytest.approx(y.mean(), rel=1e-6)


def test_manual_tp_needs_a_layout_description(tmp_path):
    golden = run_of(tmp_path / "g", {0: golden_records()})
    target = run_of(tmp_path / "t", {r: tp_records(r, placements=False) for r in (0, 1)})
    plain = run_compare(job(target, golden, tmp_path / "o1"), None)
    assert "rank 1 only in the target" in plain.summary["notes"]
    out = run_compare(job(target, golden, tmp_path / "o2", target_layout={"ranks": 2, "tp": 2}), None)
    index, r = by_name(out)
    assert r["target_shape"][index["Functional.linear.0.forward.input.1"]] == "[16, 8]"  # S(0) from the shapes
    assert r["target_shape"][index["Functional.linear.1.forward.input.1"]] == "[8, 16]"  # S(1)
    # the row-parallel partial sums have the golden's shape and differ across ranks: left out, with the reason
    local = [i for i, n in enumerate(r["target_name"].tolist()) if n == "Functional.linear.1.forward.output.0"]
    assert len(local) == 2 and all(not r["matched"][i] and "local values" in r["reasons"][i] for i in local)
    assert out.summary["errors"] == 0 and out.summary["warnings"] == 0, out.summary["verdicts"]
    with pytest.raises(CompareError, match="compare.target_layout: the layout describes ranks 0-3"):
        run_compare(job(target, golden, tmp_path / "o3", target_layout={"ranks": 4, "tp": 2}), None)


def test_pp2_stages_stitched_in_model_order(tmp_path):
    g = golden_records()
    stage0 = g[:2]
    stage1 = [("Functional.linear.0.forward", g[2][1])]  # the stage counts its own calls from 0
    golden = run_of(tmp_path / "g", {0: g})
    target = run_of(tmp_path / "t", {0: stage0, 1: stage1})
    out = run_compare(job(target, golden, tmp_path / "out", target_layout={"ranks": 2, "pp": 2}), None)
    index, r = by_name(out)
    assert list(index) == [n for rec, ts in g for n in (rec + "." + s for s, _, _ in ts)]
    assert out.summary["verdicts"]["pass"] == 8 and out.summary["unmatched"] == 0


def test_pp_micro_batches_pair_call_by_call(tmp_path):
    """Two micro-batches through two stages against one process running them one after the other."""
    g = golden_records()
    lin0, relu, lin1 = g

    def rec(name, mod):
        return (name, mod)

    g_names = ["Functional.linear.0.forward", "Functional.relu.0.forward", "Functional.linear.1.forward",
               "Functional.linear.2.forward", "Functional.relu.1.forward", "Functional.linear.3.forward"]
    g_recs = [(n, t) for n, t in zip(g_names, [lin0[1], relu[1], lin1[1]] * 2)]
    s0 = [("Functional.linear.0.forward", lin0[1]), ("Functional.relu.0.forward", relu[1]),
          ("Functional.linear.1.forward", lin0[1]), ("Functional.relu.1.forward", relu[1])]
    s1 = [("Functional.linear.0.forward", lin1[1]), ("Functional.linear.1.forward", lin1[1])]
    mods0 = ["Module.s0.Stage.forward.0"] * 2 + ["Module.s0.Stage.forward.1"] * 2
    mods1 = ["Module.s1.Stage.forward.0", "Module.s1.Stage.forward.1"]
    golden = run_of(tmp_path / "g", {0: g_recs})
    run = create_run(tmp_path / "t", task="tensor", config={}, framework="pytorch")
    write_rank(run.rank_dir(0), s0, parents=mods0)
    write_rank(run.rank_dir(1), s1, parents=mods1)
    run.finish("finished", 0)
    out = run_compare(job(run.path, golden, tmp_path / "out", target_layout={"ranks": 2, "pp": 2}), None)
    assert out.summary["unmatched"] == 0 and out.summary["verdicts"]["pass"] == 16, out.summary["verdicts"]
    r = out.results
    assert [n for n in dict.fromkeys(r["record"].tolist())] == g_names


def test_placements_and_recipes():
    assert parse_placement("S(-1)", 2) == ("S", 1) and parse_placement("R", 1) == ("R", 0)
    assert parse_placement("P(sum)", 1) == ("P:sum", 0) and parse_placement("Shard(dim=0)", 2) == ("S", 0)
    with pytest.raises(Unmergeable):
        parse_placement("_S(0, 2)", 2)
    assert infer_shard_dim([(4, 8), (4, 8)], (4, 16)) == 1
    assert infer_shard_dim([(8, 8), (8, 8)], (16, 16)) is None  # both dimensions would do: refused
    assert infer_shard_dim([(3, 8), (2, 8)], (5, 8)) == 0  # uneven shards
    # a 2-d mesh (dp x tp): S(0) over dp, S(1) over tp; rank = 2 * dp + tp
    whole = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    parts, arrays = [], {}
    for dp in range(2):
        for tp in range(2):
            rank = 2 * dp + tp
            arrays[rank] = whole[2 * dp:2 * dp + 2, 3 * tp:3 * tp + 3].copy()
            parts.append(Part(rank, rank, (dp, tp), (2, 3)))
    recipe = Recipe(tuple(parts), (2, 2), (("S", 0), ("S", 1)), (4, 6))
    assert np.array_equal(recipe.assemble([arrays[p.rank] for p in parts]), whole)
    assert sorted((p.rank, off) for p, off in recipe.boxes()) == [(0, (0, 0)), (1, (0, 3)), (2, (2, 0)),
                                                                  (3, (2, 3))]
    partial = Recipe(tuple(Part(p.rank, p.loc, (i,), p.shape) for i, p in enumerate(parts[:2])), (2,), (("P:sum", 0),), (2, 3))
    assert np.array_equal(partial.assemble([arrays[0], arrays[1]]), arrays[0] + arrays[1])
    assert partial.boxes() is None


def test_layout_on_the_command_line(tmp_path, capsys):
    from probe_tui.cli import main

    golden = run_of(tmp_path / "g", {0: golden_records()})
    target = run_of(tmp_path / "t", {r: tp_records(r, placements=False) for r in (0, 1)})
    assert main(["compare", str(target), str(golden), "-o", str(tmp_path / "o1"), "--target-layout", "tp=2"]) == 2
    err = capsys.readouterr().err
    assert "ranks" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["compare", str(target), str(golden), "-o", str(tmp_path / "o2"), "--target-layout", "ranks=2,tp"]) == 2
    assert "expected key=value pairs" in capsys.readouterr().err
    assert main(["compare", str(target), str(golden), "-o", str(tmp_path / "o3"),
                 "--target-layout", "ranks=2,tp=2"]) == 0
    summary = json.loads((tmp_path / "o3" / "summary.json").read_text())
    assert summary["options"]["target_layout"]["tp"] == 2 and summary["errors"] == 0


def test_tp2_pp2_and_data_parallel_replicas(tmp_path):
    """ranks = tp + 2·pp (Megatron's order): stage 0 on ranks 0-1, stage 1 on ranks 2-3, shards in each; with
    data parallel on top (8 ranks) the second replica is a piece of its own, rank 1 of the merged side."""
    g = golden_records()
    golden = run_of(tmp_path / "g", {0: g})
    per_rank = {}
    for tp in (0, 1):
        full = tp_records(tp, placements=False)
        per_rank[tp] = full[:2]
        per_rank[2 + tp] = [("Functional.linear.0.forward", full[2][1])]
    target = run_of(tmp_path / "t", per_rank)
    out = run_compare(job(target, golden, tmp_path / "o1", target_layout={"ranks": 4, "tp": 2, "pp": 2}), None)
    index, r = by_name(out)
    assert r["target_shape"][index["Functional.linear.1.forward.input.1"]] == "[8, 16]"
    assert out.summary["errors"] == 0 and out.summary["warnings"] == 0, out.summary["verdicts"]
    assert sum(1 for n in r["target_name"].tolist() if n.startswith("Functional.linear.1.forward.output")) == 2
    # order tp-dp-pp: rank = tp + 2·dp + 4·pp; both replicas hold the same rows
    target2 = run_of(tmp_path / "t2", {r_: per_rank[(r_ % 2) + 2 * (r_ // 4)] for r_ in range(8)})
    out2 = run_compare(job(target2, golden, tmp_path / "o2",
                           target_layout={"ranks": 8, "tp": 2, "pp": 2, "order": "tp-dp-pp"}), None)
    assert "rank 1 only in the target" in out2.summary["notes"]
    assert [p["rank"] for p in out2.summary["pieces"]] == [0]
    assert out2.summary["errors"] == 0 and out2.summary["rows"] == out.summary["rows"]


def write_msprobe_ranks(root, per_rank):
    """msprobe's layout, statistics only: step0/rank<R>/dump.json."""
    for rank, records in per_rank.items():
        folder = root / "step0" / "rank{}".format(rank)
        folder.mkdir(parents=True)
        data = {}
        for name, tensors in records:
            entry = {"input_args": [], "input_kwargs": {}, "output": []}
            for slot, arr, _ in tensors:
                f = np.asarray(arr, dtype=np.float64)
                leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(arr.shape),
                        "Max": float(f.max()), "Min": float(f.min()), "Mean": float(f.mean()),
                        "Norm": float(np.linalg.norm(f)), "requires_grad": False}
                (entry["output"] if slot.startswith("output") else entry["input_args"]).append(leaf)
            data[name] = entry
        (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                      "dump_data_dir": None, "data": data}))
    return root


def test_msprobe_tp2_dumps_merge_with_a_layout_description(tmp_path):
    golden = write_msprobe_ranks(tmp_path / "g", {0: golden_records()})
    target = write_msprobe_ranks(tmp_path / "t", {r: tp_records(r, placements=False) for r in (0, 1)})
    out = run_compare(job(target, golden, tmp_path / "out", target_layout={"ranks": 2, "tp": 2}), None)
    assert out.summary["mode"] == "statistics" and out.summary["target_origin"] == "msprobe"
    index, r = by_name(out)
    i = index["Functional.linear.0.forward.output.0"]
    f = (X @ W_UP.T).astype(np.float64)
    assert r["target_shape"][i] == "[4, 16]" and r["t_max"][i] == pytest.approx(f.max(), rel=1e-6)
    assert r["t_norm"][i] == pytest.approx(np.linalg.norm(f), rel=1e-6)
    assert out.summary["errors"] == 0 and out.summary["warnings"] == 0, out.summary["verdicts"]


def test_equal_rank_counts_merge_only_when_asked(tmp_path):
    """TP=2 against DP=2: two ranks each; auto pairs rank by rank (reading no placements), on merges the TP side."""
    golden = run_of(tmp_path / "g", {0: golden_records(), 1: golden_records()})
    target = run_of(tmp_path / "t", {r: tp_records(r) for r in (0, 1)})
    auto = run_compare(job(target, golden, tmp_path / "o1"), None)
    assert [p["rank"] for p in auto.summary["pieces"]] == [0, 1] and auto.summary["errors"] > 0
    on = run_compare(job(target, golden, tmp_path / "o2", merge_ranks="on"), None)
    assert [p["rank"] for p in on.summary["pieces"]] == [0] and on.summary["errors"] == 0
    assert "rank 1 only in the golden" in on.summary["notes"]


def test_pp_micro_batches_merge_into_the_whole_batch_call(tmp_path):
    """GPipe over 2 micro-batches against one process running the whole batch at once: each stage's calls of
    one micro-batch are concatenated along the batch dimension into the golden's one call."""
    g = golden_records()
    (_, lin0), (_, relu), (_, lin1) = g

    def rows(tensors, half):
        return [(slot, a[2 * half:2 * half + 2] if a.shape[0] == 4 else a, d) for slot, a, d in tensors]

    s0 = [("Functional.linear.0.forward", rows(lin0, 0)), ("Functional.relu.0.forward", rows(relu, 0)),
          ("Functional.linear.1.forward", rows(lin0, 1)), ("Functional.relu.1.forward", rows(relu, 1))]
    s1 = [("Functional.linear.0.forward", rows(lin1, 0)), ("Functional.linear.1.forward", rows(lin1, 1))]
    golden = run_of(tmp_path / "g", {0: g})
    target = run_of(tmp_path / "t", {0: s0, 1: s1})
    out = run_compare(job(target, golden, tmp_path / "out", target_layout={"ranks": 2, "pp": 2}), None)
    s = out.summary
    assert s["unmatched"] == 0 and s["golden_only_rows"] == 0 and s["verdicts"]["pass"] == 8, s["verdicts"]
    index, r = by_name(out)
    assert r["target_shape"][index["Functional.linear.1.forward.output.0"]] == "[4, 8]"
    assert r["target_shape"][index["Functional.linear.1.forward.input.1"]] == "[8, 16]"  # the same weight
    assert any("2 micro-batches a golden call" in n for n in s["notes"]), s["notes"]
    assert np.nanmax(r["rel_err"]) == 0.0


def test_tp2_inside_dp2_from_the_recorded_meshes(tmp_path):
    """TP2 x DP2: ranks 0-1 and 2-3 are tensor-parallel groups (their 1-d meshes), each on half of the batch.
    Against one process on the whole batch, every row merges: within a replica by its shards, then the replicas
    along the batch."""
    per_rank = {}
    for dp in (0, 1):
        x = X[2 * dp:2 * dp + 2]
        mesh = (2 * dp, 2 * dp + 1)
        for tp in (0, 1):
            cols = slice(8 * tp, 8 * tp + 8)
            h = x @ W_UP[cols].T
            r = np.maximum(h, 0)
            partial = r @ W_DOWN[:, cols].T

            def d(shape, p, tp=tp, mesh=mesh):
                return dist(shape, p, tp, mesh)

            # the weight on the 2-d mesh (replicated over dp, sharded over tp): what links the replicas
            two_d = json.dumps({"global_shape": [8, 16], "placements": ["R", "S(1)"], "mesh": [[0, 1], [2, 3]],
                                "mesh_dims": ["dp", "tp"], "coord": [dp, tp]})

            per_rank[2 * dp + tp] = [
                ("Functional.linear.0.forward", [("input.0", x, ""), ("input.1", W_UP[cols], d((16, 8), "S(0)")),
                                                 ("output.0", h, d((2, 16), "S(1)"))]),
                ("Functional.relu.0.forward", [("input.0", h, ""), ("output.0", r, "")]),
                ("Functional.linear.1.forward", [("input.0", r, d((2, 16), "S(1)")),
                                                 ("input.1", W_DOWN[:, cols], two_d),
                                                 ("output.0", partial, d((2, 8), "P(sum)"))])]
    golden = run_of(tmp_path / "g", {0: golden_records()})
    target = run_of(tmp_path / "t", per_rank)
    out = run_compare(job(target, golden, tmp_path / "out"), None)
    s = out.summary
    assert s["verdicts"]["pass"] == 8 and s["rows"] == 8, (s["verdicts"], s["notes"])
    assert any("data-parallel replicas of 2" in n for n in s["notes"]), s["notes"]
    index, r = by_name(out)
    assert r["target_shape"][index["Functional.relu.0.forward.output.0"]] == "[4, 16]"
    assert r["target_shape"][index["Functional.linear.1.forward.output.0"]] == "[4, 8]"
    assert np.nanmax(r["rel_err"]) < 1e-6
