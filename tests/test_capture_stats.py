"""Statistics rules (docs/reference/msprobe-tasks.md §5.2, §14 S1-S4), CRC32 and xhash, on the CPU and through the batched
(accelerator) path, written through the real store."""

import zlib

import numpy as np
import pytest
import torch
from test_capture_support import (
    Dump,
    assert_stats_equal,
    expected_stats,
    fused_path,
    make_session,
    native_stats_on,
    stats_match,
)

from engines.adapters.torch import tensor_stats
from engines.adapters.torch.entries import TensorEntries
from engines.adapters.torch.tensor_bytes import device_xhash, host_copy
from engines.capture import xhash as xh
from engines.capture.options import CaptureOptions
from engines.capture.records import VALID_CRC32, VALID_MAX, VALID_MIN, VALID_STATS, VALID_XHASH
from engines.capture.summary import CaptureSummary

CASES = {
    "fp32": lambda: torch.randn(5, 7),
    "bf16": lambda: torch.randn(64).to(torch.bfloat16),
    "fp16": lambda: (torch.randn(33) * 100).half(),
    "fp64": lambda: torch.tensor([1.0, 1.0 + 2.0 ** -40, -3.0], dtype=torch.float64),
    "int64_big": lambda: torch.tensor([2 ** 40 + 1, -(2 ** 40), 3], dtype=torch.int64),
    "int8": lambda: torch.tensor([-128, 127, 5], dtype=torch.int8),
    "uint8": lambda: torch.tensor([0, 255, 9], dtype=torch.uint8),
    "bool": lambda: torch.tensor([True, False, True]),
    "bool_all": lambda: torch.ones(4, dtype=torch.bool),
    "complex": lambda: torch.randn(6, dtype=torch.complex64),
    "zero_d": lambda: torch.tensor(-2.5),
    "zero_d_int": lambda: torch.tensor(7),
    "empty": lambda: torch.zeros(0, 3),
    "fp8": lambda: torch.randn(16).to(torch.float8_e4m3fn),
}


def _finish(tensors, batched=False, **opts):
    entries = TensorEntries(CaptureOptions(**opts), CaptureSummary(), force_batched=batched)
    ids = [entries.entry(t) for t in tensors]
    cols = entries.finish()
    entries.close()
    return ids, cols


