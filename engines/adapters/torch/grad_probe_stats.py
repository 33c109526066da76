"""grad_probe statistics of one optimizer step, computed on the device and moved to the host once.

Per parameter: max, min, norm (and, at L2, the zero count and the counts ``grad <= b`` for every bound) are
stacked into one float64 tensor and copied with a single ``.cpu()``. Directions are packed to bits before they
leave the device (on the CPU, ``numpy.packbits`` on the shared buffer is faster than packing with torch). The L0
hash is the CRC32 of the gradient cast to float32 (msprobe's "MD5"): it needs the whole gradient on the host, so
the float32 copies are concatenated on the device and moved once.
"""

import zlib
from typing import List, Sequence, Tuple

import numpy as np
import torch

from engines.adapters.torch.shards import local_shard
from engines.grad_probe.levels import has_direction, has_hash, has_histogram
from engines.grad_probe.records import GradStepStats, direction_offsets, from_rows

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


def _as_float(grad: torch.Tensor) -> torch.Tensor:
    return grad if grad.dtype in (torch.float32, torch.float64) else grad.float()


def _scalar_rows(grads: Sequence[torch.Tensor], bounds: Sequence[float], histogram: bool) -> torch.Tensor:
    """One float64 row a parameter: max, min, norm[, zeros, count(g <= b) for b in bounds]."""
    rows = []
    nan = None
    for grad in grads:
        if grad.numel() == 0:
            if nan is None:
                nan = torch.tensor(float("nan"), dtype=torch.float64, device=grad.device)
            values = [nan, nan, grad.new_zeros((), dtype=torch.float64)]
            if histogram:
                values += [grad.new_zeros((), dtype=torch.float64)] * (1 + len(bounds))
            rows.append(torch.stack(values))
            continue
        flat = _as_float(grad.detach())
        lo, hi = torch.aminmax(flat)
        values = [hi.double(), lo.double(), torch.linalg.vector_norm(flat).double()]
        if histogram:
            values.append((flat == 0).sum().double())
            values += [(flat <= b).sum().double() for b in bounds]
        rows.append(torch.stack(values))
    return torch.stack(rows)


def _pack_directions(grads: Sequence[torch.Tensor]) -> Tuple[np.ndarray, np.ndarray]:
    offsets = direction_offsets([g.numel() for g in grads])
    if not grads:
        return np.zeros(0, dtype=np.uint8), offsets
    if grads[0].device.type == "cpu":
        packed = [np.packbits((g.detach() > 0).reshape(-1).numpy()) for g in grads]
        return np.concatenate(packed) if packed else np.zeros(0, dtype=np.uint8), offsets
    device = grads[0].device
    weights = torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=device)
    parts: List[torch.Tensor] = []
    for grad in grads:
        bits = (grad.detach() > 0).reshape(-1)
        pad = (-bits.numel()) % 8
        parts.append(bits)
        if pad:
            parts.append(torch.zeros(pad, dtype=torch.bool, device=device))
    bits = torch.cat([p.to(device) for p in parts]).view(-1, 8).to(torch.uint8)
    return (bits * weights).sum(1, dtype=torch.uint8).cpu().numpy(), offsets


def _crc32s(grads: Sequence[torch.Tensor]) -> np.ndarray:
    if not grads:
        return np.zeros(0, dtype=np.int64)
    flat = torch.cat([g.detach().reshape(-1).to(torch.float32) for g in grads]).cpu().numpy()
    out = np.zeros(len(grads), dtype=np.int64)
    start = 0
    for i, grad in enumerate(grads):
        end = start + grad.numel()
        out[i] = zlib.crc32(flat[start:end].tobytes())
        start = end
    return out


def compute_grad_stats(
    step: int,
    named_grads: Sequence[Tuple[str, torch.Tensor]],
    level: str,
    bounds: Sequence[float],
) -> GradStepStats:
    names = [name for name, _ in named_grads]
    grads = [local_shard(grad) for _, grad in named_grads]  # a DTensor gradient (FSDP2, TP): this rank's shard
    bounds = [float(b) for b in bounds]
    histogram = has_histogram(level)
    numels = np.array([g.numel() for g in grads], dtype=np.int64)
    if grads:
        # Group by device so that one copy per device is made (a model split over devices still works).
        rows = np.zeros((len(grads), 3 + (1 + len(bounds) if histogram else 0)), dtype=np.float64)
        by_device = {}
        for i, grad in enumerate(grads):
            by_device.setdefault(grad.device, []).append(i)
        for indices in by_device.values():
            rows[indices] = _scalar_rows([grads[i] for i in indices], bounds, histogram).cpu().numpy()
    else:
        rows = np.zeros((0, 3), dtype=np.float64)
    stats = from_rows(step, names, [tuple(g.shape) for g in grads], [str(g.dtype) for g in grads], numels, rows,
                      histogram)
    if has_direction(level):
        stats.directions, stats.dir_offsets = _pack_directions(grads)
    if has_hash(level):
        stats.crc32 = _crc32s(grads)
    return stats
