"""The consistency metric of free_benchmark on the tensor's device (docs/reference/msprobe-tasks.md §8.4, with the chunk bug fixed).

For each compared output element (a tensor; ``.values`` of a (values, indices) result; each item of a tuple or
list), both sides are brought to the perturbed side's dtype and device and compared in flat chunks
(``chunk_count``). Per chunk: a sign flip (``min(a*b) < -tol^2``) is an infinite ratio; else
``r = nan_to_num(clamp(|a|, tol) / clamp(|b|, tol), nan=1)`` and the chunk's ratio is ``max(max r, 1/min r)``.
The output's ratio is the largest over **all** chunks (msprobe keeps only the last chunk's). Float16 and
bfloat16 sides are compared in float32: computed in bfloat16 the ratio itself would be rounded to 1 + k/128,
which no 1.004 threshold can judge.

Ratios stay 0-d device tensors until ``resolve`` moves a step's worth to the host at once.
to_cpu is judged differently (msprobe's SingleCompare): ``single_compare``.
"""

from typing import Any, Dict, List, Tuple, Union

import torch

from engines.free_benchmark import structure
from engines.free_benchmark.metric import scalar_ratio  # noqa: F401 (this module's interface)
from engines.free_benchmark.thresholds import chunk_count, to_cpu_limits

Ratio = Union[float, torch.Tensor]
_INF = float("inf")


def output_items(out: Any) -> List[Tuple[int, Any]]:
    """(output_index, value) of every element that is compared (``.values`` of a (values, indices) result)."""
    return structure.output_items(out, _is_tensor, values_field=True, sizes=(torch.Size,))


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, torch.Tensor)


def work_dtype(perturbed: torch.Tensor) -> torch.dtype:
    return torch.float64 if perturbed.dtype is torch.float64 else torch.float32


def chunk_ratio(a: torch.Tensor, b: torch.Tensor, tol: float) -> torch.Tensor:
    """Ratio of one flat chunk (0-d tensor; inf for a sign flip)."""
    flip = torch.mul(a, b).amin() < -(tol * tol)
    r = a.abs().clamp_(min=tol).div_(b.abs().clamp_(min=tol))
    torch.nan_to_num_(r, nan=1.0)
    lo, hi = torch.aminmax(r)
    ratio = torch.maximum(hi, torch.reciprocal(lo))
    return torch.where(flip, torch.full_like(ratio, _INF), ratio)


def tensor_ratio(original: torch.Tensor, perturbed: torch.Tensor, tol: float) -> Ratio:
    """The ratio of one output tensor pair, max over all chunks."""
    if not (perturbed.is_floating_point() or perturbed.is_complex()):
        same = original.shape == perturbed.shape and bool(torch.equal(original.to(perturbed.device), perturbed))
        return 1.0 if same else _INF
    if original.shape != perturbed.shape:
        return _INF
    if perturbed.numel() == 0:
        return 1.0
    dt = work_dtype(perturbed)
    b = perturbed.detach()
    if b.is_complex():
        b = torch.view_as_real(b)
    a = original.detach()
    if a.is_complex():
        a = torch.view_as_real(a)
    a = a.to(device=b.device, dtype=dt).reshape(-1)
    b = b.to(dt).reshape(-1)
    n = chunk_count(perturbed.numel() * perturbed.element_size())
    if n == 1:
        return chunk_ratio(a, b, tol)
    return torch.stack([chunk_ratio(x, y, tol) for x, y in zip(a.chunk(n), b.chunk(n))]).amax()


def resolve(values: List[Ratio]) -> List[float]:
    """Host floats of a batch of ratios: one transfer per device."""
    out: List[float] = [0.0] * len(values)
    by_device: Dict[Any, List[Tuple[int, torch.Tensor]]] = {}
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append((i, v))
        else:
            out[i] = float(v)
    for pairs in by_device.values():
        host = torch.stack([t.to(torch.float64) for _, t in pairs]).cpu().tolist()
        for (i, _), h in zip(pairs, host):
            out[i] = float(h)
    return out


def single_compare(actual: torch.Tensor, golden: torch.Tensor) -> Tuple[bool, str]:
    """to_cpu: the device output (actual) against the CPU float32 output (golden), in float64, with the limits
    of the actual dtype. Golden inf/NaN: the call is not judged (consistent)."""
    limits = to_cpu_limits(str(actual.dtype))
    if not (actual.is_floating_point() and golden.is_floating_point()):
        same = actual.shape == golden.shape and bool(torch.equal(actual.cpu(), golden.cpu()))
        return same, "" if same else "values differ"
    g = golden.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(g).all()):
        return True, "golden holds inf/nan: not judged"
    a = actual.detach().to("cpu", torch.float64)
    if a.shape != g.shape:
        return False, "shapes differ"
    a = torch.where(torch.isfinite(a), a, torch.ones_like(a))
    err = (a - g).abs()
    small = a.abs() < limits["small"]
    abs_err = float(err[small].max()) if bool(small.any()) else 0.0
    rel_err = float((err[~small] / g[~small].abs().clamp(min=1e-300)).max()) if bool((~small).any()) else 0.0
    denom = torch.where(g.abs() < 1, torch.ones_like(g), g.abs())
    balance = float(((a - g) / denom).mean()) if a.numel() else 0.0
    ok = abs_err <= limits["atol"] and rel_err <= limits["rtol"] and balance <= limits["eb"]
    detail = "max abs err %.3g (atol %.3g), max rel err %.3g (rtol %.3g), error balance %.3g (eb %.3g)" % (
        abs_err, limits["atol"], rel_err, limits["rtol"], balance, limits["eb"])
    return ok, detail
