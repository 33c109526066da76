"""msprobe's grad_probe API on the PyTorch demo: ``PrecisionDebugger(config_path=...).monitor(model)`` records
the same rows, per parameter and step, as ``probe-tui --run`` of the same config; steps are optimizer steps, and
the start/stop/step calls of a dump loop change nothing."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_debugger_support import run_json, torch_demo_in_script, via_run, write_config  # noqa: E402

from engines.grad_probe.reader import GradReader  # noqa: E402
from probe_tui import PrecisionDebugger  # noqa: E402

DEMO = {"preset": "tiny", "steps": 3, "dtype": "fp32"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(rank_dir):
    """step -> name -> every column the store holds for it (directions unpacked)."""
    out = {}
    with GradReader(rank_dir) as reader:
        for step in reader.steps():
            data = reader.read_step(step)
            out[step] = {name: (data.shapes[i], data.max[i], data.min[i], data.norm[i], data.zero_frac[i],
                                tuple(data.hist[i]) if data.hist is not None else None,
                                data.direction(i).tobytes())
                         for i, name in enumerate(data.names)}
    return out


def _equal(a, b):
    assert a.keys() == b.keys()
    for step in a:
        assert list(a[step]) == list(b[step]), step
        for name, row in a[step].items():
            assert all(np.array_equal(x, y, equal_nan=True) if isinstance(x, (float, np.floating, tuple)) else x == y
                       for x, y in zip(row, b[step][name])), (step, name)


@pytest.mark.parametrize("lifecycle", [False, True])
def test_monitor_model_records_what_run_records(tmp_path, lifecycle):
    config = {"task": "grad_probe", "grad_probe": {"grad_level": "L2", "bounds": [-0.01, 0, 0.01],
                                                   "export_csv": True}}
    cfg = write_config(tmp_path, "gp", dict(config, dump_path=str(tmp_path / "script")))
    debugger, summary, _ = torch_demo_in_script(DEMO, lambda: PrecisionDebugger(config_path=str(cfg)),
                                                monitor=True, lifecycle=lifecycle)
    outcome, run_rank = via_run(config, DEMO, tmp_path / "run")
    rank = debugger.run_dir / "rank0"
    got = _rows(rank)
    assert sorted(got) == [0, 1, 2]  # one step per optimizer step
    assert "blocks.0.attn.qkv.weight" in got[0] and all(row[5] is not None for row in got[0].values())
    _equal(got, _rows(run_rank))
    assert sorted(p.name for p in rank.glob("grad_summary_*.csv")) == \
        sorted(p.name for p in run_rank.glob("grad_summary_*.csv")) == [f"grad_summary_{s}.csv" for s in range(3)]
    for step in range(3):
        name = f"grad_summary_{step}.csv"
        assert (rank / name).read_text() == (run_rank / name).read_text()
    assert summary["steps_recorded"] == outcome.summary["steps_recorded"] == 3
    assert summary["parameter_rows"] == outcome.summary["parameter_rows"]
    meta = run_json(debugger.run_dir)
    assert meta["status"] == "finished" and meta["task"] == "grad_probe"
    assert meta["summary"]["parameter_rows"] == summary["parameter_rows"]


def test_step_and_param_filters_apply_and_class_monitor_works(tmp_path):
    cfg = write_config(tmp_path, "gp", {"task": "grad_probe", "dump_path": str(tmp_path / "d"), "step": [1, 2],
                                        "grad_probe": {"grad_level": "L1", "param_list": ["head.weight"]}})
    state = {}

    def make():
        state["debugger"] = PrecisionDebugger(config_path=str(cfg))
        return state["debugger"]

    class Classy:  # PrecisionDebugger.monitor(model) from any file, as msprobe documents it
        def __init__(self):
            self.debugger = make()

        def monitor(self, model):
            PrecisionDebugger.monitor(model)

        def close(self):
            return self.debugger.close()

    _, summary, _ = torch_demo_in_script(dict(DEMO, steps=4), Classy, monitor=True, lifecycle=False)
    rows = _rows(state["debugger"].run_dir / "rank0")
    assert sorted(rows) == [1, 2] and all(list(r) == ["head.weight"] for r in rows.values())
    assert summary["steps_recorded"] == 2


def test_start_with_a_model_starts_monitoring_when_monitor_was_not_called(tmp_path):
    _, summary, _ = torch_demo_in_script(DEMO, lambda: PrecisionDebugger(task="grad_probe",
                                                                         dump_path=str(tmp_path / "d")))
    assert summary["steps_recorded"] == 3 and summary["parameter_rows"] > 0


def test_monitor_never_called_leaves_a_finished_run_that_says_so(tmp_path):
    debugger = PrecisionDebugger(task="grad_probe", dump_path=str(tmp_path / "d"))
    summary = debugger.close()
    assert summary["steps_recorded"] == 0 and "never called" in summary["verdict"]
    assert run_json(debugger.run_dir)["status"] == "finished"
