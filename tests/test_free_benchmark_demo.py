"""free_benchmark end to end on the bf16-autocast demo (docs/decisions/0015-demo-faults-by-numeric-effect.md): the injected low-precision softmax is
flagged and every healthy call passes; fix changes the loss curve; checks never change the numbers."""

import csv
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch.demo import train  # noqa: E402
from engines.events import NullSink  # noqa: E402
from engines.free_benchmark.preheat import Preheat, pure_name  # noqa: E402
from engines.free_benchmark.results import CSV_COLUMNS, read_checks  # noqa: E402
from engines.runner import run_job  # noqa: E402
from engines.runs import open_run  # noqa: E402
from engines.store import store_kinds  # noqa: E402
from schemas import load_config  # noqa: E402

LOWP = {"lowp_softmax": {"layer": 1}}
ROOT = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(tmp_path, section, faults=None, steps=2):
    job = load_config({"task": "free_benchmark", "dump_path": str(tmp_path / "fb"),
                       "target": {"demo": {"preset": "tiny", "steps": steps, "dtype": "bf16", "faults": faults or {}}},
                       "free_benchmark": section})
    outcome = run_job(job, events=NullSink(), fail_on_findings=True)
    rank = open_run(outcome.run_dir).path / "rank0"
    return outcome, rank, read_checks(rank)


def _plain_losses(faults, steps=2):
    return train({"preset": "tiny", "steps": steps, "dtype": "bf16", "faults": faults}).losses


def test_whole_network_improve_precision_flags_the_injected_softmax_only(tmp_path):
    outcome, rank, rows = _run(tmp_path, {}, LOWP)
    assert outcome.exit_code == 3
    bad = [r for r in rows if not r["consistent"]]
    assert sorted({r["name"] for r in bad}) == ["Demo.naive_softmax.0.forward"]
    assert sorted(r["step"] for r in bad) == [0, 1]
    assert all(r["ratio"] > r["threshold"] == 1.004 and r["dtype"] == "torch.bfloat16" for r in bad)
    good = [r for r in rows if r["consistent"]]
    names = {pure_name(r["name"]) for r in good}
    assert {"Functional.linear", "Tensor.matmul", "Functional.softmax", "Functional.gelu"} <= names  # checked, passed
    assert len(good) > 40
    with open(rank / "free_benchmark.csv", newline="") as fh:
        got = list(csv.reader(fh))
    assert tuple(got[0]) == CSV_COLUMNS
    assert [(g[0], g[1], g[2], g[4], g[6], g[8]) for g in got[1:]] == \
        [("0", "improve_precision", "forward", "Demo.naive_softmax.0.forward", "torch.bfloat16", "0")] * 2
    assert [float(g[5]) for g in got[1:]] == pytest.approx([r["ratio"] - 1 for r in bad])
    s = outcome.summary
    assert s["verdict"].startswith("1 of ") and "Demo.naive_softmax (ratio 1.00" in s["verdict"]
    assert s["tables"][0]["rows"][0][1] == "Demo.naive_softmax.0.forward"
    # checking changes nothing: the run's losses are bit-identical to an unchecked run
    assert s["losses"] == _plain_losses(LOWP)


def test_healthy_demo_passes(tmp_path):
    outcome, rank, rows = _run(tmp_path, {"list": ["matmul", "linear", "softmax"]}, {})
    assert outcome.exit_code == 0 and rows and all(r["consistent"] for r in rows)
    assert not (rank / "free_benchmark.csv").exists()
    assert outcome.summary["verdict"].startswith("all ") and "consistent" in outcome.summary["verdict"]


def test_fix_replaces_outputs_and_changes_the_loss_curve(tmp_path):
    outcome, _, rows = _run(tmp_path, {"handler_type": "fix", "list": ["softmax"]}, LOWP, steps=3)
    assert outcome.exit_code == 3  # the replaced naive softmax is still reported
    fixed = outcome.summary["losses"]
    plain = _plain_losses(LOWP, steps=3)
    assert fixed != plain and all(abs(a - b) < 1e-2 for a, b in zip(fixed, plain))
    replaced = outcome.summary["free_benchmark"]["replaced"]
    assert replaced == {"Demo.naive_softmax": 3, "Functional.softmax": 3}
    assert all(r["replaced"] for r in rows)
    assert outcome.summary["verdict"].startswith("fix: replaced the outputs of 6 calls")
    # fixing the healthy softmax alone changes nothing measurable but still runs it in float32
    out2, _, _ = _run(tmp_path / "h", {"handler_type": "fix", "list": ["Functional.softmax"]}, {}, steps=2)
    assert out2.exit_code == 0 and out2.summary["free_benchmark"]["replaced"] == {"Functional.softmax": 4}


