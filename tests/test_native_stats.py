"""The native fused statistics kernel (engines/native/, decision 28): values against an independent float64
reference, determinism (thread counts, vector clones), the build cache, and the fallback when it cannot build."""

import ctypes
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_capture_support import fused_stats as reference
from test_capture_support import round_to

from engines.adapters.torch import tensor_stats
from engines.adapters.torch.tensor_stats import StatsBatch
from engines.native import build
from engines.native.stats import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, FusedStats, fused_stats

CODES = {torch.float32: FLOAT32, torch.float64: FLOAT64, torch.float16: FLOAT16, torch.bfloat16: BFLOAT16}


@pytest.fixture(scope="module")
def kernel() -> FusedStats:
    k = fused_stats()
    assert k is not None, "the native kernel did not build here (a C compiler is part of the test setup)"
    return k


def run(kernel: FusedStats, t: torch.Tensor, out_dtype=None, threads: int = 1):
    assert t.is_contiguous()
    code = CODES[t.dtype]
    out = kernel.run(t.data_ptr(), t.numel(), code, CODES[out_dtype] if out_dtype else code, threads)
    return list(out)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 65536 * 2 + 31])
def test_kernel_matches_the_float64_reference(kernel, dtype, n):
    torch.manual_seed(n)
    t = (torch.randn(n, dtype=torch.float64) * 30 + 2).to(dtype)
    got = run(kernel, t)
    mx, mn, s, nrm = reference(t)
    assert got[0] == mx and got[1] == mn and got[4:] == [0.0, 0.0, 0.0]
    if dtype is torch.float64:  # float64 accumulated in the kernel's order: within a few ulps of the exact sum
        assert got[2] == pytest.approx(s, rel=1e-12, abs=1e-12) and got[3] == pytest.approx(nrm, rel=1e-13)
    else:
        assert got[2] == s and got[3] == nrm
    # and within the type's rounding of torch's own reductions
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 2e-2, torch.bfloat16: 5e-2}[dtype]
    assert got[3] == pytest.approx(float(torch.linalg.vector_norm(t.double())), rel=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_half_types_widen_to_float32_at_precision_high(kernel, dtype):
    torch.manual_seed(1)
    t = (torch.randn(5000) * 300).to(dtype)
    got = run(kernel, t, torch.float32)
    mx, mn, s, nrm = reference(t, "high")
    assert got[:4] == [mx, mn, s, nrm]


def test_sum_and_norm_round_once_to_the_type_and_overflow_like_it(kernel):
    t = torch.full((100,), 1000.0, dtype=torch.float16)  # sum 1e5 > 65504: inf in float16, as torch's sum
    got = run(kernel, t)
    assert got[2] == math.inf == float(t.sum()) and got[3] == 10000.0
    assert got[4:] == [0.0, 0.0, 0.0]  # nothing non-finite in the tensor itself
    assert run(kernel, t, torch.float32)[2] == 100000.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rounding_of_float64_values_matches_exact_rounding(kernel, dtype):
    """One-element float64 arrays summarised with a narrower out type: the kernel's rounding against exact
    arithmetic, and against numpy's own float64 -> float32/float16 conversions where it has them."""
    rng = np.random.default_rng(0)
    lo = {torch.float32: -150, torch.float16: -26, torch.bfloat16: -135}[dtype]
    hi = {torch.float32: 129, torch.float16: 17, torch.bfloat16: 129}[dtype]
    values = rng.standard_normal(3000) * np.exp2(rng.integers(lo, hi, 3000).astype(float))
    # ties to even and the edges of the range
    values = np.concatenate([values, [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65504.0, 65519.99, 65520.0, 2.0 ** -25,
                                      1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -24, 3.4e38, 3.403e38]])
    np_type = {torch.float32: np.float32, torch.float16: np.float16}.get(dtype)
    for v in values:
        t = torch.tensor([v], dtype=torch.float64)
        got = run(kernel, t, dtype)[2]
        want = round_to(float(v), dtype)
        assert same(got, want), (v, got, want)
        if np_type is not None:
            with np.errstate(over="ignore"):
                assert same(got, float(np.float64(v).astype(np_type))), v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_nan_and_inf_counts_and_propagation(kernel, dtype):
    t = torch.tensor([1.0, float("nan"), float("inf"), -3.0, float("-inf"), float("inf")] * 7, dtype=dtype)
    got = run(kernel, t)
    assert math.isnan(got[0]) and math.isnan(got[1]) and math.isnan(got[2])  # as torch's amax / amin / sum
    assert got[4:] == [7.0, 14.0, 7.0]
    inf_only = torch.tensor([1.0, float("inf"), -2.0], dtype=dtype)
    got = run(kernel, inf_only)
    assert got[:4] == [math.inf, -2.0, math.inf, math.inf] and got[4:] == [0.0, 1.0, 0.0]


def test_subnormal_half_values_are_exact(kernel):
    bits = torch.arange(0, 1024, dtype=torch.int16)  # every float16 subnormal (and zero)
    t = bits.view(torch.float16)
    got = run(kernel, t, torch.float32)
    assert got[0] == float(t.max()) and got[2] == round_to(math.fsum(t.double().tolist()), torch.float32)


def _build_variant(folder, name: str, *defines: str) -> FusedStats:
    path = folder / name
    subprocess.run([build.compiler(), *build.FLAGS, *defines, "-o", str(path), *map(str, build.SOURCES), "-lm"], check=True)
    return FusedStats(build._bind(path))


@pytest.fixture(scope="module")
def plain_kernel(tmp_path_factory) -> FusedStats:
    """The library built without run-time vector clones (baseline x86-64 / any CPU: float16 widened by integer
    operations, not F16C)."""
    return _build_variant(tmp_path_factory.mktemp("plain"), "plain.so", "-DPT_NO_CLONES")


@pytest.fixture(scope="module")
def avx2_kernel(tmp_path_factory) -> FusedStats:
    """The library with the AVX2 clone and the baseline only: on an AVX-512 CPU the default build runs its
    AVX-512 clone, so this is how the AVX2 one is tested there (on a CPU without AVX2, the baseline again)."""
    return _build_variant(tmp_path_factory.mktemp("avx2"), "avx2.so",
                          '-DPT_CLONE_TARGETS="arch=x86-64-v3","default"')


@pytest.mark.parametrize("which", ["cloned", "plain", "avx2"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_half_value_widens_exactly(kernel, plain_kernel, avx2_kernel, which, dtype):
    """Each of the 65,536 bit patterns alone: max = min = the value widened exactly (subnormals, signed zeros,
    infinities; NaN stays NaN), and in a block of 1,024 (the staged loop) the extremes of the finite values."""
    k = {"cloned": kernel, "plain": plain_kernel, "avx2": avx2_kernel}[which]
    t = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    want = t.float().tolist()
    ptr, code = t.data_ptr(), CODES[dtype]
    for i, w in enumerate(want):
        out = k.run(ptr + 2 * i, 1, code, FLOAT32, 1)
        assert same(out[0], w) and same(out[1], w), (i, out[0], w)
        assert math.isnan(w) or math.copysign(1.0, out[0]) == math.copysign(1.0, w), (i, out[0], w)
    finite = t[torch.isfinite(t)]
    for start in range(0, finite.numel(), 1024):
        chunk = finite[start:start + 1024]
        got = run(k, chunk, torch.float32)
        assert got[0] == float(chunk.max()) and got[1] == float(chunk.min()), start


def test_results_do_not_depend_on_the_thread_count(kernel):
    torch.manual_seed(5)
    t = torch.randn(65536 * 40 + 123) * 1e3 + 0.1
    one = run(kernel, t, threads=1)
    for threads in (2, 3, 8):
        assert run(kernel, t, threads=threads) == one
    d = torch.randn(65536 * 20 + 7, dtype=torch.float64)
    assert run(kernel, d, threads=1) == run(kernel, d, threads=4)


def test_vector_clones_give_the_same_bits(kernel, plain_kernel, avx2_kernel):
    """The library picks a vector width (and F16C for float16) at run time; the portable build (no clones) and
    the AVX2 clone must agree bit for bit with what this CPU runs."""
    torch.manual_seed(9)
    for dtype in CODES:
        for n in (70001, 1000, 17):
            t = (torch.randn(n) * 5).to(dtype)
            for out in (None, torch.float32):
                want = run(kernel, t, out)
                assert run(plain_kernel, t, out) == want and run(avx2_kernel, t, out) == want, dtype
    for dtype in CODES:  # the strided walk feeds the same block code
        for view in strided_views(dtype):
            want = list(kernel.run_strided(view.data_ptr(), view.shape, view.stride(), CODES[dtype], FLOAT32))
            for k in (plain_kernel, avx2_kernel):
                assert list(k.run_strided(view.data_ptr(), view.shape, view.stride(), CODES[dtype], FLOAT32)) \
                    == want, dtype


def test_statsbatch_uses_the_kernel_for_dense_and_strided_views(kernel):
    """Dense blocks as before; any other strided view (a slice, an expanded tensor) by the strided walk: the
    kernel's figures of the view's contiguous copy (before, torch's reductions: other last bits of the sum)."""
    torch.manual_seed(4)
    base = torch.randn(300, 200)
    batch = StatsBatch()
    for i, t in enumerate((base, base.t(), base[:, ::2], base.unsqueeze(0).expand(3, 300, 200))):
        batch.add(i, t)
    want_dense = list(reference(base))
    # (a row the kernel filled is a tuple: engines/adapters/torch/tensor_stats.py)
    assert list(batch.host[0][:4]) == want_dense and list(batch.host[1][:4]) == want_dense
    for i, view in ((2, base[:, ::2]), (3, base.unsqueeze(0).expand(3, 300, 200))):
        assert list(batch.host[i]) == run(kernel, view.contiguous())[:4] + [view.numel(), batch.host[0][5], 0, 0, 0]
    assert list(batch.host[0][4:]) == [60000, batch.host[0][5], 0, 0, 0]


def strided_views(dtype):
    """Views no dense read covers, of every kind the walk handles; some span several blocks (65,536 elements)."""
    torch.manual_seed(12)
    base = (torch.randn(8, 64, 768) * 3).to(dtype)
    big = (torch.randn(400, 700) * 2 + 0.25).to(dtype)
    return [base[..., 256:512],                                     # a slice of the last dimension (q of qkv)
            base.view(8, 64, 3, 4, 64)[:, :, 1].transpose(1, 2),    # heads: a slice, then a transpose
            base.permute(2, 0, 1),                                  # inner stride not 1
            base[:, ::3, 5:700:7],                                  # steps in two dimensions
            big.t()[3:, 7:],                                        # a transposed slice: 3 blocks
            big[:, :699],                                           # rows of 699 of 700: 5 blocks
            (torch.randn(5, 1) * 4).to(dtype).expand(5, 30000),     # stride 0
            big[::2, ::2].unsqueeze(1).expand(200, 2, 350),         # stride 0 between strided dimensions
            big[7:9, 3:9].unsqueeze(1),                             # a dimension of 1
            big[:, 5]]                                              # one column: one dimension, stride 700


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_strided_views_give_the_kernels_figures_of_their_contiguous_copy(kernel, dtype):
    for i, view in enumerate(strided_views(dtype)):
        assert not view.is_contiguous() and (view.dim() < 2 or not view.mT.is_contiguous()), i
        dense = view.contiguous()
        for out in (None, torch.float32):
            code = CODES[out] if out else CODES[dtype]
            got = list(kernel.run_strided(view.data_ptr(), view.shape, view.stride(), CODES[dtype], code))
            assert got == run(kernel, dense, out), (i, out)
        for high in (False, True):
            batch = StatsBatch(high_precision=high)
            batch.add(0, view)
            batch.add(1, dense)
            assert list(batch.host[0]) == list(batch.host[1]), (i, high)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_strided_views_count_nan_and_inf_like_their_copy(kernel, dtype):
    torch.manual_seed(13)
    big = torch.randn(300, 500).to(dtype)
    big[4, 10] = float("inf")
    big[200, 3] = -float("inf")
    big[250, 100] = float("inf")
    view = big.t()[2:, :]  # holds all three
    got = list(kernel.run_strided(view.data_ptr(), view.shape, view.stride(), CODES[dtype], CODES[dtype]))
    want = run(kernel, view.contiguous())
    assert all(same(a, b) for a, b in zip(got, want)) and got[4:] == [0.0, 2.0, 1.0]
    big[9, 9] = float("nan")
    got = list(kernel.run_strided(view.data_ptr(), view.shape, view.stride(), CODES[dtype], CODES[dtype]))
    want = run(kernel, view.contiguous())
    assert all(same(a, b) for a, b in zip(got, want)) and got[4:] == [1.0, 2.0, 1.0] and math.isnan(got[0])


def test_strided_results_do_not_depend_on_the_thread_count(kernel):
    """Large views are walked by several threads (whole blocks each, their own walk and scratch): the same bits
    as one thread and as the contiguous copy, NaN/inf counts included."""
    torch.manual_seed(14)
    big = torch.randn(1500, 1401) * 3 + 0.5
    view = big.t()[:, 1:]  # 1401 x 1499: 33 blocks, uneven rows
    want = run(kernel, view.contiguous())
    for threads in (1, 2, 3, 8):
        got = list(kernel.run_strided(view.data_ptr(), view.shape, view.stride(), FLOAT32, FLOAT32, threads))
        assert got == want, threads
    d = (torch.randn(1100, 1100, dtype=torch.float64))[:, :1090]
    want = run(kernel, d.contiguous())
    assert list(kernel.run_strided(d.data_ptr(), d.shape, d.stride(), FLOAT64, FLOAT64, 4)) == want
    big[700, 3] = float("inf")
    big[9, 900] = float("nan")
    want = run(kernel, view.contiguous())
    got = list(kernel.run_strided(view.data_ptr(), view.shape, view.stride(), FLOAT32, FLOAT32, 3))
    assert all(same(a, b) for a, b in zip(got, want)) and got[4:] == [1.0, 1.0, 0.0]
    batch = StatsBatch()  # StatsBatch passes torch's thread count from THREADS_FROM elements
    batch.add(0, view)
    assert all(same(a, b) for a, b in zip(batch.host[0][:4], want[:4]))


def test_the_strided_walk_refuses_negative_strides(kernel):
    t = torch.randn(10)
    with pytest.raises(ValueError):
        kernel.run_strided(t.data_ptr(), (5,), (-1,), FLOAT32, FLOAT32)


def test_views_the_raw_pointer_misreads_take_torch(kernel):
    """A negative view (its values are the negation of the memory the pointer reads) and a misaligned buffer
    (a torch.frombuffer at an odd byte offset) are dense, but not what the kernel may read: torch's reductions."""
    torch.manual_seed(8)
    base = torch.randn(30, 20)
    neg = torch._neg_view(base)
    assert neg.is_neg() and neg.is_contiguous()
    raw = bytearray(base.numpy().tobytes() + bytes(8))
    cases = [neg]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        odd = torch.frombuffer(raw, dtype=dtype, offset=1, count=64)
        assert odd.is_contiguous() and odd.data_ptr() % dtype.itemsize
        cases.append(odd)
    batch = StatsBatch()
    for i, t in enumerate(cases):
        batch.add(i, t)
        want = [float(t.max()), float(t.min()), float(t.sum()), float(torch.linalg.vector_norm(t))]
        assert all(same(a, b) for a, b in zip(batch.host[i][:4], want)), (i, batch.host[i][:4], want)


def test_a_tensor_without_a_pointer_takes_torch(kernel, monkeypatch):
    """If reading the pointer fails (a tensor whose storage cannot be read that way), the record still gets
    torch's statistics: capture never fails where torch's reductions would not."""
    t = torch.randn(40, 5)
    batch = StatsBatch()

    class NoPointer(torch.Tensor):
        def data_ptr(self):
            raise RuntimeError("no data pointer here")

    nt = t.as_subclass(NoPointer)
    batch.add(0, nt)
    assert batch.host[0][:4] == [float(t.max()), float(t.min()), float(t.sum()), float(torch.linalg.vector_norm(t))]


def test_capture_leaves_the_tensor_untouched(kernel):
    torch.manual_seed(6)
    t = torch.randn(1000, 33)
    before = t.clone()
    StatsBatch().add(0, t)
    assert torch.equal(t, before)


def test_a_failed_build_falls_back_to_torch_with_one_log_line(tmp_path, monkeypatch, caplog):
    fake_cc = tmp_path / "cc"
    fake_cc.write_text("#!/bin/sh\necho 'no compiling today' >&2\nexit 1\n")
    fake_cc.chmod(0o755)
    monkeypatch.setenv("CC", str(fake_cc))
    monkeypatch.setenv(build.ENV_DIR, str(tmp_path / "cache"))
    build.reset()
    try:
        with caplog.at_level(logging.INFO, logger="engines.native"):
            batch = StatsBatch()
            assert batch._fused is None and StatsBatch()._fused is None
        lines = [r for r in caplog.records if r.name == "engines.native"]
        assert len(lines) == 1 and "no compiling today" in lines[0].getMessage()
        t = torch.randn(64, 50)
        batch.add(0, t)  # torch's reductions, bit for bit
        assert batch.host[0][:4] == [float(t.max()), float(t.min()), float(t.sum()),
                                     float(torch.linalg.vector_norm(t))]
        assert not list((tmp_path / "cache").glob("*.so*"))  # no partial library left behind
    finally:
        build.reset()


def test_no_compiler_and_the_switch_fall_back(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(build.ENV_DIR, str(tmp_path / "cache"))
    build.reset()
    try:
        monkeypatch.setenv("CC", str(tmp_path / "missing-cc"))
        with caplog.at_level(logging.INFO, logger="engines.native"):
            assert build.load() is None
        assert "no C compiler" in caplog.text
        build.reset()
        monkeypatch.delenv("CC")
        monkeypatch.setenv(build.ENV_SWITCH, "0")
        assert build.load() is None and tensor_stats.fused_stats() is None
    finally:
        build.reset()


def test_the_library_is_built_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(build.ENV_DIR, str(tmp_path / "cache"))
    build.reset()
    try:
        assert build.load() is not None
        (path,) = (tmp_path / "cache").glob("stats-*.so")
        assert path == build.library_path(build.compiler())
        assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"
        build.reset()

        def no_compiler(*args, **kwargs):
            raise AssertionError("compiled again")

        monkeypatch.setattr(build.subprocess, "run", no_compiler)
        assert build.load() is not None
    finally:
        build.reset()


def test_a_library_others_may_write_is_not_loaded(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(build.ENV_DIR, str(tmp_path / "cache"))
    build.reset()
    try:
        assert build.load() is not None
        os.chmod(tmp_path / "cache", 0o777)
        build.reset()
        with caplog.at_level(logging.INFO, logger="engines.native"):
            assert build.load() is None
        assert "writable by others" in caplog.text
    finally:
        build.reset()


def test_the_kernel_is_framework_free():
    for source in build.SOURCES:
        src = source.read_text()
        assert "#include <torch" not in src and "Python.h" not in src
    lib = build.load()
    assert isinstance(lib, ctypes.CDLL)


def test_an_unwritable_cache_folder_builds_in_the_temporary_folder(tmp_path, monkeypatch):
    """A read-only or missing home (containers, CI): the per-user folder under the temporary folder. (A path
    through a regular file cannot be created even by root.)"""
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    monkeypatch.delenv(build.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))
    monkeypatch.setattr(build.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    build.reset()
    try:
        assert build.load() is not None
        (path,) = (tmp_path / "tmp").glob("probe-tui-native-*/stats-*.so")
        assert path.parent.name == "probe-tui-native-%d" % os.getuid()
    finally:
        build.reset()


def test_ranks_building_at_once_all_load_one_library(tmp_path):
    """Several processes (torchrun ranks, pytest workers) on a fresh cache at the same moment: each compiles to
    a temporary file and renames it into place; all load a working library, one is left, no partial files."""
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "while not os.path.exists(%r): time.sleep(0.001)\n"
        "from engines.native.stats import fused_stats\n"
        "import ctypes\n"
        "k = fused_stats()\n"
        "v = (ctypes.c_float * 3)(1.0, -2.0, 4.0)\n"
        "out = k.run(ctypes.addressof(v), 3, 0, 0, 1)\n"
        "sys.exit(0 if list(out)[:3] == [4.0, -2.0, 3.0] else 3)\n" % str(go))
    env = dict(os.environ, PROBE_TUI_NATIVE_DIR=str(cache), PYTHONPATH=str(build.SOURCE.parents[2]))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    go.write_text("")
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in results), results
    assert [p.name for p in cache.iterdir()] == [build.library_path(build.compiler(), cache).name]


def test_strided_scratch_is_resident_only_where_written():
    """Issue 21: the strided walk's 512 KiB scratch is an anonymous mapping, not a zero-filled heap block: the first
    strided read of a small view adds a page or two of resident memory, not the whole scratch."""
    code = (
        "import torch\n"
        "from engines.native.stats import FLOAT32, fused_stats\n"
        "def anon():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('RssAnon:'):\n"
        "            return int(line.split()[1])\n"
        "k = fused_stats()\n"
        "assert k is not None\n"
        "view = torch.arange(12.0).reshape(3, 4).t()\n"
        "before = anon()\n"
        "got = list(k.run_strided(view.data_ptr(), view.shape, view.stride(), FLOAT32, FLOAT32))\n"
        "after = anon()\n"
        "assert got[:3] == [11.0, 0.0, 66.0] and abs(got[3] - 506 ** 0.5) < 1e-5, got\n"
        "print(after - before)\n"
    )
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc: resident memory unread here")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 256, done.stdout  # KiB; the zero-filled scratch was 512
