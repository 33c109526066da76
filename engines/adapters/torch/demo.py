"""The demo training loop in PyTorch: plain user-style code the capture engines instrument like any script.

One step is ``zero_grad`` -> autocast forward -> cross-entropy loss -> ``backward`` -> ``optimizer.step()``.
Engines count steps with torch's global optimizer-step hooks, exactly as in a user's script. Everything is
deterministic: the weights and batches come from numpy streams keyed by the seed, dropout is p=0, and two runs
in one process give bit-identical losses. ``torch.set_num_threads`` is the caller's business.

fp16 autocast works on the CPU with torch 2.13 (linear/matmul run in float16, cross-entropy in float32);
there is no GradScaler, as a CPU user would not have one.
"""

import time
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from engines.adapters.torch.demo_model import DemoGPT
from engines.adapters.torch.demo_model import build_model as _build_model
from engines.demo.data import batches
from engines.demo.knobs import resolve_knobs
from engines.demo.result import DemoResult
from engines.demo.weights import parameter_count

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

StepCallback = Callable[[int, float], None]
BuildCallback = Callable[[torch.nn.Module, torch.optim.Optimizer], None]


def build_model(knobs: Any) -> DemoGPT:
    """The demo GPT with its seed-generated initial weights; ``knobs`` is a dict or ``DemoKnobs``."""
    return _build_model(resolve_knobs(knobs))


def make_optimizer(model: torch.nn.Module, knobs: Any) -> torch.optim.Optimizer:
    """AdamW with torch's defaults except the learning rate (per-parameter ops, as in the reference workload)."""
    return torch.optim.AdamW(model.parameters(), lr=resolve_knobs(knobs).lr)


def train(
    knobs: Any,
    *,
    on_step: Optional[StepCallback] = None,
    on_build: Optional[BuildCallback] = None,
) -> DemoResult:
    """Train the demo for ``knobs.steps`` steps.

    ``on_build(model, optimizer)`` runs once before the first step (where a user would attach a monitor);
    ``on_step(step_index, loss)`` runs after each optimizer step, with the parameters' gradients still set.
    """
    knobs = resolve_knobs(knobs)
    torch.manual_seed(knobs.seed)
    model = build_model(knobs)
    model.train()
    optimizer = make_optimizer(model, knobs)
    if on_build is not None:
        on_build(model, optimizer)
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches(knobs)]
    autocast_dtype = AUTOCAST_DTYPES.get(knobs.dtype)
    result = DemoResult(knobs=knobs, n_params=parameter_count(knobs))

    for step, (tokens, targets) in enumerate(data):
        started = time.perf_counter()
        model.schedule.step = step
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            logits = model(tokens)
            loss = F.cross_entropy(logits.view(-1, knobs.vocab), targets.view(-1))
        loss.backward()
        optimizer.step()
        value = loss.item()
        result.step_times_s.append(time.perf_counter() - started)
        result.losses.append(value)
        if on_step is not None:
            on_step(step, value)
    return result
