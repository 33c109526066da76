"""grad_probe for MindSpore: every parameter's gradient at each optimizer call (msprobe's ``monitor(optimizer)``).

A MindSpore optimizer is called with the gradients (``optimizer(grads)``), in the order of its ``parameters``,
whose names are already full paths (``blocks.0.attn.qkv.weight``): a pre-hook on optimizer calls
(``optimizer_hooks``) reads them with no model handle, so ``probe-tui --run`` needs no code change and the in-script
API only needs the optimizer. ``step`` counts calls of the first optimizer that steps (docs/reference/msprobe-tasks.md §9.1); other
optimizers record into the current step.

Statistics are msprobe's per level (``engines.grad_probe.levels``): max, min, norm; L2 adds the interval fractions
and the fraction of zeros; L1/L2 the direction bits ``grad > 0``; L0 the CRC32 of the float32 gradient. On the CPU
the gradients are read in place (``asnumpy`` is a view there); on a device the per-parameter numbers are stacked
and moved with one copy, and the direction bits / float32 bytes with one more.
"""

import weakref
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor

from engines.adapters.mindspore.optimizer_hooks import (
    HookHandle,
    named_parameters,
    register_optimizer_pre_hook,
)
from engines.adapters.mindspore.tensor_stats import raw
from engines.grad_probe.hook import GradProbeHookBase, GradProbeRunBase
from engines.grad_probe.levels import has_direction, has_hash, has_histogram
from engines.grad_probe.records import GradStepStats, direction_offsets, from_rows
from engines.safe_fs import PathLike
from schemas.grad_probe import GradProbeSection


def _on_cpu(t: Tensor) -> bool:
    return str(getattr(t, "device", "CPU") or "CPU").upper().startswith("CPU")


def _host_float(t: Tensor) -> np.ndarray:
    arr = t.asnumpy()
    if arr.dtype.name == "bfloat16" or arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    return arr.reshape(-1)


def _host_rows(grads: Sequence[Tensor], bounds: Sequence[float], histogram: bool) -> Tuple[np.ndarray, List]:
    width = 3 + (1 + len(bounds) if histogram else 0)
    rows = np.zeros((len(grads), width), dtype=np.float64)
    arrays = []
    for i, grad in enumerate(grads):
        a = _host_float(grad)
        arrays.append(a)
        if a.size == 0:
            rows[i, :2] = np.nan
            continue
        a64 = a.astype(np.float64, copy=False)
        rows[i, 0], rows[i, 1] = a.max(), a.min()
        rows[i, 2] = np.sqrt(np.dot(a64, a64))
        if histogram:
            rows[i, 3] = np.count_nonzero(a == 0)
            rows[i, 4:] = [np.count_nonzero(a <= b) for b in bounds]
    return rows, arrays


def _device_rows(grads: Sequence[Tensor], bounds: Sequence[float], histogram: bool) -> np.ndarray:
    from mindspore import mint, ops

    cast, stack, mx, mn, sm, mul, sqrt = (raw(ops.cast), raw(ops.stack), raw(mint.max), raw(mint.min),
                                          raw(mint.sum), raw(mint.mul), raw(mint.sqrt))
    le, eq = raw(mint.le), raw(mint.eq)
    rows = []
    for grad in grads:
        if int(grad.size) == 0:
            values = [Tensor(np.nan, ms.float64)] * 2 + [Tensor(0.0, ms.float64)]
            if histogram:
                values += [Tensor(0.0, ms.float64)] * (1 + len(bounds))
            rows.append(stack(values))
            continue
        g = cast(grad, ms.float32)
        values = [cast(mx(g), ms.float64), cast(mn(g), ms.float64), cast(sqrt(sm(mul(g, g))), ms.float64)]
        if histogram:
            values.append(cast(sm(cast(eq(g, 0.0), ms.float32)), ms.float64))
            values += [cast(sm(cast(le(g, float(b)), ms.float32)), ms.float64) for b in bounds]
        rows.append(stack(values))
    return stack(rows).asnumpy()


