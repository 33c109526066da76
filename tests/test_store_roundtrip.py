"""Round trip through the generic store: 100k statistics rows and 1k tensors of mixed dtypes, both modes, every
compression."""

import json

import h5py
import numpy as np
import pytest

from engines.store import (
    Column,
    StoreReader,
    StoreWriter,
    TableSpec,
    as_float32,
    bfloat16_bits,
)

STEPS = 10
ROWS_PER_STEP = 10_000
N_TENSORS = 1000

STATS = TableSpec("stats", (
    Column("step", "int64"),
    Column("name", "str"),
    Column("value", "float64"),
    Column("valid", "uint8", default=0),
    Column("small", "int8", default=-1),
    Column("args", "json", default="{}"),
    Column("hist", "float32", width=8, default=0.0),
))
REFS = TableSpec("refs", (
    Column("step", "int64"),
    Column("pool", "str"),
    Column("offset", "int64"),
    Column("numel", "int64"),
    Column("shape", "str"),
    Column("dtype", "str"),
))

TENSOR_KINDS = ["bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                "uint16", "uint32", "uint64", "bool", "complex64", "complex128"]
SHAPES = [(), (0,), (3, 0, 2), (7,), (4, 5), (2, 3, 4), (1, 1, 1, 9)]


@pytest.fixture(autouse=True)
def no_mode_override(monkeypatch):
    monkeypatch.delenv("PROBE_TUI_STORE_MODE", raising=False)


def stats_batch(step: int, rng: np.random.Generator):
    n = ROWS_PER_STEP
    value = rng.standard_normal(n)
    value[rng.random(n) < 0.01] = np.nan
    value[::997] = np.inf
    value[::1499] = -np.inf
    return {
        "step": np.full(n, step),
        "name": [f"Functional.op{(i * 7 + step) % 2000}.forward" for i in range(n)],
        "value": value,
        "valid": rng.integers(0, 64, n).astype(np.uint8),
        "small": rng.integers(-128, 128, n).astype(np.int8),
        "args": [{"i": i, "step": step, "alpha": 0.5, "name": "x" * (i % 5)} for i in range(n)],
        "hist": rng.random((n, 8)).astype(np.float32),
    }


def make_tensor(i: int, rng: np.random.Generator):
    kind = TENSOR_KINDS[i % len(TENSOR_KINDS)]
    shape = SHAPES[(i // len(TENSOR_KINDS)) % len(SHAPES)]
    if i == 500:  # larger than half a staging buffer: written straight from the caller's memory
        shape = (1024, 1100)
    if kind == "bfloat16":
        return bfloat16_bits(rng.standard_normal(shape).astype(np.float32)), "torch.bfloat16"
    if kind == "bool":
        return rng.random(shape) < 0.5, "torch.bool"
    if kind.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(kind), kind
    if kind.startswith("float"):
        a = rng.standard_normal(shape).astype(kind)
        if a.size > 2:
            a.flat[1] = np.nan
            a.flat[2] = -np.inf
        return a, f"torch.{kind}"
    info = np.iinfo(kind)
    return rng.integers(info.min, info.max, size=shape, dtype=kind, endpoint=True), f"torch.{kind}"


def write_store(directory, mode, compression, level=None):
    rng = np.random.default_rng(7)
    expected_rows = []
    tensors = []
    with StoreWriter(directory, "dump", [STATS, REFS], meta={"rank": 3, "world_size": 8, "framework": "torch",
                                                             "run_meta": {"seed": 1234, "config": {"level": "L1"}}},
                     mode=mode, compression=compression, compression_level=level) as w:
        assert w.mode == mode
        for step in range(STEPS):
            batch = stats_batch(step, rng)
            rows = w.append("stats", **batch)
            assert rows[0] == step * ROWS_PER_STEP and len(rows) == ROWS_PER_STEP
            expected_rows.append(batch)
            refs = []
            for i in range(step * N_TENSORS // STEPS, (step + 1) * N_TENSORS // STEPS):
                arr, name = make_tensor(i, rng)
                if i % 10 == 3 and arr.ndim == 2:
                    arr = np.asfortranarray(arr)  # not C-contiguous
                if i % 10 == 4 and arr.dtype.kind == "f" and arr.dtype.itemsize > 2:
                    arr = arr.astype(arr.dtype.newbyteorder(">"))  # big-endian input
                ref = w.put_array(arr, name)
                refs.append(ref)
                tensors.append((arr, name, ref))
            w.append("refs", step=step, **{k: [r.columns()[k] for r in refs]
                                           for k in ("pool", "offset", "numel", "shape", "dtype")})
            w.commit(step, loss=float(step) / 10)
        assert w.rows == {"stats": STEPS * ROWS_PER_STEP, "refs": N_TENSORS}
        assert w.bytes_written > 0
    return expected_rows, tensors


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
@pytest.mark.parametrize("compression", ["none", "lzf", "gzip"])
def test_round_trip_rows_and_tensors(tmp_path, mode, compression):
    batches, tensors = write_store(tmp_path / "rank3", mode, compression)
    r = StoreReader(tmp_path / "rank3")
    assert r.kind == "dump" and r.status == "finished" and r.mode == mode
    meta = r.meta
    assert (meta["rank"], meta["world_size"], meta["framework"], meta["format_version"]) == (3, 8, "torch", 1)
    assert meta["run_meta"] == {"seed": 1234, "config": {"level": "L1"}}
    assert r.steps() == list(range(STEPS))
    assert [c["info"] for c in r.commits()] == [{"loss": s / 10} for s in range(STEPS)]
    assert r.num_rows("stats") == STEPS * ROWS_PER_STEP

    got = r.read("stats")
    for col in STATS.column_names:
        want = np.concatenate([np.asarray(b[col]) if col != "args" else
                               np.array([json.dumps(a, separators=(",", ":")) for a in b[col]], dtype=object)
                               for b in batches])
        if col == "value":
            np.testing.assert_array_equal(got[col], want)  # NaN and +-inf in the same places
            assert np.isnan(got[col]).sum() == np.isnan(want).sum() > 0
        else:
            assert got[col].dtype == want.dtype or col in ("name", "args")
            assert np.array_equal(got[col], want), col
    assert got["name"].dtype == object and got["name"][0] == "Functional.op0.forward"
    assert json.loads(got["args"][12345]) == {"i": 2345, "step": 1, "alpha": 0.5, "name": "xxxxx"[:2345 % 5]}

    step4 = r.read("stats", ["name", "value"], steps=[4], with_row=True)
    assert np.array_equal(step4["row"], np.arange(4 * ROWS_PER_STEP, 5 * ROWS_PER_STEP))
    assert np.array_equal(step4["name"], got["name"][4 * ROWS_PER_STEP:5 * ROWS_PER_STEP])
    some = r.read("stats", ["value", "name"], rows=[99_999, 0, 50_000, 0])
    assert np.array_equal(some["name"], got["name"][[99_999, 0, 50_000, 0]])

    refs = r.read("refs")
    assert len(refs["pool"]) == N_TENSORS
    for i, (arr, name, ref) in enumerate(tensors):
        row = {k: refs[k][i] for k in ("pool", "offset", "numel", "shape", "dtype")}
        assert row["dtype"] == name and tuple(json.loads(row["shape"])) == arr.shape
        back = r.read_array(row)
        assert back.shape == arr.shape and back.dtype == arr.dtype.newbyteorder("=")
        assert np.array_equal(back, arr, equal_nan=arr.dtype.kind in "fc"), (i, name)
        assert np.array_equal(r.read_array(ref), back, equal_nan=arr.dtype.kind in "fc")
        if name == "torch.bfloat16":
            assert back.dtype == np.uint16
            assert np.array_equal(as_float32(back), as_float32(arr))
    r.close()


def test_pools_are_few_large_datasets(tmp_path):
    """Tensors share one dataset per storage dtype: no HDF5 object per tensor."""
    write_store(tmp_path / "rank0", "swmr", "none")
    with h5py.File(tmp_path / "rank0" / "dump.h5", "r") as f:
        pools = f["pools"]
        assert set(pools) >= {"uint16", "float32", "bool", "complex64"}
        assert sum(1 for _ in f["tables/stats"]) == len(STATS.columns)
        assert pools["complex128"].shape[0] > 0 and pools["uint16"].chunks is not None
        assert f["meta"].attrs["format_version"] == 1 and f["meta"].attrs["kind"] == "dump"


def test_gzip_level_and_compressed_files_are_smaller(tmp_path):
    write_store(tmp_path / "plain", "per_step", "none")
    write_store(tmp_path / "gz", "per_step", "gzip", level=6)
    size = {d: sum(p.stat().st_size for p in (tmp_path / d).glob("*.h5")) for d in ("plain", "gz")}
    assert size["gz"] < size["plain"]
    seg = sorted((tmp_path / "gz").glob("dump-s*.h5"))[0]
    with h5py.File(seg, "r") as f:
        d = f["tables/stats/value"]
        assert (d.compression, d.compression_opts) == ("gzip", 6)


def test_bfloat16_from_torch_round_trips(tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.randn(17, 5).to(torch.bfloat16)
    bits = t.view(torch.int16).numpy().view(np.uint16)
    with StoreWriter(tmp_path, "dump", [REFS], meta={}) as w:
        ref = w.put_array(bits, str(t.dtype))
        w.commit(0)
    r = StoreReader(tmp_path)
    back = r.read_array(ref)
    assert ref.dtype == "torch.bfloat16" and back.dtype == np.uint16
    assert np.array_equal(as_float32(back), t.float().numpy())
    assert np.array_equal(bfloat16_bits(t.float().numpy()), bits)


def test_json_column_batches_of_text_stage_as_value_by_value():
    """A json column given a list of str (the capture's record arguments) is staged in one pass
    (``StringTable.add_batch``): the same ids, bytes and byte count as ``add`` value by value; a list with other
    values (dicts, to encode) takes the per-value path."""
    from engines.store.staging import StringTable, TableStage

    spec = TableSpec("t", (Column("step", "int64"), Column("args", "json", default="{}")))
    texts = ['{"a":1}', "", "é \ud800", '{"b":[1,2]}', "{}"]
    got_table, want_table = StringTable(), StringTable()
    got_table.intern("a name")  # ids continue from what the table holds
    want_table.intern("a name")
    got_stage = TableStage(spec)
    got_stage.append(got_table, {"step": 1, "args": list(texts)})
    assert got_stage.take()["args"].tolist() == list(range(1, 6))
    want_ids = [want_table.add(t) for t in texts]
    got_blob, got_lengths = got_table.take()
    want_blob, want_lengths = want_table.take()
    assert got_blob == want_blob and got_lengths.tolist() == want_lengths.tolist()
    assert got_table.count == want_table.count == 6 and want_ids == list(range(1, 6))
    stage = TableStage(spec)
    strings = StringTable()
    stage.append(strings, {"step": [1, 1], "args": ["x", {"k": 1}]})
    stage.append(strings, {"step": [], "args": []})
    assert stage.take()["args"].tolist() == [0, 1]
    blob, lengths = strings.take()
    assert blob == b'x{"k":1}' and lengths.tolist() == [1, 7]
    ascii_table = StringTable()  # all ASCII (JSON from ensure_ascii): lengths from the characters, one blob
    assert ascii_table.add_batch(['{"a":1}', "", "{}"]).tolist() == [0, 1, 2] and ascii_table.staged == 3
    ascii_table.add("é")
    blob, lengths = ascii_table.take()
    assert blob == '{"a":1}{}é'.encode() and lengths.tolist() == [7, 0, 2, 2] and ascii_table.staged == 0
