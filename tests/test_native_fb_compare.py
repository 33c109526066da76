"""free_benchmark's native comparison kernel (engines/native/fb_compare.c): every figure against an independent
float64 reference and against the framework path bit for bit, thread counts, what goes to the framework path,
and the fallback when the kernel is unavailable or fails its self-check."""

import ctypes
import logging
import math
import subprocess

import numpy as np
import pytest
import torch

from engines.adapters.torch import free_benchmark_compare as cmp
from engines.native import build
from engines.native import fb_compare as native

CODES = {torch.float32: native.FLOAT32, torch.float16: native.FLOAT16, torch.bfloat16: native.BFLOAT16}
DTYPES = list(CODES)
F32_MAX = float(np.finfo(np.float32).max)


@pytest.fixture(scope="module")
def kernel() -> native.FusedCompare:
    k = native.fused_compare()
    assert k is not None, "the native kernel did not build here (a C compiler is part of the test setup)"
    return k


def reference(a: torch.Tensor, b: torch.Tensor, tol: float):
    """(min a*b, min r, max r, ratio) in float64, each IEEE float32 operation as the exact result rounded once to
    float32 (a float64 product of two float32 values is exact; a float64 quotient rounded again to float32 is the
    correctly rounded one: 53 >= 2*24 + 2)."""
    x = a.detach().double().numpy().ravel()
    y = b.detach().double().numpy().ravel()
    with np.errstate(all="ignore"):
        z = (x * y).astype(np.float32).astype(np.float64)
        t = float(np.float32(tol))
        ax, ay = np.abs(x), np.abs(y)
        ax = np.where(ax < t, t, ax)  # NaN stays NaN
        ay = np.where(ay < t, t, ay)
        r = (ax / ay).astype(np.float32).astype(np.float64)
    r = np.where(np.isnan(r), 1.0, np.where(r > F32_MAX, F32_MAX, r))
    zmin = math.nan if np.isnan(z).any() else float(z.min())
    lo, hi = float(r.min()), float(r.max())
    ratio = max(hi, math.inf if lo == 0 else float(np.float32(1.0 / lo)))
    if zmin < float(np.float32(-(tol * tol))):
        ratio = math.inf
    return zmin, lo, hi, ratio


def pair(n: int, seed: int, special: bool = True):
    gen = torch.Generator().manual_seed(seed)
    b = torch.randn(n, generator=gen) * 10.0 ** torch.randint(-7, 4, (n,), generator=gen).float()
    a = b * (1 + 1e-2 * torch.randn(n, generator=gen))
    if special and n > 12:
        a[3], b[4], a[5], b[5] = math.nan, math.nan, math.inf, math.inf
        a[6], b[7], a[8] = math.inf, -math.inf, 0.0
        b[9], a[10], b[10] = -0.0, 1e-40, 1e-39  # float32 subnormals
        a[11] = -a[11]  # a sign flip
    return a, b


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def run(kernel, a: torch.Tensor, b: torch.Tensor, tol: float, threads: int = 1):
    return kernel.run(a.data_ptr(), CODES[a.dtype], b.data_ptr(), CODES[b.dtype], b.numel(), tol, threads)


@pytest.mark.parametrize("a_dtype", DTYPES)
@pytest.mark.parametrize("b_dtype", DTYPES)
def test_every_figure_equals_the_float64_reference(kernel, a_dtype, b_dtype):
    for i, n in enumerate((1, 15, 16, 17, 100, 1000, 4099)):
        for special in (False, True):
            a, b = pair(n, 10 * i + special, special)
            a, b = a.to(a_dtype), b.to(b_dtype)
            for tol in (1e-4, 1e-2, 1e-8):
                got, want = run(kernel, a, b, tol), reference(a, b, tol)
                assert all(same(g, w) for g, w in zip(got, want)), (n, special, tol, got, want)


def test_a_sign_flip_counts_only_without_a_nan_product(kernel):
    """torch's ``amin`` of the products is NaN when one is NaN, and NaN < limit is false: no sign flip then."""
    a = torch.tensor([1.0, -2.0, 3.0] * 7)
    b = torch.tensor([1.0, 2.0, 3.0] * 7)
    assert run(kernel, a, b, 1e-4)[3] == math.inf
    a[-1] = math.nan
    got = run(kernel, a, b, 1e-4)
    assert math.isnan(got[0]) and got[3] == 1.0
    assert got[3] == cmp.resolve([cmp.tensor_ratio(a, b, 1e-4)])[0]