@pytest.mark.parametrize("batched", [False, True], ids=["cpu-immediate", "batched"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_statistics_rules(case, batched):
    torch.manual_seed(0)
    t = CASES[case]()
    (e,), cols = _finish([t], batched)
    got = cols.stats[e]
    want = expected_stats(t, fused=False if batched else None)
    assert stats_match(got, want, t, fused=False if batched else None), (case, got, want)
    if case.startswith("bool"):
        assert cols.valid[e] == VALID_MAX | VALID_MIN
    elif case == "empty":
        assert cols.valid[e] == 0
    else:
        assert cols.valid[e] & VALID_STATS == VALID_STATS


def test_rules_in_words():
    torch.manual_seed(0)
    (b, z, c, i, f64), cols = _finish([torch.tensor([False, True]), torch.tensor(-3.0),
                                        torch.tensor([3 + 4j, 0j]), torch.tensor([2 ** 53 + 2, 0]),
                                        torch.tensor([1.0 + 2 ** -45, 1.0], dtype=torch.float64)])
    assert list(cols.stats[b][:2]) == [1.0, 0.0]  # bool: any / all
    assert list(cols.stats[z]) == [-3.0, -3.0, -3.0, -3.0]  # 0-d: the value everywhere
    assert cols.stats[c][0] == 5.0 and cols.stats[c][1] == 0.0  # complex: abs()
    assert cols.stats[i][2] == (2 ** 53 + 2) / 2  # integer sum is exact
    assert cols.stats[f64][0] == 1.0 + 2 ** -45  # fp64 never downcast


@pytest.mark.parametrize("batched", [False, True], ids=["cpu-immediate", "batched"])
def test_nonfinite_counts(batched):
    t = torch.tensor([1.0, float("nan"), float("inf"), float("-inf"), float("inf"), 2.0])
    clean = torch.randn(10)
    (e, f), cols = _finish([t, clean], batched)
    assert list(cols.counts[e]) == [1, 2, 1]
    assert list(cols.counts[f]) == [0, 0, 0]


@pytest.mark.parametrize("precision", ["low", "high"])
def test_zero_d_floats_on_the_cpu_equal_the_batched_path(precision):
    """A CPU float 0-d tensor (an optimizer's step count, a loss) is read once on the per-entry path: the same
    values, validity and NaN/inf counts as the general path of every other device, in every float type."""
    values = [-2.5, 0.0, -0.0, 3e38, 1e-45, float("nan"), float("inf"), float("-inf")]
    tensors = [torch.tensor(v, dtype=d) for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16)
               for v in values]
    _, host = _finish(tensors, False, precision=precision)
    _, batched = _finish(tensors, True, precision=precision)
    for got, want in ((host.stats, batched.stats), (host.counts, batched.counts), (host.valid, batched.valid),
                      (host.numel, batched.numel)):
        assert got.tobytes() == want.tobytes()
    assert [list(host.counts[i]) for i in (5, 6, 7)] == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert np.isnan(host.stats[5]).all() and list(host.stats[0]) == [-2.5] * 4


def _host_float_cases():
    torch.manual_seed(2)
    big = torch.randn(64, 512) * 7
    return [big, big.t(), big[:, ::3], (torch.randn(3000) * 50).half(), (torch.randn(20000) * 50).bfloat16(),
            torch.randn(40000, dtype=torch.float64), torch.tensor([[1.0, float("nan")], [float("inf"), -2.0]]),
            torch.tensor([float("-inf"), 1.0]), torch.empty(0, 5)]


@pytest.mark.parametrize("precision", ["low", "high"])
def test_host_float_fallback_equals_the_batched_path_bit_for_bit(precision, monkeypatch):
    """Without the native kernel the CPU's float fast path (values read at once) and the accelerators' batched
    path run the same torch kernels: large tensors (amax + amin), non-contiguous views, half types, non-finite
    values, all bit-equal."""
    monkeypatch.setattr(tensor_stats, "fused_stats", lambda: None)
    tensors = _host_float_cases()
    _, host = _finish(tensors, False, precision=precision)
    _, batched = _finish(tensors, True, precision=precision)
    for got, want in ((host.stats, batched.stats), (host.counts, batched.counts), (host.valid, batched.valid)):
        assert got.tobytes() == want.tobytes()
    assert list(host.counts[6]) == [1, 1, 0] and list(host.counts[7]) == [0, 0, 1]


@pytest.mark.parametrize("precision", ["low", "high"])
def test_host_float_path_follows_the_fused_definition(precision):
    """With the kernel: dense tensors (a transposed one too) and a strided view (the strided walk) by decision
    28's definition; counts and validity exactly as the batched path's."""
    assert native_stats_on(), "the native kernel did not build here (a C compiler is part of the test setup)"
    tensors = _host_float_cases()
    ids, host = _finish(tensors, False, precision=precision)
    _, batched = _finish(tensors, True, precision=precision)
    for e, t in zip(ids, tensors):
        want = expected_stats(t, precision)
        assert stats_match(host.stats[e], want, t), (e, list(host.stats[e]), want)
    assert fused_path(tensors[2]) and fused_path(tensors[1]) and not tensors[2].is_contiguous()
    assert host.counts.tobytes() == batched.counts.tobytes() and host.valid.tobytes() == batched.valid.tobytes()
    assert list(host.counts[6]) == [1, 1, 0] and list(host.counts[7]) == [0, 0, 1]


def test_precision_high_accumulates_half_types_in_float32():
    torch.manual_seed(1)
    t = (torch.randn(4096) * 300).to(torch.bfloat16)
    (lo,), low = _finish([t], precision="low")
    (hi,), high = _finish([t], precision="high")
    assert stats_match(high.stats[hi], expected_stats(t, "high"), t)
    assert stats_match(low.stats[lo], expected_stats(t, "low"), t)
    exact = t.double()
    assert abs(high.stats[hi][3] - float(exact.norm())) <= abs(low.stats[lo][3] - float(exact.norm()))


@pytest.mark.parametrize("case", ["fp32", "bf16", "fp16", "fp64", "int64_big", "bool", "complex", "zero_d", "empty",
                                  "uint8"])
def test_crc32_and_xhash(case):
    torch.manual_seed(2)
    t = CASES[case]()
    (e,), cols = _finish([t], summary_mode="hash")
    raw = t.contiguous().view(torch.int16) if t.dtype is torch.bfloat16 else t.contiguous()
    assert cols.crc32[e] == zlib.crc32(raw.numpy().tobytes())
    assert cols.valid[e] & (VALID_CRC32 | VALID_XHASH) == VALID_CRC32 | VALID_XHASH
    arr, name = host_copy(t)
    assert cols.xhash[e] == xh.xhash_bytes(arr, name, tuple(t.shape)) == device_xhash(t)


def test_large_tensors_hash_off_the_training_thread_with_the_same_result():
    t = torch.randn(1100, 1000)  # 4.4 MB: handed to the hash thread, and longer than one weight chunk
    (e,), cols = _finish([t], summary_mode="hash")
    assert cols.crc32[e] == zlib.crc32(t.numpy().tobytes())
    assert cols.xhash[e] == device_xhash(t)


def test_xor_mode_hashes_on_the_device_path():
    t = torch.randn(50)
    (e,), cols = _finish([t], batched=True, summary_mode="xor")
    assert cols.valid[e] & VALID_XHASH and not cols.valid[e] & VALID_CRC32
    assert cols.xhash[e] == device_xhash(t)
    assert cols.crc32[e] == -1


# xhash version 1 pinned: these vectors are in docs/FORMAT.md; a change of definition must fail here.
XHASH_VECTORS = [
    (np.arange(6, dtype=np.float32).reshape(2, 3), "float32", "d438b8680000204e"),
    (np.array([0x3F80, 0x4000, 0xBF80], dtype=np.uint16), "bfloat16", "15bb386698b22530"),
    (np.array(True), "bool", "5bac5f142b82aa7b"),
    (np.array([-1, 2 ** 40, 7], dtype=np.int64), "int64", "05fcfec3116167b1"),
    (np.zeros((0, 3), dtype=np.float32), "float32", "01cdfca997ce21c0"),
    (np.array([1.0, 1.0 + 2 ** -52], dtype=np.float64), "float64", "5cfd0dfef8a2cf2a"),
]


@pytest.mark.parametrize("array,dtype,hexval", XHASH_VECTORS)
def test_xhash_reference_vectors(array, dtype, hexval):
    assert xh.xhash_hex(xh.xhash_bytes(array, dtype, array.shape)) == hexval


def test_xhash_is_framework_neutral_and_sensitive():
    x = torch.arange(12, dtype=torch.float32)
    assert device_xhash(x) == xh.xhash_array(x.numpy())
    assert xh.neutral_dtype_name("torch.bfloat16") == xh.neutral_dtype_name("BFloat16") == "bfloat16"
    assert device_xhash(x) != device_xhash(x.flip(0))
    assert device_xhash(x) != device_xhash(x.reshape(3, 4))
    y = x.clone()
    y[5] = torch.nextafter(y[5], torch.tensor(100.0))
    assert device_xhash(x) != device_xhash(y)
    assert device_xhash(torch.tensor(0.0)) != device_xhash(torch.tensor(-0.0))


def test_session_writes_statistics_rows_equal_to_direct_values(tmp_path):
    torch.manual_seed(3)
    s = make_session(tmp_path, level="L1", summary_mode="hash")
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    s.start()
    out = torch.matmul(a, b)
    flags = torch.isfinite(out)
    s.step_end()
    s.close()
    dump = Dump(tmp_path / "rank0")
    rows = dump.rows("Torch.matmul.0.forward")
    assert_stats_equal(rows["input.0"], a)
    assert_stats_equal(rows["input.1"], b)
    assert_stats_equal(rows["output.0"], out)
    assert rows["output.0"]["crc32"] == zlib.crc32(out.numpy().tobytes())
    assert rows["output.0"]["xhash"] == device_xhash(out)
    assert rows["output.0"]["requires_grad"] == 0
    bool_rows = dump.rows("Torch.isfinite.0.forward")
    assert_stats_equal(bool_rows["output.0"], flags)
    dump.close()


class _NoGraph(torch.overrides.TorchFunctionMode):
    """Fails on any torch call whose result is part of the autograd graph."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        assert not (isinstance(out, torch.Tensor) and out.requires_grad), func
        return out


@pytest.mark.parametrize("path", ["fused", "torch", "batched"])
def test_statistics_of_graph_tensors_build_no_graph_and_equal_the_detached_ones(path, monkeypatch):
    """Every torch op the statistics run on a tensor of the autograd graph (a leaf, an op's output, a transposed
    weight, a strided view, a half type) runs on a detached tensor (none adds to the training's graph), and the
    values are those of the detached tensors, bit for bit."""
    if path == "torch":
        monkeypatch.setattr(tensor_stats, "fused_stats", lambda: None)
    w = torch.randn(32, 48, requires_grad=True)
    h = torch.randn(40, dtype=torch.float16, requires_grad=True)
    tensors = [w, w * 2, w.t(), w[:, ::3], h, h.sum(), w.sum()]
    with _NoGraph():
        _, got = _finish(tensors, path == "batched")
    _, want = _finish([t.detach() for t in tensors], path == "batched")
    for a, b in ((got.stats, want.stats), (got.counts, want.counts), (got.valid, want.valid)):
        assert a.tobytes() == b.tobytes()


def test_stats_columns_in_one_pass_equal_the_entry_at_a_time_loop():
    """The step end's columns from the statistics rows (one float64 array, indexed assignments) hold exactly what
    the loop an entry at a time gives: bools, large integers, NaN rows (max/min NaN), no statistics (valid 0),
    rows of entries past the step's count left out, mean = sum / numel."""
    import copy
    import math

    from engines.capture import entries as step_entries

    rows = {
        0: [3.5, -1.25, 7.0, 4.0, 3, VALID_STATS, 0, 0, 0],
        1: [True, False, math.nan, math.nan, 4, VALID_MAX | VALID_MIN, 0, 0, 0],
        2: [2 ** 62 + 1, -(2 ** 40), 2 ** 63 - 1, 1e18, 3, VALID_STATS, 0, 0, 0],
        3: [5.0, 1.0, math.nan, math.nan, 6, VALID_STATS, 2, 1, 0],
        4: [math.nan, math.nan, math.nan, math.nan, 0, 0, 0, 0, 0],
        6: [1.0, 1.0, 1.0, 1.0, 1, VALID_STATS, 0, 0, 1],
        9: [9.0, 9.0, 9.0, 9.0, 1, VALID_STATS, 0, 0, 0],  # past n_entries: left out
    }
    loop_rows, fast_rows = copy.deepcopy(rows), copy.deepcopy(rows)
    want = step_entries._stats_columns_loop(loop_rows, 8)
    got = step_entries.stats_columns(fast_rows, 8)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
    assert fast_rows == rows and loop_rows == rows  # the rows are left as they are
    assert step_entries.stats_columns({k: tuple(v) for k, v in rows.items()}, 8)[0].tobytes() == want[0].tobytes()
    assert got[2][5].tolist() == [-1, -1, -1] and got[1][4] == 0 and got[2][3].tolist() == [2, 1, 0]


def test_stats_columns_takes_odd_rows_as_np_array_did():
    """The one-pass read of the rows (np.fromiter) hands anything it cannot take to np.array as before: a None
    (np.array reads it as NaN), a 0-d numpy value; rows of another length go to the entry-at-a-time loop."""
    from engines.capture import entries as step_entries

    rows = {0: [None, 1.0, 2.0, 3.0, 2, VALID_STATS, 0, 0, 0], 1: (np.float32(2.5), np.float64(-1.0), 4.0, 2.0, 2,
                                                                  VALID_STATS, 0, 0, 0)}
    stats, valid, counts = step_entries.stats_columns(rows, 2)
    assert np.isnan(stats[0, 0]) and stats[0, 1] == 1.0 and stats[0, 2] == 1.0
    assert stats[1].tolist() == [2.5, -1.0, 2.0, 2.0] and valid.tolist() == [VALID_STATS, VALID_STATS]
    # a row one short and one a value long: never read as two rows shifted by one (the loop takes what it can)
    uneven = {0: [1.0, 1.0, 1.0, 1.0, 1, VALID_STATS, 0, 0, 0, 7.0], 1: [2.0, 2.0, 2.0, 2.0, 1, VALID_STATS, 0, 0]}
    with pytest.raises(IndexError):  # the loop's own complaint about the short row, as before
        step_entries.stats_columns(uneven, 2)
