"""``PrecisionDebugger`` with ``overflow_check`` and ``free_benchmark`` on the PyTorch demo: msprobe's
start/stop/step loop in a script writes the same findings, records and files as ``probe-tui --run`` of the same
config on the same demo, and leaves a finished run with a readable summary."""

import csv

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_debugger_support import only_run, run_json, torch_demo_in_script, via_run, write_config  # noqa: E402

from engines.adapters.torch.demo import train  # noqa: E402
from engines.free_benchmark.results import read_checks  # noqa: E402
from engines.overflow.results import read_calls, read_steps  # noqa: E402
from engines.store import DumpReader  # noqa: E402
from probe_tui import PrecisionDebugger  # noqa: E402

OVERFLOW_DEMO = {"preset": "tiny", "steps": 4, "dtype": "fp16", "faults": {"fp16_overflow": {"layer": 1, "from_step": 2}}}
LOWP_DEMO = {"preset": "tiny", "steps": 2, "dtype": "bf16", "faults": {"lowp_softmax": {"layer": 1}}}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _dump(rank_dir):
    """Every kept record with its tensors, as plain values."""
    with DumpReader(rank_dir) as dump:
        recs = dump.records()
        t = dump.tensors()
        data = [dump.tensor_data(int(row)) for row in t["row"]]
        return ([(str(n), int(s)) for n, s in zip(recs["name"], recs["step"])], [str(s) for s in t["slot"]], data)


@pytest.mark.parametrize("class_calls, end", [(False, "stop"), (True, "forward_backward_dump_end")])
def test_overflow_check_in_script_finds_what_run_finds(tmp_path, class_calls, end):
    config = {"task": "overflow_check", "level": "L1", "overflow_check": {"overflow_nums": 1}}
    cfg = write_config(tmp_path, "of", dict(config, dump_path=str(tmp_path / "script")))
    debugger, summary, _ = torch_demo_in_script(OVERFLOW_DEMO, lambda: PrecisionDebugger(config_path=str(cfg)),
                                                class_calls=class_calls, end=end)
    outcome, run_rank = via_run(config, OVERFLOW_DEMO, tmp_path / "run")
    rank = only_run(tmp_path / "script") / "rank0"
    assert debugger.run_dir == rank.parent

    steps = read_steps(rank)
    assert [(s["step"], s["flagged"], s["first"], s["first_origin"]) for s in steps] == \
        [(0, 0, "", ""), (1, 0, "", ""), (2, 1, "Torch.exp.0.forward", "produced")]
    assert steps == read_steps(run_rank)  # per step: calls checked, masks, the first origin, the stop
    calls = read_calls(rank)
    assert [(c["name"], c["origin"], c["kept"]) for c in calls] == [("Torch.exp.0.forward", "produced", True)]
    assert calls == read_calls(run_rank)
    names, slots, data = _dump(rank)
    run_names, run_slots, run_data = _dump(run_rank)
    assert names == run_names == [("Torch.exp.0.forward", 2)] and slots == run_slots == ["input.0", "output.0"]
    assert all(np.array_equal(a, b) for a, b in zip(data, run_data)) and np.isposinf(data[1]).any()

    # the summary close() returns is --run's (less the demo's losses), and run.json is finished with it
    assert summary["verdict"] == outcome.summary["verdict"]
    assert summary["verdict"].startswith("overflow at step 2: Torch.exp.0.forward produced +inf from finite inputs")
    assert summary["tables"] == outcome.summary["tables"]
    meta = run_json(rank.parent)
    assert meta["status"] == "finished" and meta["task"] == "overflow_check" and meta["steps"] == 4
    assert meta["summary"]["verdict"] == summary["verdict"] and meta["summary"]["flagged_calls"] == 1


def test_overflow_check_limit_ends_the_check_for_good_and_a_later_step_is_harmless(tmp_path):
    """overflow_nums 1: after the flagged step nothing more is checked; the loop's later calls do nothing."""
    debugger, summary, losses = torch_demo_in_script(
        dict(OVERFLOW_DEMO, steps=5, faults={"fp16_overflow": {"layer": 1, "from_step": 1}}),
        lambda: PrecisionDebugger(task="overflow_check", dump_path=str(tmp_path / "d"), level="L1"))
    rank = debugger.run_dir / "rank0"
    assert [s["step"] for s in read_steps(rank)] == [0, 1] and read_steps(rank)[1]["stopped"]
    assert summary["steps_checked"] == 2 and summary["overflow"]["limit_reached"]
    assert len(losses) == 5 and run_json(debugger.run_dir)["steps"] == 5


def test_free_benchmark_in_script_flags_the_naive_softmax_as_run_does(tmp_path):
    config = {"task": "free_benchmark", "level": "L1",
              "free_benchmark": {"list": ["matmul", "linear", "softmax"], "pert_mode": "improve_precision"}}
    cfg = write_config(tmp_path, "fb", dict(config, dump_path=str(tmp_path / "script")))
    debugger, summary, losses = torch_demo_in_script(LOWP_DEMO, lambda: PrecisionDebugger(config_path=str(cfg)))
    outcome, run_rank = via_run(config, LOWP_DEMO, tmp_path / "run")
    rank = debugger.run_dir / "rank0"

    rows = read_checks(rank)
    bad = [r for r in rows if not r["consistent"]]
    assert sorted((r["step"], r["name"]) for r in bad) == [(0, "Demo.naive_softmax.0.forward"),
                                                            (1, "Demo.naive_softmax.0.forward")]
    assert len(rows) > 20 and rows == read_checks(run_rank)  # every check, ratio for ratio
    with open(rank / "free_benchmark.csv", newline="") as a, open(run_rank / "free_benchmark.csv", newline="") as b:
        got, expected = list(csv.reader(a)), list(csv.reader(b))
    assert got == expected and [g[4] for g in got[1:]] == ["Demo.naive_softmax.0.forward"] * 2

    assert summary["verdict"] == outcome.summary["verdict"] and "Demo.naive_softmax (ratio" in summary["verdict"]
    assert summary["csv"] == str(rank / "free_benchmark.csv")
    assert losses == outcome.summary["losses"]  # checking changes no number
    meta = run_json(debugger.run_dir)
    assert meta["status"] == "finished" and meta["summary"]["inconsistent_calls"] == 1 and meta["steps"] == 2


def test_free_benchmark_fix_in_script_changes_the_losses_as_run_does(tmp_path):
    config = {"task": "free_benchmark", "level": "L1", "free_benchmark": {"handler_type": "fix", "list": ["softmax"]}}
    cfg = write_config(tmp_path, "fix", dict(config, dump_path=str(tmp_path / "script")))
    demo = dict(LOWP_DEMO, steps=3)
    _, summary, losses = torch_demo_in_script(demo, lambda: PrecisionDebugger(config_path=str(cfg)))
    outcome, _ = via_run(config, demo, tmp_path / "run")
    plain = train(demo).losses
    assert losses == outcome.summary["losses"] and losses != plain  # the fixed softmax trains differently
    assert summary["free_benchmark"]["replaced"] == outcome.summary["free_benchmark"]["replaced"]
    assert summary["verdict"].startswith("fix: replaced the outputs of")
