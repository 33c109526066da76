"""Statistics of MindSpore tensors (host and device paths agree, msprobe's rules), checksums equal to the
PyTorch capture's for equal values, and the tensor task's stored data equal to the live tensors."""

import math
import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from mindspore import Tensor  # noqa: E402
from test_mindspore_support import ONE_STEP, Dump, make_session, run_demo  # noqa: E402

from engines.adapters.mindspore.tensor_stats import StatsBatch  # noqa: E402
from engines.capture import xhash as xh  # noqa: E402
from engines.store.dtypes import as_float32  # noqa: E402

nan, inf = math.nan, math.inf

CASES = {
    "float32": (np.arange(-3, 9, dtype=np.float32).reshape(3, 4) / 7, None),
    "float16": (np.linspace(-2, 5, 10).astype(np.float16), None),
    "bfloat16": (np.linspace(-2, 5, 10).astype(np.float32), ms.bfloat16),
    "float64": (np.linspace(-1, 1, 7), None),
    "int64": (np.array([[3, -7], [2, 9]], dtype=np.int64), None),
    "int32": (np.array([1, 2, 3], dtype=np.int32), None),
    "bool": (np.array([True, False, True]), None),
    "zero-d": (np.array(-2.5, dtype=np.float32), None),
    "empty": (np.zeros((0, 3), dtype=np.float32), None),
    "nonfinite": (np.array([1.0, nan, inf, -inf, inf, 2.0], dtype=np.float32), None),
}


def _tensor(name):
    array, cast = CASES[name]
    t = Tensor(array)
    return t.astype(cast) if cast is not None else t


def _expected(name):
    """(max, min, mean, norm, counts) by msprobe's rules, in float64 from the values."""
    array = CASES[name][0]
    if CASES[name][1] == ms.bfloat16:
        array = Tensor(array).astype(ms.bfloat16).astype(ms.float32).asnumpy()
    if array.size == 0:
        return (nan, nan, nan, nan), (0, 0, 0)
    if array.dtype == np.bool_:
        return (1.0, 0.0, nan, nan), (0, 0, 0)
    if array.ndim == 0:
        v = float(array)
        return (v, v, v, v), (0, 0, 0)
    a = array.astype(np.float64)
    counts = (int(np.isnan(a).sum()), int(np.isposinf(a).sum()), int(np.isneginf(a).sum()))
    if any(counts):
        return (nan, nan, nan, nan), counts
    return (a.max(), a.min(), a.mean(), float(np.sqrt((a * a).sum()))), counts


@pytest.mark.parametrize("batched", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_statistics_rules_on_both_paths(name, batched):
    batch = StatsBatch(force_batched=batched)
    batch.add(0, _tensor(name))
    stats, valid, counts = batch.finish(1)
    want, want_counts = _expected(name)
    assert tuple(counts[0]) == want_counts
    if name == "nonfinite":
        assert math.isnan(stats[0][0]) and math.isnan(stats[0][2])  # max and sum see the NaN
        return
    for got, w, col in zip(stats[0], want, ("max", "min", "mean", "norm")):
        if math.isnan(w):
            assert math.isnan(got), (col, got)
        else:
            assert got == pytest.approx(w, rel=2e-6, abs=1e-7), (col, got, w)


def test_precision_high_accumulates_in_float64():
    values = np.full(100_000, 0.1, dtype=np.float32)
    low, high = StatsBatch(), StatsBatch(high_precision=True)
    low.add(0, Tensor(values))
    high.add(0, Tensor(values))
    exact = float(values.astype(np.float64).sum()) / values.size
    assert high.finish(1)[0][0][2] == pytest.approx(exact, rel=1e-12)
    assert low.finish(1)[0][0][2] == pytest.approx(exact, rel=1e-5)


def test_session_statistics_equal_direct_values_and_checksums_match_pytorch(tmp_path):
    session = make_session(tmp_path, level="L1", summary_mode="hash")
    x = Tensor(np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6))
    session.start()
    y = x.exp()
    session.step_end()
    session.close()
    rows = Dump(tmp_path / "rank0").rows("Tensor.exp.0.forward")
    out = y.asnumpy()
    assert rows["output.0"]["max"] == out.max() and rows["output.0"]["min"] == out.min()
    assert rows["output.0"]["crc32"] == zlib.crc32(out.tobytes())
    assert rows["input.0"]["xhash"] == xh.xhash_array(x.asnumpy())
    torch = pytest.importorskip("torch")
    from engines.adapters.torch.tensor_bytes import device_xhash

    assert rows["input.0"]["xhash"] == device_xhash(torch.from_numpy(x.asnumpy()))  # equal values, equal hash


