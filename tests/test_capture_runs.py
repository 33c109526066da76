"""Runs through the runner: step events with records and bytes, the summary for ``run_finished``, async
writing (one file set per rank under torchrun: tests/test_distributed_runs.py)."""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_capture_support import TINY, Dump, run_demo

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("writer", ["process", "inline"])
def test_runner_events_and_summary(tmp_path, monkeypatch, writer):
    monkeypatch.setenv("PROBE_TUI_WRITER", writer)
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
    assert all(e["records"] > 0 and e["loss"] is not None for e in steps)
    summary = outcome.summary
    assert summary["records"] == sum(e["records"] for e in steps)
    # bytes: what the store wrote since the previous step event; in this process that is the step's own, and a
    # writer process may finish a step after its event (the run's total is the summary's)
    if writer == "inline":
        assert all(e["bytes"] > 0 for e in steps)
        assert sum(e["bytes"] for e in steps) == summary["capture"]["bytes"]
    else:
        assert all(e.fields.get("bytes", 0) >= 0 for e in steps)
        assert sum(e.fields.get("bytes", 0) for e in steps) <= summary["capture"]["bytes"]
    assert summary["steps_written"] == 3 and summary["steps"] == "0-2" and summary["dump"] == outcome.run_dir
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


def test_the_step_a_failing_script_dies_in_is_marked_partial_and_readers_say_so(tmp_path):
    """The records of the step in progress when the script raised were committed as if the step were whole."""
    from engines.compare.engine import run_compare
    from engines.parse.inspect import parse
    from engines.runner import run_job
    from engines.store import DumpReader
    from schemas import load_config

    script = tmp_path / "boom.py"
    script.write_text(textwrap.dedent('''
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            hidden = model[1](model[0](torch.ones(2, 3)))
            if step == 2:
                raise RuntimeError("loss went NaN")  # half-way through the forward
            model[2](hidden).sum().backward()
            opt.step()
    '''))
    job = load_config({"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "d"),
                       "target": {"script": str(script)}})
    outcome = run_job(job)
    assert outcome.exit_code == 1
    rank0 = Path(outcome.run_dir) / "rank0"
    dump = DumpReader(rank0)
    assert dump.steps() == [0, 1, 2] and dump.partial_steps() == {2: "failed"}
    assert len(dump.records(step=2)["name"]) < len(dump.records(step=1)["name"])
    dump.close()
    notes = parse(outcome.run_dir).summary["notes"]
    assert notes == ["rank 0 step 2: partial, the run failed during it"]
    result = run_compare(load_config({"task": "compare", "dump_path": str(tmp_path / "c"),
                                      "compare": {"target_path": outcome.run_dir, "golden_path": outcome.run_dir}}),
                         write=False)
    assert "target rank 0 step 2: partial, the run failed during it" in result.summary["notes"]