def _directions(grads: Sequence[Tensor], arrays: Optional[List[np.ndarray]]) -> Tuple[np.ndarray, np.ndarray]:
    offsets = direction_offsets([int(g.size) for g in grads])
    if arrays is None:
        from mindspore import mint, ops

        gt, cat = raw(mint.gt), raw(ops.cat)
        bits = cat([raw(ops.reshape)(gt(g, 0.0), (-1,)) for g in grads]).asnumpy()
        arrays, start = [], 0
        for g in grads:
            arrays.append(bits[start:start + int(g.size)])
            start += int(g.size)
        packed = [np.packbits(a) for a in arrays]
    else:
        packed = [np.packbits(a > 0) for a in arrays]
    return (np.concatenate(packed) if packed else np.zeros(0, dtype=np.uint8)), offsets


def _crc32s(arrays: List[np.ndarray]) -> np.ndarray:
    return np.array([zlib.crc32(np.ascontiguousarray(a, dtype=np.float32).tobytes()) for a in arrays],
                    dtype=np.int64)


def compute_grad_stats(step: int, named_grads: Sequence[Tuple[str, Tensor]], level: str,
                       bounds: Sequence[float]) -> GradStepStats:
    names = [n for n, _ in named_grads]
    grads = [g for _, g in named_grads]
    bounds = [float(b) for b in bounds]
    histogram = has_histogram(level)
    numels = np.array([int(g.size) for g in grads], dtype=np.int64)
    arrays: Optional[List[np.ndarray]] = None
    if grads and all(_on_cpu(g) for g in grads):
        rows, arrays = _host_rows(grads, bounds, histogram)
    elif grads:
        rows = _device_rows(grads, bounds, histogram)
    else:
        rows = np.zeros((0, 3), dtype=np.float64)
    stats = from_rows(step, names, [tuple(g.shape) for g in grads], [str(g.dtype) for g in grads], numels, rows,
                      histogram)
    if has_direction(level):
        stats.directions, stats.dir_offsets = _directions(grads, arrays)
    if has_hash(level):
        if arrays is None:
            arrays = [_host_float(g) for g in grads]
        stats.crc32 = _crc32s(arrays)
    return stats


class GradProbeHook(GradProbeHookBase):
    """The optimizer pre-hook (``engines.grad_probe.hook``); ``optimizer`` names the primary optimizer."""

    def __init__(self, sink: Callable[[GradStepStats], None], *, level: str = "L1",
                 bounds: Sequence[float] = (-1.0, 0.0, 1.0), param_list: Optional[Sequence[str]] = None,
                 steps: Optional[Sequence[int]] = None, optimizer: Any = None) -> None:
        super().__init__(sink, level=level, bounds=bounds, param_list=param_list, steps=steps)
        if optimizer is not None:
            self._primary = weakref.ref(optimizer)
        self._handle: Optional[HookHandle] = None

    def install(self) -> "GradProbeHook":
        self._handle = register_optimizer_pre_hook(self._pre_call)
        return self

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _pre_call(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        grads = args[0] if args else kwargs.get("gradients", ())
        self.optimizer_step(optimizer, lambda: [(name, grad if isinstance(grad, Tensor) else None)
                                                for (name, _), grad in zip(named_parameters(optimizer), grads)])

    def _stats(self, named: List[Tuple[str, Any]]) -> GradStepStats:
        return compute_grad_stats(self.step, named, self.level, self.bounds)


class GradProbeRun(GradProbeRunBase):
    framework = "mindspore"

    def __init__(self, section: GradProbeSection, rank_dir: PathLike, *, steps: Optional[Sequence[int]] = None,
                 rank: int = 0, world_size: int = 1, optimizer: Any = None,
                 store_options: Optional[Dict[str, Any]] = None,
                 on_step: Optional[Callable[[int], None]] = None) -> None:
        super().__init__(section, rank_dir, steps=steps, rank=rank, world_size=world_size,
                         store_options=store_options, on_step=on_step, optimizer=optimizer)

    def _hook(self, sink: Callable[[GradStepStats], None], **options: Any) -> GradProbeHook:
        return GradProbeHook(sink, **options)


def start_grad_probe(section: GradProbeSection, rank_dir: PathLike, **kwargs: Any) -> GradProbeRun:
    """Record gradients into ``rank_dir`` until ``stop()``; ``section`` is a GradProbeSection. ``optimizer=``
    names the optimizer whose calls are the steps (msprobe's MindSpore ``monitor(optimizer)``)."""
    kwargs.pop("model", None)
    return GradProbeRun(section, rank_dir, **kwargs)
