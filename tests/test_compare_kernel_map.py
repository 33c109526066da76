"""Graph-mode kernels paired with API records (engines/compare/kernel_map.py): the op types that compute one API,
in call order, element counts agreeing; expanded kernels, extra inputs and backward kernels left unmatched."""

import json

import numpy as np
import pytest
from test_compare_matching import pairs, rows_of, tensor

from engines.compare.mapping import KeyOptions
from engines.compare.piece import PieceSettings, compare_piece
from engines.compare.tensor_metrics import ST_OK, ST_SHAPE
from engines.compare.verdicts import ERROR, PASS, F
from engines.dumps.msprobe.tensors import MsprobeTensorSpec


def kernels(entries):
    """Kernel rows from ``[(record, scope, [inputs], [outputs])]``, each kernel's scope in its args."""
    rows = rows_of([(name, ins, outs) for name, _scope, ins, outs in entries])
    rows.args = {name: json.dumps({"scope": scope}) for name, scope, _ins, _outs in entries}
    return rows


T4, T8 = tensor((4,)), tensor((8,))


def test_kernels_take_the_names_of_the_api_calls_they_compute_in_call_order():
    t = kernels([("Kernel.Reshape.0.forward", "Expand/_Dense/Reshape-op0", [T4], [T4]),
                 ("Kernel.MatMul.0.forward", "Expand/_Dense/MatMul-op0", [T4, T4], [T4]),
                 ("Kernel.Softmax.0.forward", "Default/net-Net/Softmax-op0", [T4, tensor(())], [T4]),
                 ("Kernel.BatchMatMul.0.forward", "Expand/_MatMulExt/BatchMatMul-op0", [T4, T4], [T4]),
                 ("Kernel.Softmax.1.forward", "Default/net-Net/Softmax-op1", [T8], [T8]),
                 ("Kernel.Softmax.0.backward", "Gradients/Default/net-Net/Softmax-op0", [T4], [T4])])
    g = rows_of([("MintFunctional.linear.0.forward", [T4, T4], [T4]),
                 ("MintFunctional.softmax.0.forward", [T4], [T4]),
                 ("Tensor.matmul.0.forward", [T4, T4], [T4]),
                 ("MintFunctional.softmax.1.forward", [T4], [T4]),  # 4 elements: not Softmax.1's 8
                 ("MintFunctional.softmax.0.backward", [T4], [T4])])
    got, _ = pairs(t, g)
    assert got["Kernel.Softmax.0.forward.output.0"] == "MintFunctional.softmax.0.forward.output.0"
    assert got["Kernel.Softmax.0.forward.input.0"] == "MintFunctional.softmax.0.forward.input.0"
    assert got["Kernel.Softmax.0.forward.input.1"] is None  # the kernel's axis: no argument of the API
    assert got["Kernel.BatchMatMul.0.forward.input.1"] == "Tensor.matmul.0.forward.input.1"
    # a linear is several kernels, none of them the linear's output; element counts differ; gradients
    for name in ("Kernel.MatMul.0.forward.output.0", "Kernel.Reshape.0.forward.output.0",
                 "Kernel.Softmax.1.forward.output.0", "Kernel.Softmax.0.backward.output.0"):
        assert got[name] is None, name


def test_kernels_pair_with_pytorch_names_through_the_mindspore_mapping_and_as_the_golden_side():
    t = kernels([("Kernel.Softmax.0.forward", "Default/Softmax-op0", [T4], [T4])])
    g = rows_of([("Functional.softmax.0.forward", [T4], [T4])])
    got, _ = pairs(t, g, opts=KeyOptions(map_mindspore=True))
    assert got["Kernel.Softmax.0.forward.output.0"] == "Functional.softmax.0.forward.output.0"
    api = rows_of([("MintFunctional.softmax.0.forward", [T4], [T4])])
    got, _ = pairs(api, t)
    assert got["MintFunctional.softmax.0.forward.output.0"] == "Kernel.Softmax.0.forward.output.0"
    both, _ = pairs(t, t)  # two kernel dumps: names as they are
    assert both["Kernel.Softmax.0.forward.output.0"] == "Kernel.Softmax.0.forward.output.0"


