"""The dump schema: DumpWriter batches in, DumpReader queries out; run folders; disk budget."""

import json
import warnings

import numpy as np
import pytest

from engines.store import (
    Column,
    Direction,
    DumpReader,
    DumpWriter,
    RecordFlag,
    RecordKind,
    StoreReader,
    StoreWarning,
    StoreWriter,
    TableSpec,
    Valid,
    as_float32,
    bfloat16_bits,
    open_rank_dirs,
    store_kinds,
)


@pytest.fixture(autouse=True)
def no_mode_override(monkeypatch):
    monkeypatch.delenv("PROBE_TUI_STORE_MODE", raising=False)


def write_dump(rank_dir, mode):
    rng = np.random.default_rng(0)
    stored = {}
    with DumpWriter(rank_dir, meta={"rank": 1, "world_size": 2, "framework": "torch",
                                    "run_meta": {"seed": 42, "deterministic": True, "torch": "2.13.0"}},
                    mode=mode) as w:
        w.add_modules(["", "layers.0", "layers.0.attn"], ["Demo", "Block", "Attention"], ["", "", "layers.0"])
        for step in range(3):
            stack_a = w.intern_stack(["train.py:10 in main", "model.py:42 in forward"])
            stack_b = w.intern_stack(["train.py:10 in main", "model.py:50 in forward"])
            names = ["Module.layers.0.attn.Attention.forward.0", "Functional.linear.0.forward",
                     "Functional.softmax.0.forward", "Module.layers.0.Block.parameters_grad.0"]
            rec = w.add_records(step=step, name=names,
                                kind=[RecordKind.MODULE, RecordKind.API, RecordKind.API, RecordKind.PARAMETERS_GRAD],
                                direction=[Direction.FORWARD, Direction.FORWARD, Direction.FORWARD, Direction.NONE],
                                parent=["Module.layers.0.Block.forward.0", names[0], names[0], ""],
                                stack=[stack_a, stack_b, stack_b, -1],
                                args=[{}, {"bias": "input.2"}, {"dim": -1, "dtype": None}, {}],
                                flags=[0, 0, int(RecordFlag.NON_FINITE), int(RecordFlag.RECOMPUTED)])
            act = bfloat16_bits(rng.standard_normal((2, 4)).astype(np.float32))
            ref = w.put_tensor(act, "torch.bfloat16")
            stored[step] = act
            slots = ["output.0", "input.0", "input.1", "output.0", "weight"]
            owners = [rec[0], rec[1], rec[1], rec[2], rec[3]]
            w.add_tensors(refs=[ref, None, None, None, None], record=owners, step=step, slot=slots,
                          dtype=["torch.bfloat16", "torch.float32", "torch.float32", "torch.float32", "torch.float32"],
                          shape=[(2, 4), (2, 8), (4, 8), (2, 4), [4, 8]],
                          max=[1.0, 2.0, 3.0, np.inf, 5.0], min=-1.0, mean=0.5, norm=[1, 2, 3, np.nan, 5],
                          valid=[15, 15, 15, 7, 15], nan_count=[0, 0, 0, 1, 0], requires_grad=[1, 0, 1, 0, -1])
            w.commit_step(step, loss=2.0 - step)
        assert w.rows == {"records": 12, "tensors": 15, "stacks": 2, "modules": 3}
    return stored


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_dump_queries(tmp_path, mode):
    stored = write_dump(tmp_path / "rank1", mode)
    r = DumpReader(tmp_path / "rank1")
    assert r.steps() == [0, 1, 2] and r.status == "finished"
    assert r.meta["schema_version"] == 1 and r.meta["run_meta"]["seed"] == 42 and r.meta["world_size"] == 2
    rec = r.records(step=1)
    assert list(rec["row"]) == [4, 5, 6, 7] and list(rec["seq"]) == [0, 1, 2, 3]
    assert rec["kind"].dtype == np.uint8 and list(rec["kind"]) == [1, 0, 0, 2]
    assert json.loads(rec["args"][2]) == {"dim": -1, "dtype": None}
    assert rec["flags"][2] & RecordFlag.NON_FINITE and rec["flags"][3] & RecordFlag.RECOMPUTED
    assert r.stack(rec["stack"][1]) == ["train.py:10 in main", "model.py:50 in forward"] and r.stack(-1) == []
    assert sorted(set(r.records()["stack"].tolist())) == [-1, 0, 1]  # stacks are stored once

    t = r.tensors(step=[0, 2], columns=["record", "slot", "max", "norm", "valid", "shape", "numel", "pool"])
    assert len(t["row"]) == 10 and list(t["row"][:5]) == [0, 1, 2, 3, 4]
    assert t["max"][3] == np.inf and np.isnan(t["norm"][3]) and t["valid"][3] == Valid.MAX | Valid.MIN | Valid.MEAN
    assert list(t["shape"][:2]) == ["[2, 4]", "[2, 8]"] and list(t["numel"][:3]) == [8, 16, 32]
    assert list(t["pool"][:2]) == ["uint16", ""]

    names = r.row_names(step=2)
    assert list(names) == ["Module.layers.0.attn.Attention.forward.0.output.0",
                           "Functional.linear.0.forward.input.0", "Functional.linear.0.forward.input.1",
                           "Functional.softmax.0.forward.output.0", "Module.layers.0.Block.parameters_grad.0.weight"]
    assert len(r.row_names()) == 15
    for step in range(3):
        row = int(r.tensors(step=step, columns=["slot"])["row"][0])
        bits = r.tensor_data(row)
        assert bits.dtype == np.uint16 and np.array_equal(bits, stored[step])
        assert np.array_equal(r.tensor_data(row, as_float=True), as_float32(stored[step]))
        assert r.tensor_data(row + 1) is None
    mods = r.modules()
    assert list(mods["name"]) == ["", "layers.0", "layers.0.attn"] and mods["parent"][2] == "layers.0"
    assert [c["info"]["loss"] for c in r.store.commits()] == [2.0, 1.0, 0.0]
    r.close()


