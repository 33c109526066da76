"""The statistics fast path (engines/native/pyext/fastpath.c, issue 21): the same rows as the Python path, the
Python path for every case it does not take, its fallbacks, and a demo capture recorded identically with and
without it."""

import logging
import zlib

import numpy as np
import pytest
import torch
from test_capture_support import run_demo

from engines.adapters.torch import tensor_stats
from engines.adapters.torch.tensor_stats import StatsBatch
from engines.native import build, fastpath
from engines.native import crc32 as native_crc

TINY2 = {"preset": "tiny", "steps": 2}


@pytest.fixture(scope="module")
def host_row():
    fn = tensor_stats.host_row()
    if fn is None:
        pytest.skip("no C compiler or Python headers: the Python path only")
    return fn


def same_row(a, b) -> bool:
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


def python_row(t: torch.Tensor, high: bool):
    batch = StatsBatch(high, fast=False)
    batch.add_general(0, t)
    return batch.host[0]


def float_cases():
    torch.manual_seed(21)
    out = []
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for n in (1, 17, 512, 70000):  # 70000: the kernel runs without the GIL
            out.append(torch.randn(n, dtype=dtype) * 100)
        out.append(torch.tensor([1.0, float("nan"), 2.0, float("inf"), -float("inf")], dtype=dtype))
        out.append(torch.full((8, 4), 60000.0, dtype=dtype))  # a half type's sum overflows
        out.append(torch.randn(3, 5, 7, dtype=dtype).requires_grad_())
    out.append(torch.nn.Parameter(torch.randn(16, 16)))
    return out


@pytest.mark.parametrize("high", [False, True])
def test_rows_equal_the_python_paths_rows(host_row, high):
    for t in float_cases():
        row = host_row(t, high)
        assert row is not None, (t.dtype, t.shape)
        assert type(row) is tuple and same_row(row, python_row(t, high)), (t.dtype, t.shape, row)


def test_large_tensors_use_torchs_thread_count_and_give_the_same_bits(host_row):
    t = torch.randn(1 << 21)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = host_row(t, False)
        torch.set_num_threads(1)
        one = host_row(t, False)
    finally:
        torch.set_num_threads(threads)
    assert two == one == python_row(t, False)


def test_every_other_case_is_left_to_the_python_path(host_row):
    base = torch.randn(30, 20)
    raw = bytearray(base.numpy().tobytes() + bytes(8))

    class NoPointer(torch.Tensor):
        def data_ptr(self):
            raise RuntimeError("no data pointer here")

    cases = [torch.arange(6), torch.ones(3, dtype=torch.bool), torch.tensor(2.5), torch.empty(0, 4),
             base.t(), base[:, ::2], torch._neg_view(base), torch.randn(4, dtype=torch.complex64),
             torch.frombuffer(raw, dtype=torch.float32, offset=1, count=64), base.as_subclass(NoPointer)]
    for t in cases:
        assert host_row(t, False) is None, t.dtype
        StatsBatch().add(0, t)  # and the Python path summarises it as before (no error)


def test_the_statistics_never_join_the_autograd_graph(host_row):
    x = torch.randn(10, requires_grad=True)
    y = x * 2
    assert host_row(y, False) is not None
    assert y.grad_fn is not None and y.grad_fn.next_functions[0][0].variable is x
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((10,), 2.0))


def test_statsbatch_takes_the_fast_path_only_with_the_kernel(host_row):
    assert StatsBatch().host_row is host_row
    assert StatsBatch(force_batched=True).host_row is None
    assert StatsBatch(fast=False).host_row is None


def _fresh(monkeypatch, tmp_path):
    monkeypatch.setenv(build.ENV_DIR, str(tmp_path / "cache"))
    build.reset()
    fastpath.reset()