def test_backward_stage_checks_input_gradients_without_changing_training(tmp_path):
    outcome, _, rows = _run(tmp_path, {"fuzz_stage": "backward", "list": ["linear", "matmul", "softmax"]}, LOWP)
    back = [r for r in rows if r["stage"] == "backward"]
    assert back and len(back) == len(rows)
    apis = {pure_name(r["name"]) for r in back}
    assert {"Functional.linear", "Tensor.matmul", "Functional.softmax", "Demo.naive_softmax"} <= apis
    lin = [r for r in back if r["name"] == "Functional.linear.0.forward" and r["step"] == 0]
    assert [r["output_index"] for r in lin] == [0, 1, 2]  # grads of input, weight, bias
    assert all(r["threshold"] == 1.004 for r in lin)  # autocast ran it in bfloat16
    assert outcome.summary["losses"] == _plain_losses(LOWP)


def test_scope_checks_exactly_the_named_calls(tmp_path):
    _, _, rows = _run(tmp_path, {"scope": ["Tensor.matmul.1.forward"]}, {})
    assert {r["name"] for r in rows} == {"Tensor.matmul.1.forward"} and len(rows) == 2


@pytest.mark.parametrize("mode", ["add_noise", "bit_noise", "no_change", "change_value"])
def test_other_perturbations_run_on_one_api(tmp_path, mode):
    outcome, _, rows = _run(tmp_path, {"pert_mode": mode, "list": ["Functional.linear"]}, {}, steps=1)
    assert rows and all(r["pert_mode"] == mode for r in rows)
    if mode == "no_change":  # the CPU kernels are deterministic
        assert all(r["consistent"] and r["ratio"] == 1.0 for r in rows)
    if mode == "change_value":  # swapping rows of a linear's input moves its output rows
        assert not all(r["consistent"] for r in rows)


def test_to_cpu(tmp_path):
    _, _, rows = _run(tmp_path, {"pert_mode": "to_cpu", "fuzz_device": "cpu", "list": ["matmul"]}, {}, steps=1)
    assert rows and all(r["consistent"] and "max rel err" in r["detail"] for r in rows)


def test_preheat_learns_thresholds_then_checks(tmp_path):
    outcome, _, rows = _run(tmp_path, {"if_preheat": True, "preheat_step": 2, "max_sample": 2,
                                       "list": ["softmax", "matmul"]}, LOWP, steps=3)
    assert {r["step"] for r in rows} == {2}  # steps 0-1 only calibrate
    thresholds = {pure_name(r["name"]): r["threshold"] for r in rows}
    assert thresholds["Tensor.matmul"] == pytest.approx(1.525)  # 2.05 halved once: its samples were consistent
    assert "Demo.naive_softmax" in thresholds


def test_preheat_rules():
    p = Preheat(preheat_step=3, max_sample=20)
    for _ in range(7):
        p.count(0, "Torch.matmul")
    assert p.sample_numbers(0, "Torch.matmul") == set()
    assert p.sample_numbers(1, "Torch.matmul") == {1, 4, 7}  # ceil(7/3) = 3 samples: (3*(i-1)+1) % 7
    assert p.sample_numbers(2, "Torch.matmul") == {2, 5, 1}
    assert p.sample_numbers(3, "Torch.matmul") == set()
    floor = lambda dtype: 1.004  # noqa: E731
    p.add("A", "bf16", 1.01, True)
    p.end_step(floor)
    assert p.threshold("A", "bf16") == pytest.approx(1.525)  # only consistent, none above: halved
    p.add("A", "bf16", 1.6, True)
    p.end_step(floor)
    assert p.threshold("A", "bf16") == pytest.approx(2.05)  # one above: doubled
    p.add("B", "bf16", 1.001, True)
    p.add("B", "bf16", 1.3, False)
    p.add("B", "bf16", 1.2, False)
    p.end_step(floor)
    assert p.threshold("B", "bf16") == pytest.approx(1.2) and ("B", "bf16") in p.frozen
    p.add("B", "bf16", 1.001, False)
    p.end_step(floor)
    assert p.threshold("B", "bf16") == pytest.approx(1.2)  # frozen
    p.add("C", "fp16", 1.0001, False)
    p.end_step(lambda dtype: 1.002)
    assert p.threshold("C", "fp16") == 1.002  # never below the dtype's default
    p.add("D", "bf16", 1.5, True)
    p.add("D", "bf16", 1.1, False)  # overlapping: no rule moves it
    p.end_step(floor)
    assert p.threshold("D", "bf16") == pytest.approx(2.05)


def test_sample_config_reports_the_injected_softmax(tmp_path):
    sample = json.loads((ROOT / "sample_configs" / "free_benchmark.json").read_text())
    sample["dump_path"] = str(tmp_path / "fb")
    outcome = run_job(load_config(sample), events=NullSink(), fail_on_findings=True)
    assert outcome.exit_code == 3 and "Demo.naive_softmax" in outcome.summary["verdict"]
    rank = open_run(outcome.run_dir).path / "rank0"
    assert "free_benchmark" in store_kinds(rank) and (rank / "free_benchmark.csv").exists()
