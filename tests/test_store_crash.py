"""A writer process killed with SIGKILL leaves every committed step readable (SWMR and per-step modes)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from engines.store import DumpReader, StoreReader

ROOT = Path(__file__).resolve().parents[1]

# Shared by the writer child and the checks below: what step ``s`` holds.
COMMON = r'''
import numpy as np

def step_data(step):
    rng = np.random.default_rng(step)
    n = 40 + step % 7
    names = [f"Functional.op{i}.{step % 3}.forward" for i in range(n)]
    return names, rng.standard_normal(n), rng.standard_normal((n, 3)).astype(np.float32)

def write_step(w, step):
    names, maxes, tensor = step_data(step)
    rec = w.add_records(step=step, name=names, kind=0, direction=0, args=[{"i": i} for i in range(len(names))])
    ref = w.put_tensor(tensor, "torch.float32")
    rest = len(names) - 1
    w.add_tensors(refs=[ref] + [None] * rest, record=rec, step=step, slot="output.0", dtype="torch.float32",
                  shape=[list(tensor.shape)] + [[3]] * rest, max=maxes)
'''

CHILD = COMMON + r'''
import sys
from engines.store import DumpWriter

directory, mode, plan = sys.argv[1], sys.argv[2], sys.argv[3]
w = DumpWriter(directory, meta={"framework": "test"}, mode=mode)
step = 0
while True:
    write_step(w, step)
    w.commit_step(step)
    print("committed", step, flush=True)
    step += 1
    if plan.startswith("block:") and step == int(plan.split(":")[1]):
        # a step in progress, large enough that part of it already sits in the file, uncommitted
        w.add_records(step=step, name=[f"Uncommitted.{i}" for i in range(70_000)])
        w.put_tensor(np.ones(2_000_000, dtype=np.float32), "torch.float32")
        w.store._write_staged()
        w.store._segment.flush()  # as if HDF5 had evicted its metadata: the rows are in the file, uncommitted
        print("mid", flush=True)
        sys.stdin.read()
'''

ns = {}
exec(COMMON, ns)
step_data, write_step = ns["step_data"], ns["write_step"]


def start_writer(directory, mode, plan):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PROBE_TUI_STORE_MODE", None)
    return subprocess.Popen([sys.executable, "-c", CHILD, str(directory), mode, plan], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def read_line(proc):
    line = proc.stdout.readline()
    assert line, f"writer exited early: {proc.stderr.read()}"
    return line.split()


def kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdin.close()
    proc.stdout.close()
    proc.stderr.close()


def check_steps(directory, steps):
    r = DumpReader(directory)
    assert r.steps() == list(steps)
    assert r.status == "killed"
    rec = r.records()
    t = r.tensors()
    n_total = sum(len(step_data(s)[0]) for s in steps)
    assert len(rec["name"]) == len(t["row"]) == n_total
    for s in steps:
        names, maxes, tensor = step_data(s)
        rs = r.records(step=s)
        assert list(rs["name"]) == names and np.array_equal(rs["seq"], np.arange(len(names)))
        ts = r.tensors(step=s)
        np.testing.assert_array_equal(ts["max"], maxes)
        assert np.array_equal(ts["record"], rs["row"])
        assert np.array_equal(r.tensor_data(ts["row"][0]), tensor)
        assert r.tensor_data(ts["row"][1]) is None
    assert not any(name.startswith("Uncommitted") for name in rec["name"])
    r.close()


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_kill_mid_step_keeps_committed_steps(tmp_path, mode):
    proc = start_writer(tmp_path, mode, "block:4")
    while read_line(proc) != ["mid"]:
        pass
    kill(proc)
    check_steps(tmp_path, range(4))
    if mode == "swmr":
        # plain h5py opens the killed writer's file in SWMR-read mode (docs/FORMAT.md, "After a crash")
        with h5py.File(tmp_path / "dump.h5", "r", swmr=True) as f:
            assert f["tables/records/name"].shape[0] > 70_000  # uncommitted rows are in the file ...
        assert StoreReader(tmp_path).num_rows("records") < 70_000  # ... and never read
    else:
        assert list(tmp_path.glob("dump-seg*.h5.partial"))  # the step in progress, never announced
        assert sorted(p.name for p in tmp_path.glob("dump-s*.h5")) == [f"dump-s{s}.h5" for s in range(4)]


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_kill_at_any_moment_keeps_a_consistent_prefix(tmp_path, mode):
    proc = start_writer(tmp_path, mode, "loop")
    last = -1
    while last < 6:
        last = int(read_line(proc)[1])
    kill(proc)  # wherever the writer is now: appending, writing or half-way through a commit
    r = StoreReader(tmp_path)
    steps = r.steps()
    r.close()
    assert steps == list(range(len(steps))) and len(steps) > last
    check_steps(tmp_path, steps)


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_a_stop_signal_during_a_commit_waits_for_the_commit(tmp_path, monkeypatch, mode):
    """SIGTERM (or Ctrl-C) raised in the middle of a commit once left some columns of the step written and others
    not, and close() then committed the rest under a commit row that claimed them all."""
    from engines.runner import RunStopped, _TerminateAsInterrupt
    from engines.store import DumpWriter
    from engines.store.segment import SegmentFile

    original = SegmentFile.write_table
    calls = []

    def write_table(self, table, columns, final=False):
        calls.append(table)
        if len(calls) == 3:  # step 1, half-way through its tables
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, table, columns, final)

    monkeypatch.setattr(SegmentFile, "write_table", write_table)
    w = DumpWriter(tmp_path, meta={"framework": "test"}, mode=mode)
    with _TerminateAsInterrupt():
        write_step(w, 0)
        w.commit_step(0)
        write_step(w, 1)
        with pytest.raises(RunStopped):
            w.commit_step(1)
    assert w.store.commits == 2  # the stop came after the commit it arrived in
    w.close("stopped")
    r = DumpReader(tmp_path)
    assert r.steps() == [0, 1] and r.status == "stopped"
    rec, t = r.records(), r.tensors()
    assert len(rec["name"]) == len(rec["seq"]) == sum(len(step_data(s)[0]) for s in (0, 1))
    assert np.array_equal(t["record"], rec["row"])
    r.close()
