"""The demo model: size, seed-generated weights and data, determinism, autocast, knob validation."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch.demo import build_model, make_optimizer, train  # noqa: E402
from engines.demo.data import FOLLOW_P, batches, make_batch, successor_table  # noqa: E402
from engines.demo.knobs import DemoKnobError, resolve_knobs  # noqa: E402
from engines.demo.weights import initial_weights, parameter_count  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_default_size_is_the_reference_workload():
    knobs = resolve_knobs({})
    assert (knobs.n_layer, knobs.d_model, knobs.n_head, knobs.d_mlp) == (4, 256, 4, 1024)
    assert (knobs.vocab, knobs.seq, knobs.batch, knobs.steps) == (1000, 64, 8, 5)
    model = build_model(knobs)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == parameter_count(knobs) == 3_688_936  # the baseline's 3.69 M


def test_module_names_read_well():
    names = {name for name, _ in build_model({"preset": "tiny"}).named_modules()}
    assert {"tok_emb", "pos_emb", "blocks.0.ln1", "blocks.0.attn.qkv", "blocks.0.attn.proj",
            "blocks.1.mlp.fc1", "blocks.1.mlp.fc2", "ln_f", "head"} <= names


def test_model_starts_from_the_numpy_weights():
    knobs = resolve_knobs({"preset": "tiny"})
    weights = initial_weights(knobs)
    state = build_model(knobs).state_dict()
    assert set(weights) == set(state)
    for name, array in weights.items():
        assert array.dtype == np.float32
        assert np.array_equal(state[name].numpy(), array), name


def test_weights_are_a_pure_function_of_seed_and_name():
    a = initial_weights(resolve_knobs({"preset": "tiny"}))
    b = initial_weights(resolve_knobs({"preset": "tiny"}))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other_seed = initial_weights(resolve_knobs({"preset": "tiny", "seed": 7}))
    assert not np.array_equal(a["blocks.0.attn.qkv.weight"], other_seed["blocks.0.attn.qkv.weight"])
    # a parameter's values do not depend on how many blocks exist
    deeper = initial_weights(resolve_knobs({"preset": "tiny", "n_layer": 3}))
    assert np.array_equal(a["tok_emb.weight"], deeper["tok_emb.weight"])
    assert np.array_equal(a["blocks.1.mlp.fc1.weight"], deeper["blocks.1.mlp.fc1.weight"])
    assert np.all(a["blocks.0.ln1.weight"] == 1) and np.all(a["head.bias"] == 0)
    assert 0.015 < a["tok_emb.weight"].std() < 0.025


def test_batches_are_deterministic_and_learnable():
    knobs = resolve_knobs({"steps": 3})
    first, second = list(batches(knobs)), list(batches(knobs))
    assert len(first) == 3
    for (x1, y1), (x2, y2) in zip(first, second):
        assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
        assert x1.shape == y1.shape == (8, 64) and x1.dtype == np.int64
        assert np.array_equal(x1[:, 1:], y1[:, :-1])  # targets are the inputs shifted by one
        assert x1.min() >= 0 and x1.max() < knobs.vocab
    assert not np.array_equal(first[0][0], first[1][0])
    x, y = make_batch(knobs, 0)
    follows = (successor_table(knobs)[x] == y).mean()
    assert FOLLOW_P - 0.05 < follows < FOLLOW_P + 0.05


def test_two_runs_give_bit_identical_losses_and_the_loss_falls():
    seen = []
    first = train({}, on_step=lambda step, loss: seen.append((step, loss)))
    second = train({})
    assert first.losses == second.losses  # bit-identical, not approximately equal
    assert seen == list(enumerate(first.losses))
    assert len(first.losses) == 5 and all(np.isfinite(first.losses))
    assert abs(first.losses[0] - np.log(1000)) < 0.1
    assert first.losses[-1] < first.losses[0] - 0.1
    summary = first.summary()
    assert summary["steps"] == 5 and summary["n_params"] == 3_688_936 and summary["faults"] == []


def test_on_build_sees_the_model_and_optimizer_before_the_first_step():
    built = {}

    def on_build(model, optimizer):
        built["model"], built["optimizer"] = model, optimizer
        built["weights"] = model.head.weight.detach().clone()

    train({"preset": "tiny", "steps": 2}, on_build=on_build)
    assert isinstance(built["optimizer"], torch.optim.AdamW)
    assert built["optimizer"].param_groups[0]["lr"] == 1e-3
    assert not torch.equal(built["weights"], built["model"].head.weight)  # it trained afterwards


def test_make_optimizer_is_adamw_over_every_parameter():
    model = build_model({"preset": "tiny", "lr": 3e-4})
    optimizer = make_optimizer(model, {"preset": "tiny", "lr": 3e-4})
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.param_groups[0]["lr"] == 3e-4
    assert len(optimizer.param_groups[0]["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize("dtype,expected", [("fp32", torch.float32), ("bf16", torch.bfloat16),
                                            ("fp16", torch.float16)])
def test_dtype_is_the_autocast_dtype(dtype, expected):
    seen = []

    def on_build(model, optimizer):
        model.blocks[0].mlp.fc1.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))

    result = train({"preset": "tiny", "steps": 2, "dtype": dtype}, on_build=on_build)
    assert seen == [expected, expected]
    assert all(np.isfinite(result.losses))
    assert result.losses == train({"preset": "tiny", "steps": 2, "dtype": dtype}).losses


def test_sizes_override_the_preset():
    knobs = resolve_knobs({"preset": "tiny", "n_layer": 3, "seq": 16})
    assert (knobs.n_layer, knobs.d_model, knobs.seq, knobs.batch) == (3, 32, 16, 2)
    model = build_model(knobs)
    assert len(model.blocks) == 3
    logits = model(torch.from_numpy(make_batch(knobs, 0)[0]))
    assert logits.shape == (2, 16, 1000)


@pytest.mark.parametrize("knobs,field", [
    ({"preset": "huge"}, "demo.preset"),
    ({"steps": 0}, "demo.steps"),
    ({"steps": "5"}, "demo.steps"),
    ({"d_model": 30, "n_head": 4}, "demo.n_head"),
    ({"dtype": "fp8"}, "demo.dtype"),
    ({"lr": -1}, "demo.lr"),
    ({"layers": 2}, "demo.layers"),
    ({"faults": {"wrong_eps": {"layer": 4}}}, "demo.faults.wrong_eps.layer"),
    ({"faults": {"wrong_eps": {}}}, "demo.faults.wrong_eps.layer"),
    ({"faults": {"wrong_eps": {"layer": 0, "from_step": 1}}}, "demo.faults.wrong_eps.from_step"),
    ({"faults": {"grad_explosion": {"layer": 0, "step": 5}}}, "demo.faults.grad_explosion.step"),
    ({"faults": {"grad_explosion": {"layer": 0, "step": 1, "scale": 0}}}, "demo.faults.grad_explosion.scale"),
    ({"faults": {"lowp_softmax": {"layer": 0, "from_step": 9}}}, "demo.faults.lowp_softmax.from_step"),
    ({"faults": {"bitflip": {"layer": 0}}}, "demo.faults.bitflip"),
    ({"faults": {"fp16_overflow": {"layer": 1}, "lowp_softmax": {"layer": 1}}}, "demo.faults"),
])
def test_bad_knobs_are_one_line_errors_naming_the_field(knobs, field):
    with pytest.raises(DemoKnobError) as err:
        resolve_knobs(knobs)
    message = str(err.value)
    assert message.startswith(field + ":") or message.startswith(field + "."), message
    assert "\n" not in message


def test_knobs_accept_none_for_unset_fields_and_report_active_faults():
    knobs = resolve_knobs({"preset": "tiny", "n_layer": None, "faults": {"fp16_overflow": None,
                                                                         "wrong_eps": {"layer": 1}}})
    assert knobs.n_layer == 2
    assert knobs.to_dict()["faults"] == {"wrong_eps": {"layer": 1}}


def test_global_optimizer_step_hooks_count_the_demo_steps():
    """The capture engines count steps like in a user script: torch's global optimizer-step hooks."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    counted = []
    handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: counted.append(len(counted)))
    try:
        result = train({"preset": "tiny", "steps": 4})
    finally:
        handle.remove()
    assert counted == [0, 1, 2, 3] and result.steps == 4


def test_framework_neutral_parts_take_plain_dicts():
    knobs = {"preset": "tiny", "steps": 2}
    assert set(initial_weights(knobs)) == set(initial_weights(resolve_knobs(knobs)))
    assert len(list(batches(knobs))) == 2
    with pytest.raises(DemoKnobError, match="^demo.steps"):
        batches({"steps": -1})
