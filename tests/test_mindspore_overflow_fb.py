"""overflow_check and free_benchmark on MindSpore: the injected faults are found (the float16 exp that first
gives +inf; the low-precision softmax as ``Demo.naive_softmax``), the -inf causal mask is not an overflow, the
perturbations are msprobe's, and checking changes no number of the training."""

import csv
import math

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from mindspore import Tensor  # noqa: E402
from test_mindspore_support import Dump  # noqa: E402

from engines.adapters.mindspore import demo  # noqa: E402
from engines.adapters.mindspore import free_benchmark_compare as cmp  # noqa: E402
from engines.adapters.mindspore.free_benchmark_perturb import Cancelled, perturb  # noqa: E402
from engines.events import NullSink  # noqa: E402
from engines.free_benchmark.results import CSV_COLUMNS, read_checks  # noqa: E402
from engines.runner import run_job  # noqa: E402
from engines.runs import open_run  # noqa: E402
from schemas import load_config  # noqa: E402

LOWP = {"lowp_softmax": {"layer": 1}}


def _job(tmp_path, task, knobs, section, name):
    config = {"task": task, "dump_path": str(tmp_path / name), "framework": "mindspore",
              "target": {"demo": dict({"preset": "tiny"}, **knobs)}, task: section}
    outcome = run_job(load_config(config), events=NullSink(), fail_on_findings=True)
    return outcome, open_run(outcome.run_dir).path / "rank0"


