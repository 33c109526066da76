"""A reader follows a store while a writer process appends to it (SWMR and per-step modes)."""

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from engines.store import StoreReader

ROOT = Path(__file__).resolve().parents[1]

# The writer commits one step per "next" line on stdin and closes on "close".
CHILD = r'''
import sys
import numpy as np
from engines.store import Column, StoreWriter, TableSpec

table = TableSpec("metrics", (Column("step", "int64"), Column("name", "str"), Column("value", "float64"),
                              Column("hist", "int32", width=4)))
w = StoreWriter(sys.argv[1], "metrics", [table], meta={"framework": "test"}, mode=sys.argv[2])
print("open", flush=True)
step = 0
for line in sys.stdin:
    if line.strip() == "close":
        break
    n = 100 * (step + 1)
    w.append("metrics", step=step, name=[f"layer{i % 10}.grad_norm" for i in range(n)],
             value=np.arange(n, dtype=np.float64) + step, hist=np.full((n, 4), step, dtype=np.int32))
    ref = w.put_array(np.full(1000, step, dtype=np.float16), "torch.float16")
    w.commit(step, offset=ref.offset)
    print("committed", step, flush=True)
    step += 1
w.close("finished")
print("closed", flush=True)
'''


@contextmanager
def writer(directory, mode):
    """The writer process, open on ``directory``; killed if still running at the end, its pipes closed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PROBE_TUI_STORE_MODE", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory), mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line == "open\n", f"writer failed to start: {proc.stderr.read()}"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


def tell(proc, word):
    proc.stdin.write(word + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert line, f"writer exited early: {proc.stderr.read()}"
    return line.split()


def check_step(r, step):
    got = r.read("metrics", steps=[step])
    n = 100 * (step + 1)
    assert np.array_equal(got["value"], np.arange(n, dtype=np.float64) + step)
    assert got["name"][13] == "layer3.grad_norm" and got["hist"].shape == (n, 4)
    assert (got["hist"] == step).all()
    (commit,) = [c for c in r.commits() if c["step"] == step]
    data = r.read_array({"pool": "float16", "offset": commit["info"]["offset"], "numel": 1000, "shape": [1000]})
    assert data.dtype == np.float16 and (data == step).all()


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_reader_sees_rows_of_a_live_writer(tmp_path, mode):
    with writer(tmp_path, mode) as proc:
        assert tell(proc, "next") == ["committed", "0"]
        r = StoreReader(tmp_path, "metrics")
        assert r.status == "running" and r.steps() == [0] and r.num_rows("metrics") == 100
        check_step(r, 0)
        assert r.refresh() is False  # nothing new yet

        assert tell(proc, "next") == ["committed", "1"]
        assert r.refresh() is True
        assert r.steps() == [0, 1] and r.num_rows("metrics") == 300
        check_step(r, 1)
        check_step(r, 0)

        for step in (2, 3):
            assert tell(proc, "next") == ["committed", str(step)]
        assert tell(proc, "close") == ["closed"]
        proc.wait(timeout=60)
        seen = [steps for steps in r.follow(poll_s=0.01, timeout_s=60)]
        assert seen == [[0, 1], [2, 3]]  # what was there, then what came; ends at the writer's close
        assert r.status == "finished" and r.num_rows("metrics") == 1000
        check_step(r, 3)
        r.close()


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_reader_opened_before_first_commit(tmp_path, mode):
    with writer(tmp_path, mode) as proc:
        r = StoreReader(tmp_path)
        assert r.kind == "metrics" and r.steps() == [] and r.num_rows("metrics") == 0
        assert r.read("metrics")["value"].shape == (0,) and r.read("metrics")["hist"].shape == (0, 4)
        assert tell(proc, "next") == ["committed", "0"]
        assert r.refresh() and r.steps() == [0]
        check_step(r, 0)
        tell(proc, "close")
        r.close()


def test_a_swmr_writer_does_not_grow_with_the_run(tmp_path):
    """A SWMR writer keeps its datasets open all run; with HDF5's default chunk cache (8 MiB a dataset in HDF5
    2.0) its memory grew ~30 MB per 1,000 steps (+270 MB over 5,000 in a capture). Per-step files were flat.
    Figures: benchmarks/store_memory.py."""
    import importlib.util
    import json

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("store_memory", root / "benchmarks" / "store_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", bench.CHILD, "store", "swmr", "2001", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    marks = dict(json.loads(done.stdout.strip().splitlines()[-1])["marks"])
    assert marks[2000] - marks[1000] < 10, marks  # MB; it was +30


def test_swmr_extents_run_ahead_of_the_rows_and_close_trims_them(tmp_path):
    """Issue 21: a SWMR writer grows its data datasets a chunk at a time, not at every append (``set_extent`` and a
    new file space were a third of an append). While it runs (or after a kill) a dataset may hold fill values past
    the committed rows: readers take the lengths from the commit log. The commit log itself stays exact (its
    length is the number of commits), and a closed file's datasets hold exactly their rows."""
    import h5py

    with writer(tmp_path, "swmr") as proc:
        tell(proc, "next")
        tell(proc, "next")
        with h5py.File(tmp_path / "metrics.h5", "r", swmr=True) as f:
            value, hist = f["tables/metrics/value"], f["tables/metrics/hist"]
            assert value.shape[0] > 300 and value.shape[0] % value.chunks[0] == 0, value.shape
            assert hist.shape[0] > 300 and hist.shape[0] % hist.chunks[0] == 0, hist.shape
            assert f["commits/step"].shape == (2,) and f["commits/counts"].shape[0] == 2
            assert (value[300:] == 0).all()  # past the commit: fill values
        r = StoreReader(tmp_path, "metrics")
        assert r.num_rows("metrics") == 300
        check_step(r, 1)
        check_step(r, 0)
        r.close()
        tell(proc, "next")
        tell(proc, "close")
        proc.wait(timeout=60)
    with h5py.File(tmp_path / "metrics.h5", "r") as f:
        assert f["tables/metrics/value"].shape == (600,) and f["tables/metrics/hist"].shape == (600, 4)
        assert f["strings/offset"].shape == (f["commits/counts"][-1][1],)
        assert f["pools/float16"].shape == (3000,) and f["commits/step"].shape == (3,)
    r = StoreReader(tmp_path, "metrics")
    assert r.steps() == [0, 1, 2] and r.num_rows("metrics") == 600
    check_step(r, 2)
    r.close()
