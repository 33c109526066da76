"""MindSpore graph mode and ``@jit`` cells under the PyNative capture: never bogus records, never a changed
training; what ran compiled is named in the run's notes, and the exit code says whether anything was captured
(docs/MINDSPORE.md "Graph mode"). The MindSpore demo model trained with ``TrainOneStepCell``
(``tests/ms_graph_demo_script.py``), in GRAPH_MODE and in PyNative with one ``@jit`` cell."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.mindspore, pytest.mark.slow]
pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from test_mindspore_support import Dump  # noqa: E402

from tests.dump_support import only_run, write_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "ms_graph_demo_script.py")
EXIT_NOT_CAPTURED = 4


def _python(args, cwd):
    return subprocess.run([sys.executable] + args, cwd=str(cwd), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _losses(stdout):
    return [line for line in stdout.splitlines() if line.startswith("loss ")]


def _run(tmp_path, mode, level):
    config = write_config(tmp_path, "dump", level=level, target={"script": SCRIPT, "args": [mode]})
    run = _python(["-m", "probe_tui", "run", str(config)], tmp_path)
    plain = _python([SCRIPT, mode], tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert _losses(run.stdout) == _losses(plain.stdout) and len(_losses(plain.stdout)) == 2  # training unchanged
    folder = only_run(tmp_path / "dump")
    return run, json.loads((folder / "run.json").read_text()), folder


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_graph_mode_script_writes_no_records_names_what_ran_and_exits_not_captured(tmp_path, level):
    run, meta, folder = _run(tmp_path, "graph", level)
    assert run.returncode == EXIT_NOT_CAPTURED, run.stderr[-2000:]
    assert meta["status"] == "finished" and meta["exit_code"] == EXIT_NOT_CAPTURED
    summary = meta["summary"]
    assert summary["records"] == 0 and summary["tensor_rows"] == 0  # no Primitive.typeof records
    notes = " ".join(summary["capture"]["notes"])
    assert "TrainOneStepCell" in notes and "GRAPH_MODE" in notes
    assert "nothing was captured" in run.stdout + run.stderr


def test_jit_cell_is_named_and_the_rest_is_captured(tmp_path):
    run, meta, folder = _run(tmp_path, "jit", "mix")
    assert run.returncode == 0, run.stderr[-2000:]
    notes = " ".join(meta["summary"]["capture"]["notes"])
    assert "cell MLP" in notes and "@jit" in notes
    assert "partly captured" in run.stdout + run.stderr
    dump = Dump(folder / "rank0")
    assert dump.reader.steps() == [0, 1]
    names = dump.names(0)
    assert "Cell.net.blocks.0.mlp.MLP.forward.0" in names and "Cell.net.blocks.0.mlp.fc1.Linear.forward.0" in names
    assert "Cell.net.blocks.1.attn.CausalSelfAttention.forward.0" in names
    inside = [n for n in names if n.startswith("Cell.net.blocks.1.mlp.")]
    # compiled: no forward or backward record of it or inside it; its parameters' gradients come from the
    # PyNative autograd engine (the hook on each parameter), so they are recorded
    assert sorted(inside) == ["Cell.net.blocks.1.mlp.fc1.Linear.parameters_grad.0",
                              "Cell.net.blocks.1.mlp.fc2.Linear.parameters_grad.0"]
    dump.close()


@pytest.mark.parametrize("mode, what", [("jitfn", "jit function train_step"),
                                        ("jitcell", "cell TrainOneStepCell (ms.jit(cell) called directly)")])
def test_jit_function_calling_the_model_and_jit_of_a_cell_are_named(tmp_path, mode, what):
    # neither passes through Cell.__call__ (the cells are parsed into the graph): seen at jit's executor
    run, meta, _folder = _run(tmp_path, mode, "mix")
    assert run.returncode == EXIT_NOT_CAPTURED, run.stderr[-2000:]
    notes = " ".join(meta["summary"]["capture"]["notes"])
    assert what + " and everything it calls" in notes and "compiled with jit" in notes, notes
    assert "nothing was captured" in run.stdout + run.stderr


def test_a_jit_optimizer_is_not_named(tmp_path):
    # the demo's AdamW (mindspore.experimental.optim, not an nn.Optimizer) runs its update through jit's
    # executor: the update is not the model's computation, so no note (before, "cell AdamW (ms.jit(cell) ...)")
    from test_mindspore_support import run_demo

    _dump, summary, _result = run_demo(tmp_path, {"preset": "tiny", "steps": 1}, level="L1")
    assert summary.records > 0 and not summary.not_captured and not summary.notes, summary.notes
