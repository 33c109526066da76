"""The three ways to run a capture, and the promises around them: the in-script API (msprobe's lifecycle),
``--run`` on an unmodified script (same records), a SIGKILL that leaves committed steps readable, an unwritable
dump path. Failing hooks and the sample config, on both frameworks: tests/test_capture_frameworks.py."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from test_capture_support import TINY, Dump, run_demo

from tests.dump_support import only_run, write_config

ROOT = Path(__file__).resolve().parents[1]

TRAIN_SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(5, 8), torch.randint(0, 4, (5,))) for _ in range(3)]
    debugger = None
    if len(sys.argv) > 1:  # the in-script variant: the same loop with msprobe's four calls
        from probe_tui import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=sys.argv[1])
    for x, y in data:  # msprobe's documented placement: start at the top, stop and step after the optimizer
        if debugger:
            debugger.start(model)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if debugger:
            debugger.stop()
            debugger.step()
    print("final loss", loss.item())
''')


def _latest_rank0(dump_path: Path) -> Path:
    return only_run(dump_path) / "rank0"


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_stop_before_backward_still_captures_backward(tmp_path, level):
    """docs/reference/msprobe-tasks.md §14 C6: msprobe loses module-level backward when stop() comes before backward()."""
    from probe_tui import PrecisionDebugger

    cfg = write_config(tmp_path, "c6", level=level)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    debugger = PrecisionDebugger(config_path=str(cfg))
    for _ in range(2):
        debugger.start(model)
        loss = model(torch.randn(3, 4)).square().mean()
        debugger.stop()
        loss.backward()
        debugger.step()
    debugger.close()
    dump = Dump(_latest_rank0(tmp_path / "c6"))
    for step in (0, 1):
        names = dump.names(step)
        if level in ("L0", "mix"):
            assert "Module.0.Linear.backward.0" in names and "Module.2.Linear.parameters_grad.0" in names
        if level in ("L1", "mix"):
            assert "Functional.linear.1.backward" in names and "Tensor.square.0.backward" in names


def test_precision_debugger_lifecycle_save_and_class_calls(tmp_path):
    from probe_tui import PrecisionDebugger, seed_all

    seed_all(7)
    cfg = write_config(tmp_path, "dbg", level="L1")
    w = torch.randn(3, requires_grad=True)
    debugger = PrecisionDebugger(config_path=str(cfg))
    PrecisionDebugger.start()  # msprobe allows the class-level call from any file
    h = w * 2
    debugger.save("hidden", h)
    debugger.save(h.sum(), "total")  # msprobe's argument order is accepted too
    PrecisionDebugger.stop()
    h.sum().backward()
    PrecisionDebugger.step()
    summary = debugger.close()
    run_dir = _latest_rank0(tmp_path / "dbg").parent
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["summary"]["records"] == summary["records"]
    assert meta["seed_all"] == {"seed": 7, "deterministic_algorithms": False, "rm_dropout": False}
    dump = Dump(run_dir / "rank0")
    names = dump.names(0)
    assert {"hidden.0.debug", "total.0.debug", "hidden_grad.0.debug", "Tensor.mul.0.forward"} <= set(names)
    rows = dump.rows("hidden.0.debug")
    assert float(rows["value"]["max"]) == float(h.detach().max())
    assert float(dump.rows("hidden_grad.0.debug")["value"]["min"]) == 1.0
    run_meta = json.loads(dump.reader.meta["run_meta"]) if isinstance(dump.reader.meta.get("run_meta"), str) \
        else dump.reader.meta.get("run_meta", {})
    assert run_meta.get("environment", {}).get("seed_all", {}).get("seed") == 7


def test_run_without_edits_writes_the_same_records_as_the_in_script_api(tmp_path):
    from engines.runner import run_job
    from schemas import load_config

    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    in_script_cfg = write_config(tmp_path, "inscript")
    # the in-script variant, in a child interpreter as a user would run it
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script), str(in_script_cfg)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # the zero-code variant: probe-tui runs the unmodified script in-process
    job = load_config({"task": "statistics", "dump_path": str(tmp_path / "zerocode"), "level": "mix",
                       "target": {"script": str(script)}})
    outcome = run_job(job)
    assert outcome.exit_code == 0, outcome.summary
    a = Dump(_latest_rank0(tmp_path / "inscript"))
    b = Dump(_latest_rank0(tmp_path / "zerocode"))
    assert a.steps() == b.steps() == [0, 1, 2]
    for step in a.steps():
        assert a.names(step) == b.names(step)
        for name in a.names(step):
            ra, rb = a.rows(name, step), b.rows(name, step)
            assert {k: (v["max"], v["min"], v["mean"], v["norm"]) for k, v in ra.items()} == \
                {k: (v["max"], v["min"], v["mean"], v["norm"]) for k, v in rb.items()}, name




WRITER_SCRIPT = textwrap.dedent('''
    import sys, time, torch
    torch.set_num_threads(1)
    from engines.adapters.torch.zero_code import ZeroCodeCapture
    from engines.capture.options import CaptureOptions
    from engines.capture.sink import dump_sink_factory
    from engines.capture.summary import CaptureSummary
    from pathlib import Path
    root = Path(sys.argv[1])
    opts = CaptureOptions(level="L1", store_mode=sys.argv[2])
    summary = CaptureSummary()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with ZeroCodeCapture(opts, dump_sink_factory(lambda r: root / ("rank%d" % r), opts, {}, summary), summary):
        for step in range(10000):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            if step == 2:
                (root / "ready").write_text("3")
            time.sleep(0.01)
''')


@pytest.mark.parametrize("writer", ["process", "inline"])
@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_sigkill_leaves_committed_steps_readable(tmp_path, mode, writer):
    """In the training process (``inline``) the steps committed before the kill stay readable; a writer process
    outlives the training, writes every step it was handed and closes the store as ``killed``."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROBE_TUI_WRITER=writer)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), mode], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 90
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "the writer never got to step 3"
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    from engines.store import StoreReader

    deadline = time.time() + 60
    while True:  # a writer process finishes the steps it holds, then closes the store
        with StoreReader(tmp_path / "rank0", "dump") as store:
            status = store.status
        if status != "running" or time.time() > deadline:
            break
        time.sleep(0.05)
    assert status == "killed"
    dump = Dump(tmp_path / "rank0")
    steps = dump.steps()
    assert steps[:3] == [0, 1, 2]
    for step in steps:
        assert "Functional.linear.0.forward" in dump.names(step)
        assert "Functional.linear.0.backward" in dump.names(step)




def test_an_unwritable_dump_path_is_reported_and_training_goes_on(tmp_path):
    from engines.adapters.torch.demo import train

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the rank folder should go")
    baseline = train(dict(TINY)).losses
    _, summary, result = run_demo(blocker, TINY, level="L1")
    assert result.losses == baseline
    assert any("opening the dump store" in k for k in summary.missing)
