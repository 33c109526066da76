"""The MindSpore demo: the PyTorch demo's architecture, names and weights; the same losses to float32 noise;
the injected faults with the same numeric effects (docs/decisions/0015-demo-faults-by-numeric-effect.md and docs/decisions/0016-masks-are-not-overflows.md)."""

import math

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from mindspore import Tensor, mint  # noqa: E402

from engines.adapters.mindspore import demo  # noqa: E402
from engines.adapters.mindspore.demo_model import build_model, lowp_softmax  # noqa: E402
from engines.demo.data import make_batch  # noqa: E402
from engines.demo.faults import WRONG_EPS  # noqa: E402
from engines.demo.knobs import DemoKnobError, resolve_knobs  # noqa: E402
from engines.demo.weights import initial_weights, parameter_count  # noqa: E402

TINY = {"preset": "tiny", "steps": 3}


@pytest.fixture(scope="module")
def ms_tiny():
    return demo.train(TINY)


def test_cells_and_parameters_mirror_the_pytorch_demo():
    torch = pytest.importorskip("torch")
    from engines.adapters.torch.demo_model import build_model as build_torch

    knobs = resolve_knobs(TINY)
    ms_model, pt_model = build_model(knobs), build_torch(knobs)
    ms_cells = {(p, type(c).__name__) for p, c in ms_model.cells_and_names() if p}
    pt_modules = {(p, type(m).__name__) for p, m in pt_model.named_modules() if p}
    assert ms_cells - {("blocks", "CellList")} == pt_modules - {("blocks", "ModuleList")}
    ms_params = {p.name: p.asnumpy() for p in ms_model.trainable_params()}
    assert list(ms_params) == [n for n, _ in pt_model.named_parameters()]
    weights = initial_weights(knobs)
    for name, array in ms_params.items():
        assert np.array_equal(array, weights[name]), name
    assert sum(a.size for a in ms_params.values()) == parameter_count(knobs)
    del torch


@pytest.mark.usefixtures("one_torch_thread")
def test_losses_agree_with_pytorch_to_float32_noise(ms_tiny):
    pytest.importorskip("torch")
    from engines.adapters.torch.demo import train as train_torch

    pt = train_torch(TINY)
    assert abs(ms_tiny.losses[0] - pt.losses[0]) / pt.losses[0] < 1e-6  # the first step: same weights and data
    for a, b in zip(ms_tiny.losses, pt.losses):  # same AdamW update: they stay together
        assert abs(a - b) / b < 1e-5
    assert abs(ms_tiny.losses[0] - math.log(1000)) < 0.1


def test_two_runs_are_bit_identical(ms_tiny):
    seen = []
    again = demo.train(TINY, on_step=lambda step, loss: seen.append((step, loss)))
    assert again.losses == ms_tiny.losses
    assert seen == list(enumerate(again.losses))
    summary = again.summary()
    assert summary["steps"] == 3 and summary["framework"] == "mindspore" and summary["faults"] == []


def test_on_build_sees_model_and_optimizer():
    built = {}

    def on_build(model, optimizer):
        built["model"], built["optimizer"] = model, optimizer
        built["head"] = model.head.weight.asnumpy().copy()

    demo.train({"preset": "tiny", "steps": 1}, on_build=on_build)
    assert type(built["optimizer"]).__name__ == "AdamW"
    assert not np.array_equal(built["head"], built["model"].head.weight.asnumpy())  # it trained afterwards


def test_fp16_casts_linear_inputs_and_bf16_is_refused_on_cpu():
    seen = []

    def on_build(model, optimizer):
        model.blocks[0].mlp.fc1.register_forward_hook(lambda cell, args, out: seen.append(out.dtype))

    result = demo.train({"preset": "tiny", "steps": 1, "dtype": "fp16"}, on_build=on_build)
    assert seen == [ms.float16] and all(np.isfinite(result.losses))
    with pytest.raises(DemoKnobError, match="^demo.dtype: bf16 needs an Ascend or GPU device"):
        demo.train({"preset": "tiny", "steps": 1, "dtype": "bf16"})


def _attention_logits(knobs, layer=0):
    model = build_model(resolve_knobs(knobs))
    tokens = Tensor(make_batch(resolve_knobs(knobs), 0)[0])
    return model.attention_logits(tokens, layer)


def test_lowp_softmax_error_is_at_least_1e_2():
    scores = _attention_logits({"preset": "tiny"})
    exact = mint.nn.functional.softmax(scores, dim=-1).asnumpy()
    low = lowp_softmax(scores).asnumpy()
    mask = exact > 1e-3
    rel = np.abs(low - exact)[mask] / exact[mask]
    assert rel.max() >= 1e-2
    assert np.allclose(low.sum(-1), 1.0, atol=5e-2)


def test_fp16_overflow_makes_the_loss_nan_from_a_finite_exp_input():
    result = demo.train({"preset": "tiny", "steps": 2, "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}})
    assert math.isfinite(result.losses[0]) and math.isnan(result.losses[1])


def test_wrong_eps_sets_one_layer_norm():
    model = build_model(resolve_knobs({"preset": "tiny", "faults": {"wrong_eps": {"layer": 1}}}))
    assert model.blocks[1].ln1.eps == WRONG_EPS
    assert model.blocks[0].ln1.eps == model.blocks[1].ln2.eps == 1e-5


def test_grad_explosion_scales_one_blocks_gradients_at_one_step():
    from engines.demo.data import batches

    def grad_norms(knobs):
        knobs = resolve_knobs(knobs)
        model = build_model(knobs)
        model.schedule.step = 0
        tokens, targets = [(Tensor(x), Tensor(y)) for x, y in batches(knobs)][0]
        weights = model.trainable_params()
        _, grads = ms.value_and_grad(demo.loss_function(model, knobs.vocab, False), None, weights)(tokens, targets)
        return {p.name: float(np.linalg.norm(g.asnumpy())) for p, g in zip(weights, grads)}

    base = grad_norms({"preset": "tiny", "steps": 1})
    hit = grad_norms({"preset": "tiny", "steps": 1, "faults": {"grad_explosion": {"step": 0, "layer": 1,
                                                                                   "scale": 100.0}}})
    assert hit["blocks.1.mlp.fc2.weight"] / base["blocks.1.mlp.fc2.weight"] == pytest.approx(100.0, rel=1e-3)
    assert hit["blocks.0.mlp.fc2.weight"] / base["blocks.0.mlp.fc2.weight"] == pytest.approx(1.0, rel=1e-3)
    assert hit["head.weight"] == pytest.approx(base["head.weight"], rel=1e-5)
