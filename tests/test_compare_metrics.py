"""Real-data metrics against docs/reference/msprobe-analysis.md §8.1 (V1–V19) and §8.2, plus streaming and our documented deviations."""

import math

import numpy as np
import pytest

from engines.compare.tensor_metrics import (
    MSG_BENCH_ZERO,
    MSG_EMPTY,
    MSG_LEN1,
    MSG_NONFINITE,
    MSG_NPU_ZERO,
    MSG_SHAPE,
    MSG_ZERO_D,
    ST_EMPTY,
    ST_NONFINITE,
    ST_SHAPE,
    TensorAccumulator,
    classic_accuracy,
    compare_arrays,
    finish,
    round12,
    round_cosine,
)

NAN = float("nan")


def shown(m):
    """The six msprobe columns as msprobe displays them (Cosine 12/6 dp, EucDist raw, the rest 12 dp)."""
    return [round_cosine(m.cosine), m.euc_dist, round12(m.max_abs_err), round12(m.max_rel_err),
            round12(m.one_thousandth), round12(m.five_thousandths)]


def same(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if isinstance(e, float) and math.isnan(e):
            assert math.isnan(a), (actual, expected)
        else:
            assert a == pytest.approx(e, rel=1e-12, abs=1e-15), (actual, expected)


def accuracy(m):
    cos = "unsupported" if m.cosine_unsupported else m.cosine
    if m.status == ST_SHAPE:
        cos = "shape unmatched"
    if m.status == ST_NONFINITE:
        cos = "N/A"
    return classic_accuracy(cos, m.max_abs_err)


F64 = np.float64


@pytest.mark.parametrize("name,x,y,expected,acc", [
    ("V1", [1, 2, 3, 4], [1, 2, 3, 4], [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], "Yes"),
    ("V2", [1, 2, 3, 4], [1, 2, 3, 4.1], [0.999924, 0.09999999999999964, 0.1, 0.024390243902, 0.75, 0.75], "Yes"),
    ("V4", [0, 1, -1, 2], [0, 1, -1, 2.0005], [1.0, 0.000500000000000167, 0.0005, 0.000249937516, 1.0, 1.0],
     "Yes"),
    ("V8", [0, 0, 0], [0, 0, 0], [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], "Yes"),
    ("V14", [1, 2, 3], [3, 2, 1], [0.714285714286, 2.8284271247461903, 2.0, 2.0, 0.333333333333, 0.333333333333],
     "No"),
    ("V15", [1, 1], [-1, -1], [-1.0, 2.8284271247461903, 2.0, 2.0, 0.0, 0.0], "No"),
    ("V18", [2, 2, 2, 2], [1, 1, 1, 1], [1.0, 2.0, 1.0, 1.0, 0.0, 0.0], "Yes"),
])
def test_plain_vectors(name, x, y, expected, acc):
    m = compare_arrays(np.array(x, F64), np.array(y, F64))
    same(shown(m), expected)
    assert accuracy(m) == acc


def test_v3_float32_relative_error_in_native_dtype():
    x = np.array([1, 2, 3, 4], np.float32)
    y = np.array([1.001, 1.999, 3.0, 4.02], np.float32)
    same(shown(compare_arrays(x, y)),
         [0.999997, 0.020049923291260843, 0.019999980927, 0.004975119606, 0.75, 1.0])
    m64 = compare_arrays(x.astype(F64), np.array([1.001, 1.999, 3.0, 4.02]))
    assert m64.euc_dist == pytest.approx(0.020049937655762986, rel=1e-15)
    assert round12(m64.max_abs_err) == 0.02
    assert round12(m64.max_rel_err) == 0.004975124378


def test_v5_bench_zero_uses_dtype_epsilon():
    m = compare_arrays(np.array([1e-3, 0, 5]), np.array([0.0, 0, 5]))
    same(shown(m), [1.0, 0.001, 0.001, 4503599627370.496, 0.666666666667, 0.666666666667])
    m32 = compare_arrays(np.array([1e-3, 0, 5], np.float32), np.array([0, 0, 5], np.float32))
    # wheel: 1e-3/2^-23 = 8388.608 (the float32 value of 1e-3 gives 8388.6084)
    assert m32.max_rel_err == pytest.approx(8388.608, rel=1e-6)


def test_rel_eps_is_configurable():
    m = compare_arrays(np.array([1e-3, 0, 5]), np.array([0.0, 0, 5]), rel_eps=1e-3)
    assert m.max_rel_err == pytest.approx(1.0)


def test_v6_matching_inf_nan_positions_are_zeroed():
    m = compare_arrays(np.array([1, np.inf, np.nan, 2]), np.array([1, np.inf, np.nan, 2.5]))
    same(shown(m), [0.996545758245, 0.5, 0.5, 0.2, 0.75, 0.75])
    assert m.nonfinite_matched == 2


def test_v7_nonfinite_positions_differ():
    m = compare_arrays(np.array([1, np.inf, 3]), np.array([1.0, 2, 3]))
    same(shown(m), [NAN] * 6)
    assert m.status == ST_NONFINITE and m.messages == [MSG_NONFINITE]
    assert accuracy(m) == "No"


def test_opposite_inf_signs_are_a_mismatch_deviation():
    # msprobe ignores the sign of inf; we do not (docs/COMPARE.md)
    m = compare_arrays(np.array([1, np.inf]), np.array([1, -np.inf]))
    assert m.status == ST_NONFINITE


def test_v9_npu_all_zero_is_flagged():
    m = compare_arrays(np.zeros(3), np.array([1.0, 0, 0]))
    same(shown(m), [NAN, 1.0, 1.0, 1.0, 0.666666666667, 0.666666666667])
    assert MSG_NPU_ZERO in m.messages
    assert accuracy(m) == "Yes"  # msprobe classic's quirk, reproduced in the classic column
    assert m.zero_side == 1  # our verdicts turn this into an error (test_compare_engine_msprobe)


def test_bench_all_zero_message():
    m = compare_arrays(np.array([1.0, 0, 0]), np.zeros(3))
    assert MSG_BENCH_ZERO in m.messages and m.zero_side == 2


def test_v10_length_one():
    m = compare_arrays(np.array([5.0]), np.array([4.0]))
    same(shown(m)[1:], [1.0, 1.0, 0.25, 0.0, 0.0])
    assert m.cosine_unsupported and MSG_LEN1 in m.messages
    assert accuracy(m) == "None"


def test_v11_zero_d():
    m = compare_arrays(np.float64(3.0), np.float64(2.5))
    assert m.cosine_unsupported and m.ratios_unsupported
    assert round12(m.max_abs_err) == 0.5 and round12(m.max_rel_err) == 0.2
    assert math.isnan(m.euc_dist) and math.isnan(m.one_thousandth)
    assert m.messages == [MSG_ZERO_D]
    assert accuracy(m) == "None"


def test_v12_shape_mismatch():
    m = compare_arrays(np.zeros(2), np.zeros(3))
    assert m.status == ST_SHAPE and m.messages == [MSG_SHAPE]
    assert accuracy(m) == "Unmatched"


def test_v13_empty():
    m = compare_arrays(np.zeros(0), np.zeros(0))
    assert m.status == ST_EMPTY and m.messages == [MSG_EMPTY]


def test_v16_int32_and_v17_bool():
    m = compare_arrays(np.array([1, 2, 3], np.int32), np.array([1, 2, 4], np.int32))
    same(shown(m), [0.991460133984, 1.0, 1.0, 0.25, 0.666666666667, 0.666666666667])
    assert accuracy(m) == "Yes"
    b = compare_arrays(np.array([True, False, True]), np.array([True, True, True]))
    assert round_cosine(b.cosine) == 0.816496580928
    assert round12(b.one_thousandth) == 0.666666666667
    assert accuracy(b) == "No"


def test_v19_cosine_rounding():
    assert round_cosine(0.99992406) == 0.999924
    assert round_cosine(0.7142857142857143) == 0.714285714286


@pytest.mark.parametrize("cos,maxabs,verdict", [
    (0.995, 0.002, "Yes"), (0.985, 0.002, "No"), (0.985, 0.0005, "Yes"), (0.89, 0.0, "No"), (0.999, 1.0, "Yes"),
    (0.999, 1.0001, "No"), ("N/A", 1.0, "No"), ("shape unmatched", 1.0, "Unmatched"), ("None", 1.0, "None"),
    ("unsupported", 1.0, "None"),
])
def test_8_2_classic_accuracy(cos, maxabs, verdict):
    assert classic_accuracy(cos, maxabs) == verdict


def test_chunked_partials_merge_to_the_whole():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300_001).astype(np.float32)
    y = (x + rng.standard_normal(x.size).astype(np.float32) * 1e-3).astype(np.float32)
    y[::97] = 0
    whole = compare_arrays(x, y)
    parts = []
    for lo in range(0, x.size, 70_000):
        acc = TensorAccumulator(x.dtype, y.dtype)
        acc.update(x[lo:lo + 70_000], y[lo:lo + 70_000])
        parts.append(acc.part)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    m = finish(merged, x.shape)
    for a, b in zip(m.as_tuple(), whole.as_tuple()):
        assert a == pytest.approx(b, rel=1e-9)
    assert m.rel_err == pytest.approx(whole.rel_err, rel=1e-9)
    assert m.rel_err == pytest.approx(np.linalg.norm((x - y).astype(F64)) / np.linalg.norm(y.astype(F64)),
                                      rel=1e-9)


def test_mask_fills_do_not_hide_the_error():
    """Matching finfo.min fills are exact and excluded from rel_err (docs/reference/diagnosis-notes.md item 5)."""
    rng = np.random.default_rng(1)
    y = rng.standard_normal(1000).astype(np.float32)
    x = y * np.float32(1.01)
    fill = np.finfo(np.float32).min
    x[::2] = fill
    y[::2] = fill
    m = compare_arrays(x, y)
    core = np.linalg.norm((x[1::2] - y[1::2]).astype(F64)) / np.linalg.norm(y[1::2].astype(F64))
    assert m.rel_err == pytest.approx(core, rel=1e-9)
    assert m.rel_err == pytest.approx(0.01, rel=1e-3)


def test_matching_minus_inf_masks_are_exact():
    y = np.array([0.5, -np.inf, 0.25, -np.inf], np.float32)
    m = compare_arrays(y.copy(), y)
    assert m.status == 0 and m.rel_err == 0.0 and m.max_abs_err == 0.0
