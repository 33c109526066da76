"""The monitor's fused native kernel (engines/native/monitor_stats.c): every metric against an exact float64
reference (math.fsum), the counts against torch's own tests, determinism (thread counts, vector clones), the
monitor on the demo writing the kernel's values, and the fallback to the torch passes."""

import ctypes
import logging
import math
import subprocess

import numpy as np
import pytest
import torch
from test_monitor_stats import OPS, cases, same_bits
from test_monitor_stats import reference as torch_reference

from engines.adapters.torch import monitor_stats
from engines.adapters.torch.monitor_stats import bulk_metrics, native_row, tensor_metrics
from engines.native import build
from engines.native import monitor_stats as native
from engines.native.monitor_stats import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, MonitorStats, monitor_kernel

CODES = {torch.float32: FLOAT32, torch.float64: FLOAT64, torch.float16: FLOAT16, torch.bfloat16: BFLOAT16}
MEAN_REL = 1e-12  # float64 accumulation in the kernel's order against the exact sum, rounded once
NORM_REL = 1e-13


@pytest.fixture(scope="module")
def kernel() -> MonitorStats:
    k = monitor_kernel()
    assert k is not None, "the native monitor kernel did not build here (a C compiler is part of the test setup)"
    return k


def exact(x: torch.Tensor, ops, eps: float) -> list:
    """The metrics from exact arithmetic: fsum of the float64 values (every value of these types is a float64,
    and so is the square of a float32 or narrower value: exact sums, rounded once), the counts as torch's tests
    give them (eps compared in the tensor's type); min, max and the non-finite cases by torch's definitions."""
    x = x.detach()
    if x.is_complex():
        x = x.abs()
    elif not x.is_floating_point():
        x = x.float()
    values = x.double().reshape(-1).tolist()
    n = len(values)
    finite = n > 0 and all(math.isfinite(v) for v in values)
    plain = torch_reference(x, eps)  # torch's definitions: counts exactly, min/max, the non-finite cases
    out = []
    for op in ops:
        if op in ("mean", "norm") and finite:
            out.append(math.fsum(values) / n if op == "mean" else math.sqrt(math.fsum(v * v for v in values)))
        else:
            out.append(plain[OPS.index(op)])
    return out


def close(got: list, want: list, ops) -> bool:
    for op, g, w in zip(ops, got, want):
        if math.isnan(w) or math.isinf(w) or op not in ("mean", "norm"):
            if not (g == w or (math.isnan(g) and math.isnan(w))):
                return False
        elif g != pytest.approx(w, rel=MEAN_REL if op == "mean" else NORM_REL, abs=1e-300):
            return False
    return True


@pytest.mark.parametrize("eps", [1e-8, 0.5, 1e-3])
def test_tensor_metrics_by_the_kernel_match_the_exact_values(kernel, eps, monkeypatch):
    calls = []
    real = MonitorStats.run
    monkeypatch.setattr(MonitorStats, "run", lambda *a: calls.append(a) or real(*a))
    dense = 0
    for x in cases():
        got = tensor_metrics(x, OPS, eps).tolist()
        want = exact(x, OPS, eps)
        assert close(got, want, OPS), (x.dtype, tuple(x.shape), got, want)
        dense += x.dim() > 0 and x.numel() > 0
    assert len(calls) == dense  # every dense tensor of at least one dimension went through the kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_zeros_count_compares_eps_in_the_tensor_type_as_torch(kernel, dtype):
    """eps rounded to the tensor's type, values on both sides of it and of its unrounded value."""
    for eps in (1e-8, 1e-3, 0.1, 3e-5):
        e = float(torch.tensor(eps, dtype=torch.float64).to(dtype))
        probes = [e, eps, eps * (1 - 1e-7), eps * (1 + 1e-7), e / 2, 0.0, -0.0, -e, -eps, 2 * e]
        x = torch.tensor(probes * 5, dtype=torch.float64).to(dtype)
        x = torch.cat([x, torch.randn(5000, dtype=torch.float64).mul(eps * 4).to(dtype)])
        got = tensor_metrics(x, ["zeros"], eps).item()
        assert got == torch_reference(x, eps)[OPS.index("zeros")], (dtype, eps)


