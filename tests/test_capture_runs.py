"""Runs through the runner: step events with records and bytes, the summary for ``run_finished``, async
writing, and one file set per rank under torch.distributed (gloo, two processes)."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from test_capture_support import TINY, Dump, run_demo

ROOT = Path(__file__).resolve().parents[1]


def test_runner_events_and_summary(tmp_path):
    from engines.events import ListSink
    from engines.runner import run_job
    from schemas import load_config

    job = load_config({"task": "statistics", "level": "L1", "dump_path": str(tmp_path),
                       "target": {"demo": dict(TINY, steps=3)}, "statistics": {"list": ["linear"]}})
    sink = ListSink()
    outcome = run_job(job, events=sink)
    assert outcome.exit_code == 0
    steps = [e for e in sink.events if e.kind == "step"]
    assert [e["step"] for e in steps] == [0, 1, 2]
    assert all(e["records"] > 0 and e["bytes"] > 0 and e["loss"] is not None for e in steps)
    summary = outcome.summary
    assert summary["records"] == sum(e["records"] for e in steps)
    assert summary["steps"] == "0-2" and summary["dump"] == outcome.run_dir
    assert "bytes" not in summary and summary["capture"]["bytes"] > 0  # one size, human readable
    tables = {t["title"]: t for t in summary["tables"]}
    reasons = {row[0] for row in tables["records not written, and why"]["rows"]}
    assert reasons == {"filtered: not in list"}
    meta = json.loads((Path(outcome.run_dir) / "run.json").read_text())
    assert meta["status"] == "finished" and meta["summary"]["records"] == summary["records"]


def test_a_failing_target_is_exit_code_one_with_its_steps_kept(tmp_path):
    from engines.runner import run_job
    from schemas import load_config

    script = tmp_path / "boom.py"
    script.write_text(textwrap.dedent('''
        import torch
        model = torch.nn.Linear(3, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
            if step == 1:
                raise RuntimeError("loss went NaN")
    '''))
    job = load_config({"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "d"),
                       "target": {"script": str(script)}})
    outcome = run_job(job)
    assert outcome.exit_code == 1 and "loss went NaN" in outcome.summary["error"]
    dump = Dump(Path(outcome.run_dir) / "rank0")
    assert dump.steps() == [0, 1]


def test_async_dump_writes_the_same_records(tmp_path):
    sync, _, _ = run_demo(tmp_path / "sync", dict(TINY, steps=3), level="mix", summary_mode="hash")
    asyn, summary, _ = run_demo(tmp_path / "async", dict(TINY, steps=3), level="mix", summary_mode="hash",
                                async_dump=True)
    assert asyn.steps() == sync.steps() == [0, 1, 2]
    for step in (0, 2):
        assert asyn.names(step) == sync.names(step)
    a, b = asyn._tensors, sync._tensors
    for col in ("slot", "max", "min", "mean", "norm", "crc32", "xhash", "valid"):
        np.testing.assert_array_equal(a[col], b[col])  # NaN where a statistic is absent counts as equal


DIST_SCRIPT = textwrap.dedent('''
    import os, sys, torch
    import torch.distributed as dist
    from engines.adapters.torch.zero_code import ZeroCodeCapture
    from engines.capture.options import CaptureOptions
    from engines.capture.sink import dump_sink_factory
    from engines.capture.summary import CaptureSummary
    from pathlib import Path
    torch.set_num_threads(1)
    root = Path(sys.argv[1])
    opts = CaptureOptions(level="mix")
    summary = CaptureSummary()
    with ZeroCodeCapture(opts, dump_sink_factory(lambda r: root / ("rank%d" % r), opts, {}, summary), summary):
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(rank)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 4)))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()
''')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_rank_writes_its_own_files(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DIST_SCRIPT)
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PYTHONPATH=str(ROOT), RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode()[-2000:]
    for rank in (0, 1):
        dump = Dump(tmp_path / ("rank%d" % rank))
        names = dump.names(0)
        assert dump.steps() == [0, 1]
        # DDP's "module." prefix is stripped so that ranks and single-device runs share names
        assert "Module.0.Linear.forward.0" in names and "Functional.linear.0.forward" in names
        assert "Module.0.Linear.parameters_grad.0" in names
        assert dump.reader.meta["rank"] == rank
