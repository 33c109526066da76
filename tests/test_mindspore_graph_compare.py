"""Compare of graph-mode kernel dumps (MindSpore L2) with eager API dumps: the MindSpore demo in GRAPH_MODE
against the same demo in PyNative and against the PyTorch demo, kernels paired with API records where one kernel
computes the API (engines/compare/kernel_map.py); the rest reported unmatched; the first-divergence ranking on a
graph-mode run with an injected fault. Step 0 of each: the same initial weights and first batch on every side."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.mindspore, pytest.mark.slow]
pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
pytest.importorskip("torch", reason="the cross-framework compare needs the PyTorch demo too")

from test_capture_support import run_demo as run_torch_demo  # noqa: E402
from test_mindspore_support import run_demo as run_ms_demo  # noqa: E402

from engines.compare.engine import run_compare  # noqa: E402
from engines.compare.verdicts import ERROR, F  # noqa: E402
from schemas import load_config  # noqa: E402
from tests.dump_support import only_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "ms_graph_demo_script.py")
MAPPING = ROOT / "engines" / "adapters" / "mindspore" / "demo_api_mapping.json"
KNOBS = {"preset": "tiny", "steps": 1}


def _graph_l2(root: Path, *args: str) -> Path:
    """The demo in GRAPH_MODE under probe-tui's L2 statistics, step 0: the run's rank folder."""
    root.mkdir(parents=True)
    config = {"task": "statistics", "level": "L2", "step": [0], "dump_path": str(root / "dump"),
              "target": {"script": SCRIPT, "args": ["graph", *args]}}
    (root / "cfg.json").write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-m", "probe_tui", "run", str(root / "cfg.json")], cwd=str(root),
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr[-2000:]
    return only_run(root / "dump") / "rank0"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph_cmp")
    run_ms_demo(root / "pynative", KNOBS, level="L1")
    run_torch_demo(root / "pt", dict(KNOBS), level="L1")
    return {"pynative": root / "pynative" / "rank0", "pt": root / "pt" / "rank0", "root": root,
            "graph": _graph_l2(root / "graph"), "wrong_eps": _graph_l2(root / "graph_eps", "wrong_eps"),
            "lowp": _graph_l2(root / "graph_lowp", "lowp_softmax")}


def _compare(dumps, target, golden, out, **options):
    section = {"target_path": str(dumps[target]), "golden_path": str(dumps[golden]), "formats": ["csv"],
               "step": [0]}
    section.update(options)
    return run_compare(load_config({"task": "compare", "dump_path": str(dumps["root"] / out), "compare": section}),
                       None)


def _pairs(res):
    matched = res["matched"].astype(bool)
    return dict(zip(res["target_name"][matched].tolist(), res["golden_name"][matched].tolist()))


def test_graph_mode_kernels_pair_with_the_pynative_apis_row_for_row(dumps):
    res = _compare(dumps, "graph", "pynative", "cmp_pynative").results
    pairs = _pairs(res)
    for k in range(5):  # every LayerNorm of the model, in call order, with its weight, bias, mean and rstd
        for slot in ("input.0", "input.1", "input.2", "output.0", "output.1", "output.2"):
            assert pairs["Kernel.LayerNorm.%d.forward.%s" % (k, slot)] == "Primitive.LayerNorm.%d.forward.%s" % (
                k, slot)
    for k in range(2):
        assert pairs["Kernel.Softmax.%d.forward.output.0" % k] == "MintFunctional.softmax.%d.forward.output.0" % k
        assert pairs["Kernel.Split.%d.forward.output.2" % k] == "Tensor.split.%d.forward.output.2" % k
        assert pairs["Kernel.Gather.%d.forward.output.0" % k] == "Functional.gather.%d.forward.output.0" % k
    for k in range(4):
        assert pairs["Kernel.BatchMatMul.%d.forward.output.0" % k] == "Tensor.matmul.%d.forward.output.0" % k
    assert len(pairs) > 90
    matched = res["matched"].astype(bool)
    # the same computation: statistics agree to float32 noise; layouts graph mode folds (a reshape's [16, 96] where
    # PyNative passes [2, 8, 96]) are compared as values, with a note, not reported as shape errors
    for col in ("max", "min", "mean", "norm"):
        t, g = res["t_" + col][matched], res["g_" + col][matched]
        assert np.allclose(t, g, rtol=1e-5, atol=1e-6, equal_nan=True), col
    assert not (matched & (res["verdict"] == ERROR)).any()
    assert not any(int(f) & F["shape differs"] for f in res["flags"][matched])
    folded = [i for i, r in enumerate(res["reasons"].tolist()) if "layouts differ" in str(r)]
    assert len(folded) >= 11 and all(res["target_shape"][i] != res["golden_shape"][i] for i in folded)
    # backward kernels computing one API's gradient pair with its backward record, in the order the backward ran
    # (the last LayerNorm's gradient first): dy, dx, dgamma, dbeta
    for k in range(5):
        api = "Primitive.LayerNorm.%d.backward." % (4 - k)
        assert pairs["Kernel.LayerNormGrad.%d.backward.input.1" % k] == api + "input.0"
        for slot in ("output.0", "output.1", "output.2"):
            assert pairs["Kernel.LayerNormGrad.%d.backward.%s" % (k, slot)] == api + slot
    for k in range(2):  # the attention's split: its gradient is the Concat of q, k, v's
        assert pairs["Kernel.Concat.%d.backward.output.0" % k] == "Tensor.split.%d.backward.output.0" % (1 - k)
    # kernels with no API of their own (a linear's expansion, gelu's pieces, gradients MindSpore computes with
    # kernels of its own) are reported unmatched, not dropped
    names = set(res["target_name"].tolist())
    assert "Kernel.MatMul.0.forward.output.0" in names and "Kernel.Erf.0.forward.output.0" in names
    unmatched = set(res["target_name"][~matched].tolist())
    assert "Kernel.MatMul.0.forward.output.0" in unmatched
    assert "Kernel.Mul.8.backward.output.0" in unmatched  # the softmax gradient's expansion


def test_graph_mode_kernels_pair_with_the_pytorch_demo_where_names_map(dumps):
    res = _compare(dumps, "graph", "pt", "cmp_pt", api_mapping=str(MAPPING)).results
    pairs = _pairs(res)
    assert pairs["Kernel.LayerNorm.2.forward.output.0"] == "Functional.layer_norm.2.forward.output.0"
    assert pairs["Kernel.LayerNorm.2.forward.input.1"] == "Functional.layer_norm.2.forward.input.weight"
    assert pairs["Kernel.Gather.0.forward.input.0"] == "Functional.embedding.0.forward.input.1"  # the user map
    assert pairs["Kernel.Softmax.1.forward.output.0"] == "Functional.softmax.1.forward.output.0"
    assert pairs["Kernel.BatchMatMul.3.forward.output.0"] == "Tensor.matmul.3.forward.output.0"
    assert len(pairs) > 90
    matched = res["matched"].astype(bool)
    t, g = res["t_norm"][matched], res["g_norm"][matched]
    assert np.allclose(t, g, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_first_divergence_names_the_wrong_layer_norm_kernel_of_a_graph_mode_run(dumps):
    out = _compare(dumps, "wrong_eps", "pynative", "cmp_eps")
    top = out.top_suspects[0]
    assert top["record"] == "Kernel.LayerNorm.2.forward"  # blocks.1.ln1, eps 1e-1 instead of 1e-5
    assert top["in_err"] < 1e-6 < 1e-2 < top["out_err"]
    res = out.results
    parent = set(res["parent"][res["record"] == top["record"]].tolist())
    assert parent == {"Cell.net.blocks.1.ln1.LayerNorm.forward.0"}


def test_first_divergence_names_the_low_precision_softmax_kernels_of_a_graph_mode_run(dumps):
    # block 1's softmax in bfloat16: kernels (casts, exp, sums) no PyNative API stands for, feeding the
    # attention's probs @ v (the fourth matmul: block 1's second)
    out = _compare(dumps, "lowp", "pynative", "cmp_lowp")
    top = out.top_suspects[0]
    assert top["kind"] == "target-only ops" and top["note"].endswith("-> Kernel.BatchMatMul.3.forward"), top
    assert top["in_err"] < 1e-6 < 1e-4 < top["out_err"]