def _folded_pair():
    """A graph-mode dump whose Softmax kernel takes a folded ``[16, 96]`` where the API record has ``[2, 8, 96]``
    (same elements), and whose Add kernel's bias is ``[96]`` where the API's is ``[2, 8, 96]`` (other elements)."""
    flat, full, bias = tensor((16, 96)), tensor((2, 8, 96)), tensor((96,))
    t = kernels([("Kernel.Softmax.0.forward", "Default/Softmax-op0", [flat], [flat]),
                 ("Kernel.Add.0.forward", "Default/Add-op0", [flat, bias], [flat])])
    g = rows_of([("MintFunctional.softmax.0.forward", [full], [full]),
                 ("Tensor.add.0.forward", [full, full], [full])])
    return t, g


def _by_name(cols):
    return {name: i for i, name in enumerate(cols["target_name"].tolist())}


def test_a_kernel_layout_mindspore_folded_compares_as_values_and_other_element_counts_stay_errors():
    t, g = _folded_pair()
    cols, _ = compare_piece(t, g, None, None, PieceSettings(mode="statistics"))
    at = _by_name(cols)
    for name in ("Kernel.Softmax.0.forward.input.0", "Kernel.Softmax.0.forward.output.0",
                 "Kernel.Add.0.forward.input.0", "Kernel.Add.0.forward.output.0"):
        i = at[name]
        assert cols["matched"][i], name
        assert not int(cols["flags"][i]) & F["shape differs"], name
        assert cols["status"][i] != ST_SHAPE and cols["verdict"][i] == PASS, name
        assert cols["rel_err"][i] == 0.0, name  # the statistics were compared
        assert "layout" in cols["reasons"][i], name  # the row says the layouts differ
    bias = at["Kernel.Add.0.forward.input.1"]  # [96] against [2, 8, 96]: not the same tensor
    assert cols["matched"][bias] and int(cols["flags"][bias]) & F["shape differs"]
    assert cols["verdict"][bias] == ERROR


def test_the_shape_rule_of_api_records_is_unchanged():
    g = rows_of([("MintFunctional.softmax.0.forward", [tensor((2, 8, 96))], [tensor((2, 8, 96))])])
    t = rows_of([("MintFunctional.softmax.0.forward", [tensor((16, 96))], [tensor((16, 96))])])
    cols, _ = compare_piece(t, g, None, None, PieceSettings(mode="statistics"))
    assert all(int(f) & F["shape differs"] for f in cols["flags"])
    assert (cols["verdict"] == ERROR).all()


def test_a_folded_kernel_tensor_is_compared_flattened(tmp_path):
    t, g = _folded_pair()
    rng = np.random.default_rng(0)
    files = []
    for side, rows in (("t", t), ("g", g)):
        (tmp_path / side).mkdir()
        data = np.full(len(rows), -1, dtype=np.int64)
        for i, shape in enumerate(rows.shape.tolist()):
            data[i] = i
            if side == "t":
                files.append("r%d.npy" % i)
            dims = json.loads(shape)
            np.save(tmp_path / side / ("r%d.npy" % i), rng.standard_normal(int(np.prod(dims))).astype(np.float32)
                    .reshape(dims))
        rows.data = data
    # the golden side holds the target's values in its own layout, except the bias (a [96] tensor there)
    for i, shape in enumerate(g.shape.tolist()):
        x = np.load(tmp_path / "t" / ("r%d.npy" % i))
        if x.size == int(np.prod(json.loads(shape))):
            np.save(tmp_path / "g" / ("r%d.npy" % i), x.reshape(json.loads(shape)))
    spec_t = MsprobeTensorSpec(str(tmp_path / "t"), tuple(files))
    spec_g = MsprobeTensorSpec(str(tmp_path / "g"), tuple(files))
    cols, _ = compare_piece(t, g, spec_t, spec_g, PieceSettings(mode="tensor", workers=1))
    at = _by_name(cols)
    for name in ("Kernel.Softmax.0.forward.input.0", "Kernel.Softmax.0.forward.output.0",
                 "Kernel.Add.0.forward.output.0"):
        i = at[name]
        assert cols["status"][i] == ST_OK, name
        assert cols["cosine"][i] == pytest.approx(1.0) and cols["max_abs_err"][i] == 0.0, name
        assert cols["verdict"][i] == PASS, name
    bias = at["Kernel.Add.0.forward.input.1"]
    assert cols["status"][bias] == ST_SHAPE and cols["verdict"][bias] == ERROR