def test_a_product_at_the_limit_is_not_a_flip(kernel):
    tol = 1e-2
    limit = float(np.float32(-(tol * tol)))
    a = torch.tensor([limit, 1.0], dtype=torch.float32)
    b = torch.tensor([1.0, 1.0], dtype=torch.float32)
    assert run(kernel, a, b, tol)[3] < math.inf
    a[0] = float(np.nextafter(np.float32(limit), np.float32(-1)))
    assert run(kernel, a, b, tol)[3] == math.inf


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_thread_counts_give_the_same_figures(kernel, threads):
    a, b = pair(3 << 18, 5)
    for a_dtype, b_dtype in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32)):
        x, y = a.to(a_dtype), b.to(b_dtype)
        one = run(kernel, x, y, 1e-4, 1)
        many = run(kernel, x, y, 1e-4, threads)
        assert all(same(g, w) for g, w in zip(one, many))
        assert all(same(g, w) for g, w in zip(one, reference(x, y, 1e-4)))


def _framework(a, b, tol, monkeypatch):
    monkeypatch.setattr(cmp, "USE_NATIVE", False)
    try:
        return cmp.resolve([cmp.tensor_ratio(a, b, tol)])[0]
    finally:
        monkeypatch.setattr(cmp, "USE_NATIVE", True)


