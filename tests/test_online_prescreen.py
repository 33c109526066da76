"""The online check's pre-screen (engines/acc_check/prescreen.py) gives the full judgement's verdict: on a grid of
outputs (every rule class, float32 and float64, forward and backward, errors from none to far too large, small
and subnormal values, cancellation, one-sided zeros, non-finite values) pre-screen + full == full."""

import itertools

import numpy as np
import pytest

from engines.acc_check import prescreen, rules

APIS = ("softmax", "linear", "conv2d", "mul", "relu", "gelu")  # benchmark, ULP, thousandth, absolute, binary


def _bench(kind, rng, shape):
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "large":
        return rng.standard_normal(shape) * 1e3
    if kind == "small":  # many elements at or below the small-value bound
        b = rng.standard_normal(shape) * 1e-6
        b[::3] = 0.0
        return b
    if kind == "zeros":
        return np.zeros(shape)
    if kind == "subnormal":
        b = rng.standard_normal(shape)
        b[::4] = 1e-40
        return b
    return rng.standard_normal(shape) - 0.5 * rng.standard_normal(shape)  # "cancel": mixed signs near zero


def _device(bench, dtype, level, rng):
    exact = bench.astype(dtype)
    if level == 0.0:
        return exact
    if level == "ulp":  # one float32 ulp on every element
        return np.nextafter(exact, np.inf).astype(dtype)
    if level == "few":  # a few elements far off
        d = exact.copy()
        d.reshape(-1)[:2] *= 1.5
        return d
    noise = rng.standard_normal(bench.shape) * level
    return (bench * (1 + noise)).astype(dtype)


CASES = list(itertools.product(("normal", "large", "small", "subnormal", "cancel", "zeros"),
                               (0.0, "ulp", 1e-8, 1e-7, 1e-6, 3e-5, 1e-4, 1e-3, 0.03, "few"),
                               (np.float32, np.float64)))


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("backward", (False, True))
def test_prescreen_plus_full_equals_full(api, backward):
    rng = np.random.default_rng(7)
    quick = 0
    for kind, level, dtype in CASES:
        for shape in ((64, 33), (3,)):
            bench = _bench(kind, rng, shape)
            device = _device(bench, dtype, level, rng)
            ddtype = "torch." + np.dtype(dtype).name
            full = rules.judge_tensor("output.0", api, device, ddtype, bench, "torch.float64", backward)
            got = prescreen.judge("output.0", api, device, ddtype, bench, "torch.float64", backward)
            assert (got.status, got.standard) == (full.status, full.standard), (kind, level, dtype, shape)
            if prescreen.prescreen("output.0", api, device, ddtype, bench, "torch.float64", backward) is not None:
                quick += 1
                assert full.status == "pass"
                assert got.metrics["max_abs_err"] == full.metrics["max_abs_err"]
    assert quick >= 20  # the pre-screen decides a good share of the grid (it is not a test that cannot fail)


@pytest.mark.parametrize("device,bench", [
    (np.array([1.0, np.inf]), np.array([1.0, np.inf])),  # non-finite: judged in full
    (np.zeros(4), np.ones(4)),  # zero on one side only
    (np.ones(1), np.full(1, 1.0001)),  # one element that differs (no cosine)
    (np.ones((2, 2), dtype=np.float32), np.ones(4)),  # shapes differ
    (np.zeros(0), np.zeros(0)),  # empty
])
def test_edge_cases_are_left_to_the_full_judgement(device, bench):
    assert prescreen.prescreen("output.0", "softmax", device, "torch.float32", bench, "torch.float64") is None
    full = rules.judge_tensor("output.0", "softmax", device, "torch.float32", bench, "torch.float64")
    assert prescreen.judge("output.0", "softmax", device, "torch.float32", bench, "torch.float64").status \
        == full.status


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("values", [np.zeros(4), np.ones(1), np.array([-0.0, 0.0, 2.5])])
def test_equal_outputs_pass_as_in_full(api, values):
    full = rules.judge_tensor("output.0", api, values.astype(np.float32), "torch.float32", values, "torch.float64")
    got = prescreen.prescreen("output.0", api, values.astype(np.float32), "torch.float32", values, "torch.float64")
    assert full.status == "pass" and got is not None and got.standard == full.standard


def test_low_precision_devices_are_judged_in_full():
    b = np.linspace(1, 2, 50)
    assert prescreen.prescreen("output.0", "softmax", b.astype(np.float32), "torch.bfloat16", b,
                               "torch.float32") is None
