"""compare of a many-step dump holds a bounded number of result rows (pieces are written out a chunk at a time), and
what it writes chunk by chunk is what it writes in one go: the same HDF5 tables, CSV, summary."""

import gc
import json
import os
import shutil
import stat
import weakref

import numpy as np
import pytest

from engines.compare import engine
from engines.compare.hdf5_out import read_results, read_summary
from engines.store import DumpWriter

STEPS = 24
PIECE = 11  # result rows a step
RECORDS = ("Module.block.Block.forward.0", "Functional.linear.0.forward", "Functional.layer_norm.0.forward",
           "Functional.relu.0.forward")


def write_dump(rank_dir, *, drift=0.0):
    """Statistics of four records a step; ``drift`` moves layer_norm's output (and what follows) from step 5 on."""
    rng = np.random.default_rng(11)
    base = rng.random((STEPS, 9)) * 4 + 0.5
    with DumpWriter(rank_dir, meta={"rank": 0, "world_size": 1, "framework": "pytorch"}) as w:
        w.add_modules(["block"], ["Block"], [""])
        stacks = [w.intern_stack(['File "model.py", line {}, in forward'.format(10 + i)]) for i in range(4)]
        for step in range(STEPS):
            rows = w.add_records(step=step, name=list(RECORDS), kind=[1, 0, 0, 0], direction=0,
                                 parent=["", RECORDS[0], RECORDS[0], RECORDS[0]], stack=stacks,
                                 args=["{}", "{}", json.dumps({"args": [{"tensor": "input.0"}, [16]],
                                                               "kwargs": {"eps": 1e-5}}), "{}"])
            mx = base[step].copy()
            if step >= 5:
                mx[5:] *= 1 + drift  # layer_norm output.0, relu input/output, block output
            w.add_tensors(record=rows[[0, 0, 1, 1, 1, 2, 2, 3, 3]], step=step,
                          slot=["input.0", "output.0", "input.0", "input.1", "output.0", "input.0", "output.0",
                                "input.0", "output.0"],
                          dtype="torch.float32", shape=[(4, 16)] * 9, max=mx, min=-mx, mean=mx / 10,
                          norm=mx * 3, valid=15 | 16, requires_grad=0,
                          crc32=(mx * 1e6).astype(np.int64) & 0xFFFFFFFF)  # a distinct hash text a row
            w.commit_step(step)
    return rank_dir


@pytest.fixture()
def dumps(tmp_path):
    return write_dump(tmp_path / "a" / "rank0", drift=0.05), write_dump(tmp_path / "b" / "rank0")


def job(target, golden, out, formats=("hdf5", "csv")):
    return {"task": "compare", "compare": {"target_path": str(target), "golden_path": str(golden),
                                           "output_path": str(out), "formats": list(formats)}}


def small_chunks(monkeypatch, rows):
    """Chunks of ``rows`` result rows, and text dictionaries that start afresh past 7 texts."""
    from engines.compare import hdf5_out

    monkeypatch.setattr(hdf5_out, "DICT_INDEX", 7, raising=False)
    try:
        from engines.compare import stream_out
    except ImportError:  # before chunked writing existed
        return
    monkeypatch.setattr(stream_out, "CHUNK_ROWS", rows)


@pytest.fixture()
def rows_in_flight(monkeypatch):
    """The most result rows alive at once: every piece's result columns are tracked until they are freed."""
    alive = []  # (weak reference to a piece's verdict column, its rows)
    peak = [0]
    from engines.compare import pair_pool  # where each piece is compared (in this process: no workers here)

    # a first piece slower than POOL_AFTER_S (a loaded machine) would start workers, which hold pieces ahead and
    # compare them out of this process's sight: the bound is this process's, so no pool
    monkeypatch.setattr(pair_pool, "POOL_AFTER_S", float("inf"))
    real = pair_pool.compare_piece

    def spy(*args, **kwargs):
        gc.collect()
        peak[0] = max(peak[0], sum(n for ref, n in alive if ref() is not None))
        cols, match = real(*args, **kwargs)
        alive.append((weakref.ref(cols["verdict"]), len(cols["verdict"])))
        return cols, match

    monkeypatch.setattr(pair_pool, "compare_piece", spy)
    return peak


def test_compare_holds_a_bounded_number_of_rows(dumps, tmp_path, monkeypatch, rows_in_flight):
    small_chunks(monkeypatch, 30)  # a piece is 11 rows (9 tensors, the eps and shape arguments): 3 pieces a chunk
    out = engine.run_compare(job(*dumps, tmp_path / "out"), fail_on_findings=False)
    assert out.summary["rows"] == PIECE * STEPS
    assert 0 < rows_in_flight[0] <= 30 + PIECE, rows_in_flight[0]  # never all 264 rows at once
    assert read_results(tmp_path / "out", "results", ["step"])["step"].tolist() == \
        np.repeat(np.arange(STEPS), PIECE).tolist()


