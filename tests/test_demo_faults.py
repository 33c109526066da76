"""Each injectable fault of the demo, tested for its numeric effect (docs/decisions/0015-demo-faults-by-numeric-effect.md and docs/decisions/0016-masks-are-not-overflows.md)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402

from engines.adapters.torch.demo import build_model, train  # noqa: E402
from engines.adapters.torch.demo_model import bf16_pairwise_sum, lowp_softmax  # noqa: E402
from engines.demo.data import make_batch  # noqa: E402
from engines.demo.faults import WRONG_EPS, describe  # noqa: E402
from engines.demo.knobs import resolve_knobs  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _finite(t):
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


class NonFiniteOrigins(TorchFunctionMode):
    """Records every torch call whose output holds inf/NaN although its inputs and scalar arguments are finite."""

    def __init__(self):
        super().__init__()
        self.origins = []
        self.nonfinite_calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = list(_tensors((args, kwargs)))
        if not inputs or all(_finite(t) for t in _tensors(out)):  # factories (torch.empty) hold garbage
            return out
        name = getattr(func, "__name__", str(func))
        if name in ("__get__", "__set__"):  # attribute getters (param.grad) are not ops
            return out
        self.nonfinite_calls.append(name)
        scalars = [a for a in list(args) + list(kwargs.values()) if isinstance(a, float)]
        if all(_finite(t) for t in inputs) and all(math.isfinite(s) for s in scalars):
            self.origins.append((name, [t.dtype for t in inputs if t.is_floating_point()]))
        return out


def _grad_norms(knobs):
    """Per-step, per-parameter gradient norms of a demo run (read in on_step, after optimizer.step())."""
    norms, holder = [], {}
    train(knobs, on_build=lambda model, opt: holder.update(model=model),
          on_step=lambda step, loss: norms.append(
              {n: p.grad.double().norm().item() for n, p in holder["model"].named_parameters()}))
    return norms


# ---- lowp_softmax ------------------------------------------------------------------------------------------

def test_lowp_softmax_error_on_the_demo_logits_is_at_least_1e_2():
    knobs = resolve_knobs({})
    model = build_model(knobs)
    tokens = torch.from_numpy(make_batch(knobs, 0)[0])
    for layer in range(knobs.n_layer):
        logits = model.attention_logits(tokens, layer)
        assert torch.isinf(logits).any()  # the -inf causal mask is in
        exact = torch.softmax(logits.double(), dim=-1)
        kept = exact > 0
        lowp = lowp_softmax(logits).double()
        max_rel = ((lowp - exact).abs()[kept] / exact[kept]).max().item()
        assert max_rel >= 1e-2, (layer, max_rel)
        norm_rel = ((lowp - exact).norm() / exact.norm()).item()
        assert 1e-3 < norm_rel < 1e-2  # documented: bf16 rounding dominates on these small logits
        healthy = torch.softmax(logits, dim=-1).double()
        assert ((healthy - exact).abs()[kept] / exact[kept]).max().item() < 1e-5
        assert torch.equal(lowp[~kept], exact[~kept])  # masked positions stay exactly 0


def test_bf16_pairwise_sum_rounds_every_partial_sum():
    values = torch.full((2, 7), 1.01, dtype=torch.bfloat16)
    total = bf16_pairwise_sum(values)
    assert total.shape == (2, 1) and total.dtype == torch.bfloat16
    assert abs(total[0, 0].item() - 7 * values[0, 0].item()) < 0.1
    # 256 + 1 rounds back to 256 in bf16 (8 significant bits), twice; Tensor.sum accumulates in float32
    values = torch.tensor([256.0, 1.0, 1.0], dtype=torch.bfloat16)
    assert bf16_pairwise_sum(values).item() == 256.0 and values.sum().item() == 258.0


def _block_outputs(knobs):
    """The losses of a demo run and each block's output at every step."""
    outputs = {}

    def on_build(model, optimizer):
        for i, block in enumerate(model.blocks):
            block.register_forward_hook(lambda mod, inp, out, i=i: outputs.setdefault(i, []).append(out.clone()))

    return train(knobs, on_build=on_build).losses, outputs


