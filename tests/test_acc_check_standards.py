"""The standards of acc_check against the test vectors of msprobe's API pre-check (docs/ACC_CHECK.md cites them:
docs/reference/msprobe-analysis.md section 8.6), and the per-output rules built on them."""

import math

import numpy as np
import pytest

from engines.acc_check import rules
from engines.acc_check import standards as st

B = np.array([1.0, 2.0, 1e-7, 0.0, 3.0])
D = np.array([1.0000001, 1.9999, 2e-7, 1e-10, 3.0], dtype=np.float32)


def _masks():
    return st.Masks(D, B, "torch.float32", "torch.float64")


def test_absolute_errors_and_max():
    m = _masks()
    np.testing.assert_allclose(m.abs_err, [1.19209290e-7, 1.00016594e-4, 1.00000002e-7, 1.00000001e-10, 0],
                               rtol=1e-6, atol=1e-17)
    assert float(np.max(m.abs_err)) == pytest.approx(1.0001659e-4, rel=1e-6)


def test_benchmark_metrics():
    got = st.benchmark(_masks())
    assert got["small_value_err_ratio"] == 0.5
    assert got["rmse"] == pytest.approx(5.7745418402683136e-05, rel=1e-9)
    assert got["eb"] == pytest.approx(0.4)
    assert got["max_rel_err"] == pytest.approx(5.0008296966552734e-05, rel=1e-9)
    assert got["mean_rel_err"] == pytest.approx(1.6709168752034504e-05, rel=1e-9)


def test_absolute_threshold():
    got = st.absolute_threshold(_masks())
    assert got["rel_err_ratio"] == pytest.approx(1 / 3)
    assert got["abs_err_ratio"] == 0.5
    assert got["inf_nan_error_ratio"] == 0.0


def test_ulp_float32():
    got = st.ulp_error(D, B, "float32")
    assert got["max_ulp_err"] == pytest.approx(14073749.1644672, rel=1e-9)
    assert got["mean_ulp_err"] == pytest.approx(2814833.9330612123, rel=1e-9)
    assert got["ulp_err_proportion"] == pytest.approx(0.4)


def test_ulp_float16():
    b = np.array([1.0, 0.5, 3.0], dtype=np.float32)
    d = np.array([1.0009765625, 0.5, 2.998046875], dtype=np.float16)
    got = st.ulp_error(d, b, "float16")
    assert got["max_ulp_err"] == 1.0 and got["ulp_err_proportion"] == 0.0


def test_checker_cosine():
    cos, note = st.checker_cosine(D, B)
    assert note == "" and cos == pytest.approx(0.9999999997446836, abs=1e-12)
    assert st.checker_cosine(np.array([5.0]), np.array([4.0])) == (None, "")
    assert st.checker_cosine(np.zeros(3), np.zeros(3)) == (None, "")
    assert st.checker_cosine(np.zeros(3), np.array([1.0, 0, 0]))[1]


def test_ratio_stage():
    assert st.precision_ratio(2e-4, 1e-4, "float32") == pytest.approx(2.0)
    assert st.precision_ratio(3e-4, 1e-4, "float32") == pytest.approx(3.0)
    assert st.precision_ratio(1e-3, 1e-4, "float32") == pytest.approx(10.0)
    assert st.precision_ratio(1e-3, 0.0, "float32") == pytest.approx(1e-3 * 2 ** 14)


@pytest.mark.parametrize("dtype, hundredth, thousandth, ten_thousandth, status", [
    ("float16", 0.995, 0.99, 1.0, st.WARNING),
    ("float16", 0.985, 0.99, 1.0, st.ERROR),
    ("float32", 1.0, 0.9995, 0.9990, st.WARNING),
    ("float32", 1.0, 0.998, 1.0, st.ERROR),
    ("float32", 1.0, 1.0, 1.0, st.PASS),
])
def test_ladder(dtype, hundredth, thousandth, ten_thousandth, status):
    assert st.ladder(0.999, "", 0.01, hundredth, thousandth, ten_thousandth, dtype)[0] == status


def test_ladder_gates():
    assert st.ladder(0.98, "", 0.0, 1, 1, 1, "float32")[0] == st.ERROR  # cosine, whatever the rest
    assert st.ladder(0.999, "", 0.0009, 0, 0, 0, "float32")[0] == st.PASS  # max |err| < 0.001


def test_aggregation():
    assert st.worst([st.PASS, st.WARNING, st.PASS]) == st.WARNING
    assert st.worst([st.PASS, st.ERROR, st.WARNING]) == st.ERROR
    assert st.worst([st.SKIP, st.SKIP]) == st.SKIP
    assert st.worst([]) == " "