def test_chunked_reports_equal_the_one_go_reports(dumps, tmp_path, monkeypatch):
    one = engine.run_compare(job(*dumps, tmp_path / "one", ("hdf5", "csv", "xlsx")), fail_on_findings=False)
    small_chunks(monkeypatch, 25)
    many = engine.run_compare(job(*dumps, tmp_path / "many", ("hdf5", "csv", "xlsx")), fail_on_findings=False)
    assert many.results == {} and len(one.results["verdict"]) == PIECE * STEPS  # the rows were written, not held
    for table in ("results", "divergence", "tree", "golden_only"):
        a, b = read_results(tmp_path / "one", table), read_results(tmp_path / "many", table)
        assert sorted(a) == sorted(b), table
        for column in a:
            assert a[column].tolist() == b[column].tolist() or \
                np.allclose(a[column], b[column], equal_nan=True), (table, column)
    assert len(read_results(tmp_path / "many", "divergence")["record"]) > 0  # the drift is ranked
    skip = ("elapsed_s", "run_dir", "files", "output_dir")
    s1, s2 = read_summary(tmp_path / "one"), read_summary(tmp_path / "many")
    assert {k: v for k, v in s1.items() if k not in skip} == {k: v for k, v in s2.items() if k not in skip}
    assert s2["top_suspects"] and min(t["step"] for t in s2["top_suspects"]) >= 5  # the drift starts at step 5
    assert s2["top_suspects"][0]["stack"] == s1["top_suspects"][0]["stack"] != ""
    csv1 = next((tmp_path / "one").glob("compare_result_*.csv")).read_bytes()
    csv2 = next((tmp_path / "many").glob("compare_result_*.csv")).read_bytes()
    assert csv1 == csv2
    x1 = next((tmp_path / "one").glob("compare_result_*.xlsx"))
    x2 = next((tmp_path / "many").glob("compare_result_*.xlsx"))
    openpyxl = pytest.importorskip("openpyxl")
    rows1 = list(openpyxl.load_workbook(x1, read_only=True).active.iter_rows(values_only=True))
    rows2 = list(openpyxl.load_workbook(x2, read_only=True).active.iter_rows(values_only=True))
    assert rows1 == rows2 and len(rows1) == PIECE * STEPS + 1


def test_app_reads_the_summary_of_a_chunked_result(dumps, tmp_path, monkeypatch):
    from probe_tui.app.data.compare_result import CompareResult

    small_chunks(monkeypatch, 25)
    engine.run_compare(job(*dumps, tmp_path / "many"), fail_on_findings=False)
    result = CompareResult(tmp_path / "many")
    assert result.summary["rows"] == PIECE * STEPS == result.n_rows and result.summary["top_suspects"]


def test_chunked_reports_have_exact_modes_under_umask_000(dumps, tmp_path, monkeypatch):
    """The reports written chunk by chunk go through engines/safe_fs too: files 0o640, folders 0o750."""
    small_chunks(monkeypatch, 25)
    old = os.umask(0)
    try:
        engine.run_compare(job(*dumps, tmp_path / "many", ("hdf5", "csv", "xlsx")), fail_on_findings=False)
    finally:
        os.umask(old)
    names = sorted(p.name for p in (tmp_path / "many").iterdir())
    assert any(n.endswith(".csv") for n in names) and any(n.endswith(".xlsx") for n in names), names
    assert "summary.json" in names and not any(n.endswith(".partial") for n in names), names
    assert stat.S_IMODE(os.stat(tmp_path / "many").st_mode) == 0o750
    for p in (tmp_path / "many").rglob("*"):
        want = 0o750 if p.is_dir() else 0o640
        assert stat.S_IMODE(os.lstat(p).st_mode) == want, (p, oct(os.lstat(p).st_mode))


def test_a_many_step_tensor_compare_with_nothing_readable_writes_nothing(tmp_path, monkeypatch):
    """Every tensor of a three-step target unreadable, chunks smaller than a step: bad input (one line) and no
    result folder, although a chunk-by-chunk compare writes as it goes."""
    from engines.compare.options import CompareError
    from tests.test_compare_probe_dumps import model, write_msprobe

    sides = []
    for side in ("t", "g"):
        root = write_msprobe(tmp_path / side, model())
        for step in (1, 2):
            shutil.copytree(root / "step0", root / "step{}".format(step))
        sides.append(root)
    for p in sides[0].rglob("*.npy"):
        p.write_bytes(b"garbage")
    small_chunks(monkeypatch, 3)
    spec = job(*sides, tmp_path / "out")
    spec["compare"]["mode"] = "tensor"
    with pytest.raises(CompareError) as err:
        engine.run_compare(spec, fail_on_findings=False)
    assert "no tensor pair could be compared" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