def test_backward_kernels_computing_one_apis_gradient_pair_with_its_backward_records_in_backward_order():
    x, w, d = tensor((2, 8, 4)), tensor((4,)), tensor((2, 8, 4))
    flat = tensor((16, 4))
    grad = "Gradients/Default/net-Net/ln-LayerNorm/Grad_LayerNorm/"
    t = kernels([("Kernel.LayerNorm.0.forward", "Default/net-Net/ln-LayerNorm/LayerNorm-op0", [x, w, w], [x]),
                 ("Kernel.LayerNorm.1.forward", "Default/net-Net/ln-LayerNorm/LayerNorm-op1", [x, w, w], [x]),
                 # the backward runs in reverse: the second LayerNorm's gradient first
                 ("Kernel.LayerNormGrad.0.backward", grad + "LayerNormGrad-op0", [flat, flat, w, w, w],
                  [flat, w, w]),
                 ("Kernel.Mul.0.backward", "Gradients/Default/net-Net/Grad_Mul/Mul-op0", [d, d], [d]),
                 ("Kernel.LayerNormGrad.1.backward", grad + "LayerNormGrad-op1", [flat, flat, w, w, w],
                  [flat, w, w]),
                 ("Kernel.Concat.0.backward", "Gradients/Default/net-Net/Grad_Split/Concat-op0", [d, d], [x]),
                 ("Kernel.UnsortedSegmentSum.0.backward", "Gradients/Default/net-Net/emb-Embedding/Grad_Gather/"
                  "UnsortedSegmentSum-op0", [flat, tensor((16,))], [tensor((10, 4))])])
    g = rows_of([("Primitive.LayerNorm.0.forward", [x, w, w], [x]),
                 ("Primitive.LayerNorm.1.forward", [x, w, w], [x]),
                 ("Primitive.LayerNorm.1.backward", [d], [d, w, w]),
                 ("Tensor.mul.0.backward", [d], [d, d]),
                 ("Primitive.LayerNorm.0.backward", [d], [d, w, w]),
                 ("Tensor.split.0.backward", [d, d], [x]),
                 ("Functional.gather.0.backward", [d], [tensor((10, 4))])])
    got, _ = pairs(t, g)
    # LayerNormGrad (x, dy, variance, mean, gamma) -> (dx, dgamma, dbeta): dy is the API's incoming gradient
    assert got["Kernel.LayerNormGrad.0.backward.input.1"] == "Primitive.LayerNorm.1.backward.input.0"
    for k in range(3):
        assert got["Kernel.LayerNormGrad.0.backward.output.%d" % k] == "Primitive.LayerNorm.1.backward.output.%d" % k
    assert got["Kernel.LayerNormGrad.1.backward.output.0"] == "Primitive.LayerNorm.0.backward.output.0"
    assert got["Kernel.LayerNormGrad.0.backward.input.0"] is None  # the forward input it re-reads: no gradient
    assert got["Kernel.Concat.0.backward.input.1"] == "Tensor.split.0.backward.input.1"
    assert got["Kernel.Concat.0.backward.output.0"] == "Tensor.split.0.backward.output.0"
    assert got["Kernel.UnsortedSegmentSum.0.backward.output.0"] == "Functional.gather.0.backward.output.0"
    # a gradient MindSpore computes with kernels of its own (not one per API call) stays unmatched
    assert got["Kernel.Mul.0.backward.output.0"] is None
    assert got["Kernel.LayerNorm.0.forward.output.0"] == "Primitive.LayerNorm.0.forward.output.0"
