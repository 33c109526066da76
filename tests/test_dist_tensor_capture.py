"""Distributed tensor subclasses are recorded, never skipped: a DTensor as its local shard with its layout in the
``dist`` column, an AsyncCollectiveTensor as the tensor it resolves to (docs/CAPTURE.md, "Distributed tensors").

The torchrun tests run the DTensor beds (``tests/dist_beds``): tp.py (TP2, 2 processes) and tp_dp.py (TP2 x DP2 on
a 2-D mesh with FSDP2 over dp, 4 processes), and check that capture leaves the losses bit-identical to a plain
launch of the same bed. Each launch costs seconds, so one launch carries many assertions.
"""

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dist_support import BEDS, bed, losses, ok, torchrun  # noqa: E402
from test_capture_support import Dump, make_session  # noqa: E402

from engines.capture.records import VALID_MAX  # noqa: E402
from engines.store import DumpReader  # noqa: E402

ACT = pytest.importorskip("torch.distributed._functional_collectives").AsyncCollectiveTensor
ASYNC = {"async_collective": True}


def _dist(row):
    text = str(row["dist"])
    return json.loads(text) if text else None


# -- one process: an AsyncCollectiveTensor needs no process group to exist ---------------------------------------

class _Doubles(torch.nn.Module):
    def forward(self, x):
        return ACT(x * 2)  # what a functional collective hands back (here already complete)


def test_an_async_collective_tensor_is_recorded_as_the_tensor_it_resolves_to(tmp_path):
    s = make_session(tmp_path, task="tensor", level="mix")
    model = torch.nn.Sequential(_Doubles())
    x = torch.randn(3, 4)
    s.start(model)
    y = model(x)
    assert type(y) is ACT and not y.completed  # the tool waited on it without marking it waited
    z = torch.mul(y, 3)
    s.step_end()
    s.close()
    assert torch.equal(z, x * 6)
    assert not s.summary.as_dict().get("missing"), s.summary.as_dict()
    dump = Dump(tmp_path / "rank0")
    mul = dump.rows("Torch.mul.0.forward")
    for row in (mul["input.0"], dump.rows("Module.0._Doubles.forward.0")["output.0"]):
        assert _dist(row) == ASYNC
        assert row["valid"] & VALID_MAX and float(row["max"]) == float((x * 2).max())
        assert str(row["shape"]) == "[3, 4]"
        np.testing.assert_array_equal(dump.reader.tensor_data(int(row["row"])), (x * 2).numpy())
    assert _dist(mul["output.0"]) is None and str(mul["output.0"]["dist"]) == ""
    dump.close()


class _Wrapped(torch.Tensor):
    """A minimal wrapper subclass (one inner tensor, its own __torch_dispatch__), like many a library's."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, size, stride):
        return _Wrapped(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        def unwrap(x):
            return x.elem if isinstance(x, _Wrapped) else x

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


def test_a_wrapper_subclass_is_recorded_as_its_inner_tensor(tmp_path):
    s = make_session(tmp_path, task="tensor", level="L1")
    x = torch.randn(5, 2)
    s.start()
    out = torch.mul(_Wrapped(x), 2)
    s.step_end()
    s.close()
    assert torch.equal(out, x * 2)
    assert not s.summary.as_dict().get("missing"), s.summary.as_dict()
    dump = Dump(tmp_path / "rank0")
    row = dump.rows("Torch.mul.0.forward")["input.0"]
    assert _dist(row) == {"subclass": __name__ + "._Wrapped"}
    assert float(row["max"]) == float(x.max()) and str(row["shape"]) == "[5, 2]"
    np.testing.assert_array_equal(dump.reader.tensor_data(int(row["row"])), x.numpy())
    dump.close()


# -- torchrun: the TP bed (2 processes) ----------------------------------------------------------------------------

NAN_TP = '''
import os, sys
sys.path.insert(0, %r)
import torch
import tp

_forward = tp.MLP.forward
_calls = [0]


def forward(self, x):
    """Step 1 on rank 1: a NaN in this rank's shard of up.weight, written where no hook sees it."""
    _calls[0] += 1
    if _calls[0] == 2 and os.environ.get("RANK") == "1":
        with torch.no_grad(), torch._C.DisableTorchFunction():
            self.up.weight._local_tensor[0, 0] = float("nan")
    return _forward(self, x)


