"""Statistics mode against docs/reference/msprobe-analysis.md §8.4 (S1–S8): msprobe 26.2's numbers as numbers, relative errors as fractions."""

import math

import numpy as np
import pytest

from engines.compare.classic import RED, Y3, YELLOW, classic_stats_warning, highlight
from engines.compare.stats_metrics import (
    NOTE_DIFF,
    NOTE_NA,
    NOTE_NUM,
    scaled_stat_errors,
    stat_diff,
    stats_table,
)
from engines.dumps.rows import IO_INPUT, IO_OUTPUT

NAN, INF = float("nan"), float("inf")


def one(n, b, nt=None, bt=None):
    d, r, note = stat_diff(np.array([n], float), np.array([b], float),
                           None if nt is None else np.array([nt], object),
                           None if bt is None else np.array([bt], object))
    return float(d[0]), float(r[0]), int(note[0])


def eq(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("n,b,diff,rel", [
    (1, 1, 0.0, 0.0), (1, 0, 1.0, INF), (3, 2, 1.0, 0.5), (NAN, 1, NAN, NAN), (INF, 1, INF, INF),
    (1, INF, -INF, -INF), (1, -INF, INF, INF), (-INF, 1, -INF, -INF), (NAN, NAN, NAN, NAN), (INF, INF, 0.0, 0.0),
])
def test_s8_numeric_rule_table(n, b, diff, rel):
    d, r, note = one(n, b)
    assert eq(d, diff) and eq(r, rel) and note == NOTE_NUM


@pytest.mark.parametrize("nt,bt,note,diff", [
    ("npu:0", "npu:0", NOTE_NUM, 0.0), ("npu:0", "cpu", NOTE_NA, NAN), ("abc", None, NOTE_DIFF, NAN),
    ("N/A", None, NOTE_NA, NAN),
])
def test_s8_text_rule_table(nt, bt, note, diff):
    d, r, code = one(NAN, 1.0 if bt is None else NAN, nt, bt)
    assert code == note and eq(d, diff) and eq(r, diff)


def test_s1_diffs_and_relative_errors_are_fractions():
    t = {"max": np.array([3.0]), "min": np.array([-2.0]), "mean": np.array([0.5]), "norm": np.array([4.0])}
    g = {"max": np.array([2.0]), "min": np.array([-2.0]), "mean": np.array([0.4]), "norm": np.array([3.5])}
    out = stats_table(t, g)
    assert [out[s + "_diff"][0] for s in ("max", "min", "mean", "norm")] == [1.0, 0.0, 0.09999999999999998, 0.5]
    # msprobe: '50.0%', '0' (wheel), '24.999999999999993%', '14.285714285714285%'
    assert out["max_rel"][0] == 0.5 and out["min_rel"][0] == 0.0
    assert out["mean_rel"][0] == pytest.approx(24.999999999999993 / 100, rel=1e-15)
    assert out["norm_rel"][0] == pytest.approx(14.285714285714285 / 100, rel=1e-15)


def test_s2_classic_warning_uses_signed_maximum():
    t = {s: np.array([v]) for s, v in zip(("max", "min", "mean", "norm"), (1.0, -3.2, 0.0, 1.0))}
    g = {s: np.array([v]) for s, v in zip(("max", "min", "mean", "norm"), (1.0, -2.0, 0.0, 1.0))}
    d, r, _ = stat_diff(t["min"], g["min"])
    assert d[0] == pytest.approx(-1.2) and r[0] == pytest.approx(0.6000000000000001)
    assert classic_stats_warning(t, g)[0]


def test_s3_zero_golden_statistics():
    d, r, _ = one(5, 2)
    assert r == 1.5
    assert one(0, 0)[:2] == (0.0, 0.0)  # wheel '0' (classic N/A)
    assert one(0, 0.001)[1] == 1.0


def test_scaled_errors_do_not_explode_on_a_mean_near_zero():
    t = {"max": np.array([3.0]), "min": np.array([-3.0]), "mean": np.array([1e-9]), "norm": np.array([100.0])}
    g = {"max": np.array([3.0]), "min": np.array([-3.0]), "mean": np.array([-1e-9]), "norm": np.array([100.0])}
    err = scaled_stat_errors(t, g, np.array([10000]), 2.0 ** -20)
    assert err[0] < 1e-8  # msprobe's MeanRelativeErr would say 200 %
    g2 = dict(g, norm=np.array([101.0]))
    assert scaled_stat_errors(t, g2, np.array([10000]), 2.0 ** -20)[0] == pytest.approx(1 / 101)


def _group(t_rows, g_rows, tensor=False, rg=None):
    """A one-record result with input rows then output rows, statistics mode, for the classic rules."""
    n = len(t_rows)
    cols = {"record": np.array(["Functional.x.0.forward"] * n, object),
            "io": np.array([IO_INPUT] * (n - 1) + [IO_OUTPUT], np.uint8),
            "matched": np.ones(n, bool), "t_valid": np.full(n, 15, np.uint8),
            "requires_grad_equal": np.array(rg if rg is not None else [1] * n, np.int8)}
    for k, s in enumerate(("max", "min", "mean", "norm")):
        cols["t_" + s] = np.array([r[k] for r in t_rows], float)
        cols["g_" + s] = np.array([r[k] for r in g_rows], float)
    out = stats_table({s: cols["t_" + s] for s in ("max", "min", "mean", "norm")},
                      {s: cols["g_" + s] for s in ("max", "min", "mean", "norm")})
    cols.update(out)
    cols["max_rel"] = np.fmax.reduce([np.abs(out[s + "_rel"]) for s in ("max", "min", "mean", "norm")])
    return highlight(cols, tensor)


def test_s1_classic_yellow():
    colour, msgs = _group([(1, 1, 1, 1), (3, -2, 0.5, 4)], [(1, 1, 1, 1), (2, -2, 0.4, 3.5)])
    assert colour.tolist() == [0, YELLOW]
    assert msgs[1] == Y3


def test_s3_classic_red():
    colour, msgs = _group([(1, 1, 1, 1), (5, 0, 0, 0)], [(1, 1, 1, 1), (2, 0, 0.001, 0)])
    assert colour[1] == RED and msgs[1] == "maximum relative error exceeds 0.5"


def test_s5_classic_red_for_inf():
    colour, msgs = _group([(1, 1, 1, 1), (INF, 0, 1, 2)], [(1, 1, 1, 1), (2, 0, 1, 2)])
    assert colour[1] == RED and msgs[1] == "maximum or minimum is nan, -inf, or inf"


def test_s6_classic_requires_grad_yellow():
    colour, msgs = _group([(1, 1, 1, 1), (1, 1, 1, 1)], [(1, 1, 1, 1), (1, 1, 1, 1)], rg=[0, 1])
    assert colour[0] == YELLOW and msgs[0] == "requires_grad is inconsistent"
