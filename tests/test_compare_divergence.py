"""First divergence on hand-built dumps (engines.store.DumpWriter): error added, target-only regions, gaps, the
update phase, backward twins, and the module roll-up."""

import json

import numpy as np
import pytest

from engines.compare.engine import run_compare
from engines.store import DumpWriter

RNG = np.random.default_rng(11)
X0 = RNG.standard_normal((8, 32)).astype(np.float32)


def write(rank_dir, records):
    """``records``: (name, parent, [(slot, array)]) in call order; direction from the name."""
    with DumpWriter(rank_dir, meta={"rank": 0, "world_size": 1, "framework": "pytorch"}) as w:
        names = [r[0] for r in records]
        rows = w.add_records(step=0, name=names, kind=[1 if n.startswith("Module") else 0 for n in names],
                             direction=[1 if "backward" in n else 0 for n in names], parent=[r[1] for r in records],
                             args=[json.dumps({"args": [], "kwargs": {}})] * len(records))
        cols = {k: [] for k in ("record", "slot", "dtype", "shape", "max", "min", "mean", "norm", "valid")}
        refs = []
        for row, (_, _, tensors) in zip(rows, records):
            for slot, arr in tensors:
                a = arr.astype(np.float64)
                refs.append(w.put_tensor(arr, "torch.float32"))
                for k, v in (("record", row), ("slot", slot), ("dtype", "torch.float32"), ("shape", arr.shape),
                             ("max", a.max()), ("min", a.min()), ("mean", a.mean()), ("norm", np.linalg.norm(a)),
                             ("valid", 15)):
                    cols[k].append(v)
        w.add_tensors(refs=refs, step=0, **cols)
        w.commit_step(0)
    return rank_dir


def ulp_noise(a, k=1):
    """The golden's "other kernels": every value a few ulp off."""
    return (a * (1 + np.float32(k) * np.float32(2 ** -23) * RNG.choice([-1, 1], a.shape))).astype(np.float32)


def chain(fault=False, golden=False, gap=False):
    """linear -> gelu -> [softmax | target-only composite] -> matmul -> add, with the target slightly off."""
    n = ulp_noise if golden else (lambda a, k=1: a)
    h = n((X0 * np.float32(1.5)).astype(np.float32))
    g = n(np.tanh(h).astype(np.float32))
    recs = [("Functional.linear.0.forward", "", [("input.0", X0), ("output.0", h)]),
            ("Functional.gelu.0.forward", "", [("input.0", h), ("output.0", g)])]
    sm = np.exp(g) / np.exp(g).sum(-1, keepdims=True)
    if fault:  # the softmax done as three ops in low precision
        e = np.exp(g).astype(np.float16).astype(np.float32)
        s = e.sum(-1, keepdims=True).astype(np.float16).astype(np.float32)
        p = (e / s).astype(np.float32)
        recs += [("Torch.exp.0.forward", "", [("input.0", g), ("output.0", e)]),
                 ("Tensor.sum.0.forward", "", [("input.0", e), ("output.0", s)]),
                 ("Tensor.div.0.forward", "", [("input.0", e), ("input.1", s), ("output.0", p)])]
    else:
        p = n(sm.astype(np.float32))
        recs.append(("Functional.softmax.0.forward", "", [("input.0", g), ("output.0", p)]))
    q = p * np.float32(2.0) if gap else p
    m = n((q @ q.T).astype(np.float32))
    out = n((m + np.float32(1)).astype(np.float32))
    recs += [("Tensor.matmul.0.forward", "", [("input.0", q), ("input.1", q), ("output.0", m)]),
             ("Tensor.add.0.forward", "", [("input.0", m), ("output.0", out)])]
    return recs


def compare(tmp_path, t, g, **extra):
    section = {"target_path": str(t), "golden_path": str(g), "output_path": str(tmp_path / "out"),
               "formats": ["hdf5"]}
    section.update(extra)
    return run_compare({"task": "compare", "compare": section}, None)


