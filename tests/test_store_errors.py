"""Bad input to the store: one-line errors naming the file or field, nothing half-written."""

import h5py
import numpy as np
import pytest

from engines.store import (
    Column,
    DumpReader,
    DumpWriter,
    StoreError,
    StoreReader,
    StoreWriter,
    TableSpec,
    open_rank_dirs,
)

TABLE = TableSpec("t", (Column("step", "int64"), Column("name", "str"), Column("v", "float32", default=0.0)))


@pytest.fixture(autouse=True)
def no_mode_override(monkeypatch):
    monkeypatch.delenv("PROBE_TUI_STORE_MODE", raising=False)


def one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and text
    return text


def test_folder_without_a_store(tmp_path):
    with pytest.raises(StoreError) as e:
        StoreReader(tmp_path)
    assert str(tmp_path) in one_line(e) and "no probe-tui store" in str(e.value)
    with pytest.raises(StoreError) as e:
        DumpReader(tmp_path / "missing")
    assert one_line(e) == f"{tmp_path / 'missing'}: no such folder"
    with pytest.raises(StoreError) as e:
        open_rank_dirs(tmp_path)
    assert str(tmp_path) in one_line(e)


def test_wrong_kind_and_several_kinds(tmp_path):
    for kind in ("metrics", "grads"):
        with StoreWriter(tmp_path, kind, [TABLE], meta={}) as w:
            w.append("t", step=0, name="x")
            w.commit(0)
    with pytest.raises(StoreError) as e:
        DumpReader(tmp_path)
    assert "no 'dump' store (it holds: metrics, grads)" in one_line(e)
    with pytest.raises(StoreError) as e:
        StoreReader(tmp_path)
    assert "several stores (metrics, grads); name the kind" in one_line(e)


def test_not_a_store_file(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(StoreError) as e:
        StoreReader(path)
    assert str(path) in one_line(e)
    with DumpWriter(tmp_path / "steps", meta={}, mode="per_step") as w:
        for step in range(2):
            w.add_records(step=step, name=["a"])
            w.commit_step(step)
    with pytest.raises(StoreError) as e:
        StoreReader(tmp_path / "steps" / "dump-s1.h5")
    assert f"one per-step segment of a store; open its folder, {tmp_path / 'steps'}" in one_line(e)
    assert StoreReader(tmp_path / "steps" / "dump-s0.h5").read("records")["name"].tolist() == ["a"]
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(StoreError) as e:
        StoreReader(tmp_path / "text.h5")
    assert "text.h5" in one_line(e)


def test_bad_appends_name_the_table_and_column(tmp_path):
    w = StoreWriter(tmp_path, "dump", [TABLE], meta={})
    cases = [
        (dict(table="nope", step=1, name="a"), "no table 'nope'"),
        (dict(table="t", step=1, name="a", colour=3), "no column 'colour'"),
        (dict(table="t", step=[1, 2], name=["a", "b", "c"]), "column 'name' has 3 rows, 'step' has 2"),
        (dict(table="t", name="a"), "column 'step' missing"),
        (dict(table="t", step=1, name=[3]), "column 'name': expected str, got int"),
        (dict(table="t", step="one", name="a"), "column 'step': cannot convert to int64"),
        (dict(table="t", step=1, name="a", v=[[1, 2]]), "column 'v': shape"),
    ]
    for kwargs, message in cases:
        table = kwargs.pop("table")
        with pytest.raises(StoreError) as e:
            w.append(table, **kwargs)
        assert message in one_line(e)
    with pytest.raises(StoreError) as e:
        w.put_array(np.array(["a"], dtype=object), "str")
    assert "dtype object has no pool" in one_line(e)
    assert w.rows == {"t": 0}  # nothing half-appended
    w.append("t", step=[1, 2], name=["a", "b"])
    w.commit(1)
    w.close()
    with pytest.raises(StoreError) as e:
        w.append("t", step=3, name="c")
    assert "store is closed" in one_line(e)
    assert StoreReader(tmp_path).num_rows("t") == 2


def test_bad_writer_settings(tmp_path):
    with pytest.raises(StoreError, match="compression 'zstd'"):
        StoreWriter(tmp_path / "a", "dump", [TABLE], meta={}, compression="zstd")
    with pytest.raises(StoreError, match="compression_level 12"):
        StoreWriter(tmp_path / "a", "dump", [TABLE], meta={}, compression="gzip", compression_level=12)
    with pytest.raises(StoreError, match="store kind 'Dump Files'"):
        StoreWriter(tmp_path / "a", "Dump Files", [TABLE], meta={})
    with pytest.raises(StoreError, match="column 'x': dtype 'U8' is not a fixed numeric dtype"):
        TableSpec("t", (Column("x", "U8"),))
    with pytest.raises(StoreError, match="column 'a' given twice"):
        TableSpec("t", (Column("a", "int8"), Column("a", "str")))
    with pytest.raises(StoreError, match="disk_budget"):
        StoreWriter(tmp_path / "a", "dump", [TABLE], meta={}, disk_budget=-1)


def test_runs_are_never_overwritten(tmp_path):
    for mode in ("swmr", "per_step"):
        d = tmp_path / mode
        with DumpWriter(d, meta={}, mode=mode) as w:
            w.add_records(step=0, name=["a"])
            w.commit_step(0)
        for again in ("swmr", "per_step"):
            with pytest.raises(StoreError) as e:
                DumpWriter(d, meta={}, mode=again)
            assert f"{d}: already holds a 'dump' store" in one_line(e)
        assert DumpReader(d).records()["name"].tolist() == ["a"]


def test_close_commits_pending_rows_and_failed_status(tmp_path):
    with pytest.raises(RuntimeError):
        with StoreWriter(tmp_path, "dump", [TABLE], meta={}) as w:
            w.append("t", step=0, name="a")
            w.commit(0)
            w.append("t", step=1, name="b")
            raise RuntimeError("training crashed")
    r = StoreReader(tmp_path)
    assert r.status == "failed"
    assert r.read("t")["name"].tolist() == ["a", "b"] and r.steps() == [0]
    with pytest.raises(StoreError) as e:
        r.read("t", rows=[5])
    assert "row 5 is outside table 't' (2 committed rows)" in one_line(e)
    with pytest.raises(StoreError) as e:
        r.read_array({"pool": "float32", "offset": 0, "numel": 4, "shape": [4]})
    assert "not committed" in one_line(e)


def test_newer_format_is_refused(tmp_path):
    with StoreWriter(tmp_path, "dump", [TABLE], meta={}, mode="per_step") as w:
        w.append("t", step=0, name="a")
        w.commit(0)
    seg = tmp_path / "segments.jsonl"
    text = seg.read_text()
    assert '"format_version":1' in text
    seg.write_text(text.replace('"format_version":1', '"format_version":2'))
    with pytest.raises(StoreError) as e:
        StoreReader(tmp_path)
    assert "store format 2 is newer than this probe-tui reads (1)" in one_line(e)
