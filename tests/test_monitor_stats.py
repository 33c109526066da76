"""The monitor's tensor metrics are the numbers of their definitions, whatever shortcut computes them.

The reference is each metric written the plain way (docs/MONITOR.md): ``mean``/``norm`` accumulated in float64,
``zeros`` the float32 fraction of ``|x| < eps``, ``nans``/``infs`` counts. The torch passes (no native kernel)
give these numbers bit for bit; the native kernel's fused read gives min, max and the counts bit for bit and
mean and norm within float64 rounding of the exact values (tests/test_native_monitor_stats.py).
"""

import numpy as np
import pytest
import torch

from engines.adapters.torch.monitor_stats import StepMetrics, bulk_metrics, tensor_metrics

OPS = ["min", "max", "mean", "norm", "zeros", "nans", "infs", "id"]


@pytest.fixture(autouse=True)
def torch_passes(monkeypatch):
    """These tests check the torch passes (the path without the native kernel) bit for bit."""
    from engines.adapters.torch import monitor_stats

    monkeypatch.setattr(monitor_stats, "monitor_kernel", lambda: None)


def reference(x: torch.Tensor, eps: float) -> list:
    x = x.detach()
    if x.is_complex():
        x = x.abs()
    elif not x.is_floating_point():
        x = x.float()
    n = x.numel()
    if n == 0:
        return [float("nan")] * len(OPS)
    lo, hi = torch.aminmax(x)
    values = [lo, hi, x.mean(dtype=torch.float64), torch.linalg.vector_norm(x, dtype=torch.float64),
              (x.abs() < eps).sum() / float(n), torch.isnan(x).sum(), torch.isinf(x).sum(),
              x.reshape(()) if x.dim() == 0 else torch.tensor(float("nan"))]
    return [float(v) for v in values]


def same_bits(a, b) -> bool:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


def cases():
    gen = torch.Generator().manual_seed(0)
    out = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for n in (1, 7, 4097, 70000):
            x = torch.randn(n, generator=gen) * 3
            x[::5] = 0
            x[1::11] = 1e-9
            out.append(x.to(dtype))
            y = x.clone()
            y[::7] = float("nan")
            y[3::13] = float("inf")
            y[4::17] = -float("inf")
            out.append(y.to(dtype))
        out.append(torch.randn(64, 33, generator=gen).to(dtype).t())  # not contiguous
        out.append(torch.tensor(2.5, dtype=dtype))
        out.append(torch.empty(0, dtype=dtype))
    out.append(torch.tensor([float("inf")] * 3))  # min and max infinite, no NaN
    out.append(torch.randint(-3, 3, (100,), generator=gen))
    out.append(torch.randn(50, dtype=torch.complex64, generator=gen))
    return out


@pytest.mark.parametrize("eps", [1e-8, 0.5])
def test_tensor_metrics_are_their_definitions_bit_for_bit(eps):
    for x in cases():
        got = tensor_metrics(x, OPS, eps).tolist()
        assert same_bits(got, reference(x, eps)), (x.dtype, tuple(x.shape), got, reference(x, eps))


def test_counts_stay_exact_past_float32_integers():
    x = torch.zeros(2 ** 24 + 3)
    x[::2] = 1.0
    x[1] = float("nan")
    got = tensor_metrics(x, ["zeros", "nans"], 1e-8).tolist()
    assert same_bits(got, [reference(x, 1e-8)[4], 1.0])


def test_bulk_metrics_equal_one_by_one():
    tensors = [t for t in cases() if t.numel() > 0 and t.is_floating_point()]
    ops = ["min", "max", "mean", "zeros", "nans", "infs"]
    block = bulk_metrics(tensors, ops, 1e-8)
    for row, t in zip(block.tolist(), tensors):
        assert same_bits(row, tensor_metrics(t, ops, 1e-8).tolist())


def test_a_tensor_measured_twice_in_a_step_is_measured_again_after_an_in_place_change():
    metrics = StepMetrics()
    x = torch.ones(10)
    metrics.add_tensor("actv", "a.output", x, ["max"], 1e-8)
    metrics.add_tensor("actv", "b.input", x, ["max"], 1e-8)  # the same tensor: the values are reused
    x.mul_(3)  # changed in place: measured again
    metrics.add_tensor("actv", "c.input", x, ["max"], 1e-8)
    metrics.add_tensor("actv", "d.input", x.clone(), ["min", "max"], 1e-8)
    assert metrics.collect().tolist() == [1.0, 1.0, 3.0, 3.0, 3.0]
    assert metrics.keys[-1] == ("actv", "d.input", "max")


def test_one_tensor_seen_by_two_hooks_is_measured_once(monkeypatch):
    from engines.adapters.torch import monitor_stats

    calls = []
    real = monitor_stats.tensor_metrics
    monkeypatch.setattr(monitor_stats, "tensor_metrics", lambda x, ops, eps: calls.append(1) or real(x, ops, eps))
    metrics = StepMetrics()
    x = torch.randn(100)
    metrics.add_tensor("actv", "ln1.output", x, ["norm"], 1e-8)
    metrics.add_tensor("actv", "attn.input", x, ["norm"], 1e-8)
    metrics.add_tensor("actv", "attn.input", x, ["norm", "max"], 1e-8)  # other ops: measured
    assert len(calls) == 2
    assert metrics.keys[:2] == [("actv", "ln1.output", "norm"), ("actv", "attn.input", "norm")]
