"""Tensor streaming: split units, worker processes (spawn), merged partials equal the in-process result."""

import os

import numpy as np
import pytest

from engines.compare import tensor_stream
from engines.compare.tensor_metrics import compare_arrays, finish
from engines.compare.tensor_stream import PairTask, compare_pairs, plan_units
from engines.dumps.msprobe.tensors import MsprobeTensorSpec


@pytest.fixture()
def two_dumps(tmp_path):
    rng = np.random.default_rng(3)
    files = []
    arrays = []
    for k, n in enumerate((300_000, 5, 70_001)):
        x = rng.standard_normal(n).astype(np.float32)
        y = (x + rng.standard_normal(n).astype(np.float32) * np.float32(1e-3)).astype(np.float32)
        for side, arr in (("t", x), ("g", y)):
            (tmp_path / side).mkdir(exist_ok=True)
            np.save(tmp_path / side / "a{}.npy".format(k), arr)
        files.append("a{}.npy".format(k))
        arrays.append((x, y))
    spec_t = MsprobeTensorSpec(str(tmp_path / "t"), tuple(files))
    spec_g = MsprobeTensorSpec(str(tmp_path / "g"), tuple(files))
    tasks = [PairTask(row=10 + k, t_loc=k, g_loc=k, numel=len(x), itemsize=4) for k, (x, _) in enumerate(arrays)]
    return spec_t, spec_g, tasks, arrays


def test_plan_splits_large_tensors_and_batches_small_ones():
    tasks = [PairTask(0, 0, 0, 1000, 4), PairTask(1, 1, 1, 10, 4), PairTask(2, 2, 2, 10, 4)]
    units = plan_units(tasks, unit_bytes=2000)
    assert [[(t.row, a, b) for t, a, b in u] for u in units] == [
        [(0, 0, 250)], [(0, 250, 500)], [(0, 500, 750)], [(0, 750, 1000)], [(1, 0, 10), (2, 0, 10)]]


def test_worker_processes_give_the_in_process_answer(two_dumps, monkeypatch):
    spec_t, spec_g, tasks, arrays = two_dumps
    monkeypatch.setattr(tensor_stream, "INPROCESS_BYTES", 0)
    seen = []
    par = compare_pairs(tasks, spec_t, spec_g, workers=2, unit_bytes=400_000, parent_helps=False,
                        progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == sum(t.numel * 8 for t in tasks)
    assert {o.worker for o in par.values()} - {0, os.getpid()}, "computed in worker processes"
    for task, (x, y) in zip(tasks, arrays):
        got = finish(par[task.row].partial, x.shape)
        want = compare_arrays(x, y)
        for a, b in zip(got.as_tuple() + (got.rel_err,), want.as_tuple() + (want.rel_err,)):
            assert a == pytest.approx(b, rel=1e-9, nan_ok=True)


def test_the_parent_helps_and_the_answer_is_the_same(two_dumps, monkeypatch):
    spec_t, spec_g, tasks, arrays = two_dumps
    monkeypatch.setattr(tensor_stream, "INPROCESS_BYTES", 0)
    par = compare_pairs(tasks, spec_t, spec_g, workers=2, unit_bytes=100_000)
    for task, (x, y) in zip(tasks, arrays):
        assert finish(par[task.row].partial, x.shape).rel_err == pytest.approx(compare_arrays(x, y).rel_err,
                                                                               rel=1e-9)


def test_a_missing_file_is_reported_per_row(two_dumps):
    spec_t, spec_g, tasks, _ = two_dumps
    broken = MsprobeTensorSpec(spec_g.folder, ("missing.npy",) + spec_g.files[1:])
    out = compare_pairs(tasks, spec_t, broken, workers=1)
    assert "not found" in out[10].error and out[11].error == ""
