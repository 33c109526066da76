"""Compare end to end on real captures: the demo model with an injected low-precision softmax against a reference
that differs everywhere (docs/decisions/0019-ranking-tested-where-it-matters.md), and our capture against msprobe 26.2.0's dump of the same model."""

import glob
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.compare.engine import run_compare  # noqa: E402
from engines.compare.hdf5_out import read_results  # noqa: E402

DATA = Path(__file__).parent / "data" / "msprobe"


def _latest(dump_path: Path) -> str:
    return sorted(glob.glob(str(dump_path / "2*")))[-1]


def capture_demo(dump_path: Path, *, task="tensor", level="L1", faults=None, double=False, steps=1) -> str:
    """One demo training step under the in-script API. ``double``: the whole model in float64 — a reference
    whose every op differs from float32 by a few ulp, as another device's kernels do."""
    import torch.nn.functional as F

    from engines.adapters.torch.demo import build_model, make_optimizer
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs
    from probe_tui.debugger import PrecisionDebugger

    knobs = resolve_knobs({"preset": "tiny", "steps": steps, "faults": faults or {}})
    torch.manual_seed(knobs.seed)
    model = build_model(knobs)
    if double:
        model = model.double()
    optimizer = make_optimizer(model, knobs)
    debugger = PrecisionDebugger(task=task, dump_path=str(dump_path), level=level)
    for step, (x, y) in enumerate(batches(knobs)):
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        model.schedule.step = step
        debugger.start(model)
        optimizer.zero_grad()
        logits = model(x)
        F.cross_entropy(logits.view(-1, knobs.vocab), y.view(-1)).backward()
        optimizer.step()
        debugger.stop()
        debugger.step()
    return _latest(dump_path)


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    target = capture_demo(root / "lowp", faults={"lowp_softmax": {"layer": 1}})
    golden = capture_demo(root / "fp64", double=True)
    return root, target, golden


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_first_divergence_finds_the_low_precision_softmax(demo_pair, mode):
    root, target, golden = demo_pair
    out = run_compare({"task": "compare", "compare": {
        "target_path": target, "golden_path": golden, "mode": mode, "fuzzy_match": True,
        "output_path": str(root / ("out_" + mode))}}, None)
    top = out.top_suspects[0]
    # the fault: exp, sums and division in bfloat16 (engines/adapters/torch/demo_model.py: lowp_softmax, one
    # operator Demo.naive_softmax between two casts), ops the float64 reference does not run; the ranking reports
    # them as one region
    assert top["kind"] == "target-only ops", out.top_suspects[:3]
    assert top["note"].startswith(
        "3 target-only op(s) Tensor.to.0.forward, Demo.naive_softmax.0.forward, Tensor.to.1.forward -> ")
    assert "scores.to(torch.bfloat16)" in top["stack"]
    fault_ops = top["note"]
    # the naive rules point elsewhere: every op differs by a few ulp, so the first that differs is early in
    # block 0; the largest error sits in the optimizer update, far downstream
    first, largest = out.summary["first_differing_op"], out.summary["largest_error_op"]
    assert first and first not in fault_ops and "exp" not in first
    assert largest and largest not in fault_ops and "exp" not in largest
    res = read_results(out.output_dir, columns=["record", "rel_err", "matched", "io"])
    outputs = res["matched"] & (res["io"] == 1) & ~np.isnan(res["rel_err"])
    by_error = res["record"][outputs][np.argsort(-res["rel_err"][outputs], kind="stable")]
    assert "exp" not in by_error[0] and by_error[0] not in fault_ops
    div = read_results(out.output_dir, "divergence")
    assert div["kind"][0] == 4 and div["position"][0] == 1


def test_the_op_that_first_overflows_ranks_first(tmp_path):
    """fp16_overflow: torch.exp on float16 gives inf from finite inputs; everything after inherits inf/NaN."""
    target = capture_demo(tmp_path / "ovf", task="statistics", faults={"fp16_overflow": {"layer": 1}})
    golden = capture_demo(tmp_path / "ref", task="statistics")
    out = run_compare({"compare": {"target_path": target, "golden_path": golden, "fuzzy_match": True,
                                   "output_path": str(tmp_path / "out")}}, None)
    top = out.top_suspects[0]
    assert top["kind"] == "target-only ops" and "Torch.exp.0.forward" in top["note"]
    assert top["out_err"] > 1e300 and top["in_err"] == 0  # inf out of finite inputs
    consumer = out.summary["first_differing_op"]
    assert consumer == out.summary["largest_error_op"] and "exp" not in consumer
    inherited = [s for s in out.top_suspects[1:] if s["out_err"] and s["out_err"] > 1e300]
    assert inherited and all(s["score"] == 1.0 for s in inherited)


def test_a_wrong_eps_is_found_with_its_argument(tmp_path):
    target = capture_demo(tmp_path / "eps", task="statistics", faults={"wrong_eps": {"layer": 1}})
    golden = capture_demo(tmp_path / "ref", task="statistics", double=True)
    out = run_compare({"compare": {"target_path": target, "golden_path": golden,
                                   "output_path": str(tmp_path / "out")}}, None)
    top = out.top_suspects[0]
    assert top["record"].startswith("Functional.layer_norm.") and top["changed_args"] == "input.eps: 0.1 -> 1e-05"
    assert out.summary["largest_error_op"] != top["record"] and out.summary["first_differing_op"] != top["record"]


@pytest.mark.usefixtures("one_torch_thread")
def test_our_capture_against_msprobes_dump_of_the_same_model(tmp_path):
    sys.path.insert(0, str(DATA))
    try:
        from make_real_dumps import batch, step, tiny_model
    finally:
        sys.path.remove(str(DATA))
    from probe_tui.debugger import PrecisionDebugger

    model = tiny_model()
    x, y = batch()
    debugger = PrecisionDebugger(task="tensor", dump_path=str(tmp_path / "ours"), level="mix")
    debugger.start(model)
    step(model, x, y)
    debugger.stop()
    debugger.step()
    for side, (target, golden) in enumerate(((_latest(tmp_path / "ours"), DATA / "real" / "tensor_mix"),
                                             (DATA / "real" / "tensor_mix", _latest(tmp_path / "ours")))):
        out = run_compare({"compare": {"target_path": str(target), "golden_path": str(golden),
                                       "output_path": str(tmp_path / "o{}".format(side))}}, None)
        r = out.results
        forward = r["matched"] & (r["direction"] == 0) & np.array([n.startswith(("Functional.", "Module.", "Torch."))
                                                                   for n in r["target_name"]])
        assert forward.sum() >= 25
        assert (r["verdict"][forward] == 0).all(), r["target_name"][forward & (r["verdict"] != 0)]
        assert np.nanmax(r["rel_err"][forward]) == 0.0
        # `model(x) * scale`: msprobe's Tensor.__mul__.0 is our Tensor.mul.0, forward and backward
        mul = np.array([n.startswith(("Tensor.mul.0.", "Tensor.__mul__.0.")) for n in r["record"]])
        assert r["matched"][mul].sum() == 5 and (r["verdict"][mul & r["matched"]] == 0).all()
        assert {g.split(".")[1] for g in r["golden_name"][mul & r["matched"]]} == {"mul", "__mul__"} - \
            {r["record"][mul][0].split(".")[1]}
