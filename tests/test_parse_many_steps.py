"""parse reads what it is asked for on a many-step dump: ``--limit 1`` one step, ``--step`` that step, ``--row`` the
steps up to the first hit, a tensor the locating columns of its own step only (not the whole dump)."""

import json
import os
import stat

import numpy as np
import pytest

from engines.dumps import probe_source
from engines.parse.inspect import parse, read_tensor
from engines.store import DumpWriter, StoreReader

STEPS = 30
RECORDS = ("Functional.linear.0.forward", "Functional.relu.0.forward", "Functional.linear.1.forward")


def write_dump(rank_dir, steps=STEPS, tensors=False):
    rng = np.random.default_rng(3)
    with DumpWriter(rank_dir, meta={"rank": 0, "world_size": 1, "framework": "pytorch"}) as w:
        for step in range(steps):
            rows = w.add_records(step=step, name=list(RECORDS), kind=0, direction=0,
                                 args=[json.dumps({"args": [{"tensor": "input.0"}], "kwargs": {"p": 0.5}})] * 3)
            data = [rng.standard_normal(8).astype(np.float32) for _ in range(6)]
            refs = [w.put_tensor(d, "torch.float32") for d in data] if tensors else None
            w.add_tensors(refs=refs, record=np.repeat(rows, 2), step=step, slot=["input.0", "output.0"] * 3,
                          dtype="torch.float32", shape=[(8,)] * 6, max=[float(d.max()) for d in data],
                          min=[float(d.min()) for d in data], mean=[float(d.mean()) for d in data],
                          norm=[float(np.linalg.norm(d)) for d in data], valid=15)
            w.commit_step(step)
    return rank_dir


@pytest.fixture()
def steps_read(monkeypatch):
    """The steps whose rows the probe-tui source materialised (one entry per ``rows(rank, step)`` call)."""
    seen = []
    real = probe_source.ProbeSource.rows

    def spy(self, rank, step):
        seen.append(step)
        return real(self, rank, step)

    monkeypatch.setattr(probe_source.ProbeSource, "rows", spy)
    return seen


def test_limit_one_reads_one_step(tmp_path, steps_read):
    dump = write_dump(tmp_path / "rank0")
    out = parse(dump, limit=1)
    assert len(out.summary["listed"]) == 1 and out.summary["listed"][0]["step"] == 0
    assert steps_read == [0]
    assert out.summary["complete"] is False and out.summary["read_pieces"] == 1
    assert out.summary["pieces"] == STEPS and out.summary["steps"] == list(range(STEPS))


def test_listing_stops_when_full(tmp_path, steps_read):
    dump = write_dump(tmp_path / "rank0")
    out = parse(dump, name="relu", limit=4)  # 2 relu rows a step (+ its scalar argument p): full after step 1
    assert steps_read == [0, 1]
    assert [r["step"] for r in out.summary["listed"]] == [0, 0, 0, 1]
    assert parse(dump, name="relu", limit=1000).summary["complete"] is True  # everything read: exact counts
    assert parse(dump, name="relu", limit=1000).summary["rows"] == 3 * STEPS


def test_step_filter_reads_that_step(tmp_path, steps_read):
    dump = write_dump(tmp_path / "rank0")
    out = parse(dump, name="Functional.linear.1.forward", step=17)
    assert steps_read == [17]
    assert {r["step"] for r in out.summary["listed"]} == {17} and out.summary["complete"] is True


def test_row_lookup_stops_at_first_hit_and_reads_its_step_only(tmp_path, steps_read, monkeypatch):
    dump = write_dump(tmp_path / "rank0", tensors=True)
    tensor_reads = []
    real_read = StoreReader.read

    def spy_read(self, table, columns=None, rows=None, steps=None, **kw):
        if table == "tensors":
            tensor_reads.append(None if steps is None else list(steps))
        return real_read(self, table, columns, rows, steps, **kw)

    monkeypatch.setattr(StoreReader, "read", spy_read)
    got = read_tensor(dump, "Functional.relu.0.forward.output.0", step=None)
    assert got.shape == (8,)
    assert steps_read == [0]
    assert None not in tensor_reads, tensor_reads  # no read of the whole tensors table
    got5 = read_tensor(dump, "Functional.relu.0.forward.output.0", step=5)
    assert steps_read[-1] == 5 and not np.array_equal(got, got5)


def test_export_of_one_step_has_no_sub_folders(tmp_path):
    dump = write_dump(tmp_path / "rank0", steps=3, tensors=True)
    out = parse(dump, name="Functional.relu.0.forward.output.0", step=1, export_npy=tmp_path / "one")
    assert out.summary["exported"] == 1 and (tmp_path / "one" / "Functional.relu.0.forward.output.0.npy").exists()
    many = parse(dump, name="Functional.relu.0.forward.output.0", export_npy=tmp_path / "all", limit=1)
    assert many.summary["exported"] == 3 and many.summary["complete"] is True  # an export reads every step
    assert (tmp_path / "all" / "rank0" / "step2" / "Functional.relu.0.forward.output.0.npy").exists()


def test_reading_step_after_step_decodes_each_string_once(tmp_path, monkeypatch):
    dump = write_dump(tmp_path / "rank0")
    decoded = []
    reader = StoreReader(dump, "dump")
    real = reader._decode_ids

    def spy(ids):
        decoded.extend(ids.tolist())
        return real(ids)

    monkeypatch.setattr(reader, "_decode_ids", spy)
    names = [reader.read("records", ["name"], steps=[s])["name"] for s in range(STEPS)]
    assert names[0].tolist() == names[-1].tolist() == list(RECORDS)
    assert len(decoded) == len(RECORDS)  # the names of step 0; later steps reuse them
    assert names[0][0] is names[-1][0]
    reader.close()


def test_a_reader_holds_a_small_chunk_cache(tmp_path):
    """HDF5 2.0 gives every open dataset an 8 MiB chunk cache by default: ~35 columns of a long dump held ~280 MB
    in a reader (and compare opens two)."""
    dump = write_dump(tmp_path / "rank0", steps=2)
    with StoreReader(dump, "dump") as reader:
        reader.read("tensors", ["max"])
        nbytes = reader._files.file(0).id.get_access_plist().get_cache()[2]
    assert nbytes <= 1 << 20


def test_a_step_by_step_export_has_exact_modes_and_right_data_under_umask_000(tmp_path):
    """Exported step by step (rank/step sub-folders, or moved up for one step): files 0o640, folders 0o750, each
    file the tensor of its own step."""
    dump = write_dump(tmp_path / "rank0", steps=3, tensors=True)
    name = "Functional.relu.0.forward.output.0"
    old = os.umask(0)
    try:
        parse(dump, name=name, export_npy=tmp_path / "all")
        parse(dump, name=name, step=2, export_npy=tmp_path / "one")
        parse(dump, name="Functional.linear.1.forward.input.0", export_npy=tmp_path / "first", limit=1)
    finally:
        os.umask(old)
    for root in ("all", "one", "first"):
        assert stat.S_IMODE(os.stat(tmp_path / root).st_mode) == 0o750
        for p in (tmp_path / root).rglob("*"):
            want = 0o750 if p.is_dir() else 0o640
            assert stat.S_IMODE(os.lstat(p).st_mode) == want, (p, oct(os.lstat(p).st_mode))
    for step in range(3):
        got = np.load(tmp_path / "all" / "rank0" / "step{}".format(step) / (name + ".npy"))
        assert np.array_equal(got, read_tensor(dump, name, step=step))
    assert np.array_equal(np.load(tmp_path / "one" / (name + ".npy")), read_tensor(dump, name, step=2))

