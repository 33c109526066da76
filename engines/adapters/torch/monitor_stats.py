"""The monitor's metrics of tensors, computed on the device and moved to the host once per step.

``StepMetrics`` collects 0-d device tensors during a step (activation hooks, the optimizer hooks) together with
their series keys; ``collect()`` concatenates them and makes the step's single device-to-host copy. Nothing here
calls ``.item()``.

Definitions (docs/reference/msprobe-tasks.md §10.3): min / max as stored; mean and norm accumulated in float64 for activations and
in float32 or wider for the bulk weight-gradient norms (``torch._foreach_norm``, one fused kernel for all
parameters); zeros = fraction of ``|x| < eps``; nans / infs = counts; id = the value of a 0-dim tensor.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from engines.adapters.torch.shards import local_shard

_HAS_FOREACH_MAX = hasattr(torch, "_foreach_max")


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(int(s)) for s in t.shape) + "]"


def _real(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return x.abs()
    if not x.is_floating_point():
        return x.float()
    return x


def tensor_metrics(x: torch.Tensor, ops: Sequence[str], eps: float) -> torch.Tensor:
    """A float64 device tensor with one value per op, in ``ops`` order (of the local shard of a DTensor)."""
    x = _real(local_shard(x.detach()))
    numel = x.numel()
    if numel == 0:
        return torch.full((len(ops),), float("nan"), dtype=torch.float64, device=x.device)
    values: List[torch.Tensor] = []
    lo = hi = None
    for op in ops:
        if op in ("min", "max"):
            if lo is None:
                lo, hi = torch.aminmax(x)
            values.append(lo if op == "min" else hi)
        elif op == "mean":
            values.append(x.mean(dtype=torch.float64))
        elif op == "norm":
            values.append(torch.linalg.vector_norm(x, dtype=torch.float64))
        elif op == "zeros":
            values.append((x.abs() < eps).sum() / float(numel))
        elif op == "nans":
            values.append(torch.isnan(x).sum())
        elif op == "infs":
            values.append(torch.isinf(x).sum())
        elif op == "id":
            values.append(x.reshape(()) if x.dim() == 0 else torch.tensor(float("nan"), device=x.device))
        else:
            raise ValueError(f"unknown monitor op {op!r}")
    return torch.stack([v.to(torch.float64) for v in values])


def bulk_metrics(tensors: Sequence[torch.Tensor], ops: Sequence[str], eps: float) -> torch.Tensor:
    """``(len(tensors), len(ops))`` float64 on the device; norm (and max) through fused foreach kernels."""
    tensors = [_real(local_shard(t.detach())) for t in tensors]
    if not tensors:
        return torch.zeros((0, len(ops)), dtype=torch.float64)
    columns: Dict[str, torch.Tensor] = {}
    plain = all(t.numel() > 0 for t in tensors)
    if "norm" in ops and plain:
        columns["norm"] = torch.stack(torch._foreach_norm(tensors, 2, dtype=torch.float32)).to(torch.float64)
    if "max" in ops and plain and _HAS_FOREACH_MAX:
        columns["max"] = torch.stack([v.to(torch.float64) for v in torch._foreach_max(tensors)])
    rest = [op for op in ops if op not in columns]
    if rest:
        per_tensor = torch.stack([tensor_metrics(t, rest, eps) for t in tensors])
        for j, op in enumerate(rest):
            columns[op] = per_tensor[:, j]
    return torch.stack([columns[op] for op in ops], dim=1)


class StepMetrics:
    """What one step measured, still on the device, with series keys ``(tag, name, metric)``."""

    def __init__(self):
        self._blocks: List[torch.Tensor] = []
        self.keys: List[Tuple[str, str, str]] = []
        self.shapes: List[str] = []
        self.dtypes: List[str] = []

    def __len__(self) -> int:
        return len(self.keys)

    def add_tensor(self, tag: str, name: str, tensor: torch.Tensor, ops: Sequence[str], eps: float) -> None:
        tensor = local_shard(tensor)
        self._add(tensor_metrics(tensor, ops, eps), [(tag, name, op) for op in ops], _shape(tensor), str(tensor.dtype))

    def add_bulk(self, tag: str, names: Sequence[str], tensors: Sequence[torch.Tensor], ops: Sequence[str],
                 eps: float) -> torch.Tensor:
        """Metrics of many tensors at once; returns the ``(n, len(ops))`` device block."""
        tensors = [local_shard(t) for t in tensors]
        block = bulk_metrics(tensors, ops, eps)
        keys = [(tag, name, op) for name in names for op in ops]
        shapes = [_shape(t) for t in tensors for _ in ops]
        dtypes = [str(t.dtype) for t in tensors for _ in ops]
        self._blocks.append(block.reshape(-1))
        self.keys += keys
        self.shapes += shapes
        self.dtypes += dtypes
        return block

    def add_value(self, tag: str, name: str, metric: str, value) -> None:
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value), dtype=torch.float64)
        self._add(value.detach().reshape(1).to(torch.float64), [(tag, name, metric)], "[]", str(value.dtype))

    def _add(self, values: torch.Tensor, keys, shape: str, dtype: str) -> None:
        self._blocks.append(values)
        self.keys += keys
        self.shapes += [shape] * len(keys)
        self.dtypes += [dtype] * len(keys)

    def collect(self) -> np.ndarray:
        """All values on the host: one copy per device (normally one)."""
        if not self._blocks:
            return np.zeros(0, dtype=np.float64)
        by_device: Dict[torch.device, List[int]] = {}
        for i, block in enumerate(self._blocks):
            by_device.setdefault(block.device, []).append(i)
        if len(by_device) == 1:
            return torch.cat(self._blocks).cpu().numpy()
        parts: List[Optional[np.ndarray]] = [None] * len(self._blocks)
        for indices in by_device.values():
            host = torch.cat([self._blocks[i] for i in indices]).cpu().numpy()
            start = 0
            for i in indices:
                size = self._blocks[i].numel()
                parts[i] = host[start:start + size]
                start += size
        return np.concatenate(parts)