def test_the_ratio_equals_the_framework_path_bit_for_bit(kernel, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    for i in range(60):
        n = int(torch.randint(1, 5000, (1,), generator=gen))
        a, b = pair(n, 100 + i, special=i % 2 == 0)
        if i % 4 == 1:  # near-equal pairs: ratios near 1, as in a real check
            b = a * (1 + 1e-6 * torch.randn(n, generator=gen))
        a, b = a.to(DTYPES[i % 3]), b.to(DTYPES[(i // 3) % 3])
        tol = (1e-4, 1e-2, 1e-8, 1e-3)[i % 4]
        assert cmp._native_ratio(a, b, tol) is not None
        got = cmp.resolve([cmp.tensor_ratio(a, b, tol)])[0]
        assert same(got, _framework(a, b, tol, monkeypatch)), (i, a.dtype, b.dtype, tol)


def test_pairs_the_kernel_cannot_read_go_to_the_framework_path(kernel):
    a, b = pair(64, 1)
    m, n = a.reshape(8, 8), b.reshape(8, 8)
    assert cmp._native_ratio(m.t(), n.t(), 1e-4) is None  # strided
    assert cmp._native_ratio(a.double(), b.double(), 1e-4) is None  # float64
    assert cmp._native_ratio(a, b.double(), 1e-4) is None
    neg = torch._neg_view(a)  # its raw data are not its values
    assert neg.is_neg() and neg.is_contiguous()
    assert cmp._native_ratio(neg, b, 1e-4) is None
    assert cmp.resolve([cmp.tensor_ratio(neg, b, 1e-4)]) == cmp.resolve([cmp.tensor_ratio(-a, b, 1e-4)])
    raw = bytearray(4 * 61 + 2)
    bytes_ = torch.frombuffer(raw, dtype=torch.float32, count=60, offset=2)  # misaligned by 2 bytes
    bytes_.copy_(a[:60])
    assert bytes_.data_ptr() % 4 != 0
    assert cmp._native_ratio(bytes_, b[:60], 1e-4) is None
    # the strided pair's ratio is still the formula's
    assert cmp.resolve([cmp.tensor_ratio(m.t(), n.t(), 1e-4)]) == cmp.resolve([cmp.tensor_ratio(a, b, 1e-4)])


def test_bad_arguments_raise(kernel):
    x = torch.zeros(4)
    with pytest.raises(ValueError):
        kernel.run(x.data_ptr(), 1, x.data_ptr(), 0, 4, 1e-4)  # float64 is not taken


def test_a_failed_self_check_falls_back_with_one_log_line(monkeypatch, caplog):
    a, b = pair(100, 2)
    a = a.bfloat16()
    want = cmp.resolve([cmp.tensor_ratio(a, b, 1e-4)])

    def broken(kernel):
        raise RuntimeError("self-check failed: broken on purpose")

    native.reset()
    monkeypatch.setattr(native, "self_check", broken)
    try:
        with caplog.at_level(logging.INFO, logger="engines.native"):
            assert native.fused_compare() is None
            assert cmp._native_ratio(a, b, 1e-4) is None
            assert cmp.resolve([cmp.tensor_ratio(a, b, 1e-4)]) == want
            assert native.fused_compare() is None
        lines = [r for r in caplog.records if r.name == "engines.native"]
        assert len(lines) == 1 and "broken on purpose" in lines[0].getMessage()
    finally:
        monkeypatch.undo()
        native.reset()
    assert native.fused_compare() is not None


def test_without_the_library_the_framework_path_serves(monkeypatch):
    a, b = pair(100, 4)
    want = cmp.resolve([cmp.tensor_ratio(a, b, 1e-4)])
    native.reset()
    build.reset()
    monkeypatch.setenv(build.ENV_SWITCH, "0")
    try:
        assert native.fused_compare() is None
        assert cmp._native_ratio(a, b, 1e-4) is None
        assert cmp.resolve([cmp.tensor_ratio(a, b, 1e-4)]) == want
    finally:
        monkeypatch.undo()
        native.reset()
        build.reset()
    assert native.fused_compare() is not None


def test_the_self_check_catches_a_wrong_kernel():
    class Wrong:
        out = (ctypes.c_double * 4)()

        def run(self, *args):
            return (0.0, 1.0, 1.0, 1.0)

    with pytest.raises(RuntimeError):
        native.self_check(Wrong())


# -- the noise perturbations --------------------------------------------------------------------------------------

def _torch_noise(fn, x, monkeypatch):
    """The framework path's output (the refusal left to the caller: the flag deferred)."""
    from engines.adapters.torch import free_benchmark_perturb as fp

    monkeypatch.setattr(fp, "USE_NATIVE", False)
    monkeypatch.setattr(fp, "DEFER_REFUSAL_ON_CPU", True)
    try:
        return fn(x, [])
    finally:
        monkeypatch.setattr(fp, "USE_NATIVE", True)
        monkeypatch.setattr(fp, "DEFER_REFUSAL_ON_CPU", False)


def _bits(t):
    return t.view({torch.float32: torch.int32}.get(t.dtype, torch.int16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["add_noise", "bit_noise"])
def test_the_noise_equals_torch_on_every_half_value(kernel, monkeypatch, dtype, mode):
    """Every one of the 65536 values of the dtype (NaN, inf, subnormals, both zeros, values at the threshold)."""
    from engines.adapters.torch import free_benchmark_perturb as fp

    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    want = _torch_noise(getattr(fp, mode), x, monkeypatch)
    out = torch.empty_like(x)
    top = kernel.noise(x.data_ptr(), CODES[dtype], x.numel(), native.ADD_NOISE if mode == "add_noise" else
                       native.BIT_NOISE, fp.epsilon(str(dtype)), fp._threshold(dtype, mode), out.data_ptr())
    assert torch.equal(_bits(out), _bits(want)) and math.isnan(top)
    finite = x[torch.isfinite(x)]
    out = torch.empty_like(finite)
    top = kernel.noise(finite.data_ptr(), CODES[dtype], finite.numel(), 0, 1e-4, 0.01, out.data_ptr())
    assert top == float(finite.abs().max())


@pytest.mark.parametrize("mode", ["add_noise", "bit_noise"])
def test_the_noise_equals_torch_on_float32(kernel, monkeypatch, mode):
    from engines.adapters.torch import free_benchmark_perturb as fp

    gen = torch.Generator().manual_seed(0)
    scaled = torch.randn(1 << 16, generator=gen) * 10.0 ** torch.randint(-12, 6, (1 << 16,), generator=gen).float()
    scaled[:7] = torch.tensor([math.inf, -math.inf, 1e-4, -1e-4, 1.0000001e-4, 0.0, -0.0])
    raw = torch.randint(-2 ** 31, 2 ** 31 - 1, (1 << 16,), generator=gen, dtype=torch.int32).view(torch.float32)
    for x in (scaled, raw[~torch.isnan(raw)], raw, scaled[:5000]):
        want = _torch_noise(getattr(fp, mode), x, monkeypatch)
        if math.isnan(float(x.abs().max())) or not float(x.abs().max()) >= 1e-8:
            with pytest.raises(fp.Cancelled, match="maximum value is less than the minimum threshold"):
                getattr(fp, mode)(x)
            continue
        got = getattr(fp, mode)(x)
        assert torch.equal(_bits(got), _bits(want)) and got.shape == x.shape and got.stride() == x.stride()


@pytest.mark.parametrize("mode", ["add_noise", "bit_noise"])
def test_the_native_noise_refuses_what_torch_refuses(kernel, mode):
    """The refusal rule, max |x| < eps (NaN included), read from the kernel's maximum: the same calls refused."""
    from engines.adapters.torch import free_benchmark_perturb as fp

    cases = [torch.full((64,), 1e-5, dtype=torch.bfloat16), torch.tensor([1.0, math.nan] * 40),
             torch.full((10,), 1e-9), torch.full((3, 5), 2.0, dtype=torch.float16)]
    for x in cases:
        outcome = []
        for use in (True, False):
            fp.USE_NATIVE = use
            try:
                outcome.append(_bits(getattr(fp, mode)(x)).tolist())
            except fp.Cancelled as exc:
                outcome.append(str(exc))
            finally:
                fp.USE_NATIVE = True
        assert outcome[0] == outcome[1], (x, outcome)


def test_noise_inputs_the_kernel_cannot_read_take_torch(kernel, monkeypatch):
    from engines.adapters.torch import free_benchmark_perturb as fp

    x = torch.randn(64, 96)
    assert fp._native_noise(x, "add_noise", None) is not None
    assert fp._native_noise(x.t(), "add_noise", None) is None  # strided
    assert fp._native_noise(x.double(), "add_noise", None) is None
    assert fp._native_noise(torch._neg_view(x), "add_noise", None) is None
    assert fp._native_noise(x[:0], "add_noise", None) is None  # torch's path refuses an empty tensor
    monkeypatch.setattr(fp, "DEFER_REFUSAL_ON_CPU", True)
    assert fp._native_noise(x, "add_noise", []) is None  # the flag is wanted as a tensor: torch's path
    assert fp._native_noise(x, "add_noise", None) is not None
    native.reset()
    monkeypatch.setattr(native, "self_check", lambda k: (_ for _ in ()).throw(RuntimeError("off")))
    try:
        assert fp._native_noise(x, "add_noise", None) is None
        assert torch.equal(fp.add_noise(x), x + torch.where(x.abs() > 1e-4, 1e-8, 0.0))
    finally:
        monkeypatch.undo()
        native.reset()


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """The library built without run-time vector clones (baseline x86-64) and with the AVX2 clone and the
    baseline only (how the AVX2 code is tested on an AVX-512 CPU), each self-checked."""
    folder = tmp_path_factory.mktemp("fbvariants")
    out = {}
    for name, defines in (("plain", ["-DPT_NO_CLONES"]), ("avx2", ['-DPT_CLONE_TARGETS="arch=x86-64-v3","default"'])):
        path = folder / (name + ".so")
        subprocess.run([build.compiler(), *build.FLAGS, *defines, "-o", str(path), *map(str, build.SOURCES), "-lm"],
                       check=True)
        k = native.FusedCompare(ctypes.CDLL(str(path)))
        native.self_check(k)
        out[name] = k
    return out


@pytest.mark.parametrize("which", ["plain", "avx2"])
def test_every_build_gives_the_same_bits(kernel, variants, which):
    from engines.adapters.torch import free_benchmark_perturb as fp

    other = variants[which]
    for i, (a_dtype, b_dtype) in enumerate([(x, y) for x in DTYPES for y in DTYPES]):
        a, b = pair(3001, 50 + i)
        a, b = a.to(a_dtype), b.to(b_dtype)
        assert all(same(g, w) for g, w in zip(run(other, a, b, 1e-4), run(kernel, a, b, 1e-4)))
    for dtype in DTYPES:
        every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)  # every half value
        x = every.view(dtype) if dtype != torch.float32 else torch.cat([every.view(torch.bfloat16).float(),
                                                                        pair(4096, 9)[0]])
        for mode in (native.ADD_NOISE, native.BIT_NOISE):
            name = "add_noise" if mode == native.ADD_NOISE else "bit_noise"
            outs = []
            for k in (kernel, other):
                out = torch.empty_like(x)
                top = k.noise(x.data_ptr(), CODES[dtype], x.numel(), mode, fp.epsilon(str(dtype)),
                              fp._threshold(dtype, name), out.data_ptr())
                outs.append((_bits(out), top))
            assert torch.equal(outs[0][0], outs[1][0]) and same(outs[0][1], outs[1][1])
