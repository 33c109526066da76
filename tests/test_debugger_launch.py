"""The in-script debugger as a user's process runs it: closed at interpreter exit (finished, or failed when the
script dies on an exception, with the steps written so far readable), and several ranks of one launch writing
one run folder (``rank<R>/`` each, one ``run.json`` finished by the rank that created it)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_debugger_support import only_run, run_json  # noqa: E402

from engines.overflow.results import read_calls, read_steps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    import torch
    from probe_tui import PrecisionDebugger

    torch.set_num_threads(1)
    root, mode = Path(sys.argv[1]), sys.argv[2]
    rank = int(os.environ.get("RANK", "0"))
    debugger = PrecisionDebugger(task="overflow_check", dump_path=str(root / "dump"), level="L1")
    if mode == "launch":  # every rank has made its debugger before any finishes (as in a real launch)
        (root / ("ready%d" % rank)).write_text("")
        while not all((root / ("ready%d" % r)).exists() for r in range(2)):
            time.sleep(0.02)
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for step in range(3):
        debugger.start(lin)
        hot = step == 1 and (rank == 1 or mode != "launch")
        x = torch.full((2, 4), 50.0 if hot else 0.1)
        loss = (lin(x) + torch.exp(x * 20)).mean()   # exp(1000) is +inf in float32
        loss.backward()
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
        if mode == "crash" and step == 1:
            raise RuntimeError("the training script failed")
    # no close(): the debugger closes itself at interpreter exit
''')


def _run(tmp_path, mode, env):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocess.Popen([sys.executable, str(script), str(tmp_path), mode], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("mode, status", [("ok", "finished"), ("crash", "failed")])
def test_the_run_is_closed_at_interpreter_exit(tmp_path, mode, status):
    proc = _run(tmp_path, mode, {})
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == (0 if mode == "ok" else 1), err[-2000:]
    run_dir = only_run(tmp_path / "dump")
    meta = run_json(run_dir)
    assert meta["status"] == status and meta["summary"]["flagged_calls"] == 1
    steps = read_steps(run_dir / "rank0")
    assert [s["step"] for s in steps] == [0, 1] and steps[1]["first"] == "Torch.exp.0.forward"
    assert "overflow at step 1: Torch.exp.0.forward produced +inf" in err  # the summary line at exit


def test_the_ranks_of_one_launch_share_one_run_folder(tmp_path):
    env = {"WORLD_SIZE": "2", "PROBE_TUI_RUN_ID": "launch-7"}
    procs = [_run(tmp_path, "launch", dict(env, RANK=str(rank))) for rank in (0, 1)]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
    run_dir = only_run(tmp_path / "dump")
    assert run_dir.name == "launch-7" and sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == \
        ["rank0", "rank1"]
    assert [s["flagged"] for s in read_steps(run_dir / "rank0")] == [0, 0, 0]
    assert [s["flagged"] for s in read_steps(run_dir / "rank1")] == [0, 1]  # stopped after the flagged step
    assert [c["name"] for c in read_calls(run_dir / "rank1")] == ["Torch.exp.0.forward"]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["task"] == "overflow_check"
