"""The consistency metric and thresholds of free_benchmark (docs/reference/msprobe-tasks.md §8.4, §14 F3/F4), on synthetic outputs."""

import csv
import math

import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch import free_benchmark_compare as cmp  # noqa: E402
from engines.free_benchmark import thresholds as th  # noqa: E402
from engines.free_benchmark.results import CSV_COLUMNS, CheckRow, ResultWriter, read_checks  # noqa: E402

MB = 1 << 20


def _ratio(a, b, tol=1e-4):
    return cmp.resolve([cmp.tensor_ratio(a, b, tol)])[0]


def test_chunk_count():
    assert th.chunk_count(0) == 1
    assert th.chunk_count(MB // 2) == 1
    assert th.chunk_count(16 * MB) == 1
    assert th.chunk_count(31 * MB) == 1
    assert th.chunk_count(32 * MB) == 2
    assert th.chunk_count(64 * MB) == 4
    assert th.chunk_count(1000 * MB) == 32
    assert th.chunk_count(1 << 40) == 128


def test_ratio_is_the_larger_of_max_r_and_one_over_min_r():
    b = torch.tensor([1.0, 2.0, 4.0, 8.0])
    a = b * torch.tensor([1.001, 1.0, 0.998, 1.0])
    assert _ratio(a, b) == pytest.approx(max(1.001, 1 / 0.998), rel=1e-6)
    assert _ratio(b, b) == 1.0


def test_values_below_the_tolerance_are_clamped_and_nan_counts_as_equal():
    b = torch.tensor([1e-6, 1.0, float("nan")])
    a = torch.tensor([5e-5, 1.0, float("nan")])
    assert _ratio(a, b, tol=1e-4) == 1.0  # both below 1e-4
    assert _ratio(a, b, tol=1e-5) == pytest.approx(5.0)


def test_a_sign_flip_is_symbol_flipping():
    a = torch.tensor([1.0, -0.5, 2.0])
    b = torch.tensor([1.0, 0.5, 2.0])
    assert _ratio(a, b) == math.inf
    assert th.max_rel(math.inf) == "symbol_flipping"
    # a product above -tol^2 is not a flip: opposite signs below the tolerance are noise
    assert _ratio(torch.tensor([-1e-5, 1.0]), torch.tensor([1e-5, 1.0]), tol=1e-4) == 1.0


def test_the_max_is_taken_over_all_chunks_not_only_the_last():
    n = (40 * MB) // 4  # 40 MB of float32: two chunks
    assert th.chunk_count(n * 4) == 2
    b = torch.ones(n)
    a = torch.ones(n)
    a[10] = 1.5  # in the first chunk; the last chunk is exact
    assert _ratio(a, b) == pytest.approx(1.5)
    half = a[n // 2:]
    assert _ratio(half, b[n // 2:]) == 1.0  # what msprobe's last-chunk ratio would report


def test_half_precision_pairs_are_compared_in_float32():
    b = torch.tensor([1.0, 1.0])
    a = torch.tensor([1.0, 1.0 + 2 ** -9]).to(torch.bfloat16)  # rounds to 1.0 in bfloat16
    assert _ratio(a, b) == 1.0
    a16 = torch.tensor([1.0, 1.001], dtype=torch.float16)
    assert _ratio(a16, b) == pytest.approx(float(a16[1]), rel=1e-7)


def test_thresholds_per_dtype_and_no_change():
    assert th.ratio_threshold("torch.float16", "improve_precision") == 1.002
    assert th.ratio_threshold("torch.bfloat16", "add_noise") == 1.004
    assert th.ratio_threshold("torch.float32", "bit_noise") == 1.0002
    assert th.ratio_threshold("torch.float64", "change_value") == 1.0002
    assert th.ratio_threshold("torch.int64", "improve_precision") == 1.0002
    assert th.ratio_threshold("torch.bfloat16", "no_change") == 1.0
    assert th.consistent(1.004, 1.004) and not th.consistent(1.0041, 1.004)
    assert th.consistent(1.0, 1.0) and not th.consistent(1.0000001, 1.0)
    assert not th.consistent(math.inf, 1.002)
    assert th.forward_abs_tol("torch.float32") == pytest.approx(1e-4)
    assert th.forward_abs_tol("torch.float16") == pytest.approx(1e-3)
    assert th.forward_abs_tol("torch.bfloat16") == pytest.approx(1e-2)
    assert th.BACKWARD_ABS_TOL == 1e-3


def test_outputs_are_compared_element_by_element():
    res = torch.tensor([3.0, 1.0]).max(dim=0)
    assert cmp.output_items(res) == [(0, res.values)]
    items = cmp.output_items((torch.ones(1), [torch.zeros(1), 2]))
    assert [k for k, _ in items] == [0, 1, 2]
    assert cmp.scalar_ratio(3, 3) == 1.0 and cmp.scalar_ratio(3, 4) == math.inf
    assert cmp.scalar_ratio(2.0, 1.0) == 2.0 and cmp.scalar_ratio(0.0, 0.0) == 1.0
    assert cmp.scalar_ratio("a", "b") is None
    assert _ratio(torch.tensor([1, 2]), torch.tensor([1, 2])) == 1.0
    assert _ratio(torch.tensor([1, 2]), torch.tensor([1, 3])) == math.inf


def test_to_cpu_single_compare():
    g = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float32)
    ok, detail = cmp.single_compare(g.to(torch.bfloat16), g)
    assert ok and "max rel err" in detail
    bad = torch.tensor([0.5, 2.05, 3.0]).to(torch.bfloat16)  # 2.5% off where |x| >= 1: above 2^-8
    ok, _ = cmp.single_compare(bad, g)
    assert not ok
    ok, detail = cmp.single_compare(g, torch.tensor([0.5, float("inf"), 3.0]))
    assert ok and "not judged" in detail
    biased = g + 2e-4 * torch.tensor([1.0, 0.0, 0.0])  # abs error 2e-4 below 1: above fp32's atol 2^-14
    assert not cmp.single_compare(biased, g)[0]


def test_csv_rows_and_store(tmp_path):
    w = ResultWriter(tmp_path, 3, {"framework": "pytorch"}, mode="swmr")
    rows = [CheckRow(2, "Torch.matmul.0.forward", "forward", "improve_precision", "check", 0, "torch.bfloat16",
                     "[2, 3]", ratio=1.01, threshold=1.004, consistent=False),
            CheckRow(2, "Torch.add.0.forward", "forward", "improve_precision", "check", 0, "torch.float32", "[2]",
                     ratio=1.0, threshold=1.0002, consistent=True),
            CheckRow(2, "Tensor.mul.1.forward", "forward", "improve_precision", "check", 1, "torch.float16", "[4]",
                     ratio=math.inf, threshold=1.002, consistent=False)]
    w.write(2, rows)
    w.write(3, [])
    w.close()
    with open(tmp_path / "free_benchmark.csv", newline="") as fh:
        got = list(csv.reader(fh))
    assert tuple(got[0]) == CSV_COLUMNS == ("rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype",
                                            "shape", "output_index")
    assert got[1] == ["3", "improve_precision", "forward", "2", "Torch.matmul.0.forward", repr(1.01 - 1.0),
                      "torch.bfloat16", "[2, 3]", "0"]
    assert got[2][5] == "symbol_flipping" and got[2][8] == "1" and len(got) == 3
    stored = read_checks(tmp_path)
    assert [r["name"] for r in stored] == [r.name for r in rows]
    assert [r["consistent"] for r in stored] == [False, True, False]
    assert stored[2]["ratio"] == math.inf


def test_fix_casts_a_replacement_into_the_original_structure():
    from engines.adapters.torch.free_benchmark_call import _cast_like

    old = torch.tensor([[1.0, 3.0], [2.0, 0.0]], dtype=torch.bfloat16).max(dim=1)
    new = torch.tensor([[1.0, 3.0], [2.0, 0.0]]).max(dim=1)
    got = _cast_like(new, old)
    assert type(got) is type(old) and got.values.dtype == torch.bfloat16 and got.indices.dtype == torch.int64
    leaf = torch.ones(2, requires_grad=True)
    out = leaf * 2
    cpu_side = torch.full((2,), 3.0)  # computed outside the graph (to_cpu): written into the original output
    same = _cast_like(cpu_side, out)
    assert same is out and out.tolist() == [3.0, 3.0] and out.grad_fn is not None
    with pytest.raises(ValueError):
        _cast_like((torch.ones(1),), [torch.ones(1), torch.ones(1)])


def _reference(a, b, tol):
    """The formula as written, one chunk: both sides in the work dtype, then ``chunk_ratio``."""
    dt = cmp.work_dtype(b)
    return float(cmp.chunk_ratio(a.detach().to(dt).reshape(-1), b.detach().to(dt).reshape(-1), tol))


@pytest.mark.parametrize("block", [3, 64, 1 << 19])
def test_the_blocked_comparison_equals_the_formula_bit_for_bit(monkeypatch, block):
    """tensor_ratio works in blocks in a reused workspace and finishes the ratios per step (resolve): the same
    ratios as the formula, for every dtype pair, with sign flips, NaN, inf and values under the tolerance (the
    framework path: the native kernel off; tests/test_native_fb_compare.py checks it equals this path)."""
    monkeypatch.setattr(cmp, "BLOCK", block)
    monkeypatch.setattr(cmp, "USE_NATIVE", False)
    gen = torch.Generator().manual_seed(7)
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
    cases = []
    for i in range(48):
        b = torch.randn(200, generator=gen) * 10.0 ** torch.randint(-6, 3, (200,), generator=gen).float()
        a = b * (1 + 1e-3 * torch.randn(200, generator=gen))
        if i % 3 == 0:
            a[5] = -a[5]
        if i % 5 == 0:
            a[-1] = float("nan")
        if i % 7 == 0:
            a[0], b[0] = float("inf"), float("inf")
        if i % 11 == 0:
            b[1] = float("-inf")
        cases.append((a.to(dtypes[i % 4]), b.to(dtypes[(i // 4) % 4]), (1e-4, 1e-2, 1e-8)[i % 3]))
    got = cmp.resolve([cmp.tensor_ratio(a, b, tol) for a, b, tol in cases] + [2.5])
    want = [_reference(a, b, tol) for a, b, tol in cases] + [2.5]
    assert [g if g == g else "nan" for g in got] == [w if w == w else "nan" for w in want]
    assert math.inf in got and any(1.0 < g < math.inf for g in got)


def test_the_workspace_made_in_inference_mode_serves_outside_it():
    """The CPU workspace is kept between calls: made during an inference-mode forward it must still take the
    in-place writes of a later training step (a tensor made in inference mode refuses them)."""
    import threading

    got = []

    def run():  # a fresh thread: a fresh workspace
        b = torch.tensor([1.0, 2.0, 4.0])
        with torch.inference_mode():
            got.append(_ratio(b * 1.5, b))
        got.append(_ratio(b * 2.0, b))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == [pytest.approx(1.5), pytest.approx(2.0)]
