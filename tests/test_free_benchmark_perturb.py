"""The perturbations of free_benchmark, bit for bit (docs/reference/msprobe-tasks.md §8.3, §14 F2)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch.free_benchmark_perturb import (  # noqa: E402
    Cancelled,
    add_noise,
    bit_noise,
    change_value,
    first_eligible_index,
    perturb,
)

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
EPS = {torch.bfloat16: 1e-4, torch.float16: 1e-6, torch.float32: 1e-8, torch.float64: 1e-16}


def _bits(t):
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(width).tolist()


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_noise_adds_eps_where_abs_exceeds_its_root(dtype):
    eps = EPS[dtype]
    root = eps ** 0.5
    x = torch.tensor([0.5, -0.75, root / 4, -root / 8, 4 * root, 0.0], dtype=dtype)
    y = add_noise(x)
    assert y.dtype == dtype and y.shape == x.shape
    # expected, computed independently: x + eps rounded once to the dtype, only where |x| > sqrt(eps)
    wide = x.double()
    expected = torch.where(wide.abs() > root, wide + eps, wide).to(dtype)
    assert _bits(y) == _bits(expected)
    assert _bits(y[2:4]) == _bits(x[2:4]) and y[5] == 0  # small values untouched
    if dtype in (torch.float32, torch.float64):  # just above sqrt(eps) the noise survives rounding
        assert y[4].item() == pytest.approx(x[4].item() + eps, rel=1e-6) and y[4].item() != x[4].item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_bit_noise_flips_the_lowest_mantissa_bit_of_normal_values(dtype):
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor([1.0, -2.5, 1e-3, 0.0, 3.0], dtype=dtype)
    x = torch.cat([x, torch.tensor([tiny / 4], dtype=dtype)])  # a subnormal stays as it is
    y = bit_noise(x)
    xb, yb = _bits(x), _bits(y)
    for i in range(4):
        if i == 3:
            continue
        assert yb[i] == xb[i] ^ 1
    assert yb[3] == xb[3] and yb[4] == xb[4] ^ 1 and yb[5] == xb[5]
    assert y.dtype == dtype


def test_noise_prechecks_cancel_the_perturbation():
    with pytest.raises(Cancelled, match="dtype torch.int64 unsupported"):
        add_noise(torch.tensor([1, 2]))
    with pytest.raises(Cancelled, match="empty"):
        add_noise(torch.tensor([], dtype=torch.float32))
    with pytest.raises(Cancelled, match="maximum value is less than the minimum threshold"):
        bit_noise(torch.full((3,), 1e-9, dtype=torch.float32))
    with pytest.raises(Cancelled, match="maximum value"):
        add_noise(torch.full((3,), 5e-5, dtype=torch.bfloat16))


def test_change_value_swaps_first_and_last():
    x = torch.arange(5.0)
    assert change_value(x).tolist() == [4.0, 1.0, 2.0, 3.0, 0.0]
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # a copy
    m = torch.arange(24.0).reshape(2, 3, 4)
    y = change_value(m)
    assert torch.equal(y[0][0], m[-1][-1]) and torch.equal(y[-1][-1], m[0][0])
    untouched = torch.ones(2, 3, 4, dtype=torch.bool)
    untouched[0, 0] = untouched[-1, -1] = False
    assert torch.equal(y[untouched], m[untouched])
    row = torch.tensor([[1.0, 2.0, 3.0]])  # (1, 3): [0][0] and [-1][-1] are both in the one row
    assert change_value(row).tolist() == [[3.0, 2.0, 1.0]]
    col = torch.tensor([[1.0], [2.0]])
    assert change_value(col).tolist() == [[2.0], [1.0]]
    for bad in (torch.tensor(1.0), torch.tensor([1.0]), torch.ones(1, 1), torch.ones(3, 0)):
        with pytest.raises(Cancelled):
            change_value(bad)


def test_only_the_first_eligible_tensor_is_perturbed():
    a = torch.full((3,), 0.01)
    b = torch.full((3,), 0.01)
    p = perturb("add_noise", (a, b), {"alpha": 2}, 0)
    assert not torch.equal(p.args[0], a) and p.args[1] is b and p.kwargs == {"alpha": 2}
    nested = ([torch.tensor([1, 2]), a], b)
    p = perturb("change_value", nested, {}, 0)
    assert p.args[0][0] is nested[0][0] and torch.equal(p.args[0][1], a) and p.args[1] is b
    with pytest.raises(Cancelled, match="no floating tensor"):
        perturb("bit_noise", ([torch.tensor([1])],), {}, 0)


def test_first_eligible_index_follows_msprobe():
    f = torch.ones(2)
    assert first_eligible_index((f,)) == 0
    assert first_eligible_index((torch.tensor([1, 2]), f)) == 1
    assert first_eligible_index((3, [f])) == 1  # any container counts
    assert first_eligible_index((torch.tensor([1]), 2.0)) is None
    assert first_eligible_index((torch.empty(2, device="meta"),)) is None


def test_improve_precision_raises_half_types_only_and_says_when_nothing_changed():
    h = torch.ones(2, dtype=torch.float16)
    b = torch.ones(2, dtype=torch.bfloat16)
    f = torch.ones(2)
    i = torch.ones(2, dtype=torch.int64)
    p = perturb("improve_precision", (h, [b, i]), {"other": f, "inplace": True}, 0)
    assert p.changed and p.args[0].dtype == torch.float32 and p.args[1][0].dtype == torch.float32
    assert p.args[1][1].dtype == torch.int64 and p.kwargs["other"].dtype == torch.float32
    assert p.kwargs["inplace"] is False
    assert not perturb("improve_precision", (f, i), {}, 0).changed
    # under autocast (the call ran in bfloat16): float32 inputs are rounded to bfloat16 first
    x = torch.tensor([1.0 + 2 ** -12])
    p = perturb("improve_precision", (x,), {}, 0, autocast_dtype=torch.bfloat16)
    assert p.changed and p.args[0].dtype == torch.float32 and p.args[0].item() == 1.0
    g = torch.tensor([1.0 + 2 ** -12], requires_grad=True)
    p = perturb("improve_precision", (g,), {}, 0, autocast_dtype=torch.bfloat16, keep_graph=True)
    assert p.args[0] is g and p.changed  # fix mode: the full float32 call, in the graph


def test_to_cpu_moves_and_raises():
    h = torch.ones(2, dtype=torch.float16)
    p = perturb("to_cpu", (h, 2), {"device": torch.device("cpu")}, 0)
    assert p.args[0].dtype == torch.float32 and p.args[0].device.type == "cpu" and p.args[1] == 2
    assert p.device == torch.device("cpu")


def test_no_change_keeps_everything():
    a = torch.ones(2)
    p = perturb("no_change", (a,), {"dim": 0}, 0)
    assert p.args[0] is a and p.kwargs == {"dim": 0} and p.changed


def test_add_noise_matches_a_numpy_reference_in_float16():
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000).astype(np.float16)
    y = add_noise(torch.from_numpy(x)).numpy()
    wide = x.astype(np.float64)
    expected = np.where(np.abs(wide) > 1e-3, (wide + 1e-6), wide).astype(np.float16)
    assert np.array_equal(y.view(np.int16), expected.view(np.int16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_noise_on_large_tensors_picks_the_same_bits_as_where(dtype):
    """From SELECT_BITS_FROM elements the noise is selected with integer operations instead of torch.where (much
    cheaper on the CPU): the same bits, signed zeros, NaN, inf and values under the threshold included."""
    from engines.adapters.torch.free_benchmark_perturb import SELECT_BITS_FROM, _select

    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(SELECT_BITS_FROM + 17, generator=gen) * 0.05).to(dtype)
    x[:7] = torch.tensor([-0.0, 0.0, float("inf"), -float("inf"), 1e-30, -1e-5, 3.0])
    eps = {torch.float32: 1e-8, torch.bfloat16: 1e-4, torch.float16: 1e-6, torch.float64: 1e-16}[dtype]
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    want = torch.where(x.abs() > eps ** 0.5, x + eps, x)
    assert torch.equal(add_noise(x).view(ints), want.view(ints))
    tiny = torch.finfo(dtype).tiny
    flipped = (x.view(ints) ^ 1).view(dtype)
    assert torch.equal(bit_noise(x).view(ints), torch.where(x.abs() > tiny, flipped, x).view(ints))
    x[7:9] = torch.tensor([float("nan"), -float("nan")])  # (a NaN input cancels the noise: _select alone)
    mask = torch.rand(x.shape, generator=gen) > 0.3
    assert torch.equal(_select(mask, x + eps, x).view(ints), torch.where(mask, x + eps, x).view(ints))
