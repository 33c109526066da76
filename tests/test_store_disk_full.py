"""A full disk stops the store, never the process: committed steps stay readable, the store closes with status
``disk_full``, one line says so, and nothing is left half-written (docs/FORMAT.md, "When the disk fills").

Two ways in: the free space checked before a step is written (simulated here by a file system that reports no
room), and an HDF5 write that fails anyway (simulated with RLIMIT_FSIZE in a child process: the write gets EFBIG,
as it gets ENOSPC on a full disk). Once, a failed write left an HDF5 handle that crashed the process (exit 139).
The tests on a real small tmpfs, through the CLI, are in test_cli_disk_full.py.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from engines.store import DumpReader, StoreWarning
from engines.store import space as store_space
from engines.store.dump_writer import DumpWriter

ROOT = Path(__file__).resolve().parents[1]

STEP = r'''
import numpy as np

def size(step):
    return 50_000 if step < 5 else 200_000  # 200 kB a step, then 800 kB

def write_step(w, step):
    n = 30
    rec = w.add_records(step=step, name=[f"Functional.op{i}.0.forward" for i in range(n)], kind=0, direction=0)
    ref = w.put_tensor(np.full(size(step), step, dtype=np.float32), "torch.float32")
    w.add_tensors(refs=[ref] + [None] * (n - 1), record=rec, step=step, slot="output.0", dtype="torch.float32",
                  shape=[[size(step)]] + [[1]] * (n - 1), max=np.full(n, float(step)))
'''

CHILD = STEP + r'''
import json, resource, signal, sys, warnings
from engines.store import DumpWriter

directory, mode, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
w = DumpWriter(directory, meta={"framework": "test"}, mode=mode)
# no file may grow past this (a soft limit, as `ulimit -S -f` sets: the store's own files only are written)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for step in range(40):
        write_step(w, step)  # the training's hook goes on calling the writer: no exception reaches it
        w.commit_step(step)
    w.close()
print(json.dumps({"stopped": w.store.stopped, "commits": w.store.commits,
                  "warnings": [str(x.message) for x in caught]}))
'''

ns = {}
exec(STEP, ns)
write_step, size = ns["write_step"], ns["size"]


def check_readable(directory, steps):
    r = DumpReader(directory)
    assert r.steps() == list(steps)
    assert r.status == "disk_full"
    for s in steps:
        t = r.tensors(step=s)
        assert len(t["row"]) == 30 and np.all(t["max"] == s)
        assert np.array_equal(r.tensor_data(t["row"][0]), np.full(size(s), s, dtype=np.float32))
    r.close()
    assert not list(Path(directory).glob("*.partial"))


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_a_failed_write_stops_the_store_without_crashing_the_process(tmp_path, mode):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PROBE_TUI_STORE_MODE", None)
    # SWMR: one file that grows; per-step: one file a step, which fails when the steps grow to 800 kB
    limit = 6_000_000 if mode == "swmr" else 600_000
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), mode, str(limit)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]  # was -11 (a segfault) after the failed write
    out = json.loads(done.stdout)
    assert out["stopped"] == "disk_full" and len(out["warnings"]) == 1, out
    assert "the disk is full (File too large)" in out["warnings"][0] and "\n" not in out["warnings"][0]
    assert 3 <= out["commits"] < 40
    check_readable(tmp_path, range(out["commits"]))
    if mode == "swmr" and out["commits"]:
        with h5py.File(tmp_path / "dump.h5", "r", swmr=True) as f:  # what a plain-h5py user does (FORMAT.md)
            assert f["commits/step"].shape[0] >= out["commits"]


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_a_step_that_does_not_fit_in_the_free_space_is_not_written(tmp_path, monkeypatch, mode):
    free = {"bytes": 1 << 40}
    monkeypatch.setattr(store_space, "free_bytes", lambda directory: free["bytes"])
    w = DumpWriter(tmp_path, meta={"framework": "test"}, mode=mode)
    caught = []
    w.store.on_stop = lambda reason, message: caught.append((reason, message))
    for step in range(6):
        if step == 3:
            free["bytes"] = 100_000  # another process filled the disk
        write_step(w, step)
        w.commit_step(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)
        w.close()
    assert [c[0] for c in caught] == ["disk_full"]
    assert "no room" not in caught[0][1] and "steps 0" not in caught[0][1]
    assert "the 3 committed step(s), up to step 2, stay readable" in caught[0][1]
    check_readable(tmp_path, range(3))
    if mode == "swmr":
        with h5py.File(tmp_path / "dump.h5", "r") as f:  # closed cleanly: opens without SWMR
            assert f["commits/step"].shape[0] == 3
    events = [json.loads(line) for line in (tmp_path / "segments.jsonl").read_text().splitlines()]
    close = [e for e in events if e["event"] == "close"]
    assert len(close) == 1 and close[0]["status"] == "disk_full" and "disk is full" in close[0]["stopped"]


def test_an_empty_store_left_by_a_full_disk_reads_as_no_complete_step(tmp_path, monkeypatch):
    monkeypatch.setattr(store_space, "free_bytes", lambda directory: 0)
    w = DumpWriter(tmp_path / "run" / "rank0", meta={"framework": "test"}, mode="swmr")
    w.store.on_stop = lambda reason, message: None
    write_step(w, 0)
    w.commit_step(0)
    w.close()
    r = DumpReader(tmp_path / "run" / "rank0")
    assert r.steps() == [] and r.status == "disk_full"
    assert len(r.records()["name"]) == 0 and len(r.row_names()) == 0
    r.close()
    from engines.parse.inspect import ParseError, parse

    with pytest.raises(ParseError, match="holds no committed step to read .*disk_full"):
        parse(tmp_path / "run")
    from engines.compare.engine import CompareError, run_compare
    from schemas import load_config

    job = load_config({"task": "compare", "dump_path": str(tmp_path / "c"),
                       "compare": {"target_path": str(tmp_path / "run"), "golden_path": str(tmp_path / "run")}})
    with pytest.raises(CompareError, match="holds no committed step to read .*disk_full"):
        run_compare(job, write=False)
