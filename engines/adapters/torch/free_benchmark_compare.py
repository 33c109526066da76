"""The consistency metric of free_benchmark on the tensor's device (docs/reference/msprobe-tasks.md §8.4, with the chunk bug fixed).

For each compared output element (a tensor; ``.values`` of a (values, indices) result; each item of a tuple or
list), both sides are brought to the perturbed side's dtype and device and compared in flat chunks
(``chunk_count``). Per chunk: a sign flip (``min(a*b) < -tol^2``) is an infinite ratio; else
``r = nan_to_num(clamp(|a|, tol) / clamp(|b|, tol), nan=1)`` and the chunk's ratio is ``max(max r, 1/min r)``.
The output's ratio is the largest over **all** chunks (msprobe keeps only the last chunk's). Float16 and
bfloat16 sides are compared in float32: computed in bfloat16 the ratio itself would be rounded to 1 + k/128,
which no 1.004 threshold can judge.

Since the output's ratio is the largest over all chunks, it is ``max(max r, 1/min r)`` over the whole tensor (inf
when any product ``a*b`` is below ``-tol^2``) whatever the chunks: ``tensor_ratio`` computes it in blocks of at
most ``BLOCK`` elements, nine passes per block and no temporaries, in a workspace reused from call to call
(``_workspace``: on the CPU a fresh buffer of a few MB costs its page faults on every call, as much as the passes
themselves), and keeps three 0-d device tensors per output (``Parts``: ``min(a*b)``, ``min r``, ``max r``).
``resolve`` finishes a step's worth at once, batched per device and dtype, with one transfer per device.
``chunk_ratio`` is the formula for one chunk as written, the reference the blocked path equals bit for bit (tests).
A dense CPU float32/float16/bfloat16 pair goes to the native kernel instead (``_native_ratio``;
``engines/native/fb_compare.c``): one read of both, the ratio a host float at once, the same bits (every figure
is an elementwise float32 operation followed by a minimum or maximum).
to_cpu is judged differently (msprobe's SingleCompare): ``single_compare``.
"""

import threading
from typing import Any, Dict, List, Tuple, Union

import torch

from engines.free_benchmark import structure
from engines.free_benchmark.metric import scalar_ratio  # noqa: F401 (this module's interface)
from engines.free_benchmark.thresholds import to_cpu_limits
from engines.native import fb_compare as native

#: the dtypes the native kernel reads (``engines/native/fb_compare.c``)
_NATIVE_CODES = {torch.float32: native.FLOAT32, torch.float16: native.FLOAT16, torch.bfloat16: native.BFLOAT16}
#: off: every pair by the framework's passes (tests)
USE_NATIVE = True

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


#: elements per block of ``tensor_ratio`` (the CPU workspace holds three blocks of the work dtype: 6 MB in float32)
BLOCK = 1 << 19


class Parts:
    """A tensor pair's ratio still on the device, as three 0-d tensors of the work dtype: the smallest product
    ``a*b`` (a sign flip when below ``-tol^2``), the smallest and the largest ``r``. ``resolve`` finishes it."""

    __slots__ = ("flip_min", "lo", "hi", "tol")

    def __init__(self, flip_min: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, tol: float) -> None:
        self.flip_min = flip_min
        self.lo = lo
        self.hi = hi
        self.tol = tol


Ratio = Union[float, torch.Tensor, Parts]
_local = threading.local()


def _workspace(dtype: torch.dtype, device: torch.device, n: int) -> torch.Tensor:
    """``3n`` elements of ``dtype`` to compute in. On the CPU one buffer per thread and dtype, kept and grown to the
    largest block seen (at most ``3 * BLOCK`` elements); on an accelerator the framework's caching allocator
    serves a fresh one (which keeps it safe across streams)."""
    if device.type != "cpu":
        return torch.empty(3 * n, dtype=dtype, device=device)
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    buf = buffers.get(dtype)
    if buf is None or buf.numel() < 3 * n:
        with torch.inference_mode(False):  # written in place later, inside inference mode or not
            buf = buffers[dtype] = torch.empty(3 * n, dtype=dtype)
    return buf


