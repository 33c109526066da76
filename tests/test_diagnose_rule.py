"""The inconclusive rule of diagnose (engines/diagnose/rule.py) and the per-module shares, on small tables; and\nstage 2 from two dumps that hold tensors (no framework needed)."""

import json
from pathlib import Path

import numpy as np

from engines.diagnose import evidence, rule
from probe_tui.cli import main


def _group(record, score, out_err, in_err=0.0, phase="forward", direction="forward", members=(), position=1):
    return {"record": record, "score": score, "out_err": out_err, "in_err": in_err, "phase": phase,
            "direction": direction, "members": list(members), "position": position, "kind": "api", "step": 0,
            "rank": 0}


def _div(*floors):
    return {"floor": np.array(floors, dtype=np.float64)}


def test_a_suspect_that_adds_error_and_stands_out_is_conclusive():
    groups = [_group("Functional.softmax.1.forward", 300.0, 3e-3, position=1),
              _group("Functional.linear.2.forward", 5.0, 1e-4, position=2)]
    j = rule.judge(groups, _div(2.0 ** -20, 2.0 ** -20))
    assert j.conclusive, j.reason
    assert j.top["record"] == "Functional.softmax.1.forward"
    assert j.ratio == 60.0


def test_a_close_runner_up_makes_it_inconclusive():
    groups = [_group("Functional.linear.1.forward", 10.0, 1e-3, position=1),
              _group("Functional.linear.2.forward", 6.0, 1e-3, position=2)]
    j = rule.judge(groups, _div(2.0 ** -20, 2.0 ** -20))
    assert not j.conclusive
    assert "runner-up Functional.linear.2.forward" in j.reason


def test_the_backward_of_the_top_suspect_is_not_its_runner_up():
    groups = [_group("Functional.softmax.1.forward", 10.0, 1e-3, position=1),
              _group("Functional.softmax.1.backward", 9.0, 1e-3, direction="backward", phase="backward",
                     position=2)]
    j = rule.judge(groups, _div(2.0 ** -20, 2.0 ** -20))
    assert j.conclusive, j.reason
    assert j.runner_up is None


def test_an_error_the_dtypes_explain_is_inconclusive():
    # a bfloat16 output (floor 2^-8) off by 2e-3: what bfloat16 rounding gives, whatever the score says
    groups = [_group("Functional.linear.1.forward", 50.0, 2e-3, position=1)]
    j = rule.judge(groups, _div(2.0 ** -8))
    assert not j.conclusive
    assert "dtypes explain" in j.reason


def test_a_low_score_is_inconclusive():
    j = rule.judge([_group("Functional.linear.1.forward", 2.5, 1e-3)], _div(2.0 ** -20))
    assert not j.conclusive and "needs 4x" in j.reason


def test_update_ops_are_judged_only_when_the_model_does_not_differ():
    groups = [_group("Tensor.addcdiv_.5.forward", 60.0, 0.1, phase="update", position=1),
              _group("Functional.layer_norm.2.backward", 2.7, 4e-3, phase="backward", direction="backward",
                     position=2)]
    j = rule.judge(groups, _div(2.0 ** -20, 2.0 ** -20))
    assert j.top["record"] == "Functional.layer_norm.2.backward" and not j.conclusive
    only_update = [dict(groups[0]), _group("Functional.linear.0.forward", 0.0, 0.0, position=2)]
    j = rule.judge(only_update, _div(2.0 ** -20, 2.0 ** -20))
    assert j.top["record"] == "Tensor.addcdiv_.5.forward" and j.conclusive


def test_nothing_differs():
    j = rule.judge([_group("Functional.linear.0.forward", 0.0, 0.0)], _div(2.0 ** -20))
    assert not j.conclusive and not j.differs


def test_a_region_and_the_op_inside_it_are_the_same_culprit():
    region = _group("Tensor.to.0.forward", 200.0, 3e-4,
                    members=["Tensor.to.0.forward", "Demo.naive_softmax.0.forward", "Tensor.to.1.forward"])
    region["kind"] = "target-only ops"
    assert rule.same_culprit(region, _group("Demo.naive_softmax.0.forward", 9.0, 1e-3))
    assert evidence.key_op(region) == "Demo.naive_softmax.0.forward"


def test_module_shares_add_up_per_top_level_module():
    div = {"record": np.array(["a", "b", "c", "d"], dtype=object),
           "kind": np.array([0, 0, 0, 0], np.uint8), "phase": np.array([0, 1, 0, 2], np.uint8),
           "out_err": np.array([3e-3, 2e-3, 1e-3, 0.5]), "in_err": np.array([1e-3, 0.0, 0.0, 0.0]),
           "parent": np.array(["Module.blocks.0.attn.CausalSelfAttention.forward.0",
                               "Module.blocks.0.mlp.fc1.Linear.backward.0", "Module.head.Linear.forward.0", ""],
                              dtype=object)}
    shares = evidence.module_shares(div)
    assert [(s["module"], round(s["share"], 3), s["ops"]) for s in shares] == [("blocks.0", 0.8, 2),
                                                                               ("head", 0.2, 1)]


def test_tensors_of_two_dumps_overrule_statistics_where_values_moved(tmp_path):
    """msprobe's dumps of a model whose softmax writes its values in the reverse order: max, min, mean and norm
    are equal, so the statistics blame the matmul (the only other difference); the dumps hold tensors, so stage 2
    compares them without a re-run and names the softmax."""
    data = Path(__file__).parent / "data" / "msprobe" / "e2e_83"
    out = tmp_path / "out"
    assert main(["diagnose", str(data / "npu/step0/rank0/dump.json"), str(data / "bench/step0/rank0/dump.json"),
                 "-o", str(out)]) == 0
    v = json.loads((out / "verdict.json").read_text())
    assert v["stage1"]["judgement"]["top"]["op"] == "Functional.matmul.0.forward"
    assert v["stage2"]["ran"] and "no re-run" in v["stage2"]["source"]
    assert v["decided_by"] == "stage 2 (tensors)" and v["stage2_outcome"] == "overruled"
    assert v["culprit"]["op"] == "Functional.softmax.0.forward"
    assert v["culprit"]["inputs_match"] and v["culprit"]["out_err"] > 0.5