def test_target_only_ops_rank_first_as_a_region(tmp_path):
    t = write(tmp_path / "t" / "rank0", chain(fault=True))
    g = write(tmp_path / "g" / "rank0", chain(golden=True))
    out = compare(tmp_path, t, g, fuzzy_match=True)
    top = out.top_suspects[0]
    assert top["kind"] == "target-only ops" and top["record"] == "Torch.exp.0.forward"
    assert top["note"] == ("3 target-only op(s) Torch.exp.0.forward, Tensor.sum.0.forward, Tensor.div.0.forward -> "
                           "Tensor.matmul.0.forward")
    table = out.divergence
    region = int(np.flatnonzero(table["kind"] == 4)[0])
    assert (table["last_op"][region], table["n_ops"][region], table["link"][region]) == \
        ("Tensor.div.0.forward", 3, "Tensor.matmul.0.forward")
    group = out.summary["suspect_groups"][0]
    assert group["where"] == "" and out.summary["tables"][0]["rows"][0][:2] == ["exp.0 +2 → matmul.0", "0"]
    assert table["members"][region] == "Torch.exp.0.forward Tensor.sum.0.forward Tensor.div.0.forward"
    assert top["score"] > 100 and top["score"] > 10 * out.top_suspects[1]["score"]
    # the naive answers: the first op that differs is the linear (every op is a few ulp off), and the largest
    # error is downstream of the fault
    assert out.summary["first_differing_op"] == "Functional.linear.0.forward"
    assert out.summary["largest_error_op"] != top["record"]
    assert any("have no golden counterpart" in n for n in out.summary["notes"])
    table = out.divergence
    assert table["kind"].tolist().count(4) == 1 and table["position"][0] == 1


def test_gap_when_the_golden_ran_ops_the_target_did_not(tmp_path):
    # the golden doubled the softmax output before the matmul; the target did not
    t = write(tmp_path / "t" / "rank0", chain())
    g = write(tmp_path / "g" / "rank0", chain(golden=True, gap=True))
    out = compare(tmp_path, t, g)
    top = out.top_suspects[0]
    assert top["kind"] == "gap" and top["record"] == "Tensor.matmul.0.forward"
    assert "further off than output.0 of Functional.softmax.0.forward" in top["note"]
    assert out.divergence["link"][0] == "Functional.softmax.0.forward"
    assert out.summary["tables"][0]["rows"][0][4] == "golden-only ops after softmax.0?"


def _adam_like(golden):
    """A model phase, a backward, then update-phase ops that amplify tiny gradient differences."""
    n = ulp_noise if golden else (lambda a, k=1: a)
    h = n((X0 * 2).astype(np.float32))
    grad = n((X0 * 1e-7).astype(np.float32), 4)
    upd = (np.sign(grad) * np.float32(1e-3)).astype(np.float32)
    if golden:
        upd[0] = -upd[0]  # sign flips of tiny gradients
    return [("Functional.linear.0.forward", "", [("input.0", X0), ("output.0", h)]),
            ("Functional.linear.0.backward", "", [("input.0", h), ("output.0", grad)]),
            ("Tensor.addcdiv_.0.forward", "", [("input.0", grad), ("output.0", upd)])]


def test_update_phase_ranks_after_a_model_signal(tmp_path):
    recs_t = _adam_like(False)
    recs_t[0] = ("Functional.linear.0.forward", "", [("input.0", X0), ("output.0", (X0 * 2.2).astype(np.float32))])
    t = write(tmp_path / "t" / "rank0", recs_t)
    g = write(tmp_path / "g" / "rank0", _adam_like(True))
    out = compare(tmp_path, t, g)
    kinds = [(s["record"], s["phase"]) for s in out.top_suspects]
    assert kinds[0] == ("Functional.linear.0.forward", "forward")
    update = [s for s in out.top_suspects if s["phase"] == "update"][0]
    assert update["record"] == "Tensor.addcdiv_.0.forward" and update["score"] > out.top_suspects[0]["score"]


def test_update_phase_leads_when_the_model_is_clean(tmp_path):
    t = write(tmp_path / "t" / "rank0", _adam_like(False))
    g = write(tmp_path / "g" / "rank0", _adam_like(True))
    out = compare(tmp_path, t, g)
    assert out.top_suspects[0]["record"] == "Tensor.addcdiv_.0.forward"


def test_backward_counts_its_forward_inputs(tmp_path):
    # the forward input differs a lot (inherited); the backward's own inputs do not: not a suspect
    def recs(golden):
        x = (X0 * (1.1 if golden else 1.0)).astype(np.float32)
        y = np.tanh(x).astype(np.float32)
        dy = np.ones_like(y)
        dx = (dy * (1 - y * y)).astype(np.float32)
        return [("Functional.tanh.0.forward", "", [("input.0", x), ("output.0", y)]),
                ("Functional.tanh.0.backward", "", [("input.0", dy), ("output.0", dx)])]
    t = write(tmp_path / "t" / "rank0", recs(False))
    g = write(tmp_path / "g" / "rank0", recs(True))
    out = compare(tmp_path, t, g)
    back = [s for s in out.top_suspects if s["record"] == "Functional.tanh.0.backward"][0]
    assert back["in_err"] > 0.05 and back["score"] < 2


