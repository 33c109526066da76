"""api-precision-compare (msprobe's api_precision_compare): each standard's rule on metric vectors, and end to end
on acc_check results of the demo: a kernel swapped for a slightly wrong one on the device under test fails, and
only it; an error both devices share passes; an API the second device lacks is SKIP."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from engines.acc_check import precision_compare as pc
from engines.acc_check.rules import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
NAN = math.nan


def _row(dtype="torch.float32", status="pass", shape="[4, 8]", **metrics):
    return {"device_dtype": dtype, "shape": shape, "status": status, "message": "",
            "metrics": {**{c: NAN for c in COLUMNS}, **metrics}}


BENCH = dict(small_value_err_ratio=0.0, rmse=1e-3, max_rel_err=1e-3, mean_rel_err=1e-4, eb=1e-4)


def test_benchmark_ratios_against_the_tier_thresholds():
    gpu = _row(**BENCH)
    # default tier (L0): max_rel may be 10x, mean_rel and rmse 2x
    assert pc.judge_output("Functional.softmax.0.forward.output.0", _row(**{**BENCH, "max_rel_err": 9e-3}),
                           gpu)["status"] == "pass"
    out = pc.judge_output("Functional.softmax.0.forward.output.0", _row(**{**BENCH, "max_rel_err": 11e-3}), gpu)
    assert out["status"] == "error" and out["相对误差最大值判定结果"] == "error" and out["比对算法"] == "标杆比对法"
    assert "max_rel_err ratio 11" in out["message"]
    # L2 tier (layer_norm): max_rel 2x
    assert pc.judge_output("Functional.layer_norm.0.forward.output.0", _row(**{**BENCH, "max_rel_err": 3e-3}),
                           gpu)["status"] == "error"
    # the error balance is reported, not judged
    out = pc.judge_output("Functional.softmax.0.forward.output.0", _row(**{**BENCH, "eb": 1.0}), gpu)
    assert out["status"] == "pass" and out["误差均衡性判定结果"] == "error"
    # a ratio's denominator is floored at the dtype's minimum error (float32: 2^-14)
    tiny = _row(**{**BENCH, "mean_rel_err": 1e-5})
    assert pc.judge_output("Functional.softmax.0.forward.output.0", _row(**{**BENCH, "mean_rel_err": 1e-4}),
                           tiny)["status"] == "pass"


def test_non_finite_metrics_agree_or_are_an_error():
    gpu = _row(**{**BENCH, "rmse": math.inf})
    assert pc.judge_output("Functional.softmax.0.forward.output.0", _row(**{**BENCH, "rmse": math.inf}),
                           gpu)["status"] == "pass"
    out = pc.judge_output("Functional.softmax.0.forward.output.0", _row(**{**BENCH, "rmse": -math.inf}), gpu)
    assert out["status"] == "error" and "均方根误差inf或nan不一致" in out["message"]


def test_absolute_binary_ulp_and_thousandth_judge_the_device_alone_or_by_ratio():
    ok = dict(inf_nan_error_ratio=0.0, rel_err_ratio=0.0, abs_err_ratio=0.0)
    assert pc.judge_output("Tensor.add.0.forward.output.0", _row(**ok), _row())["status"] == "pass"
    out = pc.judge_output("Tensor.add.0.forward.output.0", _row(**{**ok, "rel_err_ratio": 0.01}), _row(**ok))
    assert (out["status"], out["比对算法"], out["相对误差判定结果"]) == ("error", "绝对阈值法", "error")
    assert pc.judge_output("Functional.relu.0.forward.output.0", _row(binary_error_rate=0.0), _row())[
        "status"] == "pass"
    assert pc.judge_output("Functional.relu.0.forward.output.0", _row(binary_error_rate=0.1), _row())[
        "比对算法"] == "二进制一致法"
    # ULP, float32: an error only when the mean is >= 64, the proportion >= 5% and not below the GPU's
    bad = _row(mean_ulp_err=100.0, ulp_err_proportion=0.2)
    assert pc.judge_output("Functional.linear.0.forward.output.0", bad, _row(ulp_err_proportion=0.01))[
        "status"] == "error"
    assert pc.judge_output("Functional.linear.0.forward.output.0", bad, _row(ulp_err_proportion=0.4))[
        "status"] == "pass"
    assert pc.judge_output("Functional.linear.0.forward.output.0", _row(mean_ulp_err=10.0, ulp_err_proportion=0.2),
                           _row(ulp_err_proportion=0.01))["status"] == "pass"
    # bfloat16: the proportion must stay under 0.1% or under the GPU's
    bf = _row("torch.bfloat16", mean_ulp_err=1.0, ulp_err_proportion=0.01)
    assert pc.judge_output("Functional.linear.0.forward.output.0", bf, _row("torch.bfloat16",
                                                                           ulp_err_proportion=0.0))["status"] == "error"
    assert pc.judge_output("Functional.conv2d.0.forward.output.0", _row(thousandth=0.99), _row())["status"] == "error"
    assert pc.judge_output("Functional.conv2d.0.forward.output.0", _row(thousandth=0.9995), _row())["status"] == "pass"
    # a gradient is judged by the benchmark standard whatever its API's class (as acc_check judges it)
    assert pc.judge_output("Tensor.add.0.backward.output.0", _row(**BENCH), _row(**BENCH))["standard"] == "benchmark"


def test_skips_name_their_reason():
    assert pc.judge_output("Tensor.add.0.forward.output.0", _row("torch.int64"), _row())["message"] == pc.UNSUPPORTED
    assert pc.judge_output("Tensor.add.0.forward.output.0", _row(), None)["message"] == \
        "not in the second device's result"
    assert pc.judge_output("Tensor.add.0.forward.output.0", _row(status="SKIP"), _row())["status"] == "SKIP"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "probe_tui", "api-precision-compare", str(tmp_path / "empty"),
                           str(tmp_path / "empty"), "-o", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "NPU result" in proc.stderr
    assert not (tmp_path / "out").exists()


# ---- end to end on the demo ---------------------------------------------------------------------------------------
def _dump_and_check(folder: Path, faults=None, dispatch=None) -> Path:
    from engines.events import NullSink
    from engines.runner import run_job
    from schemas import load_config

    demo = {"preset": "tiny", "steps": 1, "dtype": "fp32"}
    if faults:
        demo["faults"] = faults
    job = load_config({"task": "tensor", "dump_path": str(folder / "dump"), "target": {"demo": demo},
                       "level": "L1", "tensor": {"data_mode": ["all"], "summary_mode": "statistics"}})
    if dispatch is not None:
        with dispatch:
            assert run_job(job, events=NullSink()).exit_code == 0
    else:
        assert run_job(job, events=NullSink()).exit_code == 0
    job = load_config({"task": "acc_check", "acc_check": {"path": str(folder / "dump" / "latest"),
                                                          "output_path": str(folder / "acc")}})
    run_job(job, events=NullSink())
    return folder / "acc"


def _csv(folder: Path, prefix: str):
    (path,) = folder.glob(prefix + "*.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


@pytest.fixture(scope="module")
def demo_results(tmp_path_factory, one_torch_thread_for_module):
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    class SlightlyWrongGelu(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * (1 + 1e-3) if func is torch.ops.aten.gelu.default else out

    root = tmp_path_factory.mktemp("apc")
    return {"fp32": _dump_and_check(root / "fp32"), "gelu": _dump_and_check(root / "gelu",
                                                                            dispatch=SlightlyWrongGelu()),
            "lowp": _dump_and_check(root / "lowp", faults={"lowp_softmax": {"layer": 1}})}


def test_a_swapped_kernel_on_the_device_under_test_is_the_only_error(demo_results, tmp_path):
    summary = pc.api_precision_compare(str(demo_results["gelu"]), str(demo_results["fp32"]), str(tmp_path / "o"))
    assert sorted(a["name"] for a in summary["failing"]) == ["Functional.gelu.0", "Functional.gelu.1"]
    assert summary["counts"]["pass"] > 400 and summary["counts"]["warning"] == 0
    result = _csv(tmp_path / "o", pc.COMPARE_RESULT_PREFIX)
    assert result[0] == ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
    gelu = next(r for r in result if r[0] == "Functional.gelu.0")
    assert gelu[1:3] == ["error", "pass"] and "mean_rel_err ratio" in gelu[3]
    details = _csv(tmp_path / "o", pc.COMPARE_DETAILS_PREFIX)
    assert tuple(details[0]) == pc.COMPARE_DETAILS_COLUMNS
    row = next(r for r in details if r[0] == "Functional.gelu.0.forward.output.0")
    assert row[pc.COMPARE_DETAILS_COLUMNS.index("比对结果")] == "error"


def test_an_error_both_devices_share_passes_and_a_missing_api_is_skipped(demo_results, tmp_path):
    # acc_check alone calls the injected softmax an error; against a second device as bad, it passes
    summary = pc.api_precision_compare(str(demo_results["lowp"]), str(demo_results["lowp"]), str(tmp_path / "a"))
    assert summary["failing"] == []
    result = {r[0]: r for r in _csv(tmp_path / "a", pc.COMPARE_RESULT_PREFIX)}
    assert result["Demo.naive_softmax.0"][1] == "pass"
    # the fp32 run has no Demo.naive_softmax: SKIP, with the reason
    pc.api_precision_compare(str(demo_results["lowp"]), str(demo_results["fp32"]), str(tmp_path / "b"))
    result = {r[0]: r for r in _csv(tmp_path / "b", pc.COMPARE_RESULT_PREFIX)}
    assert result["Demo.naive_softmax.0"][1] == "SKIP"
    assert "not in the second device's result" in result["Demo.naive_softmax.0"][3]


def test_cli_prints_the_verdict_and_exit_3_with_fail_on_findings(demo_results, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "probe_tui", "api-precision-compare", str(demo_results["gelu"]),
                           str(demo_results["fp32"]), "-o", str(tmp_path / "o"), "--fail-on-findings"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "2 error" in proc.stdout and "error Functional.gelu.0" in proc.stdout


def test_result_records_hold_the_values_item_by_item_would():
    """The store's columns become rows of Python values, a column at a time (``tolist``): the same values and
    types as ``item()`` value by value (ints, floats with NaN, text in an object column, numpy scalars in one)."""
    import numpy as np

    from engines.acc_check.results import _records

    cols = {"row": np.arange(3), "rank": np.array([0, 1, 2], dtype=np.int64),
            "err": np.array([0.5, math.nan, 1e-9]), "name": np.array(["a", "b", "c"], dtype=object),
            "mixed": np.array([np.float32(1.5), "x", None], dtype=object)}
    rows = _records(cols)
    assert [list(r) for r in rows] == [["rank", "err", "name", "mixed"]] * 3
    assert [r["rank"] for r in rows] == [0, 1, 2] and all(type(r["rank"]) is int for r in rows)
    assert rows[0]["err"] == 0.5 and math.isnan(rows[1]["err"]) and type(rows[2]["err"]) is float
    assert [r["name"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["mixed"] == 1.5 and type(rows[0]["mixed"]) is float and rows[1]["mixed"] == "x"
    assert rows[2]["mixed"] is None
    assert _records({"row": np.arange(0)}) == [] and _records({"a": np.array([], dtype=float)}) == []