def test_the_switch_turns_it_off(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    try:
        monkeypatch.setenv(fastpath.ENV_SWITCH, "0")
        assert fastpath.module() is None
        assert build.load() is not None  # the kernel stays on
    finally:
        build.reset()
        fastpath.reset()


def test_without_python_headers_or_with_a_failed_build_the_python_path_runs(tmp_path, monkeypatch, caplog):
    _fresh(monkeypatch, tmp_path)
    try:
        monkeypatch.setattr(fastpath, "include_dir", lambda: None)
        with caplog.at_level(logging.INFO, logger="engines.native"):
            assert fastpath.module() is None
        assert "no Python.h" in caplog.text
        fastpath.reset()
        monkeypatch.undo()
        _fresh(monkeypatch, tmp_path)
        assert build.load() is not None  # the kernel library first, with the real compiler
        fake_cc = tmp_path / "cc"
        fake_cc.write_text("#!/bin/sh\necho 'no compiling today' >&2\nexit 1\n")
        fake_cc.chmod(0o755)
        monkeypatch.setattr(build, "compiler", lambda: str(fake_cc))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="engines.native"):
            assert fastpath.module() is None
        assert "no compiling today" in caplog.text
        assert not list((tmp_path / "cache").glob("fastpath-*"))  # no partial library left behind
    finally:
        build.reset()
        fastpath.reset()


def test_the_extension_is_built_once_and_cached(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    try:
        assert fastpath.module() is not None
        (path,) = (tmp_path / "cache").glob("fastpath-*.so")
        fastpath.reset()

        def no_compiler(*args, **kwargs):
            raise AssertionError("compiled again")

        monkeypatch.setattr(build.subprocess, "run", no_compiler)
        assert fastpath.module() is not None
    finally:
        build.reset()
        fastpath.reset()


@pytest.mark.parametrize("options", [dict(level="L1"), dict(level="mix"), dict(level="L1", summary_mode="md5")],
                         ids=["L1", "mix", "L1-md5"])
def test_a_demo_capture_records_the_same_with_and_without_it(host_row, tmp_path, monkeypatch, options):
    """The demo under capture: every statistics column (and md5's CRC32) of every row is the same, and the fast
    path took every dense float tensor (none reached the Python path while it was on)."""
    taken = []
    general = StatsBatch.add_general

    def note_dense(self, entry, t):
        if t.dtype.is_floating_point and t.dim() and t.is_contiguous() and not t.is_neg() and t.numel():
            taken.append(t.shape)
        return general(self, entry, t)

    monkeypatch.setattr(StatsBatch, "add_general", note_dense)
    fast, _, _ = run_demo(tmp_path / "fast", TINY2, **options)
    assert not taken  # every dense float tensor went through the fast path
    monkeypatch.setattr(tensor_stats, "host_row", lambda: None)
    monkeypatch.setattr(native_crc, "fast_at", lambda: None)
    slow, _, _ = run_demo(tmp_path / "slow", TINY2, **options)
    assert taken  # and through the Python path without it
    try:
        a, b = fast.reader.tensors(), slow.reader.tensors()
        assert len(a["max"]) == len(b["max"]) > 500
        columns = ["max", "min", "mean", "norm", "nan_count", "dtype", "shape", "slot", "record", "numel"]
        if options.get("summary_mode") == "md5":
            columns.append("crc32")
            assert (np.asarray(a["crc32"]) != 0).sum() > 500
        for col in columns:
            x, y = np.asarray(a[col]), np.asarray(b[col])
            if x.dtype.kind == "f":
                assert np.array_equal(x, y, equal_nan=True), col
            else:
                assert (x == y).all(), col
    finally:
        fast.close()
        slow.close()


def test_crc32_at_gives_zlibs_value():
    fn = native_crc.fast_at()
    if fn is None:
        pytest.skip("no fast path")
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, 100000, dtype=np.uint8).tobytes()
    buf = np.frombuffer(raw, dtype=np.uint8)
    base = buf.__array_interface__["data"][0]
    for off, n in ((0, 0), (1, 5), (13, 64), (2, 1000), (0, 99999), (7, 65536)):
        assert fn(base + off, n) == zlib.crc32(raw[off:off + n])
    with pytest.raises(ValueError):
        fn(0, 10)
