"""grad compare's numbers: direction similarity on packed bits, the 0.97 / 0.03 rule, the layer-wise ratios."""

import numpy as np
import pytest

from engines.grad_compare.layers import layer_of, layer_ratios
from engines.grad_compare.rule import apply_rule
from engines.grad_compare.similarity import SimilarityTable, direction_similarity


@pytest.mark.parametrize("numel", [1, 7, 8, 9, 1000, 4099])
def test_similarity_on_packed_bits_equals_the_elementwise_fraction(numel):
    rng = np.random.default_rng(numel)
    a = rng.standard_normal(numel) > 0
    b = a.copy()
    flip = rng.choice(numel, size=numel // 3, replace=False)
    b[flip] = ~b[flip]
    expected = float((a == b).sum()) / numel
    got = direction_similarity(np.packbits(a), np.packbits(b), numel)
    assert got == pytest.approx(expected, abs=0)


def test_similarity_refuses_different_sizes():
    with pytest.raises(ValueError):
        direction_similarity(np.zeros(2, np.uint8), np.zeros(3, np.uint8), 16)


def _table(values, numels=None, steps=None):
    values = np.array(values, dtype=float)
    params = [f"p{i}" for i in range(values.shape[0])]
    numels = np.array(numels or [10] * len(params))
    return SimilarityTable(steps or list(range(values.shape[1])), params, numels, values)


def test_summary_is_element_weighted_and_skips_missing_parameters():
    table = _table([[1.0, 0.5], [0.5, np.nan]], numels=[30, 10])
    assert table.summary[0] == pytest.approx((30 * 1.0 + 10 * 0.5) / 40)
    assert table.summary[1] == pytest.approx(0.5)
    rows = table.rows()
    assert rows[-1][0] == "summary" and rows[1] == ["p1", 0.5, ""]


def test_rule_flags_a_low_first_step_and_later_drops_in_step_then_parameter_order():
    table = _table([
        [0.99, 0.99, 0.95, 0.94],   # p0: drop of 0.04 at step 2
        [0.96, 0.96, 0.96, 0.96],   # p1: below 0.97 at the first step
        [1.00, 0.98, 0.975, 0.90],  # p2: drops 0.02, 0.005 (fine) then 0.075
    ], steps=[10, 11, 12, 13])
    verdict = apply_rule(table)
    found = [(v.step, v.param, v.reason) for v in verdict.violations]
    assert found == [(10, "p1", "below_threshold"), (12, "p0", "drop"), (13, "p2", "drop")]
    assert verdict.first.param == "p1" and verdict.first.step == 10 and not verdict.ok


def test_rule_boundaries_are_strict():
    # exactly 0.97 passes; a drop of exactly 0.03 passes (values chosen exact in binary fractions)
    table = _table([[0.97, 0.97], [1.0, 0.96875]])
    assert apply_rule(table, 0.97, 0.03125).ok
    assert not apply_rule(table, 0.97, 0.03).ok


def test_rule_judges_a_parameter_from_its_own_first_and_previous_steps():
    table = _table([[np.nan, 0.99, np.nan, 0.95]])
    verdict = apply_rule(table)
    assert [(v.step, v.reason, v.previous) for v in verdict.violations] == [(3, "drop", 0.99)]


def test_layer_of_groups_by_block_or_owning_module():
    assert layer_of("blocks.3.attn.qkv.weight") == "blocks.3"
    assert layer_of("model.layers.12.mlp.fc1.bias") == "model.layers.12"
    assert layer_of("embed.weight") == "embed"
    assert layer_of("bias") == "bias"


def test_layer_ratios_combine_norms_and_mark_the_first_layer_over_tolerance_from_the_output():
    params = ["embed.weight", "blocks.0.a.weight", "blocks.0.b.weight", "blocks.1.a.weight", "head.weight"]
    golden = np.array([[1.0], [3.0], [4.0], [2.0], [1.0]])
    # error grows from the output (head fine) to the input: blocks.1 slightly off, blocks.0 and embed far off
    target = np.array([[2.0], [6.0], [8.0], [2.1], [1.0]])
    layers = layer_ratios(params, [7], target, golden, tolerance=0.1)
    assert layers.layers == ["embed", "blocks.0", "blocks.1", "head"]
    assert layers.golden[1, 0] == pytest.approx(5.0)  # sqrt(3^2 + 4^2)
    assert layers.ratio[:, 0] == pytest.approx([2.0, 2.0, 1.05, 1.0])
    assert list(layers.over[:, 0]) == [True, True, False, False]
    assert layers.first_over(0) == 1  # blocks.0: walking from head back, the first one over tolerance
    assert layers.first_step_over() == 0


def test_layer_ratios_with_nothing_over_tolerance():
    layers = layer_ratios(["a.w", "b.w"], [0, 1], np.ones((2, 2)), np.ones((2, 2)), 0.05)
    assert layers.first_over(0) is None and layers.first_step_over() is None


def test_a_dump_that_is_not_a_grad_probe_run_is_bad_input(tmp_path, capsys):
    """A statistics dump given to grad_compare: one line naming it, exit code 2 (not a traceback)."""
    import json

    from probe_tui.cli import main
    from tests.test_compare_probe_dumps import model, write_ours

    stats = write_ours(tmp_path / "stats" / "rank0", model(), tensors=False).parent
    config = tmp_path / "gc.json"
    config.write_text(json.dumps({"task": "grad_compare", "grad_compare": {
        "target_path": str(stats), "golden_path": str(stats), "output_path": str(tmp_path / "out")}}))
    assert main(["--run", str(config)]) == 2
    assert "not a grad_probe run" in capsys.readouterr().err
