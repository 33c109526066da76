"""L0, L1 and mix on the MindSpore demo: the records msprobe's MindSpore dump has, named as it names them, with
statistics equal to values computed here from a reference step kept by MindSpore's own cell hooks."""


import json

import pytest

pytestmark = pytest.mark.mindspore
support = pytest.importorskip("test_mindspore_support", reason="MindSpore is not installed")

from test_mindspore_support import ONE_STEP, TINY, assert_stats_equal, reference_step, values  # noqa: E402

from tests.dump_support import forward_counts  # noqa: E402


@pytest.fixture(scope="module")
def reference():
    return reference_step(ONE_STEP)


@pytest.fixture(scope="module")
def dumps(demo_level_dumps):
    return demo_level_dumps("mindspore")  # TINY at L0, L1 and mix (tests/conftest.py)


def _cells(model):
    return [(path, type(c).__name__, c) for path, c in model.cells_and_names() if path and path != "blocks"]


def test_l0_has_every_cell_record_named_like_msprobe(reference, dumps):
    model = reference[0]
    dump, summary, _ = dumps["L0"]
    names = set(dump.names(0))
    for path, cls, cell in _cells(model):
        assert "Cell.%s.%s.forward.0" % (path, cls) in names
        assert "Cell.%s.%s.backward.0" % (path, cls) in names
        if cell._params:
            assert "Cell.%s.%s.parameters_grad.0" % (path, cls) in names
    assert not any(n.startswith(("Functional.", "Tensor.", "Mint", "Primitive.")) for n in names)
    assert not summary.missing


def test_l0_statistics_equal_the_reference(reference, dumps):
    model, seen, grads, params, _ = reference
    dump = dumps["L0"][0]
    for path, cls, cell in _cells(model):
        ref = seen[path]
        fwd = dump.rows("Cell.%s.%s.forward.0" % (path, cls))
        in_dtype = "Int64" if path in ("tok_emb", "pos_emb") else "Float32"
        assert_stats_equal(fwd["input.0"], values(ref["input"][0], in_dtype))
        assert_stats_equal(fwd["output.0"], values(ref["output"]))
        for pname in cell._params:
            full = "%s.%s" % (path, pname)
            assert_stats_equal(fwd["parameters." + pname], values(params[full]))
            pg = dump.rows("Cell.%s.%s.parameters_grad.0" % (path, cls))
            assert_stats_equal(pg[pname], values(grads[full]))
        bwd = dump.rows("Cell.%s.%s.backward.0" % (path, cls))
        # msprobe's convention: backward input = grad w.r.t. the forward output, output = grad w.r.t. the input.
        assert_stats_equal(bwd["input.0"], values(ref["grad_output"][0]))
        if path in ("tok_emb", "pos_emb"):
            assert "output.0" not in bwd  # integer ids have no gradient
        else:
            assert_stats_equal(bwd["output.0"], values(ref["grad_input"][0]))




EXPECTED_L1 = {
    # name: forward calls in one tiny step (2 blocks)
    "Functional.gather": 2, "Primitive.LayerNorm": 5, "MintFunctional.linear": 9, "Functional.gelu": 2,
    "MintFunctional.softmax": 2, "MintFunctional.dropout": 5, "Functional.cross_entropy": 1,
    "Tensor.masked_fill": 2, "Tensor.split": 2, "Tensor.view": 10, "Tensor.transpose": 10, "Tensor.matmul": 4,
}


def test_l1_records_every_api_call(dumps):
    dump, summary, _ = dumps["L1"]
    names = dump.names(0)
    forward = forward_counts(names, EXPECTED_L1)
    assert forward["Tensor.add"] == 5 and forward["Tensor.mul"] == 2  # operators, by method name
    # metadata calls and MindSpore's own machinery (autograd, the jit AdamW) are never records
    assert not any(n.split(".")[1] in ("shape", "dim", "asnumpy", "__len__", "value_and_grad", "grad")
                   for n in names)
    assert not any(n.startswith("Cell.") for n in names)
    backward = {n for n in names if n.endswith(".backward")}
    for i in range(9):
        assert "MintFunctional.linear.%d.backward" % i in backward
    assert {"Functional.cross_entropy.0.backward", "Primitive.LayerNorm.4.backward",
            "MintFunctional.softmax.1.backward"} <= backward
    assert not summary.missing


def test_l1_statistics_equal_the_reference(reference, dumps):
    model, seen, grads, params, _ = reference
    dump = dumps["L1"][0]
    rows = dump.rows("MintFunctional.linear.0.forward")  # blocks.0.attn.qkv
    assert_stats_equal(rows["input.0"], values(seen["blocks.0.attn.qkv"]["input"][0]))
    assert_stats_equal(rows["input.1"], values(params["blocks.0.attn.qkv.weight"]))
    assert_stats_equal(rows["output.0"], values(seen["blocks.0.attn.qkv"]["output"]))
    bwd = dump.rows("MintFunctional.linear.0.backward")
    assert_stats_equal(bwd["input.0"], values(seen["blocks.0.attn.qkv"]["grad_output"][0]))
    assert_stats_equal(bwd["output.0"], values(seen["blocks.0.attn.qkv"]["grad_input"][0]))
    assert_stats_equal(bwd["output.1"], values(grads["blocks.0.attn.qkv.weight"]))
    assert_stats_equal(bwd["output.2"], values(grads["blocks.0.attn.qkv.bias"]))
    ln = dump.rows("Primitive.LayerNorm.4.forward")  # ln_f
    assert_stats_equal(ln["output.0"], values(seen["ln_f"]["output"]))
    args = dump.record("Primitive.LayerNorm.4.forward")["args"]
    assert '"tensor":"input.0"' in args
    # the primitive's construction attributes, for a replay (docs/FORMAT.md "API records")
    prim = json.loads(args)["primitive"]
    assert prim["class"] == "LayerNorm"
    assert prim["init_attrs"] == {"begin_norm_axis": -1, "begin_params_axis": -1, "epsilon": 1e-5}
    softmax = dump.record("MintFunctional.softmax.0.forward")["args"]
    assert '"dim":-1' in softmax  # non-tensor arguments kept for replay




def test_loss_and_gradients_are_bit_identical_with_capture(reference, dumps):
    from engines.adapters.mindspore.demo import train

    plain = train(TINY).losses  # step 1's loss depends on every step-0 gradient through the optimizer
    assert plain[0] == reference[4]
    for level in ("L0", "L1", "mix"):
        assert dumps[level][2].losses == plain