# -- overflow_check --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def overflow_run(tmp_path_factory):
    knobs = {"steps": 2, "dtype": "fp16", "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}
    return _job(tmp_path_factory.mktemp("of"), "overflow_check", knobs, {"overflow_nums": 1}, "of")


def test_overflow_check_names_the_float16_exp_and_keeps_its_tensors(overflow_run):
    outcome, rank = overflow_run
    assert outcome.exit_code == 3
    s = outcome.summary
    assert s["verdict"].startswith("overflow at step 1: Mint.exp.0.forward")
    assert "produced +inf from finite inputs" in s["verdict"] and "demo_model.py" in s["verdict"]
    assert s["flagged_calls"] == 1 and s["masked_calls"] > 0  # the -inf causal masks are not counted
    dump = Dump(rank)
    assert dump.names(1) == ["Mint.exp.0.forward"]
    rows = dump.rows("Mint.exp.0.forward", 1)
    assert rows["input.0"]["dtype"] == "Float16" and rows["input.0"]["posinf_count"] == 0
    assert rows["output.0"]["posinf_count"] > 0
    stored = dump.reader.tensor_data(int(rows["input.0"]["row"]))
    with np.errstate(over="ignore"):
        assert np.isfinite(stored).all() and np.isinf(np.exp(stored.astype(np.float16))).any()


def test_analyze_overflow_replays_the_mindspore_call_in_float64(overflow_run, tmp_path):
    outcome, _ = overflow_run
    job = load_config({"task": "analyze_overflow", "dump_path": str(tmp_path / "an"),
                       "analyze_overflow": {"path": str(outcome.run_dir)}})
    result = run_job(job, events=NullSink(), fail_on_findings=True)
    replays = result.summary["replays"]
    assert [(r["name"], r["category"]) for r in replays] == [("Mint.exp.0.forward", "precision")]
    assert "Float16 range overflow" in result.summary["verdict"]


def test_a_healthy_run_with_an_inf_mask_has_no_overflow_and_the_same_losses(tmp_path):
    knobs = {"steps": 1}
    outcome, _ = _job(tmp_path, "overflow_check", knobs, {"overflow_nums": -1}, "healthy")
    assert outcome.exit_code == 0 and outcome.summary["flagged_calls"] == 0
    assert outcome.summary["masked_calls"] >= 2  # each block's masked_fill with -inf
    assert outcome.summary["losses"] == demo.train(dict({"preset": "tiny"}, **knobs)).losses


# -- free_benchmark --------------------------------------------------------------------------------------------

def test_improve_precision_flags_the_low_precision_softmax_only(tmp_path):
    knobs = {"steps": 2, "faults": LOWP}
    outcome, rank = _job(tmp_path, "free_benchmark", knobs, {}, "fb")
    assert outcome.exit_code == 3
    rows = read_checks(rank)
    bad = [r for r in rows if not r["consistent"]]
    assert sorted({r["name"] for r in bad}) == ["Demo.naive_softmax.0.forward"]
    assert sorted(r["step"] for r in bad) == [0, 1]
    assert all(r["ratio"] > r["threshold"] == 1.004 and r["dtype"] == "BFloat16" for r in bad)
    skipped = outcome.summary["free_benchmark"]["skipped"]
    assert skipped["skipped: improve_precision found nothing to raise (no float16/bfloat16 tensor)"] > 50
    with open(rank / "free_benchmark.csv", newline="") as fh:
        got = list(csv.reader(fh))
    assert tuple(got[0]) == CSV_COLUMNS
    assert [(g[1], g[2], g[4], g[6]) for g in got[1:]] == \
        [("improve_precision", "forward", "Demo.naive_softmax.0.forward", "BFloat16")] * 2
    assert outcome.summary["losses"] == demo.train(dict({"preset": "tiny"}, **knobs)).losses  # untouched


def test_fix_replaces_the_softmax_and_changes_the_losses(tmp_path):
    knobs = {"steps": 2, "faults": LOWP}
    outcome, _ = _job(tmp_path, "free_benchmark", knobs, {"handler_type": "fix", "list": ["naive_softmax"]}, "fix")
    assert outcome.summary["free_benchmark"]["replaced"] == {"Demo.naive_softmax": 2}
    fixed = outcome.summary["losses"]
    lowp = demo.train(dict({"preset": "tiny"}, **knobs)).losses
    assert fixed[0] != lowp[0] and all(math.isfinite(x) for x in fixed)
    assert outcome.summary["verdict"].startswith("fix: replaced the outputs of 2 calls (Demo.naive_softmax x2)")


def test_add_noise_on_a_healthy_run_is_consistent_and_backward_stage_checks_gradients(tmp_path):
    outcome, rank = _job(tmp_path, "free_benchmark", {"steps": 1}, {"pert_mode": "add_noise", "list": ["linear"]},
                         "noise")
    assert outcome.exit_code == 0
    rows = read_checks(rank)
    assert len(rows) == 9 and all(r["consistent"] and r["stage"] == "forward" for r in rows)
    outcome, rank = _job(tmp_path, "free_benchmark", {"steps": 1, "dtype": "fp16"},
                         {"fuzz_stage": "backward", "list": ["linear.0.", "linear.8."]}, "bwd")
    rows = read_checks(rank)
    assert {r["name"] for r in rows} == {"MintFunctional.linear.0.forward", "MintFunctional.linear.8.forward"}
    assert {r["stage"] for r in rows} == {"backward"}
    assert {r["output_index"] for r in rows} == {0, 1, 2}  # grads of input, weight and bias, each compared
    assert all(1.0 <= r["ratio"] < 1.01 for r in rows)
    notes = [t for t in outcome.summary.get("tables", []) if t["title"] == "notes"]
    assert not any("failed" in str(row) for t in notes for row in t["rows"])


def test_perturbations_are_msprobes():
    x = Tensor(np.array([[1.0, -2.0, 1e-9], [3.0, 4.0, 5.0]], dtype=np.float32))
    noisy = perturb("add_noise", (x,), {}, 0).args[0].asnumpy()
    assert np.array_equal(noisy, np.where(np.abs(x.asnumpy()) > 1e-4, x.asnumpy() + np.float32(1e-8), x.asnumpy()))
    flipped = perturb("bit_noise", (x,), {}, 0).args[0].asnumpy()
    assert np.array_equal(flipped.view(np.int32) ^ x.asnumpy().view(np.int32),
                          np.array([[1, 1, 1], [1, 1, 1]], dtype=np.int32))
    swapped = perturb("change_value", (x,), {}, 0).args[0].asnumpy()
    assert swapped[0][0] == 5.0 and swapped[-1][-1] == 1.0 and swapped[0][1] == -2.0
    half = perturb("improve_precision", (x.astype(ms.bfloat16), x), {"w": x.astype(ms.float16)}, 0)
    assert [t.dtype for t in half.args] == [ms.float32, ms.float32] and half.kwargs["w"].dtype == ms.float32
    with pytest.raises(Cancelled, match="to_cpu is not available on MindSpore"):
        perturb("to_cpu", (x,), {}, 0)


def test_the_ratio_is_the_same_on_the_host_and_device_paths():
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal(5000).astype(np.float32))
    b = Tensor(a.asnumpy() * (1 + 1e-3 * rng.standard_normal(5000).astype(np.float32)))
    host = cmp.tensor_ratio(a, b, 1e-4, on_device=False)
    device = cmp.resolve([cmp.tensor_ratio(a, b, 1e-4, on_device=True)])[0]
    assert host == pytest.approx(device, rel=1e-6) and host > 1.0
    flip = Tensor(-a.asnumpy())
    assert cmp.tensor_ratio(a, flip, 1e-4, on_device=False) == float("inf")
    assert cmp.resolve([cmp.tensor_ratio(a, flip, 1e-4, on_device=True)])[0] == float("inf")
