"""One run captured by probe-tui and by msprobe 26.2 (tests/data/msprobe/real, made by make_real_dumps.py) compares
clean in tensor, statistics and md5 modes, backward rows included: msprobe numbers a backward record's output slots
by the autograd node it hooks (``linear``: db, dx, dwᵀ; ``cross_entropy``: the gradient at nll_loss), we by the
forward argument (engines/dumps/msprobe/backward_slots.py)."""

import glob
import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.compare.engine import run_compare  # noqa: E402
from engines.dumps.msprobe.backward_slots import forward_tensor_inputs, map_backward_outputs  # noqa: E402
from engines.dumps.opener import open_dump  # noqa: E402

DATA = Path(__file__).parent / "data" / "msprobe"
REAL = DATA / "real"
pytestmark = pytest.mark.usefixtures("one_torch_thread_for_module")


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """Our tensor and md5 captures of make_real_dumps.py's model and step, at level mix as msprobe's."""
    sys.path.insert(0, str(DATA))
    try:
        from make_real_dumps import batch, step, tiny_model
    finally:
        sys.path.remove(str(DATA))
    from probe_tui.debugger import PrecisionDebugger

    root = tmp_path_factory.mktemp("ours")
    runs = {}
    for name, task, section in (("tensor", "tensor", {}), ("md5", "statistics", {"summary_mode": "md5"})):
        config = root / (name + ".json")
        config.write_text(json.dumps({"task": task, "dump_path": str(root / name), "level": "mix", task: section}))
        model = tiny_model()
        x, y = batch()
        debugger = PrecisionDebugger(config_path=str(config))
        debugger.start(model)
        step(model, x, y)
        debugger.stop()
        debugger.step()
        debugger.close()
        runs[name] = sorted(glob.glob(str(root / name / "2*")))[-1]
    return runs


def _compare(tmp_path, target, golden, mode):
    return run_compare({"compare": {"target_path": str(target), "golden_path": str(golden), "mode": mode,
                                    "output_path": str(tmp_path / "out"), "formats": ["csv"]}}, None)


@pytest.mark.parametrize("mode,ours_key,real,flip", [
    ("tensor", "tensor", "tensor_mix", False),
    ("tensor", "tensor", "tensor_mix", True),
    ("statistics", "md5", "stats_md5_mix", False),
    ("statistics", "md5", "stats_md5_mix", True),
    ("md5", "md5", "stats_md5_mix", False),
])
def test_the_same_run_compares_clean_against_msprobe(tmp_path, ours, mode, ours_key, real, flip):
    target, golden = (REAL / real, ours[ours_key]) if flip else (ours[ours_key], REAL / real)
    out = _compare(tmp_path, target, golden, mode)
    r = out.results
    matched = r["matched"]
    assert out.summary["verdicts"]["error"] == 0 and out.summary["verdicts"]["warning"] == 0
    assert out.top_suspects == [] or max(s["score"] for s in out.top_suspects) < 1
    names = set(r["target_name"][matched].tolist())
    # every gradient of both linears pairs, dx/dw/db each with its own
    for slot in ("output.0", "output.1", "output.2"):
        assert "Functional.linear.1.backward." + slot in names
    assert {"Functional.linear.0.backward.output.1", "Functional.linear.0.backward.output.2"} <= names
    backward = matched & (r["direction"] == 1)
    assert backward.sum() >= 15 and (r["verdict"][backward] == 0).all()
    if mode == "tensor":
        assert np.nanmax(r["rel_err"][backward]) < 1e-6


def test_msprobe_linear_slots_read_as_ours():
    rows = open_dump(REAL / "tensor_mix").rows(0, 0)
    shapes = dict(zip(rows.name.tolist(), rows.shape.tolist()))
    assert shapes["Functional.linear.1.backward.output.0"] == "[2, 8]"  # dx
    assert shapes["Functional.linear.1.backward.output.1"] == "[3, 8]"  # dw (msprobe holds dwᵀ, [8, 3])
    assert shapes["Functional.linear.1.backward.output.2"] == "[3]"  # db
    # cross_entropy's gradient is w.r.t. nll_loss's input: kept, under a slot nothing of ours pairs with
    assert "Functional.cross_entropy.0.backward.output.grad_fn.0" in shapes
    assert "Functional.cross_entropy.0.backward.output.0" not in shapes


def _t(*shape):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape)}


