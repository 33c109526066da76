"""``PrecisionDebugger`` on the MindSpore demo: overflow_check and free_benchmark through msprobe's loop, and
grad_probe through msprobe's MindSpore ``monitor(optimizer)``, write what ``probe-tui --run`` of the same config
writes on the same demo."""

import csv

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from test_debugger_support import mindspore_demo_in_script, run_json, via_run, write_config  # noqa: E402

from engines.free_benchmark.results import read_checks  # noqa: E402
from engines.grad_probe.reader import GradReader  # noqa: E402
from engines.overflow.results import read_calls, read_steps  # noqa: E402
from probe_tui import PrecisionDebugger  # noqa: E402


def _in_script(tmp_path, config, demo, **kwargs):
    cfg = write_config(tmp_path, "cfg", dict(config, dump_path=str(tmp_path / "script")))
    return mindspore_demo_in_script(demo, lambda: PrecisionDebugger(config_path=str(cfg)), **kwargs)


def test_overflow_check_names_the_float16_exp_as_run_does(tmp_path):
    config = {"task": "overflow_check", "framework": "mindspore", "level": "L1",
              "overflow_check": {"overflow_nums": 1}}
    demo = {"preset": "tiny", "steps": 2, "dtype": "fp16", "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}
    debugger, summary, _ = _in_script(tmp_path, config, demo)
    outcome, run_rank = via_run(config, demo, tmp_path / "run")
    rank = debugger.run_dir / "rank0"
    steps = read_steps(rank)
    assert [(s["step"], s["flagged"], s["first"], s["first_origin"]) for s in steps] == \
        [(0, 0, "", ""), (1, 1, "Mint.exp.0.forward", "produced")]
    assert steps == read_steps(run_rank) and read_calls(rank) == read_calls(run_rank)
    assert summary["verdict"] == outcome.summary["verdict"]
    meta = run_json(debugger.run_dir)
    assert meta["framework"] == "mindspore" and meta["status"] == "finished" and meta["summary"]["flagged_calls"] == 1


def test_free_benchmark_flags_the_naive_softmax_as_run_does(tmp_path):
    config = {"task": "free_benchmark", "framework": "mindspore", "level": "L1", "free_benchmark": {}}
    demo = {"preset": "tiny", "steps": 2, "faults": {"lowp_softmax": {"layer": 1}}}
    debugger, summary, losses = _in_script(tmp_path, config, demo)
    outcome, run_rank = via_run(config, demo, tmp_path / "run")
    rank = debugger.run_dir / "rank0"
    rows = read_checks(rank)
    assert sorted({r["name"] for r in rows if not r["consistent"]}) == ["Demo.naive_softmax.0.forward"]
    assert rows == read_checks(run_rank)
    with open(rank / "free_benchmark.csv", newline="") as a, open(run_rank / "free_benchmark.csv", newline="") as b:
        assert list(csv.reader(a)) == list(csv.reader(b))
    assert summary["verdict"] == outcome.summary["verdict"] and losses == outcome.summary["losses"]


@pytest.mark.parametrize("target", ["optimizer", "model"])
def test_monitor_optimizer_records_what_run_records(tmp_path, target):
    config = {"task": "grad_probe", "framework": "mindspore", "grad_probe": {"grad_level": "L2"}}
    demo = {"preset": "tiny", "steps": 2}
    debugger, summary, _ = _in_script(tmp_path, config, demo, monitor=target, lifecycle=False)
    _, run_rank = via_run(config, demo, tmp_path / "run")
    with GradReader(debugger.run_dir / "rank0") as a, GradReader(run_rank) as b:
        assert a.steps() == b.steps() == [0, 1]
        for step in a.steps():
            x, y = a.read_step(step), b.read_step(step)
            assert x.names == y.names and "blocks.0.attn.qkv.weight" in x.names
            for column in ("max", "min", "norm", "zero_frac", "hist"):
                assert np.array_equal(getattr(x, column), getattr(y, column), equal_nan=True), column
            assert all(np.array_equal(x.direction(i), y.direction(i)) for i in range(len(x.names)))
    assert summary["steps_recorded"] == 2
    assert run_json(debugger.run_dir)["framework"] == "mindspore"
