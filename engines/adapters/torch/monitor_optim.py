"""Optimizer-side metrics of the monitor: weight gradients, parameters, Adam state, update and update ratio.

Read from the optimizer itself (``param_groups`` and ``state``), so any torch optimizer works; the Adam metrics
need ``exp_avg`` / ``exp_avg_sq`` in the state (Adam, AdamW, and optimizers that keep the same names).

- ``update`` = Adam's bias-corrected step direction ``m_hat / (sqrt(v_hat) + eps)`` after the step;
- ``update_ratio`` = ``lr * |update| / |param|``: the relative size of the step (one value per parameter);
- ``mg_direction`` = ``((sign g * sign m).sum() / numel + 1) / 2`` with the momentum before the step (1.0 before
  the first step).
"""

from typing import List, Sequence, Tuple

import torch

from engines.adapters.torch.monitor_stats import StepMetrics
from engines.adapters.torch.shards import local_shard

NamedParams = List[Tuple[str, torch.Tensor]]


def grad_of(param: torch.Tensor):
    """The gradient the optimizer reads (Megatron's ``main_grad`` first); a DTensor's local shard."""
    grad = getattr(param, "main_grad", None)
    return local_shard(grad if grad is not None else param.grad)


def _state(optimizer, param, key: str):
    state = optimizer.state.get(param) if hasattr(optimizer, "state") else None
    return None if not state else local_shard(state.get(key))


def add_bulk(metrics: StepMetrics, tag: str, named: Sequence[Tuple[str, torch.Tensor]], ops, eps) -> None:
    if named:
        metrics.add_bulk(tag, [n for n, _ in named], [t for _, t in named], ops, eps)


def record_mg_direction(metrics: StepMetrics, optimizer, named: NamedParams) -> None:
    for name, param in named:
        grad = grad_of(param)
        if grad is None:
            continue
        momentum = _state(optimizer, param, "exp_avg")
        if momentum is None or grad.numel() == 0:
            metrics.add_value("mg_direction", name, "value", 1.0)
            continue
        agree = (torch.sign(grad.detach()) * torch.sign(momentum)).sum(dtype=torch.float64) / grad.numel()
        metrics.add_value("mg_direction", name, "value", (agree + 1.0) / 2.0)


def record_adam_state(metrics: StepMetrics, optimizer, named: NamedParams, ops, eps) -> None:
    exp_avg = _state_pairs(optimizer, named, "exp_avg")
    exp_avg_sq = _state_pairs(optimizer, named, "exp_avg_sq")
    add_bulk(metrics, "exp_avg", exp_avg, ops, eps)
    add_bulk(metrics, "exp_avg_sq", exp_avg_sq, ops, eps)


def _state_pairs(optimizer, named: NamedParams, key: str) -> NamedParams:
    out = []
    for name, param in named:
        value = _state(optimizer, param, key)
        if isinstance(value, torch.Tensor):
            out.append((name, value))
    return out


def _group_of(optimizer) -> dict:
    return {id(p): group for group in optimizer.param_groups for p in group["params"]}


def record_update(metrics: StepMetrics, optimizer, named: NamedParams, ops, eps) -> None:
    groups = _group_of(optimizer)
    updates = []
    ratios = []
    for name, param in named:
        m = _state(optimizer, param, "exp_avg")
        v = _state(optimizer, param, "exp_avg_sq")
        step = _state(optimizer, param, "step")
        group = groups.get(id(param))
        if m is None or v is None or step is None or group is None:
            continue
        beta1, beta2 = group.get("betas", (0.9, 0.999))
        # A CPU step counter is read without a device sync; capturable optimizers keep it on the device.
        t = float(step.item()) if isinstance(step, torch.Tensor) and step.device.type == "cpu" else step
        if not isinstance(t, torch.Tensor):
            t = float(t)
        correction1 = 1 - beta1 ** t
        correction2 = 1 - beta2 ** t
        adam_eps = float(group.get("eps", 1e-8))
        update = (m / correction1) / ((v / correction2).sqrt() + adam_eps)
        updates.append((name, update))
        lr = group.get("lr", 0.0)
        lr = float(lr) if not isinstance(lr, torch.Tensor) else lr
        param_norm = torch.linalg.vector_norm(local_shard(param.detach()), dtype=torch.float64)
        ratios.append((name, lr * torch.linalg.vector_norm(update, dtype=torch.float64) / param_norm))
    add_bulk(metrics, "update", updates, ops, eps)
    for name, ratio in ratios:
        metrics.add_value("update_ratio", name, "value", ratio)
