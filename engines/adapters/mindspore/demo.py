"""The demo training loop in MindSpore (PyNative): user-style code that the capture engines instrument.

One step is ``value_and_grad`` (forward + cross-entropy + backward) -> ``optimizer(grads)``, the usual
MindSpore 2.x loop. The optimizer is ``mindspore.experimental.optim.AdamW``: PyTorch's AdamW update, run as a
jit-compiled graph (like ``nn.AdamWeightDecay`` in msprobe's MindSpore baseline, it records no ops), so the
two demos start from the same ``initial_weights`` on the same ``engines.demo.data`` batches and stay close step
after step. Engines count steps by optimizer calls, exactly as in a user's script.

``dtype`` fp16 casts the inputs of every linear and attention matmul to float16 and leaves the rest in float32,
as PyTorch's CPU autocast does; bf16 needs an accelerator (MindSpore 2.10 has no bfloat16 matmul on the CPU).
"""

import time
from typing import Any, Callable, Optional

import mindspore as ms
from mindspore import Tensor, ops

from engines.adapters.mindspore.demo_model import DemoGPT
from engines.adapters.mindspore.demo_model import build_model as _build_model
from engines.demo.data import batches
from engines.demo.knobs import DemoKnobError, DemoKnobs, resolve_knobs
from engines.demo.result import DemoResult
from engines.demo.weights import parameter_count

StepCallback = Callable[[int, float], None]
BuildCallback = Callable[[Any, Any], None]


def ensure_pynative() -> None:
    """The demo and the capture hooks need PyNative mode (MindSpore's default since 2.x)."""
    if ms.get_context("mode") != ms.PYNATIVE_MODE:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def device_target() -> str:
    try:
        return str(ms.get_context("device_target"))
    except Exception:
        return "CPU"


def check_knobs(knobs: DemoKnobs) -> None:
    if knobs.dtype == "bf16" and device_target() == "CPU":
        raise DemoKnobError("demo.dtype: bf16 needs an Ascend or GPU device with MindSpore (no bfloat16 matmul "
                            "kernel on the CPU in MindSpore 2.10); use fp16 or fp32")


def build_model(knobs: Any) -> DemoGPT:
    """The demo GPT with its seed-generated initial weights; ``knobs`` is a dict or ``DemoKnobs``."""
    ensure_pynative()
    return _build_model(resolve_knobs(knobs))


def make_optimizer(model: Any, knobs: Any) -> Any:
    """PyTorch's AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.01) over every parameter, as a jit graph."""
    from mindspore.experimental.optim import AdamW

    return AdamW(model.trainable_params(), lr=resolve_knobs(knobs).lr)


def loss_function(model: DemoGPT, vocab: int, autocast: bool) -> Callable[[Tensor, Tensor], Tensor]:
    """``forward(tokens, targets) -> loss``: the model and the cross-entropy (in float32, as under autocast)."""

    def forward(tokens: Tensor, targets: Tensor) -> Tensor:
        logits = model(tokens)
        if autocast:
            logits = logits.float()
        return ops.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    return forward


def train(
    knobs: Any,
    *,
    on_step: Optional[StepCallback] = None,
    on_build: Optional[BuildCallback] = None,
) -> DemoResult:
    """Train the demo for ``knobs.steps`` steps.

    ``on_build(model, optimizer)`` runs once before the first step; ``on_step(step_index, loss)`` after each
    optimizer call.
    """
    knobs = resolve_knobs(knobs)
    check_knobs(knobs)
    ensure_pynative()
    ms.set_seed(knobs.seed)
    model = _build_model(knobs)
    model.set_train(True)
    optimizer = make_optimizer(model, knobs)
    if on_build is not None:
        on_build(model, optimizer)
    data = [(Tensor(x), Tensor(y)) for x, y in batches(knobs)]
    forward = loss_function(model, knobs.vocab, knobs.dtype != "fp32")
    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    result = DemoResult(knobs=knobs, n_params=parameter_count(knobs), framework="mindspore")

    for step, (tokens, targets) in enumerate(data):
        started = time.perf_counter()
        model.schedule.step = step
        loss, grads = grad_fn(tokens, targets)
        optimizer(grads)
        value = float(loss.asnumpy())
        result.step_times_s.append(time.perf_counter() - started)
        result.losses.append(value)
        if on_step is not None:
            on_step(step, value)
    return result
