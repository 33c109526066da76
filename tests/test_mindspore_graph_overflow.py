"""overflow_check at level L2 on MindSpore: the origin of non-finite values among the kernels of graph-mode
execution (engines/overflow/graph_task.py; docs/OVERFLOW.md "Graph mode (MindSpore, L2)"). The MindSpore demo in
GRAPH_MODE with TrainOneStepCell (tests/ms_graph_demo_script.py), 2 tiny steps, healthy and with the demo's
fp16_overflow fault in block 1; plus the origin rules on hand-made kernel files (no MindSpore needed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.adapters.mindspore.graph_kernels import kernels
from engines.adapters.mindspore.graph_overflow import check_step

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "ms_graph_demo_script.py")
ATTN = "Default/network-WithLoss/net-DemoGPT/blocks-CellList/1-Block/attn-CausalSelfAttention/"


def _file(folder, op, scope, ts, slot, arr):
    kind, index = slot.split(".")
    name = "%s.%s.0.0.%d.%s.%s.DefaultFormat.%s.npy" % (op, scope.replace("/", "_"), ts, kind, index,
                                                        str(arr.dtype).capitalize())
    np.save(os.path.join(str(folder), name), arr)


def _step(folder, fill=float("-inf"), exp_input=1.0):
    """A masked_fill (its fill a dumped scalar), the softmax reading it, then an exp."""
    scores = np.ones((2, 2), np.float32)
    masked = np.array([[1.0, fill], [1.0, 1.0]], np.float32)
    _file(folder, "MaskedFill", "Expand/MaskedFill-op0", 1, "input.0", scores)
    _file(folder, "MaskedFill", "Expand/MaskedFill-op0", 1, "input.2", np.array(fill, np.float32))
    _file(folder, "MaskedFill", "Expand/MaskedFill-op0", 2, "output.0", masked)
    _file(folder, "Softmax", ATTN + "Softmax-op0", 3, "input.0", masked)
    _file(folder, "Softmax", ATTN + "Softmax-op0", 4, "output.0", np.full((2, 2), 0.5, np.float32))
    x = np.full((2,), exp_input, np.float16)
    _file(folder, "Exp", ATTN + "Exp-op0", 5, "input.0", x)
    _file(folder, "Exp", ATTN + "Exp-op0", 6, "output.0", np.exp(x))
    _file(folder, "Neg", ATTN + "Neg-op0", 7, "input.0", np.exp(x))
    _file(folder, "Neg", ATTN + "Neg-op0", 8, "output.0", -np.exp(x))
    return kernels(str(folder), _scopes())


def _scopes():
    """The execution order's '/' form of the scopes (graph_kernels.execution_order)."""
    return {(ATTN + op).replace("/", "_"): ATTN + op for op in ("Softmax-op0", "Exp-op0", "Neg-op0")}


def test_a_masks_fill_is_not_an_overflow(tmp_path):
    findings, keep = check_step(0, _step(tmp_path), {}, 1)
    assert findings.flagged == 0 and findings.masks == 2 and not keep and findings.checked == 4


def test_the_first_kernel_making_inf_from_finite_inputs_is_the_origin(tmp_path):
    with np.errstate(over="ignore"):
        ks = _step(tmp_path, exp_input=20.0)  # float16 exp(20) overflows
    findings, keep = check_step(0, ks, {}, -1)
    assert [(c.name, c.origin_name) for c in findings.calls] == [("Kernel.Exp.0.forward", "produced"),
                                                                ("Kernel.Neg.0.forward", "inputs")]
    first = findings.first
    assert first.reason == "produced +inf from finite inputs" and first.slots == {"output.0": "+inf"}
    assert first.parent == "Cell.net.blocks.1.attn.CausalSelfAttention.forward.0"
    assert keep == {2, 3}


def test_overflow_nums_keeps_the_first_and_stops_the_step(tmp_path):
    with np.errstate(over="ignore"):
        ks = _step(tmp_path, exp_input=20.0)
    findings, keep = check_step(0, ks, {}, 1)
    assert keep == {2} and findings.stopped and findings.flagged == 1 and findings.checked == 3


def test_a_non_finite_tensor_no_kernel_wrote_is_bad(tmp_path):
    # a NaN weight from the previous step: not a scalar fill, so the first kernel reading it is flagged
    _file(tmp_path, "Gather", "Default/Gather-op0", 1, "input.0", np.array([[np.nan, 1.0]], np.float32))
    _file(tmp_path, "Gather", "Default/Gather-op0", 2, "output.0", np.array([[np.nan, 1.0]], np.float32))
    findings, _keep = check_step(1, kernels(str(tmp_path), {}), {}, 1)
    assert findings.first.origin_name == "inputs" and "input.0 (nan)" in findings.first.reason


def _run(tmp_path, *args, config=None):
    config = config or json.loads((ROOT / "tests" / "data" / "configs" / "msprobe" /
                                   "ms_static_l2_overflow_check.json").read_text())
    config.update(dump_path=str(tmp_path / "dump"), target={"script": SCRIPT, "args": ["graph", *args]})
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "probe_tui", "run", "--json", str(tmp_path / "cfg.json")],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    from tests.dump_support import only_run

    return done, only_run(tmp_path / "dump")


@pytest.mark.mindspore
@pytest.mark.slow
def test_graph_mode_overflow_names_the_kernel_and_its_cell(tmp_path):
    pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
    from engines.overflow.results import read_calls, read_steps
    from engines.store import StoreReader

    done, folder = _run(tmp_path, "fp16_overflow")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    meta = json.loads((folder / "run.json").read_text())
    verdict = meta["summary"]["verdict"]
    assert verdict.startswith("overflow at step 0: Kernel.Exp.0.forward in "
                              "Cell.net.blocks.1.attn.CausalSelfAttention.forward.0 produced "), verdict
    steps = read_steps(folder / "rank0")
    assert [s["step"] for s in steps] == [0] and steps[0]["stopped"]  # overflow_nums 1: step 1 is not checked
    calls = read_calls(folder / "rank0")
    assert [(c["name"], c["origin"], c["kept"], c["first"]) for c in calls] == [
        ("Kernel.Exp.0.forward", "produced", True, True)]
    with StoreReader(folder / "rank0", "dump") as r:  # the flagged kernel and its tensors, for analyze-overflow
        records = r.read("records")
        tensors = r.read("tensors")
    assert [str(n) for n in records["name"]] == ["Kernel.Exp.0.forward"]
    assert sorted(str(s) for s in tensors["slot"]) == ["input.0", "output.0"]
    assert not (folder / "graph_raw").exists()


@pytest.mark.mindspore
@pytest.mark.slow
def test_healthy_graph_mode_run_has_no_overflow(tmp_path):
    pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
    from engines.overflow.results import read_calls, read_steps

    done, folder = _run(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((folder / "run.json").read_text())
    # the causal mask's -inf (masked_fill and the softmax reading it, in both blocks) is not an overflow
    assert meta["summary"]["verdict"] == "no overflow in 2 checked steps (8 calls carried mask values, not counted)"
    assert [s["flagged"] for s in read_steps(folder / "rank0")] == [0, 0]
    assert read_calls(folder / "rank0") == []
    assert not (folder / "rank0" / "dump.h5").exists()  # a healthy run keeps no kernel
