"""Optimizer-side metrics of the monitor: weight gradients, parameters, Adam state, update and update ratio.

Read from the optimizer itself (``param_groups`` and ``state``), so any torch optimizer works; the Adam metrics
need ``exp_avg`` / ``exp_avg_sq`` in the state (Adam, AdamW, and optimizers that keep the same names).

- ``update`` = Adam's bias-corrected step direction ``m_hat / (sqrt(v_hat) + eps)`` after the step;
- ``update_ratio`` = ``lr * |update| / |param|``: the relative size of the step (one value per parameter);
- ``mg_direction`` = ``((sign g * sign m).sum() / numel + 1) / 2`` with the momentum before the step (1.0 before
  the first step).
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from engines.adapters.torch.monitor_stats import (
    StepMetrics,
    native_adam_update,
    native_norms,
    native_sign_sum,
)
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
    names: List[str] = []
    values: List[Union[None, float, torch.Tensor]] = []  # None: no momentum yet (1.0)
    grads, moms, slots = [], [], []
    for name, param in named:
        grad = grad_of(param)
        if grad is None:
            continue
        momentum = _state(optimizer, param, "exp_avg")
        names.append(name)
        values.append(None)
        if momentum is not None and grad.numel() > 0:
            grads.append(grad.detach())
            moms.append(momentum)
            slots.append(len(values) - 1)
    if not names:
        return
    rest = []  # pairs the native kernel does not take
    for slot, grad, momentum in zip(slots, grads, moms):
        total = native_sign_sum(grad, momentum)  # one read of both, no sign tensors: the same integer
        if total is None:
            rest.append((slot, grad, momentum))
        else:
            values[slot] = (total / grad.numel() + 1.0) / 2.0
    if rest:  # the sign products of all parameters with one foreach call each (the same numbers one by one)
        products = torch._foreach_sign([g for _, g, _ in rest])
        torch._foreach_mul_(products, torch._foreach_sign([m for _, _, m in rest]))
        for (slot, grad, _), product in zip(rest, products):
            values[slot] = (_sign_sum(product) / grad.numel() + 1.0) / 2.0
    if all(not isinstance(v, torch.Tensor) for v in values):
        block = torch.tensor([1.0 if v is None else v for v in values], dtype=torch.float64)
    else:
        block = torch.stack([torch.tensor(1.0 if v is None else v, dtype=torch.float64)
                             if not isinstance(v, torch.Tensor) else v for v in values])
    metrics.add_values("mg_direction", names, "value", block)


def _sign_sum(product: torch.Tensor) -> torch.Tensor:
    """The float64 sum of a tensor of -1, 0 and 1: exact in float32 while every partial sum is a float32 integer
    (so the same number as ``sum(dtype=float64)``, which costs several times more on the CPU)."""
    if product.numel() <= 1 << 24 and product.is_floating_point():
        return product.sum(dtype=torch.float32).to(torch.float64)
    return product.sum(dtype=torch.float64)


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
    """Adam's update and update ratio; parameters that share the step count and hyper-parameters (normally all)
    are computed together with foreach calls, element by element the same arithmetic as one at a time."""
    groups = _group_of(optimizer)
    batches: Dict[object, Tuple[tuple, List[int], list, list, list]] = {}
    names: List[str] = []
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
        lr = group.get("lr", 0.0)
        lr = float(lr) if not isinstance(lr, torch.Tensor) else lr
        scalars = (1 - beta1 ** t, 1 - beta2 ** t, float(group.get("eps", 1e-8)), lr)
        key = scalars if not any(isinstance(x, torch.Tensor) for x in scalars) else len(names)
        batch = batches.setdefault(key, (scalars, [], [], [], []))
        batch[1].append(len(names))
        batch[2].append(m)
        batch[3].append(v)
        batch[4].append(local_shard(param.detach()))
        names.append(name)
    if not names:
        return
    if _record_update_native(metrics, batches, names, ops, eps):
        return
    updates: List[Optional[torch.Tensor]] = [None] * len(names)
    ratios: List[Optional[torch.Tensor]] = [None] * len(names)
    for (correction1, correction2, adam_eps, lr), slots, ms, vs, params in batches.values():
        if isinstance(correction1, torch.Tensor):  # a device step counter: one parameter, plain arithmetic
            batch_updates = [(m / correction1) / ((v / correction2).sqrt() + adam_eps) for m, v in zip(ms, vs)]
        else:
            batch_updates = torch._foreach_div(ms, correction1)
            denominators = torch._foreach_div(vs, correction2)
            torch._foreach_sqrt_(denominators)
            torch._foreach_add_(denominators, adam_eps)
            torch._foreach_div_(batch_updates, denominators)
        update_norms = torch.stack(torch._foreach_norm(batch_updates, 2, dtype=torch.float64))
        param_norms = torch.stack(torch._foreach_norm(params, 2, dtype=torch.float64))
        batch_ratios = lr * update_norms / param_norms
        for i, slot in enumerate(slots):
            updates[slot] = batch_updates[i]
            ratios[slot] = batch_ratios[i]
    add_bulk(metrics, "update", list(zip(names, updates)), ops, eps)
    metrics.add_values("update_ratio", names, "value", torch.stack(ratios))  # type: ignore[arg-type]


def _record_update_native(metrics: StepMetrics, batches, names: List[str], ops, eps) -> bool:
    """``record_update`` by the native kernel: each update made and summarised in one read of its moments (never
    stored), its norm from the same read, the parameter norms by the kernel too (float64, in its order). False,
    with nothing recorded, unless every batch can take it (CPU, host step counters, float32/float64 moments)."""
    rows: List[Optional[List[float]]] = [None] * len(names)
    numerators: List[float] = [0.0] * len(names)
    denominators: List[float] = [1.0] * len(names)
    shapes: List[str] = [""] * len(names)
    dtypes: List[str] = [""] * len(names)
    done = []
    for (correction1, correction2, adam_eps, lr), slots, ms, vs, params in batches.values():
        if isinstance(correction1, torch.Tensor) or isinstance(lr, torch.Tensor):
            return False
        made = native_adam_update(ms, vs, correction1, correction2, adam_eps, ops, eps)
        param_norms = native_norms(params) if made is not None else None
        if made is None or param_norms is None:
            return False
        done.append((slots, ms, made, param_norms, lr))
    for slots, ms, (batch_rows, update_norms), param_norms, lr in done:
        for slot, m, row, u, p in zip(slots, ms, batch_rows, update_norms, param_norms):
            rows[slot] = row
            numerators[slot] = lr * u
            denominators[slot] = p
            shapes[slot] = str(list(m.shape))
            dtypes[slot] = str(m.dtype)
    metrics.add_rows("update", names, rows, ops, shapes, dtypes)  # type: ignore[arg-type]
    ratios = torch.tensor(numerators, dtype=torch.float64) / torch.tensor(denominators, dtype=torch.float64)
    metrics.add_values("update_ratio", names, "value", ratios)  # lr * |update| / |param|, as torch's division
    return True