def test_dump_of_a_real_torch_model(tmp_path):
    """Module outputs of a real model under bf16 autocast, captured by forward hooks into one DumpWriter batch per
    step, read back equal to what torch computed."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    captured = []

    def hook(module, args, output):
        captured.append((module, output.detach().clone()))

    names = {m: n for n, m in model.named_modules() if n}
    for m in names:
        m.register_forward_hook(hook)
    expected = {}
    with DumpWriter(tmp_path / "rank0", meta={"framework": "torch"}) as w:
        w.add_modules(list(names.values()), [type(m).__name__ for m in names], [""] * len(names))
        for step in range(2):
            captured.clear()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(torch.randn(8, 16))
            rec_names = [f"Module.{names[m]}.{type(m).__name__}.forward.0" for m, _ in captured]
            rec = w.add_records(step=step, name=rec_names, kind=RecordKind.MODULE, direction=Direction.FORWARD)
            refs, stats = [], []
            for i, (_, out) in enumerate(captured):
                bits = out.view(torch.int16).numpy().view(np.uint16) if out.dtype == torch.bfloat16 else out.numpy()
                refs.append(w.put_tensor(bits, str(out.dtype)))
                f = out.float()
                stats.append((f.max().item(), f.min().item(), f.mean().item(), f.norm().item()))
                expected[(step, i)] = f.numpy().copy()
            mx, mn, mean, norm = zip(*stats)
            w.add_tensors(refs=refs, record=rec, step=step, slot="output.0",
                          dtype=[str(o.dtype) for _, o in captured], shape=[tuple(o.shape) for _, o in captured],
                          max=mx, min=mn, mean=mean, norm=norm, valid=int(Valid.MAX | Valid.MIN | Valid.MEAN | Valid.NORM))
            w.commit_step(step)
    r = DumpReader(tmp_path / "rank0")
    t = r.tensors(step=1)
    assert list(r.row_names(step=1)) == ["Module.0.Linear.forward.0.output.0", "Module.1.GELU.forward.0.output.0",
                                         "Module.2.Linear.forward.0.output.0"]
    assert list(t["dtype"]) == ["torch.bfloat16"] * 3
    for i, row in enumerate(t["row"]):
        values = r.tensor_data(row, as_float=True)
        assert np.array_equal(values, expected[(1, i)])
        assert t["max"][i] == values.max()


@pytest.mark.parametrize("mode", ["swmr", "per_step"])
def test_disk_budget_bounds_the_files_and_stops_before_the_step_that_would_pass_it(tmp_path, mode):
    """disk_budget is a bound on the store's files, checked before a step is written (a 3 MB budget once gave a
    7.2 MB file: the budget counted logical bytes, not the chunks HDF5 allocates)."""
    table = TableSpec("t", (Column("step", "int64"), Column("x", "float64"), Column("name", "str")))
    budget = 3_000_000
    w = StoreWriter(tmp_path, "dump", [table], meta={}, mode=mode, disk_budget=budget)
    with pytest.warns(StoreWarning, match="disk_budget of 3.0 MB reached") as caught:
        for step in range(40):
            w.append("t", step=step, x=np.arange(500.0), name=[f"op{i}" for i in range(500)])
            ref = w.put_array(np.full(60_000, step, dtype=np.float32), "torch.float32")  # 240 kB a step
            w.commit(step)
            if w.stopped:
                assert ref is not None and w.put_array(np.ones(3, np.float32)) is None
                break
    assert len(caught) == 1 and w.stopped == "disk_budget" and w.budget_exhausted
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning, nothing written any more
        w.append("t", step=99, x=[1.0], name=["late"])
        w.commit(99)
    w.close()
    assert w.file_bytes() <= budget
    r = StoreReader(tmp_path)
    assert r.status == "disk_budget"
    steps = r.steps()
    assert 3 <= len(steps) < 40 and steps == list(range(len(steps)))
    assert r.num_rows("t") == 500 * len(steps)
    last = r.read("t", steps=[steps[-1]], columns=["step"])["step"]
    assert set(last.tolist()) == {steps[-1]}


def test_run_folders_and_kinds(tmp_path):
    run = tmp_path / "20260101-120000-abcdef"
    write_dump(run / "rank1", "swmr")
    metrics = TableSpec("metrics", (Column("step", "int64"), Column("value", "float32")))
    with StoreWriter(run / "rank0", "metrics", [metrics], meta={"rank": 0}, mode="per_step") as w:
        w.append("metrics", step=0, value=[1.5])
        w.commit(0)
    with StoreWriter(run / "rank1", "metrics", [metrics], meta={"rank": 1}) as w:
        w.append("metrics", step=0, value=[2.5])
        w.commit(0)
    (run / "rank10").mkdir()
    (run / "rank_notes").mkdir()
    dirs = open_rank_dirs(run)
    assert list(dirs) == [0, 1, 10] and dirs[1] == run / "rank1"
    assert store_kinds(dirs[1]) == ["dump", "metrics"]
    assert store_kinds(dirs[0]) == ["metrics"] and store_kinds(dirs[10]) == []
    assert StoreReader(dirs[1], "metrics").read("metrics")["value"][0] == np.float32(2.5)
    assert DumpReader(dirs[1]).steps() == [0, 1, 2]
    # a SWMR file copied alone still reads
    single = StoreReader(dirs[1] / "dump.h5")
    assert single.kind == "dump" and single.steps() == [0, 1, 2] and single.num_rows("tensors") == 15
