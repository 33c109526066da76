"""Matching: exact keys, fuzzy alignment (docs/reference/msprobe-analysis.md §1.6.3, §8.5), dtype gate, renumbering, mappings, MindSpore names."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.compare.dtypes import dtype_compatible
from engines.compare.fuzzy import fuzzy_key, fuzzy_record_key, myers_pairs
from engines.compare.mapping import KeyOptions, renumber_backward, side_keys, strip_wrappers
from engines.compare.matching import match_rows
from engines.dumps.msprobe.flatten import Flattener


def tensor(shape=(4,), dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 1.0, "Min": 0.0, "Mean": 0.5,
            "Norm": 1.0, "requires_grad": False}


def rows_of(records, parents=None):
    """A row table from ``[(record, [input tensors], [output tensors])]``."""
    data = {}
    for name, ins, outs in records:
        if "backward" in name.split(".")[-2:] or name.endswith("backward"):
            data[name] = {"input": ins, "output": outs}
        else:
            data[name] = {"input_args": ins, "input_kwargs": {}, "output": outs}
    return Flattener(step=0, rank=0, parents=parents or {}, stacks={}, file_index=lambda n: 0).flatten(data)


def pairs(t, g, **kw):
    m = match_rows(t, g, kw.pop("opts", KeyOptions()), **kw)
    return {t.name[i]: (g.name[j] if j >= 0 else None) for i, j in enumerate(m.golden_index)}, m


def test_exact_names_pair_and_unmatched_stay_unmatched():
    t = rows_of([("Functional.relu.0.forward", [tensor()], [tensor()]),
                 ("Functional.gelu.0.forward", [tensor()], [tensor()])])
    g = rows_of([("Functional.relu.0.forward", [tensor()], [tensor()]),
                 ("Functional.silu.0.forward", [tensor()], [tensor()])])
    got, m = pairs(t, g)
    assert got["Functional.relu.0.forward.output.0"] == "Functional.relu.0.forward.output.0"
    assert got["Functional.gelu.0.forward.output.0"] is None
    assert g.name[m.golden_only].tolist() == ["Functional.silu.0.forward.input.0",
                                              "Functional.silu.0.forward.output.0"]


def test_fuzzy_vector_from_the_reference():
    t = rows_of([("Functional.add.0.forward", [tensor()], []), ("Functional.add.1.forward", [tensor()], []),
                 ("Functional.mul.0.forward", [tensor()], [])])
    g = rows_of([("Functional.add.3.forward", [tensor()], []), ("Functional.mul.5.forward", [tensor()], [])])
    got, m = pairs(t, g, fuzzy=True)
    assert got == {"Functional.add.0.forward.input.0": "Functional.add.3.forward.input.0",
                   "Functional.add.1.forward.input.0": None,
                   "Functional.mul.0.forward.input.0": "Functional.mul.5.forward.input.0"}
    assert m.fuzzy.tolist() == [True, False, True]


def test_fuzzy_keys_keep_the_module_class_deviation():
    assert fuzzy_key("Functional.conv2d.0.forward.input.0", "Functional.conv2d.0.forward") == \
        "Functional.conv2d.forward.input.0"
    # msprobe's rename_api gives 'Module.l1.forward.0.input.0' (drops the class); we drop the call index
    assert fuzzy_key("Module.l1.Linear.forward.0.input.0", "Module.l1.Linear.forward.0") == \
        "Module.l1.Linear.forward.input.0"
    assert fuzzy_record_key("Module.l1.Linear.parameters_grad.3") == "Module.l1.Linear.parameters_grad"


def test_fuzzy_prefers_same_shapes_then_pairs_shape_changes_inside_gaps():
    t = rows_of([("Functional.linear.0.forward", [tensor((2, 8))], [tensor((2, 4))]),
                 ("Functional.relu.0.forward", [tensor((2, 4))], [tensor((2, 4))]),
                 ("Functional.linear.1.forward", [tensor((2, 4))], [tensor((2, 2))])])
    g = rows_of([("Functional.linear.5.forward", [tensor((2, 8))], [tensor((2, 4))]),
                 ("Functional.gelu.0.forward", [tensor((2, 4))], [tensor((2, 4))]),
                 ("Functional.linear.6.forward", [tensor((2, 4))], [tensor((2, 3))])])
    got, _ = pairs(t, g, fuzzy=True)
    assert got["Functional.linear.0.forward.output.0"] == "Functional.linear.5.forward.output.0"
    assert got["Functional.relu.0.forward.output.0"] is None
    assert got["Functional.linear.1.forward.output.0"] == "Functional.linear.6.forward.output.0"


def test_fuzzy_survives_a_shifted_call_count():
    recs = [("Functional.linear.{}.forward".format(i), [tensor()], [tensor()]) for i in range(50)]
    extra = ("Functional.linear.99.forward", [tensor((3,))], [tensor((3,))])
    t = rows_of(recs)
    g = rows_of(recs[:10] + [extra] + [(n.replace(".{}.".format(i), ".{}.".format(i + 1)), a, b)
                                       for i, (n, a, b) in enumerate(recs[10:], start=10)])
    got, _ = pairs(t, g, fuzzy=True)
    assert got["Functional.linear.30.forward.output.0"] == "Functional.linear.31.forward.output.0"
    assert sum(v is not None for v in got.values()) == 100


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=25), st.lists(st.integers(0, 3), max_size=25))
def test_myers_finds_a_longest_common_subsequence(a, b):
    p = myers_pairs(a, b, 1000)
    assert all(a[i] == b[j] for i, j in p)
    assert all(p[k][0] < p[k + 1][0] and p[k][1] < p[k + 1][1] for k in range(len(p) - 1))
    dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a)):
        for j in range(len(b)):
            dp[i + 1][j + 1] = dp[i][j] + 1 if a[i] == b[j] else max(dp[i][j + 1], dp[i + 1][j])
    assert len(p) == dp[len(a)][len(b)]


def test_dtype_gate():
    assert dtype_compatible("torch.float16", "torch.float32", False)
    assert dtype_compatible("torch.float32", "torch.float64", False)
    assert not dtype_compatible("torch.float32", "torch.int32", False)
    assert dtype_compatible("Float32", "torch.bfloat16", True)
    assert dtype_compatible("Int8", "torch.int64", True) and not dtype_compatible("Int8", "torch.int64", False)
    t = rows_of([("Functional.f.0.forward", [tensor(dtype="torch.float32")], [tensor(dtype="torch.float16")])])
    g = rows_of([("Functional.f.0.forward", [tensor(dtype="torch.int32")], [tensor(dtype="torch.float32")])])
    got, m = pairs(t, g)
    assert got["Functional.f.0.forward.input.0"] is None and m.gated.tolist() == [True, False]
    assert got["Functional.f.0.forward.output.0"] == "Functional.f.0.forward.output.0"


def test_backward_renumbering_vector():
    out = renumber_backward(["Functional.linear.7.backward", "Functional.linear.3.backward",
                             "Module.a.Linear.backward.4", "Functional.linear.7.forward"])
    assert out == {"Functional.linear.7.backward": "Functional.linear.0.backward",
                   "Functional.linear.3.backward": "Functional.linear.1.backward",
                   "Module.a.Linear.backward.4": "Module.a.Linear.backward.0"}


def test_wrapper_prefixes_are_stripped():
    assert strip_wrappers("Module.module.layers.0.Linear.forward.0", ddp=True) == "Module.layers.0.Linear.forward.0"
    assert strip_wrappers("Module.layers._fsdp_wrapped_module.0._checkpoint_wrapped_module.Linear.forward.0",
                          ddp=False) == "Module.layers.0.Linear.forward.0"
    t = rows_of([("Module.module.fc.Linear.forward.0", [tensor()], [tensor()])])
    g = rows_of([("Module.fc.Linear.forward.0", [tensor()], [tensor()])])
    got, _ = pairs(t, g)
    assert got["Module.module.fc.Linear.forward.0.output.0"] == "Module.fc.Linear.forward.0.output.0"


def test_data_mapping_names_pairs_and_disables_the_gate():
    t = rows_of([("Functional.a.0.forward", [tensor(dtype="torch.int64")], [])])
    g = rows_of([("Functional.b.0.forward", [tensor(dtype="torch.float32")], [])])
    opts = KeyOptions(data_mapping={"Functional.a.0.forward.input.0": "Functional.b.0.forward.input.0"})
    got, m = pairs(t, g, opts=opts)
    assert got["Functional.a.0.forward.input.0"] == "Functional.b.0.forward.input.0" and not m.gated.any()


def test_mindspore_names_map_to_pytorch():
    t = rows_of([("Cell.net.fc.Dense.forward.0", [tensor()], [tensor()]),
                 ("Functional.dense.0.forward", [tensor()], [tensor()]),
                 ("Mint.add.0.forward", [tensor()], [tensor()]),
                 ("MintFunctional.relu.0.forward", [tensor()], [tensor()])])
    g = rows_of([("Module.net.fc.Dense.forward.0", [tensor()], [tensor()]),
                 ("Functional.linear.0.forward", [tensor()], [tensor()]),
                 ("Torch.add.0.forward", [tensor()], [tensor()]),
                 ("Functional.relu.0.forward", [tensor()], [tensor()])])
    got, _ = pairs(t, g, opts=KeyOptions(map_mindspore=True), cross_framework=True)
    assert all(v is not None for v in got.values()), got


def test_user_api_mapping_renumbers_arguments():
    t = rows_of([("Functional.myop.0.forward", [tensor(), tensor((2,)), tensor((3,))], [tensor()])])
    g = rows_of([("Torch.theirop.0.forward", [tensor((3,)), tensor()], [tensor()])])
    entry = {"ms_api": "Functional.myop", "pt_api": "Torch.theirop", "ms_args": [0, 2], "pt_args": [1, 0]}
    got, _ = pairs(t, g, opts=KeyOptions(map_mindspore=True, api_mapping=[entry]))
    assert got["Functional.myop.0.forward.input.0"] == "Torch.theirop.0.forward.input.1"
    assert got["Functional.myop.0.forward.input.2"] == "Torch.theirop.0.forward.input.0"
    assert got["Functional.myop.0.forward.input.1"] is None  # not listed: abandoned
    assert got["Functional.myop.0.forward.output.0"] == "Torch.theirop.0.forward.output.0"


def test_cell_mapping_file_renames_cells():
    t = rows_of([("Cell.network.block0.Dense.forward.0", [tensor()], [tensor()])])
    g = rows_of([("Module.model.layer0.Linear.forward.0", [tensor()], [tensor()])])
    opts = KeyOptions(map_mindspore=True, cell_mapping={"network.block0.Dense": "model.layer0.Linear"})
    got, _ = pairs(t, g, opts=opts)
    assert got["Cell.network.block0.Dense.forward.0.output.0"] == "Module.model.layer0.Linear.forward.0.output.0"


def test_layer_mapping_pairs_apis_by_position_inside_mapped_layers():
    t_parent = {"Functional.dense.0.forward": "Cell.net.blk.Block.forward.0",
                "Functional.gelu.0.forward": "Cell.net.blk.Block.forward.0"}
    g_parent = {"Functional.linear.0.forward": "Module.net.layer.Block.forward.0",
                "Functional.gelu.0.forward": "Module.net.layer.Block.forward.0"}
    t = rows_of([("Cell.net.blk.Block.forward.0", [tensor()], [tensor()]),
                 ("Functional.dense.0.forward", [tensor()], [tensor()]),
                 ("Functional.gelu.0.forward", [tensor()], [tensor()])], parents=t_parent)
    g = rows_of([("Module.net.layer.Block.forward.0", [tensor()], [tensor()]),
                 ("Functional.linear.0.forward", [tensor()], [tensor()]),
                 ("Functional.gelu.0.forward", [tensor()], [tensor()])], parents=g_parent)
    opts = KeyOptions(layer_mapping={"TopLayer": {"net.blk": "net.layer"}})
    got, _ = pairs(t, g, opts=opts)
    assert got["Functional.dense.0.forward.output.0"] == "Functional.linear.0.forward.output.0"
    assert got["Cell.net.blk.Block.forward.0.input.0"] == "Module.net.layer.Block.forward.0.input.0"


def test_keys_are_computed_per_side():
    t = rows_of([("Functional.relu.0.forward", [tensor()], [])])
    keys = side_keys(t, KeyOptions(), is_target=True)
    assert keys.tolist() == ["Functional.relu.0.forward.input.0"]
    assert json.dumps(keys.tolist())
    assert isinstance(keys, np.ndarray)


@pytest.mark.parametrize("bad", ["x", ["not", "entries"]])
def test_bad_api_mapping_is_rejected(bad):
    from engines.compare.mapping import MappingError, parse_api_mapping

    with pytest.raises(MappingError, match="api_mapping m.yaml"):
        parse_api_mapping(bad, "m.yaml")
