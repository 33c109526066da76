"""acc_check on MindSpore PyNative dumps of the demo: the fp32 tensor dump passes (forward and backward, replayed
in float64 on the CPU); an injected low-precision softmax and a gelu made slightly wrong fail, and only they; a
statistics dump replays from generated inputs; ``reproduce`` writes a script that needs only mindspore and numpy."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from engines.acc_check import results as rs  # noqa: E402
from engines.events import ListSink, NullSink  # noqa: E402
from engines.runner import run_job  # noqa: E402
from schemas import load_config  # noqa: E402

LOWP = {"lowp_softmax": {"layer": 1}}


def _dump(folder, task="tensor", faults=None):
    demo = {"preset": "tiny", "steps": 1, "dtype": "fp32"}
    if faults:
        demo["faults"] = faults
    section = {"data_mode": ["all"], "summary_mode": "statistics"} if task == "tensor" else {"data_mode": ["forward"]}
    job = load_config({"task": task, "dump_path": str(folder), "framework": "mindspore", "target": {"demo": demo},
                       "level": "L1", task: section})
    assert run_job(job, events=NullSink()).exit_code == 0
    return folder / "latest"


def _check(dump, out, events=None, **section):
    job = load_config({"task": "acc_check", "acc_check": {"path": str(dump), "output_path": str(out), **section}})
    return run_job(job, events=events or NullSink(), fail_on_findings=True)


def _results(out):
    (path,) = out.glob("accuracy_checking_result_*.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["API name"]: r for r in csv.DictReader(fh)}


def _details(out):
    (path,) = out.glob("accuracy_checking_details_*.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _failing(rows):
    return sorted(n for n, r in rows.items() if {r["Forward Test Success"], r["Backward Test Success"]}
                  & {"error", "warning"})


@pytest.fixture(scope="module")
def fp32_dump(tmp_path_factory):
    return _dump(tmp_path_factory.mktemp("ms_fp32"))


def test_fp32_mindspore_dump_has_no_false_positive(fp32_dump, tmp_path):
    events = ListSink()
    outcome = _check(fp32_dump, tmp_path / "out", events)
    assert outcome.exit_code == 0, outcome.summary["verdict"]
    rows = _results(tmp_path / "out")
    assert len(rows) == outcome.summary["checked"] > 50
    assert _failing(rows) == []
    # forward and backward replayed (backward through mindspore.vjp seeded with the recorded gradients)
    for name in ("MintFunctional.linear.0", "MintFunctional.softmax.0", "Functional.gelu.0", "Tensor.split.0",
                 "Functional.cross_entropy.0", "Tensor.matmul.0"):
        assert (rows[name]["Forward Test Success"], rows[name]["Backward Test Success"]) == ("pass", "pass"), name
    # every call replays and passes, the LayerNorm primitive too: rebuilt from its recorded init attributes
    assert outcome.summary["passed"] == len(rows)
    layer_norms = [r for n, r in rows.items() if n.startswith("Primitive.LayerNorm.")]
    assert len(layer_norms) == 5 and all((r["Forward Test Success"], r["Backward Test Success"]) == ("pass", "pass")
                                         for r in layer_norms)
    details = {d["API Name"]: d for d in _details(tmp_path / "out")}
    linear_w = details["MintFunctional.linear.0.backward.output.1"]  # the weight's gradient
    assert (linear_w["Bench Dtype"], linear_w["DEVICE Dtype"]) == ("mindspore.float64", "mindspore.float32")
    steps = [e for e in events.events if e.kind == "step"]
    assert steps[-1]["unit"] == "api" and steps[-1]["total_steps"] == len(rows)
    apis, _ = rs.read_result(tmp_path / "out")
    assert [a["name"] for a in apis] == list(rows)


def test_injected_low_precision_softmax_is_the_only_failure(tmp_path):
    dump = _dump(tmp_path / "dump", faults=LOWP)
    outcome = _check(dump, tmp_path / "out")
    assert outcome.exit_code == 3
    rows = _results(tmp_path / "out")
    assert _failing(rows) == ["Demo.naive_softmax.0"]
    assert rows["Demo.naive_softmax.0"]["Forward Test Success"] == "error"
    assert "ULP" in rows["Demo.naive_softmax.0"]["Message"]
    # its bfloat16 inputs are replayed in float32
    details = {d["API Name"]: d for d in _details(tmp_path / "out")}
    assert details["Demo.naive_softmax.0.forward.output.0"]["Bench Dtype"] == "mindspore.float32"
    casts = [r for n, r in rows.items() if n.startswith("Tensor.to.")]
    assert casts and all(r["Forward Test Success"] == "SKIP" and "not a computation" in r["Message"] for r in casts)
    # two workers (spawned: this process ran MindSpore ops, which a fork does not survive) write what one writes
    some = ["naive_softmax", "linear"]
    assert _check(dump, tmp_path / "one", api_list=some).exit_code == 3
    assert _check(dump, tmp_path / "two", api_list=some, workers=2).exit_code == 3
    assert _results(tmp_path / "two") == _results(tmp_path / "one")
    assert len(_results(tmp_path / "two")) == 1 + 9


_WRONG_GELU = """
import sys
from mindspore import ops
from engines.events import NullSink
from engines.runner import run_job
from schemas import load_config