def _flat(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return (torch.view_as_real(t) if t.is_complex() else t).reshape(-1)


def _native_code(t: torch.Tensor) -> int:
    """The kernel's dtype code when its raw data can be read as the values (-1 otherwise): a dense CPU tensor of
    a taken dtype, no negative or conjugate view, aligned to its item size."""
    code = _NATIVE_CODES.get(t.dtype)
    if code is None or t.device.type != "cpu" or not t.is_contiguous() or t.is_neg() or t.is_conj():
        return -1
    return code


def _native_ratio(original: torch.Tensor, perturbed: torch.Tensor, tol: float) -> Union[float, None]:
    """The pair's ratio by the native kernel in one read of both (a host float: on the CPU no sync), or None
    when the pair is not for it (another dtype or device, a strided view) or the kernel is unavailable."""
    if not USE_NATIVE:
        return None
    a_code, b_code = _native_code(original), _native_code(perturbed)
    if a_code < 0 or b_code < 0:
        return None
    kernel = native.fused_compare()
    if kernel is None:
        return None
    try:
        a_ptr, b_ptr = original.data_ptr(), perturbed.data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor without storage (a subclass, a fake tensor)
        return None
    if a_ptr % original.element_size() or b_ptr % perturbed.element_size():
        return None
    n = perturbed.numel()
    threads = torch.get_num_threads() if n >= native.THREADS_FROM else 1
    return kernel.ratio(a_ptr, a_code, b_ptr, b_code, n, tol, threads)


def tensor_ratio(original: torch.Tensor, perturbed: torch.Tensor, tol: float) -> Ratio:
    """The ratio of one output tensor pair over all its elements (``Parts``; a float when decided at once)."""
    if not (perturbed.is_floating_point() or perturbed.is_complex()):
        same = original.shape == perturbed.shape and bool(torch.equal(original.to(perturbed.device), perturbed))
        return 1.0 if same else _INF
    if original.shape != perturbed.shape:
        return _INF
    if perturbed.numel() == 0:
        return 1.0
    fused = _native_ratio(original, perturbed, tol)
    if fused is not None:
        return fused
    dt = work_dtype(perturbed)
    a, b = _flat(original), _flat(perturbed)
    if a.numel() != b.numel():
        raise ValueError("a complex output compared with a real one")
    if a.device != b.device:
        a = a.to(b.device)
    n = b.numel()
    size = min(n, BLOCK)
    buf = _workspace(dt, b.device, size)
    parts = []
    for start in range(0, n, size):
        stop = min(n, start + size)
        k = stop - start
        both = buf[:2 * k]  # x and y side by side: one clamp for both; z for the products
        x, y, z = both[:k], both[k:], buf[2 * k:3 * k]
        bb = b[start:stop]
        x.copy_(a[start:stop])
        if bb.dtype is dt:  # |b| written straight into y: one pass over b fewer
            torch.mul(x, bb, out=z)
            torch.abs(bb, out=y)
        else:
            y.copy_(bb)
            torch.mul(x, y, out=z)
            y.abs_()
        flip_min = z.amin()
        x.abs_()
        both.clamp_(min=tol)
        x.div_(y)
        torch.nan_to_num_(x, nan=1.0)
        lo, hi = torch.aminmax(x)
        parts.append((flip_min, lo, hi))
    if len(parts) == 1:
        return Parts(parts[0][0], parts[0][1], parts[0][2], tol)
    mins, los, his = (torch.stack(p) for p in zip(*parts))
    return Parts(mins.amin(), los.amin(), his.amax(), tol)


def _finish(group: List[Parts]) -> torch.Tensor:
    """The ratios of same-dtype, same-device ``Parts``: ``max(max r, 1/min r)``, inf for a sign flip."""
    flip_min = torch.stack([p.flip_min for p in group])
    lo = torch.stack([p.lo for p in group])
    hi = torch.stack([p.hi for p in group])
    limit = torch.tensor([-(p.tol * p.tol) for p in group], dtype=flip_min.dtype).to(flip_min.device)
    ratio = torch.maximum(hi, torch.reciprocal(lo))
    return ratio.masked_fill(flip_min < limit, _INF)


def resolve(values: List[Ratio]) -> List[float]:
    """Host floats of a batch of ratios: one transfer per device."""
    out: List[float] = [0.0] * len(values)
    tensors: Dict[Any, List[Tuple[List[int], torch.Tensor]]] = {}
    groups: Dict[Tuple[Any, Any], List[Tuple[int, Parts]]] = {}
    for i, v in enumerate(values):
        if isinstance(v, Parts):
            groups.setdefault((v.hi.device, v.hi.dtype), []).append((i, v))
        elif isinstance(v, torch.Tensor):
            tensors.setdefault(v.device, []).append(([i], v.reshape(1)))
        else:
            out[i] = float(v)
    for (device, _), pairs in groups.items():
        tensors.setdefault(device, []).append(([i for i, _ in pairs], _finish([p for _, p in pairs])))
    for batches in tensors.values():
        host = torch.cat([t.to(torch.float64) for _, t in batches]).cpu().tolist()
        for i, h in zip((i for idx, _ in batches for i in idx), host):
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