def test_tensor_task_stores_every_row_equal_to_the_live_tensor(tmp_path):
    session = make_session(tmp_path, task="tensor", level="L1")
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = Tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)).astype(ms.bfloat16)
    session.start()
    c = a * 2.0
    d = b + b
    session.step_end()
    session.close()
    dump = Dump(tmp_path / "rank0")
    rows = dump.rows("Tensor.mul.0.forward")
    assert np.array_equal(dump.reader.tensor_data(int(rows["output.0"]["row"])), c.asnumpy())
    assert np.array_equal(dump.reader.tensor_data(int(rows["input.0"]["row"])), a.asnumpy())
    bf = dump.rows("Tensor.add.0.forward")["output.0"]
    stored = dump.reader.tensor_data(int(bf["row"]))
    assert bf["dtype"] == "BFloat16"
    values = as_float32(stored) if stored.dtype == np.uint16 else stored
    assert np.array_equal(values, d.astype(ms.float32).asnumpy())


def test_in_place_ops_record_inputs_before_and_outputs_after(tmp_path):
    session = make_session(tmp_path, level="L1")
    x = Tensor(np.ones((3,), np.float32))
    session.start()
    y = x * 1.0
    out = y.add_(4.0)
    z = y * 1.0
    session.step_end()
    session.close()
    dump = Dump(tmp_path / "rank0")
    add = dump.rows("Tensor.add_.0.forward")
    assert add["input.0"]["max"] == 1.0 and add["output.0"]["max"] == out.asnumpy().max() == 5.0
    # after the in-place call its target is summarised afresh (whatever MindSpore left in it)
    assert dump.rows("Tensor.mul.1.forward")["input.0"]["max"] == y.asnumpy().max()
    assert dump.rows("Tensor.mul.1.forward")["output.0"]["max"] == z.asnumpy().max()


def test_the_demo_weights_hash_equal_in_both_frameworks(tmp_path):
    torch = pytest.importorskip("torch")
    del torch
    from test_capture_support import run_demo as run_torch_demo

    ms_dump, _, _ = run_demo(tmp_path / "ms", ONE_STEP, level="L0", summary_mode="xor")
    pt_dump, _, _ = run_torch_demo(tmp_path / "pt", dict(ONE_STEP), level="L0", summary_mode="xor")
    for path, cls in (("head", "Linear"), ("blocks.0.attn.qkv", "Linear"), ("tok_emb", "Embedding")):
        a = ms_dump.rows("Cell.%s.%s.forward.0" % (path, cls))["parameters.weight"]
        b = pt_dump.rows("Module.%s.%s.forward.0" % (path, cls))["parameters.weight"]
        assert a["xhash"] == b["xhash"] != 0


def test_device_path_session_writes_the_host_path_rows(tmp_path):
    """The path an accelerator takes (0-d results stacked, one transfer a step) forced on the CPU."""
    def run(root, batched):
        session = make_session(root, level="L1", force_batched=batched)
        w = ms.Parameter(Tensor(np.linspace(-2, 2, 20, dtype=np.float32).reshape(4, 5)), name="w")
        session.start()
        grads = ms.value_and_grad(lambda x: (x @ w).exp().sum(), None, [w])(Tensor(np.ones((3, 4), np.float32)))
        session.step_end()
        session.close()
        return Dump(root / "rank0"), grads

    host, _ = run(tmp_path / "host", False)
    device, _ = run(tmp_path / "device", True)
    assert host.names(0) == device.names(0)
    for name in host.names(0):
        a, b = host.rows(name), device.rows(name)
        assert set(a) == set(b)
        for slot in a:
            assert a[slot]["max"] == b[slot]["max"] and a[slot]["min"] == b[slot]["min"]
            for col in ("mean", "norm"):  # float32 sums in a different order: equal to rounding
                assert a[slot][col] == pytest.approx(b[slot][col], rel=1e-6, abs=1e-6 * a[slot]["norm"])
