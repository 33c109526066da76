"""free_benchmark and overflow_check on a real architecture: a tiny Llama from ``transformers`` (random weights,
nothing downloaded), trained two steps under autocast."""

import warnings
from functools import partial

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engines.adapters.torch.demo_model import _NAIVE_SOFTMAX  # noqa: E402
from engines.adapters.torch.zero_code import ZeroCodeCapture  # noqa: E402
from engines.capture.options import CaptureOptions  # noqa: E402
from engines.frameworks import adapter_module  # noqa: E402
from engines.free_benchmark.options import FreeBenchmarkOptions  # noqa: E402
from engines.free_benchmark.session import build_session  # noqa: E402
from tests.test_overflow_check import _session_run  # noqa: E402

if _NAIVE_SOFTMAX is None:  # torch < 2.4 has no torch.library.custom_op
    pytest.skip("needs torch.library.custom_op", allow_module_level=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _lowp_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Llama's eager attention with its softmax replaced by a bfloat16 one without max-subtraction (one op)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    k = repeat_kv(key, module.num_key_value_groups)
    v = repeat_kv(value, module.num_key_value_groups)
    w = torch.matmul(query, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = _NAIVE_SOFTMAX(w.to(torch.bfloat16)).to(query.dtype)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), w


transformers.AttentionInterface.register("probe_lowp_eager", _lowp_attention)


def _llama(attention):
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.train()
    return model


def _train(model, dtype, steps=2):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=dtype):
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def _free_benchmark(attention, **fb):
    rows = []
    session = build_session(partial(adapter_module, "pytorch"), CaptureOptions(level="L1"), FreeBenchmarkOptions(**fb),
                            on_step=lambda step, got: rows.extend(got), rank=0)
    with ZeroCodeCapture(CaptureOptions(), None, session=session):
        losses = _train(_llama(attention), torch.bfloat16)
    return rows, losses


def test_llama_healthy_calls_pass_whole_network():
    rows, losses = _free_benchmark("eager")
    assert len(rows) > 50 and all(r.consistent for r in rows), [(r.name, r.ratio) for r in rows if not r.consistent]
    assert {"Functional.linear", "Torch.matmul", "Functional.silu"} <= {r.name.rsplit(".", 2)[0] for r in rows}
    assert losses == _train(_llama("eager"), torch.bfloat16)  # checking changes nothing


def test_llama_low_precision_softmax_is_flagged():
    rows, _ = _free_benchmark("probe_lowp_eager")
    bad = sorted({r.name for r in rows if not r.consistent})
    assert bad == ["Demo.naive_softmax.0.forward", "Demo.naive_softmax.1.forward"]
    assert all(r.ratio > 1.004 for r in rows if not r.consistent)


def test_llama_overflow_check_healthy_then_an_overflowing_projection(tmp_path):
    model = _llama("eager")
    _, found = _session_run(lambda: _train(model, torch.float16), tmp_path / "healthy", nums=-1)
    assert [f.flagged for f in found] == [0, 0]
    bad = _llama("eager")
    with torch.no_grad():
        bad.model.layers[1].self_attn.q_proj.weight.mul_(1e6)  # a float16 linear: finite inputs, inf outputs
    _, found = _session_run(lambda: _train(bad, torch.float16, steps=1), tmp_path / "overflow", nums=1)
    first = found[0].first
    assert first.name == "Functional.linear.7.forward" and first.origin_name == "produced"  # layer 1 q_proj
    assert first.reason.endswith("from finite inputs") and list(first.slots) == ["output.0"]
