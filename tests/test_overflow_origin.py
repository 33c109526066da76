"""The origin rules of overflow_check (engines.overflow.origin), without any framework."""

from engines.overflow import origin as og
from engines.overflow.origin import TensorFacts as T


def test_finite_inputs_to_inf_output_is_the_origin():
    v = og.classify([T("input.0")], [T("output.0", og.POSINF)])
    assert v.origin == og.PRODUCED and v.flagged and v.output_taint == og.BAD
    assert v.reason == "produced +inf from finite inputs"


def test_bad_inputs_make_a_call_inherit_whatever_it_outputs():
    bad = T("input.0", og.NAN, taint=og.BAD)
    for outs in ([T("output.0", og.NAN)], [T("output.0")], [T("output.0", og.POSINF | og.NAN)]):
        v = og.classify([bad, T("input.1")], outs)
        assert v.origin == og.INPUTS and v.flagged
        assert "input.0 (nan)" in v.reason


def test_a_fill_argument_makes_a_mask_not_an_overflow():
    v = og.classify([T("input.0"), T("input.1")], [T("output.0", og.NEGINF)], fills=og.NEGINF)
    assert v.origin == og.MASKED and not v.flagged and v.output_taint == og.MASK


def test_mask_values_flow_through_and_are_consumed_without_a_flag():
    mask = T("input.0", og.NEGINF, taint=og.MASK)
    assert og.classify([mask], [T("output.0", og.NEGINF)]).origin == og.MASKED  # view, to(), dropout...
    assert og.classify([mask], [T("output.0")]).origin == og.MASKED  # softmax over a masked row
    assert not og.classify([mask], [T("output.0")]).flagged


def test_new_kinds_from_mask_values_are_produced():
    mask = T("input.0", og.NEGINF, taint=og.MASK)
    v = og.classify([mask], [T("output.0", og.NAN)])  # softmax of a fully masked row
    assert v.origin == og.PRODUCED and v.reason == "produced nan from masked (-inf) inputs"
    v = og.classify([mask], [T("output.0", og.POSINF | og.NEGINF)])  # a real +inf next to the mask's -inf
    assert v.origin == og.PRODUCED and v.new_kinds == og.POSINF


def test_extreme_finite_fill_values_explain_infinities_of_their_sign():
    fmin = T("input.1", extremes=og.EXTREME_MIN)  # an additive finfo.min mask
    assert og.classify([T("input.0"), fmin], [T("output.0", og.NEGINF)]).origin == og.MASKED
    v = og.classify([T("input.0"), fmin], [T("output.0", og.POSINF)])
    assert v.origin == og.PRODUCED and "extreme values" in v.reason


def test_clean_calls():
    v = og.classify([T("input.0"), T("parameters.weight")], [T("output.0")])
    assert v.origin == og.CLEAN and not v.flagged and v.name == "clean"


def test_fill_kinds_read_the_capture_skeleton():
    args = {"args": [{"tensor": "input.0"}, {"tensor": "input.1"}, {"type": "float", "value": "-inf"}],
            "kwargs": {"value": {"type": "float", "value": "nan"}, "x": 1.5}}
    assert og.fill_kinds(args) == og.NEGINF | og.NAN
    assert og.fill_kinds({"args": [{"tensor": "input.0"}, 0.0], "kwargs": {}}) == 0
    assert og.fill_kinds({"args": [[{"type": "float", "value": "inf"}]]}) == og.POSINF


def test_kinds_from_minmax_and_text():
    nan, inf = float("nan"), float("inf")
    assert og.kinds_from_minmax(0.0, 1.0) == 0
    assert og.kinds_from_minmax(-inf, 1.0) == og.NEGINF
    assert og.kinds_from_minmax(-inf, inf) == og.NEGINF | og.POSINF
    assert og.kinds_from_minmax(nan, nan) == og.NAN
    assert og.kinds_text(og.NAN | og.NEGINF) == "nan, -inf"


def test_external_tensors_one_sign_constant_is_a_mask_else_bad():
    assert og.external_taint(og.NEGINF, requires_grad=False) == og.MASK
    assert og.external_taint(og.NEGINF, requires_grad=True) == og.BAD  # a parameter gone -inf
    assert og.external_taint(og.NAN, requires_grad=False) == og.BAD
    assert og.external_taint(og.POSINF | og.NEGINF, requires_grad=False) == og.BAD
    assert og.external_taint(0, requires_grad=True) == og.FINITE


def test_slots():
    ins, outs = og.split_rows([T("input.0"), T("parameters.weight"), T("output.0"), T("output.1")])
    assert [f.slot for f in ins] == ["input.0", "parameters.weight"]
    assert [f.slot for f in outs] == ["output.0", "output.1"]
