"""L0, L1 and mix on the demo: every record msprobe would write is there, named as msprobe names it, and its
statistics equal values computed directly from a reference run with plain torch hooks."""

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from test_capture_support import TINY, assert_stats_equal

from engines.adapters.torch.demo import build_model
from engines.demo.data import batches
from engines.demo.knobs import resolve_knobs
from tests.dump_support import forward_counts

ONE_STEP = dict(TINY, steps=1)


def reference_run():
    """The demo's first step without capture, every module's tensors kept by ordinary hooks."""
    knobs = resolve_knobs(ONE_STEP)
    torch.manual_seed(knobs.seed)
    model = build_model(knobs)
    model.train()
    tokens, targets = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches(knobs)][0]
    seen = {}
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue

        def fwd(mod, args, out, name=name):
            seen[name] = {"input": [a.detach().clone() for a in args], "output": out.detach().clone()}

        def bwd(mod, grad_in, grad_out, name=name):
            seen[name]["grad_input"] = [g.detach().clone() if g is not None else None for g in grad_in]
            seen[name]["grad_output"] = [g.detach().clone() for g in grad_out]

        handles.append(module.register_forward_hook(fwd))
        if name != "blocks":
            handles.append(module.register_full_backward_hook(bwd))
    logits = model(tokens)
    loss = F.cross_entropy(logits.view(-1, knobs.vocab), targets.view(-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the embeddings' inputs are integer ids: torch says so once
        loss.backward()
    for h in handles:
        h.remove()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return model, seen, grads, params, loss.item()


@pytest.fixture(scope="module")
def reference():
    return reference_run()


@pytest.fixture(scope="module")
def dumps(demo_level_dumps):
    return demo_level_dumps("pytorch")  # ONE_STEP at L0, L1 and mix (tests/conftest.py)


def _module_names(model):
    return [(name, type(m).__name__) for name, m in model.named_modules() if name and name != "blocks"]


def test_l0_has_every_module_record(reference, dumps):
    model = reference[0]
    dump, summary, _ = dumps["L0"]
    names = set(dump.names(0))
    for path, cls in _module_names(model):
        assert "Module.%s.%s.forward.0" % (path, cls) in names
        assert "Module.%s.%s.backward.0" % (path, cls) in names
        if list(dict(model.get_submodule(path).named_parameters(recurse=False))):
            assert "Module.%s.%s.parameters_grad.0" % (path, cls) in names
    assert not any(n.startswith(("Functional.", "Tensor.", "Torch.")) for n in names)
    assert not summary.missing


def test_l0_statistics_equal_the_reference(reference, dumps):
    model, seen, grads, params, _ = reference
    dump = dumps["L0"][0]
    for path, cls in _module_names(model):
        fwd = dump.rows("Module.%s.%s.forward.0" % (path, cls))
        ref = seen[path]
        assert_stats_equal(fwd["input.0"], ref["input"][0])
        assert_stats_equal(fwd["output.0"], ref["output"])
        module = model.get_submodule(path)
        for pname, _ in module.named_parameters(recurse=False):
            full = "%s.%s" % (path, pname)
            assert_stats_equal(fwd["parameters." + pname], params[full])
            pg = dump.rows("Module.%s.%s.parameters_grad.0" % (path, cls))
            assert_stats_equal(pg[pname], grads[full])
        bwd = dump.rows("Module.%s.%s.backward.0" % (path, cls))
        # msprobe's convention: backward input = grad w.r.t. the forward output, output = grad w.r.t. the input.
        assert_stats_equal(bwd["input.0"], ref["grad_output"][0])
        if ref["grad_input"][0] is not None:
            assert_stats_equal(bwd["output.0"], ref["grad_input"][0])
        else:
            assert "output.0" not in bwd  # integer token ids have no gradient




EXPECTED_L1 = {
    # name: forward calls in one tiny step (2 blocks)
    "Functional.embedding": 2, "Functional.layer_norm": 5, "Functional.linear": 9, "Functional.gelu": 2,
    "Functional.softmax": 2, "Functional.dropout": 5, "Functional.cross_entropy": 1,
    "Tensor.masked_fill": 2, "Tensor.split": 2, "Tensor.view": 10, "Tensor.transpose": 10,
}


def test_l1_records_every_api_call(dumps):
    dump, summary, _ = dumps["L1"]
    names = dump.names(0)
    forward = forward_counts(names, EXPECTED_L1)
    # operators, matmul through @, the optimizer's per-parameter ops: all captured, no whitelist
    assert forward["Tensor.matmul"] == 4 and forward["Tensor.add"] >= 5
    assert forward["Tensor.addcdiv_"] > 0 and forward["Tensor.lerp_"] > 0
    # metadata calls are never records
    assert not any(n.split(".")[1] in ("size", "dim", "shape", "__len__", "data_ptr", "stride", "numel")
                   for n in names)
    backward = {n for n in names if n.endswith(".backward")}
    for i in range(9):
        assert "Functional.linear.%d.backward" % i in backward
    assert "Functional.cross_entropy.0.backward" in backward
    assert not summary.missing


def test_l1_statistics_equal_the_reference(reference, dumps):
    model, seen, grads, _, _ = reference
    dump = dumps["L1"][0]
    rows = dump.rows("Functional.linear.0.forward")  # blocks.0.attn.qkv
    assert_stats_equal(rows["input.0"], seen["blocks.0.attn.qkv"]["input"][0])
    assert_stats_equal(rows["input.1"], model.blocks[0].attn.qkv.weight)
    assert_stats_equal(rows["output.0"], seen["blocks.0.attn.qkv"]["output"])
    bwd = dump.rows("Functional.linear.0.backward")
    assert_stats_equal(bwd["input.0"], seen["blocks.0.attn.qkv"]["grad_output"][0])
    assert_stats_equal(bwd["output.0"], seen["blocks.0.attn.qkv"]["grad_input"][0])
    assert_stats_equal(bwd["output.1"], grads["blocks.0.attn.qkv.weight"])
    assert_stats_equal(bwd["output.2"], grads["blocks.0.attn.qkv.bias"])
    ln = dump.rows("Functional.layer_norm.4.forward")  # ln_f
    assert_stats_equal(ln["output.0"], seen["ln_f"]["output"])
    args = json.loads(dump.record("Functional.layer_norm.4.forward")["args"])
    # non-tensor arguments kept for replay; eps=1e-05 is F.layer_norm's default, so it is not recorded
    assert args == {"args": [{"tensor": "input.0"}, [32]],
                    "kwargs": {"weight": {"tensor": "input.weight"}, "bias": {"tensor": "input.bias"}}}




def test_loss_identical_with_capture(reference, dumps):
    loss = reference[4]
    for level in ("L0", "L1", "mix"):
        assert dumps[level][2].losses[0] == loss