tp.MLP.forward = forward
tp.main()
'''


def _launch(cwd: Path, nproc: int, task: str, level: str, script: str) -> "tuple[str, Path]":
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "cfg.json").write_text(json.dumps({"task": task, "level": level, "dump_path": "dump",
                                              "target": {"script": script}}))
    proc = ok(torchrun(cwd, ["-m", "probe_tui", "run", "cfg.json"], nproc=nproc, timeout=240))
    return proc.stdout.decode() + proc.stderr.decode(), cwd / "dump" / "latest"


def _plain(cwd: Path, name: str, nproc: int):
    cwd.mkdir(parents=True, exist_ok=True)
    ok(torchrun(cwd, [bed(name)], nproc=nproc, timeout=240))
    return losses(cwd)


def _full_init():
    """tp.py's weights as one process builds them (seed 0): the shards every rank starts from."""
    import sys

    sys.path.insert(0, str(BEDS))
    try:
        import tp
    finally:
        sys.path.remove(str(BEDS))
    torch.manual_seed(0)
    return tp.MLP()


def _all_rows_summarised(reader: DumpReader) -> None:
    t = reader.tensors()
    assert (t["valid"] & VALID_MAX).all(), [str(s) for s, v in zip(t["slot"], t["valid"]) if not v & VALID_MAX]


@pytest.mark.slow
def test_tp_shards_are_recorded_with_their_layout_and_training_is_unchanged(tmp_path):
    reference = _plain(tmp_path / "plain", "tp", 2)
    assert set(reference) == {0, 1}
    full = _full_init()
    out, run = _launch(tmp_path / "tensor", 2, "tensor", "mix", bed("tp"))
    assert "unsupported" not in out, out[-3000:]
    assert losses(tmp_path / "tensor") == reference
    reduced = {}
    for rank in (0, 1):
        dump = Dump(run / ("rank%d" % rank))
        _all_rows_summarised(dump.reader)
        mesh = {"mesh": [0, 1], "mesh_dims": ["tp"], "coord": [rank]}
        rows = dump.rows("Module.up.Linear.forward.0")
        w = rows["parameters.weight"]
        assert _dist(w) == dict(mesh, global_shape=[16, 8], placements=["S(0)"])
        assert str(w["shape"]) == "[8, 8]" and int(w["numel"]) == 64
        np.testing.assert_array_equal(dump.reader.tensor_data(int(w["row"])),
                                      full.up.weight.detach()[8 * rank:8 * rank + 8].numpy())
        down = dump.rows("Module.down.Linear.forward.0")
        assert _dist(down["parameters.weight"]) == dict(mesh, global_shape=[8, 16], placements=["S(1)"])
        assert _dist(down["parameters.bias"]) == dict(mesh, global_shape=[8], placements=["R"])
        assert _dist(down["output.0"]) == dict(mesh, global_shape=[4, 8], placements=["P(sum)"])
        assert str(dump.rows("Functional.linear.0.forward")["output.0"]["shape"]) == "[4, 8]"
        # the row-parallel result after its all-reduce: waited on, recorded as the reduced values
        pow_rows = dump.rows("Tensor.pow.0.forward")
        assert _dist(pow_rows["input.0"]) == ASYNC
        reduced[rank] = dump.reader.tensor_data(int(pow_rows["input.0"]["row"]))
        np.testing.assert_array_equal(reduced[rank] ** 2, dump.reader.tensor_data(int(pow_rows["output.0"]["row"])))
        # gradients of DTensor parameters carry their layout too
        grads = dump.rows("Module.up.Linear.parameters_grad.0")
        assert _dist(grads["weight"]) == dict(mesh, global_shape=[16, 8], placements=["S(0)"])
        assert str(grads["weight"]["shape"]) == "[8, 8]"
        assert dump.reader.tensor_data(int(grads["weight"]["row"])) is not None
        dump.close()
    np.testing.assert_array_equal(reduced[0], reduced[1])  # replicated after the all-reduce: both ranks agree


@pytest.mark.slow
def test_tp_statistics_at_L0_record_local_shards(tmp_path):
    out, run = _launch(tmp_path / "l0", 2, "statistics", "L0", bed("tp"))
    assert "unsupported" not in out, out[-3000:]
    for rank in (0, 1):
        dump = Dump(run / ("rank%d" % rank))
        _all_rows_summarised(dump.reader)
        w = dump.rows("Module.up.Linear.forward.0")["parameters.weight"]
        assert str(w["shape"]) == "[8, 8]" and _dist(w)["global_shape"] == [16, 8]
        assert not any(n.startswith(("Functional.", "Tensor.")) for n in dump.names())
        assert _dist(dump.rows("Module.down.Linear.parameters_grad.0")["weight"])["placements"] == ["S(1)"]
        dump.close()


@pytest.mark.slow
def test_overflow_check_finds_a_nan_in_one_ranks_dtensor_shard(tmp_path):
    script = tmp_path / "nan_tp.py"
    script.write_text(NAN_TP % str(BEDS))
    out, run = _launch(tmp_path / "nan", 2, "overflow_check", "mix", str(script))
    assert "hooks failed" not in out, out[-3000:]
    with DumpReader(run / "rank1") as reader:
        recs = reader.records()
        t = reader.tensors()
        names = dict(zip(recs["row"].tolist(), recs["name"].tolist()))
        shard = [i for i in range(len(t["slot"]))
                 if str(t["dist"][i]) and json.loads(str(t["dist"][i])).get("placements") == ["S(0)"]
                 and str(t["shape"][i]) == "[8, 8]" and int(t["nan_count"][i]) == 1]
        assert shard, [(names[int(r)], str(s)) for r, s in zip(t["record"], t["slot"])]
        i = shard[0]
        assert names[int(t["record"][i])].startswith(("Functional.linear.0.forward", "Module.up.Linear.forward.0"))
        data = reader.tensor_data(int(t["row"][i]))
        assert data.shape == (8, 8) and np.isnan(data[0, 0]) and np.isnan(data).sum() == 1
    for rank in (0, 1):
        values = losses(tmp_path / "nan")[rank]
        assert np.isfinite(values[0]) and np.isnan(values[1])


# -- torchrun: TP2 x DP2 on a 2-D mesh (4 processes) ---------------------------------------------------------------

@pytest.mark.slow
def test_tp_dp_records_2d_mesh_shards_and_training_is_unchanged(tmp_path):
    reference = _plain(tmp_path / "plain", "tp_dp", 4)
    assert set(reference) == {0, 1, 2, 3}
    out, run = _launch(tmp_path / "l1", 4, "statistics", "L1", bed("tp_dp"))
    assert "unsupported" not in out, out[-3000:]
    assert losses(tmp_path / "l1") == reference
    mesh = [[0, 1], [2, 3]]
    for rank in range(4):
        coord = [rank // 2, rank % 2]
        dump = Dump(run / ("rank%d" % rank))
        _all_rows_summarised(dump.reader)
        # inside the forward: the tp shard FSDP gathered over dp (a 1-D DTensor on this rank's tp group)
        w = dump.rows("Functional.linear.0.forward")["input.1"]
        assert _dist(w) == {"global_shape": [16, 8], "placements": ["S(0)"], "mesh": mesh[coord[0]],
                            "mesh_dims": ["tp"], "coord": [coord[1]]}
        assert str(w["shape"]) == "[8, 8]"
        # the optimizer step updates FSDP's shard of the tp shard: a DTensor on the 2-D mesh
        by_shape = {}
        for name in dump.names(0):
            if name.startswith("Tensor.add_."):
                row = dump.rows(name)["input.0"]
                by_shape[tuple(_dist(row)["global_shape"])] = row
        down = by_shape[(8, 16)]
        assert _dist(down) == {"global_shape": [8, 16], "placements": ["S(0)", "S(1)"], "mesh": mesh,
                               "mesh_dims": ["dp", "tp"], "coord": coord}
        assert str(down["shape"]) == "[4, 8]"
        up = by_shape[(16, 8)]
        assert _dist(up)["mesh_dims"] == ["dp", "tp"] and str(up["shape"]) == "[4, 8]"
        dump.close()