original = ops.gelu


def slightly_wrong_gelu(input, approximate="none"):
    out = original(input, approximate)
    return out + ops.stop_gradient(out * 1e-3)


ops.gelu = slightly_wrong_gelu
job = load_config({"task": "tensor", "dump_path": sys.argv[1], "framework": "mindspore", "level": "L1",
                   "target": {"demo": {"preset": "tiny", "steps": 1}},
                   "tensor": {"data_mode": ["all"], "summary_mode": "statistics"}})
sys.exit(run_job(job, events=NullSink()).exit_code)
"""


def test_gelu_made_slightly_wrong_is_the_only_failure(tmp_path):
    """The MindSpore stand-in for the TorchDispatchMode fixture: ops.gelu's forward result off by 1e-3 (its
    gradient untouched) while the demo trains. In a process of its own: a capture session keeps the callables it
    wrapped first, so a patch made after an earlier session in this process would not be the one called."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", GLOG_v="3")
    done = subprocess.run([sys.executable, "-c", _WRONG_GELU, str(tmp_path / "dump")], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = _check(tmp_path / "dump" / "latest", tmp_path / "out")
    rows = _results(tmp_path / "out")
    assert _failing(rows) == ["Functional.gelu.0", "Functional.gelu.1"]
    assert (rows["Functional.gelu.0"]["Forward Test Success"], rows["Functional.gelu.0"]["Backward Test Success"]) \
        == ("error", "pass")
    assert "mean_rel_err" in rows["Functional.gelu.0"]["Message"]
    assert outcome.exit_code == 3


def test_statistics_dump_replays_from_generated_inputs(tmp_path):
    dump = _dump(tmp_path / "dump", task="statistics", faults=LOWP)
    outcome = _check(dump, tmp_path / "out", api_list=["naive_softmax", "softmax", "linear", "gelu", "matmul"])
    rows = _results(tmp_path / "out")
    assert _failing(rows) == ["Demo.naive_softmax.0"]
    assert {r["Forward Test Success"] for n, r in rows.items() if n != "Demo.naive_softmax.0"} == {"pass"}
    messages = [d["Message"] for d in _details(tmp_path / "out")]
    assert messages and all(m.startswith("inputs generated from the statistics (seed 1234)") for m in messages)
    assert outcome.exit_code == 3


def test_reproduce_writes_a_script_that_runs_with_mindspore_and_numpy_only(fp32_dump, tmp_path, capsys):
    from probe_tui.cli import main

    assert _check(fp32_dump, tmp_path / "out", api_list=["linear"]).exit_code == 0
    capsys.readouterr()
    assert main(["reproduce", str(tmp_path / "out"), "MintFunctional.linear.3", "-o", str(tmp_path / "rep")]) == 0
    assert "--device CPU|GPU|Ascend" in capsys.readouterr().out
    script = tmp_path / "rep" / "MintFunctional.linear.3.forward.py"
    text = script.read_text(encoding="utf-8")
    assert "import torch" not in text and "probe_tui" not in text and "engines" not in text
    # run from another folder, with no probe-tui on the path
    done = subprocess.run([sys.executable, str(script), "--device", "CPU"], cwd=str(tmp_path), env={
        "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "GLOG_v": "3"}, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[0] == "MintFunctional.linear.3.forward on CPU, reference on cpu in float64"
    device = json.loads(lines[2].split(":", 1)[1])
    recorded = json.loads(lines[3].split(":", 1)[1])
    assert device == recorded  # this machine computes what the demo recorded
    assert device["cosine"] > 0.999999 and device["max_abs_err"] < 1e-6
    # the reference computed in a child process, as with --device GPU or Ascend (one device target a process)
    child = subprocess.run([sys.executable, str(script), "--device", "CPU", "--reference-in-child"],
                           cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "GLOG_v": "3"},
                           capture_output=True, text=True, timeout=180)
    assert child.returncode == 0, child.stderr
    assert [line for line in child.stdout.splitlines() if line.strip()] == lines


def test_a_call_without_a_float64_kernel_gets_a_float32_reference():
    from engines.adapters.mindspore import acc_replay

    x = np.linspace(-8.0, 8.0, 24, dtype=np.float32)
    args = json.dumps({"args": [{"tensor": "input.0"}], "kwargs": {}})
    ref, outs, _ = acc_replay.replay_forward("Functional.relu6.0.forward", args,
                                             {"input.0": (x, "mindspore.float32", [4, 6])})
    assert ref == "float32"  # MindSpore 2.10 has no float64 ReLU6 on the CPU
    assert np.array_equal(outs["output.0"].reshape(-1), np.clip(x, 0, 6))
    ref, _, _ = acc_replay.replay_forward("Functional.gelu.0.forward", args,
                                          {"input.0": (x, "mindspore.float32", [4, 6])})
    assert ref == "float64"


@pytest.mark.parametrize("api, expected", [("div", lambda x, y: x / y), ("pow", lambda x, y: x ** y),
                                           ("matmul", lambda x, y: x @ y), ("sub", lambda x, y: x - y)])
def test_a_tensor_operator_replays_as_called_not_reflected(api, expected):
    """``x / y`` is recorded as ``Tensor.div`` with (x, y); the capture's table also names ``__rtruediv__`` so, and
    the replay must run ``x / y``, not ``y / x`` (every division of a model was a false positive)."""
    from engines.adapters.mindspore import acc_replay

    rng = np.random.default_rng(0)
    x, y = rng.uniform(0.5, 2.0, (3, 3)).astype(np.float32), rng.uniform(0.5, 2.0, (3, 3)).astype(np.float32)
    args = json.dumps({"args": [{"tensor": "input.0"}, {"tensor": "input.1"}], "kwargs": {}})
    saved = {"input.0": (x, "mindspore.float32", [3, 3]), "input.1": (y, "mindspore.float32", [3, 3])}
    _, outs, _ = acc_replay.replay_forward("Tensor.%s.0.forward" % api, args, saved)
    assert np.allclose(outs["output.0"], expected(x.astype(np.float64), y.astype(np.float64)), rtol=1e-12)
    assert "__r" not in acc_replay.callable_expression("Tensor.%s.0.forward" % api)


def _layer_norm_saved(rng):
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    return x, g, b, {"input.0": (x, "mindspore.float32", [2, 3, 8]), "input.1": (g, "mindspore.float32", [8]),
                     "input.2": (b, "mindspore.float32", [8])}


def test_a_primitive_replays_with_its_recorded_init_attributes():
    """A ``Primitive.*`` record's ``args`` carries ``primitive.init_attrs``; the replay builds the primitive with
    them (an epsilon of 0.5 here, far from LayerNorm's default, so a default-built one would not match)."""
    from engines.adapters.mindspore import acc_replay

    x, g, b, saved = _layer_norm_saved(np.random.default_rng(0))
    attrs = {"begin_norm_axis": -1, "begin_params_axis": -1, "epsilon": 0.5}
    args = json.dumps({"args": [{"tensor": "input.0"}, {"tensor": "input.1"}, {"tensor": "input.2"}], "kwargs": {},
                       "primitive": {"class": "LayerNorm", "init_attrs": attrs}})
    ref, outs, _ = acc_replay.replay_forward("Primitive.LayerNorm.0.forward", args, saved)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = x64.var(-1, keepdims=True)
    assert ref == "float64"
    # MindSpore 2.10's CPU LayerNorm computes in float32 inside, also for float64 inputs: float32-close, not closer
    assert np.allclose(outs["output.0"], (x64 - mean) / np.sqrt(var + 0.5) * g + b, rtol=0, atol=1e-6)
    assert not np.allclose(outs["output.0"], (x64 - mean) / np.sqrt(var + 1e-7) * g + b, rtol=0, atol=1e-2)
    # a record naming another class than the table has, or attributes that are not plain values: not replayed
    bad = json.dumps({"args": [{"tensor": "input.0"}], "kwargs": {},
                      "primitive": {"class": "TensorDump", "init_attrs": {}}})
    with pytest.raises(acc_replay.ReplayError):
        acc_replay.replay_forward("Primitive.TensorDump.0.forward", bad, saved)


def test_a_primitive_record_without_init_attributes_is_still_skipped():
    """Dumps written before the attributes were recorded: the same SKIP reason as before."""
    from engines.acc_check import cases

    old = json.dumps({"args": [{"tensor": "input.0"}], "kwargs": {}})
    assert "attributes" in cases.skip_reason("Primitive", "LayerNorm", old)
    assert "attributes" in cases.skip_reason("Primitive", "LayerNorm", "")
    new = json.dumps({"args": [], "kwargs": {}, "primitive": {"class": "LayerNorm", "init_attrs": {"epsilon": 1e-5}}})
    assert cases.skip_reason("Primitive", "LayerNorm", new) == ""
    assert "random" in cases.skip_reason("Primitive", "StandardNormal", new.replace("LayerNorm", "StandardNormal"))


def test_mindspore_reference_policy_and_cpu_only_device():
    """acc_check.reference on a MindSpore dump: the dtype policy applies, a device other than the CPU is refused."""
    from engines.adapters.mindspore import acc_replay as ms_replay

    try:
        ms_replay.configure_reference("float32", "CPU")
        assert ms_replay.reference_dtype(["mindspore.float32"]) == "float32"
        with pytest.raises(ms_replay.ReplayError, match="CPU only"):
            ms_replay.configure_reference("auto", "GPU")
    finally:
        ms_replay.configure_reference("auto", "cpu")
    assert ms_replay.reference_dtype(["mindspore.float32"]) == "float64"
    assert ms_replay.reference_dtype(["mindspore.float16"]) == "float32"