def test_rollup_carries_the_worst_below(tmp_path):
    def recs(golden):
        x = (X0 * (1.5 if golden else 1.0)).astype(np.float32)
        return [("Module.blk.Block.forward.0", "", [("input.0", X0), ("output.0", x)]),
                ("Functional.relu.0.forward", "Module.blk.Block.forward.0", [("input.0", X0), ("output.0", x)])]
    t = write(tmp_path / "t" / "rank0", recs(False))
    g = write(tmp_path / "g" / "rank0", recs(True))
    out = compare(tmp_path, t, g)
    tree = out.tree
    nodes = tree["node"].tolist()
    blk, relu = nodes.index("Module.blk.Block.forward.0"), nodes.index("Functional.relu.0.forward")
    assert tree["parent"][relu] == "Module.blk.Block.forward.0" and tree["depth"][relu] == 1
    assert tree["n_rows"][blk] == 4 and tree["n_error"][blk] == 2 and tree["worst_verdict"][blk] == 2
    assert tree["max_rel_err"][blk] == pytest.approx(1 / 3, rel=1e-6)


def test_suspect_names_steps_and_locations():
    from engines.compare.suspects import innermost_frame, location, numbers_text, short_op

    assert numbers_text([3, 0, 1, 2]) == "0-3" and numbers_text([0, 2, 5, 6, 7, 9, 10]) == "0,2,5-7,9,10"
    assert short_op("Tensor.to.0.forward") == "to.0" and short_op("Functional.layer_norm.12.backward") == \
        "layer_norm.12"
    assert short_op("Module.blocks.1.attn.Attention.forward.0") == "blocks.1.attn"
    stack = ("File /home/u/train.py, line 88, in main,\n loss = model(x)\n"
             "File /home/u/model.py, line 41, in forward,\n h = self.proj(x)\n"
             "File /usr/lib/python3.11/site-packages/torch/nn/modules/linear.py, line 134, in forward,\n"
             " return F.linear(input, self.weight, self.bias)")
    assert innermost_frame(stack) == "model.py:41"  # torch's own frame says nothing about the model
    assert innermost_frame("File /usr/lib/python3.11/site-packages/torch/x.py, line 3, in f,\n y") == "x.py:3"
    assert innermost_frame("") == "" and innermost_frame("no frames here") == ""
    assert location("Module.blocks.0.mlp.MLP.forward.0", stack) == "blocks.0.mlp"
    assert location("", stack) == "model.py:41"


def test_suspects_group_over_ranks_and_steps():
    from engines.compare.suspects import group_suspects, suspects_table

    obj = lambda items: np.array(items, dtype=object)  # noqa: E731
    # the ranking: the same linear on two ranks and three steps, a region at step 1 only, another op
    recs = ["Functional.linear.2.forward"] * 4 + ["Torch.exp.0.forward", "Functional.gelu.0.forward",
                                                  "Functional.linear.2.forward"]
    n = len(recs)
    div = {"record": obj(recs), "kind": np.array([0, 0, 0, 0, 4, 0, 0], np.uint8),
           "rank": np.array([0, 1, 0, 1, 0, 0, 1]), "step": np.array([0, 0, 2, 2, 1, 0, 3]),
           "score": np.array([90.0, 80, 70, 60, 50, 40, 3]), "position": np.arange(1, n + 1),
           "direction": np.zeros(n, np.uint8), "phase": np.zeros(n, np.uint8), "out_err": np.full(n, 0.01),
           "in_err": np.full(n, 1e-4), "worst_verdict": np.zeros(n, np.uint8), "first_row": np.arange(n),
           "parent": obj([""] * n), "last_op": obj([""] * 4 + ["Tensor.div.0.forward", "", ""]),
           "link": obj([""] * 4 + ["Tensor.matmul.0.forward", "", ""]), "n_ops": np.array([1, 1, 1, 1, 3, 1, 1]),
           "changed_args": obj([""] * n), "note": obj([""] * n)}
    groups = group_suspects(div, {"stack": obj([""] * n)}, 10)
    assert [g["record"] for g in groups] == ["Functional.linear.2.forward", "Torch.exp.0.forward",
                                            "Functional.gelu.0.forward"]
    assert groups[0]["steps"] == [0, 2, 3] and groups[0]["ranks"] == [0, 1] and groups[0]["entries"] == 5
    assert groups[0]["score"] == 90.0
    table = suspects_table(groups, multi_rank=True)
    assert table["rows"][0][:3] == ["Functional.linear.2.forward", "r0,1 s0,2,3", "90"]
    assert table["rows"][1][0] == "exp.0…div.0 → matmul.0"  # no member list (a result without it): first…last
    div["members"] = obj([""] * 4 + ["Torch.exp.0.forward Tensor.sum.0.forward Tensor.div.0.forward", "", ""])
    assert suspects_table(group_suspects(div, {}, 10), multi_rank=False)["rows"][1][0] == \
        "exp.0 +2 → matmul.0"
    assert len(group_suspects(div, {}, 2)) == 2
