"""A real architecture from ``transformers`` (GPT-2 with a tiny config, random weights, nothing downloaded):
every module and API record is present at L0, L1 and mix, and the statistics equal values computed directly."""

import warnings

import pytest
import torch
from test_capture_support import Dump, assert_stats_equal, make_session

transformers = pytest.importorskip("transformers")


def _model():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    return model


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 128, (2, 12), generator=g)


def _reference():
    model = _model()
    ids = _batch()
    seen = {}
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue

        def fwd(mod, args, out, name=name):
            first = out[0] if isinstance(out, tuple) else out
            seen[name] = {"input": args[0].detach().clone() if args and torch.is_tensor(args[0]) else None,
                          "output": first.detach().clone() if torch.is_tensor(first) else None}

        handles.append(module.register_forward_hook(fwd))
    loss = model(ids, labels=ids).loss
    loss.backward()
    for h in handles:
        h.remove()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return model, seen, grads, loss.item()


def _capture(root, level):
    model = _model()
    ids = _batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = make_session(root, level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s.start(model)
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        s.step_end()
    s.close()
    return Dump(root / "rank0"), s.summary, loss.item()


@pytest.fixture(scope="module")
def reference():
    return _reference()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return {level: _capture(tmp_path_factory.mktemp(level), level) for level in ("L0", "L1", "mix")}


def test_capture_leaves_the_loss_alone(reference, dumps):
    for level in dumps:
        assert dumps[level][2] == reference[3]


def test_l0_module_records_and_statistics(reference, dumps):
    model, seen, grads, _ = reference
    dump, summary, _ = dumps["L0"]
    names = set(dump.names(0))
    called = [(n, type(m).__name__) for n, m in model.named_modules() if n and n in seen]
    assert len(called) > 20
    for path, cls in called:
        assert "Module.%s.%s.forward.0" % (path, cls) in names, path
        assert "Module.%s.%s.backward.0" % (path, cls) in names, path
    for path in ("transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj", "transformer.ln_f"):
        cls = type(model.get_submodule(path)).__name__
        rows = dump.rows("Module.%s.%s.forward.0" % (path, cls))
        assert_stats_equal(rows["input.0"], seen[path]["input"])
        assert_stats_equal(rows["output.0"], seen[path]["output"])
        pg = dump.rows("Module.%s.%s.parameters_grad.0" % (path, cls))
        assert_stats_equal(pg["weight"], grads[path + ".weight"])
    # tied embeddings: the shared weight's gradient is reported for both of its modules
    assert "Module.transformer.wte.Embedding.parameters_grad.0" in names
    assert "Module.lm_head.Linear.parameters_grad.0" in names
    assert not [k for k in summary.missing if k.startswith("failed")]


def test_l1_api_records_and_statistics(reference, dumps):
    model, seen, _, _ = reference
    dump, summary, _ = dumps["L1"]
    names = dump.names(0)
    forward = [n for n in names if n.endswith(".forward")]
    assert "Functional.embedding.0.forward" in forward and "Functional.layer_norm.4.forward" in forward
    assert "Functional.scaled_dot_product_attention.1.forward" in forward
    assert "Functional.cross_entropy.0.forward" in forward
    assert "Functional.scaled_dot_product_attention.0.backward" in names
    # Conv1D is torch.addmm: its output (before a view) carries the module's output values
    rows = dump.rows("Torch.addmm.0.forward")
    assert_stats_equal(rows["input.0"], model.transformer.h[0].attn.c_attn.bias)
    out = seen["transformer.h.0.attn.c_attn"]["output"]
    assert_stats_equal(rows["output.0"], out.reshape(-1, out.shape[-1]))
    ln = dump.rows("Functional.layer_norm.4.forward")
    assert_stats_equal(ln["output.0"], seen["transformer.ln_f"]["output"])
    assert not [k for k in summary.missing if k.startswith("failed")]


def test_mix_links_every_api_to_its_module(dumps):
    dump, _, _ = dumps["mix"]
    assert dump.record("Torch.addmm.0.forward")["parent"] == "Module.transformer.h.0.attn.c_attn.Conv1D.forward.0"
    assert dump.record("Functional.scaled_dot_product_attention.0.backward")["parent"] == \
        "Module.transformer.h.0.attn.GPT2Attention.backward.0"
    l1 = dumps["L1"][0]
    assert sorted(n for n in dump.names(0) if not n.startswith("Module.")) == sorted(l1.names(0))