def test_a_nan_eps_takes_the_torch_passes(kernel):
    x = torch.randn(100)
    assert native_row(x, ["zeros"], math.nan) is None
    assert tensor_metrics(x, ["zeros", "max"], math.nan).tolist() == [0.0, float(x.max())]


def test_counts_past_float32_integers(kernel):
    x = torch.zeros(2 ** 24 + 3)
    x[::2] = 1.0
    x[1] = float("nan")
    x[5] = -float("inf")
    got = tensor_metrics(x, ["zeros", "nans", "infs", "max"], 1e-8).tolist()
    want = torch_reference(x, 1e-8)
    assert got[:3] == [want[4], 1.0, 1.0] and math.isnan(got[3])


def test_results_do_not_depend_on_the_thread_count(kernel):
    """65 blocks: up to 8 threads share them out (at least 8 blocks a thread)."""
    torch.manual_seed(3)
    n = (1 << 22) + 12345
    for dtype in CODES:
        t = (torch.randn(n, dtype=torch.float64) * 7).to(dtype)
        one = kernel.run(t.data_ptr(), n, CODES[dtype], 0.01, 1)
        for threads in (2, 3, 5, 8):
            assert kernel.run(t.data_ptr(), n, CODES[dtype], 0.01, threads) == one
    for dtype in (torch.float32, torch.float64):
        m = torch.randn(n, dtype=dtype)
        v = torch.rand(n, dtype=dtype)
        args = (m.data_ptr(), v.data_ptr(), n, CODES[dtype], 0.3, 0.02, 1e-8, 1e-3)
        one = kernel.adam_update(*args, 1)
        assert all(kernel.adam_update(*args, threads) == one for threads in (2, 3, 8))


def _variant(folder, name: str, *defines: str) -> MonitorStats:
    path = folder / name
    subprocess.run([build.compiler(), *build.FLAGS, *defines, "-o", str(path), *map(str, build.SOURCES), "-lm"],
                   check=True)
    return native.bind(ctypes.CDLL(str(path)))


def test_vector_clones_give_the_same_bits(kernel, tmp_path):
    """The AVX-512, AVX2 and baseline code: the same figures for the same array (no fast-math, no FMA)."""
    plain = _variant(tmp_path, "plain.so", "-DPT_NO_CLONES")
    avx2 = _variant(tmp_path, "avx2.so", '-DPT_CLONE_TARGETS="arch=x86-64-v3","default"')
    torch.manual_seed(4)
    for dtype in CODES:
        for n in (5, 1000, 65536 * 3 + 17):
            t = (torch.randn(n, dtype=torch.float64) * 100).to(dtype)
            t[::9] = 0
            args = (t.data_ptr(), n, CODES[dtype], float(torch.tensor(1e-2).to(dtype)), 1)
            figures = kernel.run(*args)
            assert plain.run(*args) == figures and avx2.run(*args) == figures, dtype
            if dtype in (torch.float32, torch.float64):
                m = t.abs().neg() if n % 2 else t  # (a sign pattern other than t's, for the sign agreement)
                v = t * t
                pair = (t.data_ptr(), m.data_ptr(), n, CODES[dtype])
                assert plain.sign_agreement(*pair) == avx2.sign_agreement(*pair) == kernel.sign_agreement(*pair)
                adam = (m.data_ptr(), v.data_ptr(), n, CODES[dtype], 0.19, 0.002, 1e-8, 1e-3, 1)
                update = kernel.adam_update(*adam)
                assert plain.adam_update(*adam) == update and avx2.adam_update(*adam) == update, dtype


