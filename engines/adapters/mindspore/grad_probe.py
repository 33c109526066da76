"""grad_probe for MindSpore: every parameter's gradient at each optimizer call (msprobe's ``monitor(optimizer)``).

A MindSpore optimizer is called with the gradients (``optimizer(grads)``), in the order of its ``parameters``,
whose names are already full paths (``blocks.0.attn.qkv.weight``): a pre-hook on optimizer calls
(``optimizer_hooks``) reads them with no model handle, so ``probe-tui --run`` needs no code change and the in-script
API only needs the optimizer. ``step`` counts calls of the first optimizer that steps (reference §9.1); other
optimizers record into the current step.

Statistics are msprobe's per level (``engines.grad_probe.levels``): max, min, norm; L2 adds the interval fractions
and the fraction of zeros; L1/L2 the direction bits ``grad > 0``; L0 the CRC32 of the float32 gradient. On the CPU
the gradients are read in place (``asnumpy`` is a view there); on a device the per-parameter numbers are stacked
and moved with one copy, and the direction bits / float32 bytes with one more.
"""

import logging
import weakref
import zlib
from typing import Any, Callable, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor

from engines.adapters.mindspore.optimizer_hooks import named_parameters, register_optimizer_pre_hook
from engines.adapters.mindspore.tensor_stats import raw
from engines.grad_probe.levels import has_direction, has_hash, has_histogram
from engines.grad_probe.records import GradStepStats, packed_size
from engines.monitor.naming import name_filter

log = logging.getLogger(__name__)


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
    offsets = np.zeros(len(grads), dtype=np.int64)
    position = 0
    for i, grad in enumerate(grads):
        offsets[i] = position
        position += packed_size(int(grad.size))
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
    stats = GradStepStats(step=step, names=names, shapes=[tuple(g.shape) for g in grads],
                          dtypes=[str(g.dtype) for g in grads], numels=numels, max=rows[:, 0].copy(),
                          min=rows[:, 1].copy(), norm=rows[:, 2].copy())
    if histogram:
        safe = np.maximum(numels, 1).astype(np.float64)
        stats.zero_frac = np.where(numels > 0, rows[:, 3] / safe, np.nan)
        le = rows[:, 4:]
        counts = np.diff(np.concatenate([np.zeros((len(grads), 1)), le, numels[:, None].astype(np.float64)],
                                        axis=1), axis=1)
        stats.hist = np.where(numels[:, None] > 0, counts / safe[:, None], np.nan)
    if has_direction(level):
        stats.directions, stats.dir_offsets = _directions(grads, arrays)
    if has_hash(level):
        if arrays is None:
            arrays = [_host_float(g) for g in grads]
        stats.crc32 = _crc32s(arrays)
    return stats


class GradProbeHook:
    """The optimizer pre-hook; ``sink(stats)`` receives a GradStepStats for every selected step."""

    def __init__(self, sink: Callable[[GradStepStats], None], *, level: str = "L1",
                 bounds: Sequence[float] = (-1.0, 0.0, 1.0), param_list: Optional[Sequence[str]] = None,
                 steps: Optional[Sequence[int]] = None, optimizer: Any = None) -> None:
        self._sink = sink
        self.level = level
        self.bounds = [float(b) for b in bounds]
        self._select = name_filter(param_list)
        self._steps = None if not steps else set(int(s) for s in steps)
        self._primary = weakref.ref(optimizer) if optimizer is not None else None
        self.step = -1
        self._handle = None
        self.failures = 0
        self._warned = set()

    def install(self) -> "GradProbeHook":
        self._handle = register_optimizer_pre_hook(self._pre_call)
        return self

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _advance(self, optimizer: Any) -> None:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
            primary = optimizer
        if optimizer is primary:
            self.step += 1
        elif self.step < 0:
            self.step = 0

    def _pre_call(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        self._advance(optimizer)
        if self._steps is not None and self.step not in self._steps:
            return
        try:
            self._record(optimizer, args[0] if args else kwargs.get("gradients", ()))
        except Exception:  # training must never crash because of the tool
            self.failures += 1
            log.exception("probe-tui grad_probe: recording step %d failed; the step is skipped", self.step)

    def _record(self, optimizer: Any, grads: Sequence[Any]) -> None:
        named = []
        skipped = []
        for (name, _), grad in zip(named_parameters(optimizer), grads):
            if not self._select(name):
                continue
            if not isinstance(grad, Tensor):
                skipped.append(name)
                continue
            named.append((name, grad))
        new = [n for n in skipped if n not in self._warned]
        if new:
            self._warned.update(new)
            log.info("probe-tui grad_probe: no gradient for %d parameter(s), e.g. %s", len(new), new[0])
        stats = compute_grad_stats(self.step, named, self.level, self.bounds)
        stats.skipped = skipped
        self._sink(stats)


class GradProbeRun:
    """The hook and the store writer of one rank, started together (the engine and the in-script API)."""

    def __init__(self, section, rank_dir, *, steps: Optional[Sequence[int]] = None, rank: int = 0,
                 world_size: int = 1, optimizer: Any = None, store_options=None,
                 on_step: Optional[Callable[[int], None]] = None) -> None:
        from engines.grad_probe.writer import GradStoreWriter

        self.writer = GradStoreWriter(
            rank_dir, level=section.grad_level, bounds=section.bounds, param_list=section.param_list, rank=rank,
            world_size=world_size, framework="mindspore",
            csv_dir=rank_dir if getattr(section, "export_csv", False) else None, store_options=store_options)

        def sink(stats: GradStepStats) -> None:
            self.writer.write(stats)
            if on_step is not None:
                on_step(stats.step)

        self.hook = GradProbeHook(sink, level=section.grad_level, bounds=section.bounds,
                                  param_list=section.param_list, steps=steps, optimizer=optimizer).install()
        self._stopped = False

    def stop(self, status: str = "finished") -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.hook.remove()
        finally:
            self.writer.close(status)


def start_grad_probe(section, rank_dir, **kwargs) -> GradProbeRun:
    """Record gradients into ``rank_dir`` until ``stop()``; ``section`` is a GradProbeSection. ``optimizer=``
    names the optimizer whose calls are the steps (msprobe's MindSpore ``monitor(optimizer)``)."""
    kwargs.pop("model", None)
    return GradProbeRun(section, rank_dir, **kwargs)
