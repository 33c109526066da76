"""Graph-mode kernels paired with API records (engines/compare/kernel_map.py): the op types that compute one API,
in call order, element counts agreeing; expanded kernels, extra inputs and backward kernels left unmatched."""

import json

from test_compare_matching import pairs, rows_of, tensor

from engines.compare.mapping import KeyOptions


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