def test_views_the_pointer_misreads_take_the_torch_passes(kernel):
    base = torch.randn(64, 33)
    assert native_row(base.t(), ["max"], 1e-8) is not None  # a transposed contiguous block: dense
    assert native_row(base[:, ::2], ["max"], 1e-8) is None  # strided
    assert native_row(base.expand(2, 64, 33), ["max"], 1e-8) is None  # expanded
    assert native_row(base._neg_view(), ["max"], 1e-8) is None  # the memory holds the values negated
    assert native_row(torch.empty(0, 3), ["mean"], 1e-8) is None  # empty: no values (tensor_metrics: NaN)
    raw = bytearray(4 * 11)
    unaligned = torch.frombuffer(raw, dtype=torch.float32, offset=1, count=10)
    assert unaligned.data_ptr() & 3 and native_row(unaligned, ["max"], 1e-8) is None
    for view in (base[:, ::2], base.expand(2, 64, 33), base._neg_view(), unaligned):
        got = tensor_metrics(view, OPS, 1e-8).tolist()
        assert same_bits(got, torch_reference(view, 1e-8))  # torch's passes, bit for bit


def test_bulk_metrics_take_the_kernel_for_every_metric_but_norms_alone(kernel):
    torch.manual_seed(5)
    tensors = [torch.randn(300, 7), torch.randn(50), torch.randn(8, 8).t()]
    ops = ["norm", "min", "max", "mean", "zeros", "nans"]
    block = bulk_metrics(tensors, ops, 1e-8)
    for row, t in zip(block.tolist(), tensors):
        assert row == tensor_metrics(t, ops, 1e-8).tolist() and close(row, exact(t, ops, 1e-8), ops)
    norms = bulk_metrics(tensors, ["norm"], 1e-8)[:, 0].tolist()  # one foreach call, float32 accumulation
    assert norms == [float(n) for n in torch._foreach_norm(tensors, 2, dtype=torch.float32)]


def test_the_switch_and_a_failed_self_check_fall_back_with_one_log_line(monkeypatch, caplog):
    x = torch.randn(1000)
    x[::3] = 0
    try:
        monkeypatch.setenv(build.ENV_SWITCH, "0")
        build.reset()
        native.reset()
        assert monitor_kernel() is None
        assert same_bits(tensor_metrics(x, OPS, 1e-8).tolist(), torch_reference(x, 1e-8))
        monkeypatch.delenv(build.ENV_SWITCH)
        build.reset()
        native.reset()
        monkeypatch.setattr(native, "_self_check", lambda k: (_ for _ in ()).throw(RuntimeError("wrong sums")))
        with caplog.at_level(logging.WARNING, logger="engines.native"):
            assert monitor_kernel() is None and monitor_kernel() is None
        lines = [r.getMessage() for r in caplog.records if "monitor kernel" in r.getMessage()]
        assert len(lines) == 1 and "wrong sums" in lines[0]
        assert same_bits(tensor_metrics(x, OPS, 1e-8).tolist(), torch_reference(x, 1e-8))
    finally:
        monkeypatch.undo()
        build.reset()
        native.reset()
    assert monitor_kernel() is not None


def test_the_self_check_rejects_a_wrong_kernel():
    class Wrong(MonitorStats):
        __slots__ = ()

        def run(self, ptr, numel, dtype, eps, threads=1):
            got = list(super().run(ptr, numel, dtype, eps, threads))
            got[4] += 1  # one zero too many
            return tuple(got)

    lib = build.load()
    assert lib is not None
    good = native.bind(lib)
    with pytest.raises(RuntimeError, match="self-check"):
        native._self_check(Wrong(good.fn, good.adam_fn, good.signs_fn))
    native._self_check(good)


def _torch_update(ms, vs, c1, c2, adam_eps):
    """Adam's update as record_update's torch path makes it (foreach calls)."""
    updates = torch._foreach_div(ms, c1)
    denominators = torch._foreach_div(vs, c2)
    torch._foreach_sqrt_(denominators)
    torch._foreach_add_(denominators, adam_eps)
    torch._foreach_div_(updates, denominators)
    return updates