def test_lowp_softmax_changes_only_its_block_from_its_step():
    faulty_losses, faulty = _block_outputs({"steps": 3, "faults": {"lowp_softmax": {"layer": 2, "from_step": 2}}})
    clean_losses, clean = _block_outputs({"steps": 3})
    assert faulty_losses[:2] == clean_losses[:2]
    assert faulty_losses[2] != clean_losses[2]
    for i in (0, 1):  # at step 2, blocks 0-1 are untouched
        assert torch.equal(faulty[i][2], clean[i][2])
    diff = (faulty[2][2] - clean[2][2]).norm() / clean[2][2].norm()  # block 2 carries the bf16 error
    assert 1e-6 < diff.item() < 1e-1


# ---- fp16_overflow -----------------------------------------------------------------------------------------

def test_fp16_overflow_first_inf_comes_from_torch_exp_on_finite_float16():
    tracer = NonFiniteOrigins()
    with tracer:
        result = train({"steps": 1, "faults": {"fp16_overflow": {"layer": 1}}})
    assert tracer.origins == [("exp", [torch.float16])]
    assert not np.isfinite(result.losses[0])


def test_healthy_run_has_a_minus_inf_mask_and_no_overflow_origin():
    tracer = NonFiniteOrigins()
    with tracer:
        result = train({"steps": 1})
    assert tracer.origins == []  # docs/decisions/0016-masks-are-not-overflows.md: masks are not overflows
    assert "masked_fill" in tracer.nonfinite_calls  # the -inf causal mask is really there
    assert np.isfinite(result.losses[0])


def test_fp16_overflow_from_step_and_under_fp16_autocast():
    result = train({"preset": "tiny", "steps": 3, "faults": {"fp16_overflow": {"layer": 0, "from_step": 1}}})
    clean = train({"preset": "tiny", "steps": 3})
    assert result.losses[0] == clean.losses[0]
    assert not np.isfinite(result.losses[1])
    tracer = NonFiniteOrigins()
    with tracer:
        fp16 = train({"preset": "tiny", "steps": 1, "dtype": "fp16", "faults": {"fp16_overflow": {"layer": 1}}})
    assert tracer.origins == [("exp", [torch.float16])]
    assert not np.isfinite(fp16.losses[0])


# ---- wrong_eps ---------------------------------------------------------------------------------------------

def test_wrong_eps_sets_one_layer_norm_eps():
    model = build_model({"faults": {"wrong_eps": {"layer": 3}}})
    eps = {name: mod.eps for name, mod in model.named_modules() if isinstance(mod, torch.nn.LayerNorm)}
    assert eps.pop("blocks.3.ln1") == WRONG_EPS == 1e-1
    assert set(eps.values()) == {1e-5}
    faulty = train({"steps": 2, "faults": {"wrong_eps": {"layer": 3}}})
    clean = train({"steps": 2})
    assert faulty.losses[0] != clean.losses[0]
    assert abs(faulty.losses[0] - clean.losses[0]) < 0.1  # a subtle fault, not a crash


# ---- grad_explosion ----------------------------------------------------------------------------------------

def test_grad_explosion_scales_one_blocks_gradients_at_one_step():
    knobs = {"preset": "tiny", "steps": 4, "faults": {"grad_explosion": {"step": 2, "layer": 1, "scale": 1e4}}}
    faulty, clean = _grad_norms(knobs), _grad_norms({"preset": "tiny", "steps": 4})
    for step in (0, 1):
        assert faulty[step] == clean[step]  # bit-identical before the step
    for name, norm in faulty[2].items():
        ratio = norm / clean[2][name]
        if name.startswith("blocks.1.") and clean[2][name] > 0:
            assert ratio == pytest.approx(1e4, rel=1e-3), name
        else:
            assert ratio == pytest.approx(1.0, rel=1e-3), name
    for name, norm in faulty[3].items():
        if clean[3][name] > 0:
            assert norm / clean[3][name] < 10, name  # no jump after the step


def test_describe_lists_active_faults():
    knobs = resolve_knobs({"faults": {"wrong_eps": {"layer": 0}, "grad_explosion": {"step": 1, "layer": 2}}})
    lines = describe(knobs.faults)
    assert lines == ["wrong_eps: blocks.0.ln1 uses eps=0.1", "grad_explosion: block 2's gradients x10000 at step 1"]
