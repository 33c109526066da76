"""The monitor's metrics of tensors, computed on the device and moved to the host once per step.

``StepMetrics`` collects 0-d device tensors during a step (activation hooks, the optimizer hooks) together with
their series keys; ``collect()`` concatenates them and makes the step's single device-to-host copy. Nothing here
calls ``.item()`` on an accelerator tensor (on the CPU a read costs no sync, and ``tensor_metrics`` uses it).
A CPU float tensor is read once by the native kernel (``engines/native/monitor_stats.c``; ``native_row``), its
values kept as host numbers; without the kernel, torch's passes (``torch_metrics``).

Definitions (docs/reference/msprobe-tasks.md §10.3): min / max as stored; mean and norm accumulated in float64
(by the kernel in its fixed order, or by torch), except the bulk norms when ``norm`` (and ``max``) are the only
metrics: float32 or wider (``torch._foreach_norm``, one fused kernel for all parameters); zeros = fraction of
``|x| < eps`` (eps in the tensor's dtype); nans / infs = counts; id = the value of a 0-dim tensor.
"""

import math
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from engines.adapters.torch.shards import local_shard
from engines.native.monitor_stats import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, THREADS_FROM, monitor_kernel

_HAS_FOREACH_MAX = hasattr(torch, "_foreach_max")
_num_threads = torch.get_num_threads


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def _real(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return x.abs()
    if not x.is_floating_point():
        return x.float()
    return x


_EXACT_FLOAT32_COUNT = 1 << 24  # every integer up to this is a float32: a 0/1 sum below it is exact


def _count(indicator: torch.Tensor, numel: int) -> torch.Tensor:
    """The number of ones in a 0/1 float tensor, exactly (float32 while every partial sum is a float32 integer)."""
    return indicator.sum(dtype=torch.float32 if numel <= _EXACT_FLOAT32_COUNT else torch.float64)


# dtype -> (kernel code, item size - 1: the pointer must be aligned to the item)
_NATIVE_CODE = {torch.float32: (FLOAT32, 3), torch.float64: (FLOAT64, 7), torch.float16: (FLOAT16, 1),
                torch.bfloat16: (BFLOAT16, 1)}
_eps_in: Dict[Tuple[float, torch.dtype], float] = {}  # (eps, dtype) -> eps rounded to dtype


def _eps_as(eps: float, dtype: torch.dtype) -> float:
    """``eps`` rounded to ``dtype``: torch compares a tensor with a Python number in the tensor's type."""
    value = _eps_in.get((eps, dtype))
    if value is None:
        value = _eps_in[(eps, dtype)] = float(torch.tensor(eps, dtype=torch.float64).to(dtype))
    return value


def _native_ptr(x: torch.Tensor, *, transposed_ok: bool = True) -> Optional[Tuple[int, int]]:
    """``(data pointer, kernel dtype code)`` of a CPU float tensor of at least one dimension whose values are one
    dense block the kernel can read (contiguous; with ``transposed_ok`` also a transposed contiguous block, which
    holds its values in another order), or None (also for an empty tensor)."""
    if x.device.type != "cpu" or not x.dim() or not x.numel():
        return None
    native = _NATIVE_CODE.get(x.dtype)
    if native is None or x.is_neg() or not (x.is_contiguous() or (transposed_ok and x.dim() >= 2
                                                                  and x.mT.is_contiguous())):
        return None
    try:
        ptr = x.data_ptr()
    except RuntimeError:  # no readable pointer
        return None
    code, align = native
    return None if ptr & align else (ptr, code)  # not aligned to the item (a torch.frombuffer may not be)


def _row(figures: Sequence[float], ops: Sequence[str], numel: int) -> List[float]:
    """The values of ``ops`` from the kernel's figures (max, min, sum, norm, zeros count, NaN count, inf count)."""
    hi, lo, total, norm, zeros, nans, infs = figures
    values = []
    for op in ops:
        if op == "min":
            values.append(lo)
        elif op == "max":
            values.append(hi)
        elif op == "mean":
            values.append(total / numel)
        elif op == "norm":
            values.append(norm)
        elif op == "zeros":  # as torch's float32 count / numel: a float32 division
            values.append(float(np.float32(zeros) / np.float32(numel)))
        elif op == "nans":
            values.append(nans)
        elif op == "infs":
            values.append(infs)
        elif op == "id":
            values.append(math.nan)  # the value of a 0-d tensor only
        else:
            raise ValueError(f"unknown monitor op {op!r}")
    return values


def native_row(x: torch.Tensor, ops: Sequence[str], eps: float) -> Optional[List[float]]:
    """The values of ``ops`` for a real tensor ``x`` by one read of the native kernel, or None where it does not
    apply (not a dense CPU float tensor of at least one dimension, no kernel): the torch passes then.

    min and max exactly; mean = float64 sum / numel and norm = sqrt(float64 sum of squares), accumulated in the
    kernel's fixed order (within float64 rounding of the exact values; torch's float64 passes add in another
    order, so the last bits may differ); zeros, nans and infs the same counts as torch's tests."""
    found = _native_ptr(x)
    if found is None or eps != eps:  # (a NaN eps: torch's comparison, false everywhere)
        return None
    kernel = monitor_kernel()
    if kernel is None:
        return None
    numel = x.numel()
    figures = kernel.run(found[0], numel, found[1], _eps_as(eps, x.dtype), _threads(numel))
    return _row(figures, ops, numel)


def _threads(numel: int) -> int:
    return _num_threads() if numel >= THREADS_FROM else 1


def native_adam_update(ms: Sequence[torch.Tensor], vs: Sequence[torch.Tensor], c1: float, c2: float, adam_eps: float,
                       ops: Sequence[str], eps: float) -> Optional[Tuple[List[List[float]], List[float]]]:
    """``(rows of ops, norms)`` of Adam's updates ``(m / c1) / (sqrt(v / c2) + adam_eps)`` by the native kernel
    (each made and summarised in one read of its two moments, never stored; element by element the arithmetic of
    torch's foreach calls), or None unless every pair is two contiguous CPU float32 or float64 tensors of one
    dtype and shape and the kernel is there."""
    kernel = monitor_kernel()
    if kernel is None or eps != eps:
        return None
    pairs = []
    for m, v in zip(ms, vs):
        if m.dtype not in (torch.float32, torch.float64) or v.dtype is not m.dtype or v.shape != m.shape \
                or not m.numel():
            return None
        pm = _native_ptr(m, transposed_ok=False)
        pv = _native_ptr(v, transposed_ok=False)
        if pm is None or pv is None:
            return None
        pairs.append((pm, pv[0], m.numel(), m.dtype))
    rows, norms = [], []
    for (m_ptr, code), v_ptr, numel, dtype in pairs:
        figures = kernel.adam_update(m_ptr, v_ptr, numel, code, c1, c2, adam_eps, _eps_as(eps, dtype),
                                     _threads(numel))
        rows.append(_row(figures, ops, numel))
        norms.append(figures[3])
    return rows, norms


def native_norms(tensors: Sequence[torch.Tensor]) -> Optional[List[float]]:
    """float64 norms by the native kernel (as ``native_row``'s norm), or None unless every tensor can take it."""
    kernel = monitor_kernel()
    if kernel is None:
        return None
    found = [_native_ptr(t) for t in tensors]
    if any(f is None or not t.numel() for f, t in zip(found, tensors)):
        return None
    return [kernel.run(f[0], t.numel(), f[1], 0.0, _threads(t.numel()))[3]  # type: ignore[index]
            for f, t in zip(found, tensors)]


_sign_of_nan: List[float] = []  # torch.sign(NaN) of this torch (0 here; NaN in some versions)


def native_sign_sum(g: torch.Tensor, m: torch.Tensor) -> Optional[float]:
    """The sum of ``sign(g) * sign(m)`` (an integer, exact) by the native kernel, or None where it does not apply
    (two contiguous CPU float32 or float64 tensors of one dtype and shape)."""
    if g.dtype not in (torch.float32, torch.float64) or m.dtype is not g.dtype or m.shape != g.shape:
        return None
    kernel = monitor_kernel()
    if kernel is None:
        return None
    pg = _native_ptr(g, transposed_ok=False)
    pm = _native_ptr(m, transposed_ok=False)
    if pg is None or pm is None:
        return None
    total, nans = kernel.sign_agreement(pg[0], pm[0], g.numel(), pg[1])
    if nans:
        if not _sign_of_nan:
            _sign_of_nan.append(float(torch.sign(torch.tensor(math.nan))))
        if _sign_of_nan[0] != 0.0:  # this torch's sign(NaN) is NaN, and so is the sum
            return math.nan
    return total


def measure(x: torch.Tensor, ops: Sequence[str], eps: float) -> Union[List[float], torch.Tensor]:
    """``tensor_metrics``, as host numbers where the native kernel gave them (no tensor made for them)."""
    x = _real(local_shard(x.detach()))
    if x.numel():
        row = native_row(x, ops, eps)
        if row is not None:
            return row
    return tensor_metrics(x, ops, eps)


def tensor_metrics(x: torch.Tensor, ops: Sequence[str], eps: float) -> torch.Tensor:
    """A float64 device tensor with one value per op, in ``ops`` order (of the local shard of a DTensor): by
    ``native_row`` (one read) for a dense float CPU tensor, else by ``torch_metrics``."""
    x = _real(local_shard(x.detach()))
    numel = x.numel()
    if numel == 0:
        return torch.full((len(ops),), float("nan"), dtype=torch.float64, device=x.device)
    row = native_row(x, ops, eps)
    if row is not None:
        return torch.tensor(row, dtype=torch.float64)
    return torch_metrics(x, ops, eps)


def torch_metrics(x: torch.Tensor, ops: Sequence[str], eps: float) -> torch.Tensor:
    """``tensor_metrics`` by torch's passes, for a non-empty real tensor ``x``.

    One float64 copy serves mean and norm, one ``|x|`` serves the counts, and each count writes its 0/1 test into
    a float tensor and sums that (a comparison into a bool tensor and a bool sum cost several times more on the
    CPU). On the CPU, where reading a value costs no device sync, finite min and max prove that there is no NaN
    and no inf (both propagate NaN), so the two counts are skipped, and the values are gathered as host numbers.
    Every value is the same number as ``x.mean(dtype=float64)``, ``vector_norm(x, dtype=float64)``,
    ``(x.abs() < eps).sum() / numel`` (float32), ``isnan(x).sum()`` and ``isinf(x).sum()`` give
    (tests/test_monitor_stats.py checks it bitwise).
    """
    numel = x.numel()
    on_cpu = x.device.type == "cpu"
    values: List[Union[torch.Tensor, float]] = []
    lo = hi = wide = magnitude = None
    finite = False
    if on_cpu and ("nans" in ops or "infs" in ops):
        lo, hi = torch.aminmax(x)
        finite = math.isfinite(lo.item()) and math.isfinite(hi.item())
    for op in ops:
        if op in ("min", "max"):
            if lo is None:
                lo, hi = torch.aminmax(x)
            values.append(lo if op == "min" else hi)
        elif op in ("mean", "norm"):
            if wide is None:
                wide = x.to(torch.float64)
            values.append(wide.mean() if op == "mean" else torch.linalg.vector_norm(wide))
        elif op in ("zeros", "nans", "infs"):
            if magnitude is None:
                magnitude = x.abs()
            values.append(0.0 if op != "zeros" and finite else _count_op(op, magnitude, numel))
        elif op == "id":
            values.append(x.reshape(()) if x.dim() == 0 else torch.tensor(float("nan"), device=x.device))
        else:
            raise ValueError(f"unknown monitor op {op!r}")
    if "zeros" in ops:  # last: it overwrites |x| with its 0/1 test
        assert magnitude is not None
        zeros = _count(magnitude.lt_(eps), numel)
        values[ops.index("zeros")] = zeros.to(torch.float32) / float(numel)
    if on_cpu:
        return torch.tensor([float(v) for v in values], dtype=torch.float64)
    return torch.stack(values).to(torch.float64)  # type: ignore[arg-type]  # stack promotes; every value is exact


def _count_op(op: str, magnitude: torch.Tensor, numel: int) -> Union[torch.Tensor, float]:
    """The NaN or inf count of ``|x|`` (a placeholder for ``zeros``, counted after them)."""
    if op == "zeros":
        return 0.0
    scratch = torch.empty_like(magnitude)
    if op == "nans":
        return _count(torch.ne(magnitude, magnitude, out=scratch), numel)
    return _count(torch.eq(magnitude, float("inf"), out=scratch), numel)


def bulk_metrics(tensors: Sequence[torch.Tensor], ops: Sequence[str], eps: float) -> torch.Tensor:
    """``(len(tensors), len(ops))`` float64 on the device; norm (and max) through fused foreach kernels."""
    tensors = [_real(local_shard(t.detach())) for t in tensors]
    if not tensors:
        return torch.zeros((0, len(ops)), dtype=torch.float64)
    if any(op not in ("norm", "max") for op in ops):  # per-tensor passes anyway: one native read does all
        rows = [native_row(t, ops, eps) if t.numel() else None for t in tensors]
        if all(r is not None for r in rows):
            return torch.tensor(rows, dtype=torch.float64)
    columns: Dict[str, torch.Tensor] = {}
    plain = all(t.numel() > 0 for t in tensors)
    if "norm" in ops and plain:
        columns["norm"] = torch.stack(torch._foreach_norm(tensors, 2, dtype=torch.float32)).to(torch.float64)
    if "max" in ops and "min" not in ops and plain and _HAS_FOREACH_MAX:  # with min, aminmax gives max too
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
        # float64 device tensors, or lists of host numbers (values the native kernel read on the CPU)
        self._blocks: List[Union[torch.Tensor, List[float]]] = []
        # id(tensor) -> (weak reference, version, ops, eps, values): a tensor measured twice in a step (one
        # module's output is the next one's input, and their gradients are one tensor) is measured once.
        self._measured: Dict[int, Tuple[weakref.ref, int, Tuple[str, ...], float,
                                        Union[torch.Tensor, List[float]]]] = {}
        self.keys: List[Tuple[str, str, str]] = []
        self.shapes: List[str] = []
        self.dtypes: List[str] = []

    def __len__(self) -> int:
        return len(self.keys)

    def add_tensor(self, tag: str, name: str, tensor: torch.Tensor, ops: Sequence[str], eps: float) -> None:
        tensor = local_shard(tensor)
        values = self._measure(tensor, tuple(ops), eps)
        self._add(values, [(tag, name, op) for op in ops], _shape(tensor), str(tensor.dtype))

    def _measure(self, tensor: torch.Tensor, ops: Tuple[str, ...], eps: float) -> Union[torch.Tensor, List[float]]:
        """``measure``, or the values of this very tensor measured earlier in the step and not changed
        since (the same object, alive, with the same in-place version counter)."""
        seen = self._measured.get(id(tensor))
        version = tensor._version
        if seen is not None and seen[0]() is tensor and seen[1] == version and seen[2] == ops and seen[3] == eps:
            return seen[4]
        values = measure(tensor, ops, eps)
        try:
            self._measured[id(tensor)] = (weakref.ref(tensor), version, ops, eps, values)
        except TypeError:  # a tensor type without weak references is measured every time
            pass
        return values

    def add_bulk(self, tag: str, names: Sequence[str], tensors: Sequence[torch.Tensor], ops: Sequence[str],
                 eps: float) -> torch.Tensor:
        """Metrics of many tensors at once; returns the ``(n, len(ops))`` device block."""
        tensors = [local_shard(t) for t in tensors]
        block = bulk_metrics(tensors, ops, eps)
        width = len(ops)
        self._blocks.append(block.reshape(-1))
        self.keys += [(tag, name, op) for name in names for op in ops]
        for t in tensors:
            self.shapes += [_shape(t)] * width
            self.dtypes += [str(t.dtype)] * width
        return block

    def add_rows(self, tag: str, names: Sequence[str], rows: Sequence[Sequence[float]], ops: Sequence[str],
                 shapes: Sequence[str], dtypes: Sequence[str]) -> None:
        """Metrics computed on the host (one row of ``ops`` per name), as ``add_bulk`` records a block."""
        width = len(ops)
        self._blocks.append([v for row in rows for v in row])
        self.keys += [(tag, name, op) for name in names for op in ops]
        for shape, dtype in zip(shapes, dtypes):
            self.shapes += [shape] * width
            self.dtypes += [dtype] * width

    def add_value(self, tag: str, name: str, metric: str, value) -> None:
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value), dtype=torch.float64)
        self._add(value.detach().reshape(1).to(torch.float64), [(tag, name, metric)], "[]", str(value.dtype))

    def add_values(self, tag: str, names: Sequence[str], metric: str, values: torch.Tensor) -> None:
        """One single value per name (a 1-d tensor, in ``names`` order), as ``add_value`` one by one would."""
        values = values.detach().reshape(-1)
        self._blocks.append(values.to(torch.float64))
        self.keys += [(tag, name, metric) for name in names]
        self.shapes += ["[]"] * len(names)
        self.dtypes += [str(values.dtype)] * len(names)

    def _add(self, values: Union[torch.Tensor, List[float]], keys, shape: str, dtype: str) -> None:
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
            if isinstance(block, torch.Tensor):
                by_device.setdefault(block.device, []).append(i)
        if all(device.type == "cpu" for device in by_device):  # no device copy: the values as host numbers
            flat: List[float] = []
            for block in self._blocks:
                flat += block if isinstance(block, list) else block.tolist()
            return np.array(flat, dtype=np.float64)
        parts: List[Optional[np.ndarray]] = [np.array(b, dtype=np.float64) if isinstance(b, list) else None
                                             for b in self._blocks]
        for indices in by_device.values():
            tensors = [self._blocks[i] for i in indices]
            host = torch.cat(tensors).cpu().numpy()  # type: ignore[arg-type]  # (tensors only)
            start = 0
            for i, t in zip(indices, tensors):
                size = t.numel()  # type: ignore[union-attr]
                parts[i] = host[start:start + size]
                start += size
        return np.concatenate(parts)  # type: ignore[arg-type]  # every part filled