def _ieee_update(m: torch.Tensor, v: torch.Tensor, c1: float, c2: float, adam_eps: float) -> torch.Tensor:
    """Adam's update with each operation correctly rounded to the moments' type (numpy's IEEE arithmetic; the
    Python numbers rounded to that type first, as torch rounds them)."""
    t = m.numpy().dtype.type
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (m.numpy() / t(c1)) / (np.sqrt(v.numpy() / t(c2)) + t(adam_eps))
    assert out.dtype == m.numpy().dtype
    return torch.from_numpy(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adam_update_figures_are_those_of_the_ieee_update(kernel, dtype):
    """The kernel makes each update element with IEEE arithmetic in the moments' type: its figures equal the
    kernel's figures of that update tensor bit for bit, and its exact values. torch's CPU square root is not
    correctly rounded (its vectorised float32 one is an ulp off for about a sixth of these values, float64 for
    about 1 %), so torch's own update tensor is within 2 ulps of it, element by element."""
    from engines.adapters.torch.monitor_stats import native_adam_update

    torch.manual_seed(6)
    ops = ["min", "max", "mean", "norm", "zeros", "nans", "infs"]
    ms = [torch.randn(n, dtype=dtype) * 1e-3 for n in (1, 17, 4099, 65536 * 2 + 5)]
    vs = [torch.rand(m.numel(), dtype=dtype) * 1e-6 for m in ms]
    ms[2][::7] = 0.0
    vs[2][::5] = 0.0
    for step in (1, 2, 50):
        c1, c2 = 1 - 0.9 ** step, 1 - 0.999 ** step
        for adam_eps, eps in ((1e-8, 1e-8), (1e-6, 0.5), (0.0, 1e-3)):
            rows, norms = native_adam_update(ms, vs, c1, c2, adam_eps, ops, eps)
            torch_updates = _torch_update(ms, vs, c1, c2, adam_eps)
            for row, norm, m, v, theirs in zip(rows, norms, ms, vs, torch_updates):
                u = _ieee_update(m, v, c1, c2, adam_eps)
                assert same_bits(row, native_row(u, ops, eps)) and same_bits(norm, row[3])
                assert close(row, exact(u, ops, eps), ops)
                a, b = theirs.numpy(), u.numpy()
                finite = np.isfinite(b) & np.isfinite(a)
                assert np.array_equal(a[~finite], b[~finite], equal_nan=True)
                # one square root an ulp off: 2 ulps
                assert np.all(np.abs(a[finite] - b[finite]) <= 2 * np.spacing(np.abs(b[finite])))
    # 0 / 0 and x / 0 without epsilon: NaN and inf, counted
    m = torch.tensor([0.0, 1.0, -1.0, 2.0] * 5, dtype=dtype)
    v = torch.tensor([0.0, 0.0, 0.0, 4.0] * 5, dtype=dtype)
    rows, _ = native_adam_update([m], [v], 1.0, 1.0, 0.0, ops, 1e-8)
    assert math.isnan(rows[0][0]) and math.isnan(rows[0][1]) and rows[0][5:] == [5.0, 10.0]


def test_adam_update_takes_torch_where_the_kernel_cannot_read(kernel):
    from engines.adapters.torch.monitor_stats import native_adam_update

    m, v = torch.randn(8, 4), torch.rand(8, 4)
    assert native_adam_update([m], [v], 0.1, 0.01, 1e-8, ["norm"], 1e-8) is not None
    assert native_adam_update([m], [v.t().contiguous().t()], 0.1, 0.01, 1e-8, ["norm"], 1e-8) is None  # strides
    assert native_adam_update([m.half()], [v.half()], 0.1, 0.01, 1e-8, ["norm"], 1e-8) is None  # half moments
    assert native_adam_update([m], [v.double()], 0.1, 0.01, 1e-8, ["norm"], 1e-8) is None  # mixed types


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sign_agreement_is_torchs_sign_product_sum(kernel, dtype):
    from engines.adapters.torch.monitor_stats import native_sign_sum

    torch.manual_seed(7)
    for n in (1, 33, 70001):
        g = torch.randn(n, dtype=dtype)
        m = torch.randn(n, dtype=dtype)
        g[::3] = 0.0
        m[1::4] = -0.0
        g[2::11] = float("nan")
        m[5::13] = float("inf")
        m[6::17] = float("nan")
        want = float((torch.sign(g) * torch.sign(m)).sum(dtype=torch.float64))
        got = native_sign_sum(g, m)
        assert got == want or (math.isnan(got) and math.isnan(want)), (n, got, want)
    assert native_sign_sum(g, m.float() if dtype is torch.float64 else m.double()) is None
    assert native_sign_sum(g[::2], m[::2]) is None


# -- the monitor on the demo ---------------------------------------------------------------------------------------
DEMO_OPS = ["norm", "min", "max", "mean", "zeros", "nans"]


def _monitor_demo(tmp_path, steps: int = 3):
    from engines.adapters.torch.demo import train
    from engines.adapters.torch.monitor import MonitorSession
    from engines.monitor.reader import open_metrics
    from engines.monitor.writer import MetricsWriter
    from schemas import load_config

    body = {"wg_distribution": True, "xy_distribution": True, "mv_distribution": True, "param_distribution": True,
            "ur_distribution": True, "mg_direction": True, "ops": DEMO_OPS, "eps": 1e-8}
    section = load_config({"task": "monitor", "dump_path": str(tmp_path / "dump"), "monitor": body}).monitor
    writer = MetricsWriter(tmp_path / "rank0")
    session = MonitorSession(section, writer).install()
    built = {}
    try:
        result = train({"preset": "tiny", "steps": steps}, on_build=lambda m, o: built.update(model=m, opt=o))
    finally:
        session.remove()
        writer.close()
    return result, built["model"], built["opt"], open_metrics(tmp_path / "rank0")


def _last_step_tensors(model, opt):
    """What the last step's ``param_updated``, ``exp_avg`` and ``exp_avg_sq`` measured: the final parameters and
    Adam state (nothing changes them after the step)."""
    out = {}
    for name, p in model.named_parameters():
        out[("param_updated", name)] = p.detach().clone()
        out[("exp_avg", name)] = opt.state[p]["exp_avg"].clone()
        out[("exp_avg_sq", name)] = opt.state[p]["exp_avg_sq"].clone()
    return out


@pytest.mark.usefixtures("one_torch_thread")
def test_the_monitor_on_the_demo_writes_the_kernels_exact_values(kernel, tmp_path, monkeypatch):
    calls = []
    real = MonitorStats.run
    monkeypatch.setattr(MonitorStats, "run", lambda *a: calls.append(a[2]) or real(*a))
    result, model, opt, metrics = _monitor_demo(tmp_path)
    assert calls and sum(calls) > 10_000  # the activations and optimizer tensors went through the kernel
    last = max(metrics.steps())
    checked = 0
    for (tag, name), t in _last_step_tensors(model, opt).items():
        want = exact(t, DEMO_OPS, 1e-8)
        got = [float(metrics.read(f"{tag}/{name}/{op}").values[-1]) for op in DEMO_OPS]
        assert list(metrics.read(f"{tag}/{name}/norm").steps)[-1] == last
        assert close(got, want, DEMO_OPS), (tag, name, got, want)
        checked += 1
    assert checked >= 30
    assert len(metrics.series(tag="actv")) > 10


@pytest.mark.usefixtures("one_torch_thread")
def test_the_monitor_on_the_demo_without_the_kernel_writes_torchs_values(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor_stats, "monitor_kernel", lambda: None)
    for name in ("run", "adam_update", "sign_agreement"):
        monkeypatch.setattr(MonitorStats, name, lambda *a: pytest.fail("the kernel ran"))
    result, model, opt, metrics = _monitor_demo(tmp_path)
    checked = 0
    for (tag, name), t in _last_step_tensors(model, opt).items():
        want = torch_reference(t, 1e-8)
        got = [float(metrics.read(f"{tag}/{name}/{op}").values[-1]) for op in DEMO_OPS]
        plain = {op: want[OPS.index(op)] for op in DEMO_OPS}
        # the torch passes: every value bit for bit the plain definition, bulk norms by float32 foreach
        assert all(same_bits(g, plain[op]) for op, g in zip(DEMO_OPS, got) if op != "norm"), (tag, name)
        assert got[0] == pytest.approx(plain["norm"], rel=1e-6)
        checked += 1
    assert checked >= 30
    np.testing.assert_equal(len(result.losses), 3)


@pytest.mark.usefixtures("one_torch_thread")
def test_the_kernel_and_the_torch_passes_record_the_same_values_but_float64_sums(kernel, tmp_path, monkeypatch):
    """The demo monitored with everything on, with and without the kernel: training bit-identical, every series
    the same steps; min, max, the counts and mg_direction bit for bit; mean, norm and update_ratio (sums in float64
    in another order, or float32 foreach norms without the kernel) and the update's figures (IEEE square roots
    with the kernel, torch's without) within their rounding."""
    calls = {"adam_update": 0, "sign_agreement": 0}
    for name in calls:
        real = getattr(MonitorStats, name)
        monkeypatch.setattr(MonitorStats, name, lambda *a, _n=name, _r=real: calls.__setitem__(_n, calls[_n] + 1)
                            or _r(*a))
    on, *_, with_kernel = _monitor_demo(tmp_path / "on")
    assert calls["adam_update"] > 0 and calls["sign_agreement"] > 0
    monkeypatch.setattr(monitor_stats, "monitor_kernel", lambda: None)
    off, *_, without = _monitor_demo(tmp_path / "off")
    assert on.losses == off.losses
    names = sorted(s.key for s in with_kernel.series())
    assert names == sorted(s.key for s in without.series()) and len(names) > 500
    loose = 0
    for name in names:
        a, b = with_kernel.read(name), without.read(name)
        assert list(a.steps) == list(b.steps)
        metric = name.rsplit("/", 1)[-1]
        if metric in ("mean", "norm") or name.startswith(("update_ratio/", "update/")) \
                or name == "train/grad_norm/value":
            # float32 foreach norms without the kernel: 1e-6; float64 sums in two orders: 1e-12
            # the update: IEEE square roots with the kernel, torch's (1 ulp off at times) without
            rel = 1e-5 if metric == "norm" or "ratio" in name or "grad_norm" in name or "update" in name else 1e-9
            if name.startswith("update/") and metric == "mean":  # a mean near 0 of values an ulp apart
                norms = with_kernel.read(name[:-len("mean")] + "norm").values
                assert np.all(np.abs(a.values - b.values) <= 1e-6 * norms), name
            else:
                np.testing.assert_allclose(a.values, b.values, rtol=rel, atol=1e-30, err_msg=name)
            loose += 1
        else:
            assert same_bits(a.values, b.values), name
    assert loose < len(names)


def test_step_metrics_keep_the_kernels_values_as_host_numbers_in_key_order(kernel):
    from engines.adapters.torch.monitor_stats import StepMetrics

    metrics = StepMetrics()
    x = torch.randn(40, 3)
    metrics.add_tensor("actv", "a.output", x, ["max", "min"], 1e-8)
    metrics.add_value("train", "loss", "value", torch.tensor(2.5))
    metrics.add_rows("update", ["p", "q"], [[1.0, 2.0], [3.0, 4.0]], ["max", "min"], ["[2]", "[3]"],
                     ["torch.float32"] * 2)
    metrics.add_values("update_ratio", ["p", "q"], "value", torch.tensor([0.5, 0.25], dtype=torch.float64))
    metrics.add_tensor("actv", "b.input", x, ["max", "min"], 1e-8)  # the same tensor: the same values
    assert isinstance(metrics._blocks[0], list)  # no tensor made for the kernel's values
    values = metrics.collect()
    hi, lo = float(x.max()), float(x.min())
    assert values.tolist() == [hi, lo, 2.5, 1.0, 2.0, 3.0, 4.0, 0.5, 0.25, hi, lo]
    assert metrics.keys[3:5] == [("update", "p", "max"), ("update", "p", "min")]
    assert metrics.shapes[3:7] == ["[2]", "[2]", "[3]", "[3]"] and len(metrics.dtypes) == len(values)