def test_slot_mapping_rules():
    # F.layer_norm(x, normalized_shape, w, b): msprobe's node gives (dx, dw, db); ours are output.0, .2, .3
    ln = forward_tensor_inputs({"input_args": [_t(2, 4), {"type": "list", "value": [4]}, _t(4), _t(4)]})
    assert map_backward_outputs("layer_norm", [_t(2, 4), _t(4), _t(4)], ln) == [
        ("output.0", _t(2, 4), False), ("output.2", _t(4), False), ("output.3", _t(4), False)]
    # F.embedding(ids, w): one gradient, the weight's (the ids are integers)
    ids = dict(_t(2, 5), dtype="torch.int64")
    emb = forward_tensor_inputs({"input_args": [ids, _t(10, 4)]})
    assert map_backward_outputs("embedding", [_t(10, 4)], emb) == [("output.1", _t(10, 4), False)]
    # weight and bias of one shape, and no order to tell them apart: kept unpaired, never crossed
    odd = forward_tensor_inputs({"input_args": [_t(2, 4), _t(4), _t(4)]})
    assert map_backward_outputs("odd", [_t(4), _t(4)], odd) == [("output.grad_fn.0", _t(4), False),
                                                                ("output.grad_fn.1", _t(4), False)]
    relu = [("output.0", (2, 3))]
    assert map_backward_outputs("relu", [_t(2, 3)], relu) is None  # msprobe's order agrees: unchanged
    assert map_backward_outputs("linear", [_t(3)], None) is None  # no forward record: unchanged
    mm = [("output.0", (2, 4)), ("output.1", (3, 4))]
    assert map_backward_outputs("linear", [_t(2, 4), _t(4, 3)], mm) == [("output.0", _t(2, 4), False),
                                                                         ("output.1", _t(4, 3), True)]


@pytest.mark.parametrize("flip", [False, True])
def test_integer_statistics_msprobe_leaves_empty_are_na(tmp_path, ours, flip):
    """msprobe 26.2 writes no Mean/Norm for an integer tensor (cross_entropy's target): N/A, not an error."""
    target, golden = (REAL / "stats_md5_mix", ours["md5"]) if flip else (ours["md5"], REAL / "stats_md5_mix")
    out = _compare(tmp_path, target, golden, "statistics")
    r = out.results
    i = r["target_name"].tolist().index("Functional.cross_entropy.0.forward.input.1")
    assert r["target_dtype"][i] == "torch.int64" and r["verdict"][i] == 0 and r["rel_err"][i] == 0.0
    for s in ("mean", "norm"):
        assert r[s + "_note"][i] == 1 and np.isnan(r[s + "_rel"][i])  # NOTE_NA
    for s in ("max", "min"):
        assert r[s + "_note"][i] == 0 and r[s + "_rel"][i] == 0.0
    csv = next((tmp_path / "out").rglob("*.csv")).read_text().splitlines()
    header = csv[0].split(",")
    row = next(line.split(",") for line in csv if line.startswith("Functional.cross_entropy.0.forward.input.1,"))
    for column in ("Mean diff", "L2norm diff", "MeanRelativeErr", "NormRelativeErr"):
        assert row[header.index(column)] == "N/A"


def test_the_demo_against_its_own_rows_in_msprobes_layout(tmp_path):
    """The demo (embedding, layer_norm, 3-D linears, softmax, gelu, cross_entropy) written in msprobe's layout
    with msprobe's backward slot order (tests/msprobe_layout.py) compares clean against itself."""
    from msprobe_layout import write_msprobe_dump
    from test_compare_demo import capture_demo

    ours = capture_demo(tmp_path / "ours", task="statistics")
    theirs = write_msprobe_dump(ours, tmp_path / "msprobe")
    for flip in (False, True):
        target, golden = (theirs, ours) if flip else (ours, theirs)
        out = run_compare({"compare": {"target_path": str(target), "golden_path": str(golden),
                                       "mode": "statistics", "output_path": str(tmp_path / "out{}".format(flip)),
                                       "formats": ["csv"]}}, None)
        r = out.results
        backward = r["matched"] & (r["direction"] == 1)
        assert backward.sum() >= 40
        assert (r["verdict"][backward] == 0).all(), r["target_name"][backward & (r["verdict"] != 0)]
        names = set(r["target_name"][backward].tolist())
        assert {"Functional.layer_norm.0.backward.output.0", "Functional.layer_norm.0.backward.output.weight",
                "Functional.layer_norm.0.backward.output.bias", "Functional.embedding.0.backward.output.1"} <= names
        assert not [s for s in out.top_suspects if s["score"] >= 1]
        integer = r["matched"] & np.array([str(d).startswith("torch.int") for d in r["target_dtype"]])
        assert integer.sum() >= 2 and (r["verdict"][integer] == 0).all()
        assert (r["mean_note"][integer] == 1).all() and not np.isinf(r["rel_err"][integer]).any()