def test_binary_error_rate_and_bf16_rounding():
    assert st.binary_error_rate(np.array([1, 2, 3]), np.array([1, 2, 4])) == pytest.approx(1 / 3)
    assert st.binary_error_rate(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == 0.0
    x = np.array([1.0, 1.00390625, 1.005859375, 3.0e38], dtype=np.float32)  # 1 + 1.5 ulp rounds up to 1 + 2 ulp
    np.testing.assert_array_equal(st.round_bf16(x)[:3], [1.0, 1.0, 1.0078125])


# -- rules: one per API class ---------------------------------------------------------------------------------------
def test_api_classes():
    assert rules.api_class("add", "torch.float32") == rules.ABSOLUTE
    assert rules.api_class("relu", "torch.float32") == rules.BINARY
    assert rules.api_class("matmul", "torch.float16") == rules.ULP
    assert rules.api_class("conv2d", "torch.float32") == rules.THOUSANDTH
    assert rules.api_class("softmax", "torch.bfloat16") == rules.BENCHMARK
    assert rules.api_class("softmax", "torch.int64") == rules.BINARY


def _judge(api, device, bench, dtype="torch.float32", bench_dtype="torch.float64"):
    return rules.judge_tensor("x.0.forward.output.0", api, device, dtype, bench, bench_dtype)


def test_a_correctly_rounded_float32_output_passes_every_class():
    rng = np.random.default_rng(0)
    bench = rng.standard_normal(1000)
    device = bench.astype(np.float32)
    for api in ("add", "relu", "matmul", "conv2d", "softmax"):
        assert _judge(api, device, bench).status == st.PASS, api


def test_benchmark_class_catches_a_small_relative_error_the_ladder_passes():
    rng = np.random.default_rng(1)
    bench = rng.uniform(0.01, 0.2, 1000)
    device = (bench * (1 + 1e-3)).astype(np.float32)
    assert st.ladder(1.0, "", float(np.max(np.abs(device - bench))), 1, 0, 0, "float32")[0] == st.PASS
    got = _judge("softmax", device, bench)
    assert got.status == st.ERROR and "mean_rel_err" in got.message


def test_bf16_output_more_than_one_ulp_off_is_an_error():
    rng = np.random.default_rng(2)
    bench = rng.uniform(0.1, 1.0, 4096).astype(np.float32)
    exact = st.round_bf16(bench)
    assert _judge("softmax", exact, bench, "torch.bfloat16", "torch.float32").status != st.ERROR
    off = st.round_bf16(bench * (1 + 2.0 ** -8))  # within 1%: the ladder gives a warning only
    got = _judge("softmax", off, bench, "torch.bfloat16", "torch.float32")
    assert got.status == st.ERROR and got.message.startswith("ULP")


def test_binary_and_absolute_classes():
    bench = np.array([1.0, -2.0, 3.5])
    assert _judge("relu", np.array([1.0, -2.0, 3.5000005], dtype=np.float32), bench).status == st.ERROR
    got = _judge("add", np.array([1.0, -2.0, 3.5 + 1e-5], dtype=np.float32), bench)
    assert got.status == st.ERROR and "rel_err_ratio" in got.message


def test_nonfinite_shape_and_values():
    assert _judge("exp", np.array([1.0, np.inf]), np.array([1.0, 2.0])).status == st.ERROR
    assert _judge("exp", np.array([1.0, np.inf]), np.array([1.0, np.inf])).status == st.PASS
    assert _judge("exp", np.zeros(3), np.zeros(2)).status == st.ERROR
    assert _judge("exp", np.zeros(0), np.zeros(0)).status == st.SKIP
    assert rules.judge_value("o", 3, 3).status == st.PASS
    assert rules.judge_value("o", 3, 4).status == st.ERROR
    assert rules.judge_value("o", math.nan, math.nan).status == st.PASS


def test_complex_outputs_are_judged_on_their_parts():
    bench = np.array([1 + 2j, 3 - 1j])
    assert _judge("fft", bench.astype(np.complex64), bench, "torch.complex64").status == st.PASS
    assert _judge("fft", (bench * 1.1).astype(np.complex64), bench, "torch.complex64").status == st.ERROR


def test_bf16_absolute_threshold_accepts_a_rounded_small_value():
    """bfloat16's absolute atol is 2^-16 (msprobe's documented value): with its code's 1e-16 every rounded value
    below small_value would fail."""
    bench = np.array([1e-4, 3e-4, 0.5], dtype=np.float32)
    m = st.Masks(st.round_bf16(bench), bench, "torch.bfloat16", "torch.float32")
    assert st.absolute_threshold(m)["abs_err_ratio"] == 0.0
    assert st.absolute_threshold(m, atol=1e-16)["abs_err_ratio"] == 1.0
