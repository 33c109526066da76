"""The six perturbations of free_benchmark (docs/reference/msprobe-tasks.md §8.3), bit for bit.

- ``add_noise``: ``where(|x| > sqrt(eps), x + eps, x)`` in x's dtype, eps = bf16 1e-4, fp16 1e-6, fp32 1e-8,
  fp64 1e-16;
- ``bit_noise``: the lowest mantissa bit flipped (``int(x) ^ 1`` on the same-width integer view) where
  ``|x| > finfo.smallest_normal``;
- ``change_value``: a copy with ``x[0]``/``x[-1]`` swapped (1-D) or the sub-tensors ``x[0][0]``/``x[-1][-1]``;
- ``no_change``: the inputs as they are;
- ``improve_precision``: every float16/bfloat16 tensor of the arguments raised to float32;
- ``to_cpu``: every tensor moved to the CPU, float16/bfloat16 raised to float32.

add_noise, bit_noise and change_value perturb only the first eligible tensor (the first floating tensor of the
first positional argument that is a tensor or a container; ``engines.free_benchmark.perturb``); each refuses, with
a reason, what it cannot perturb.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from engines.free_benchmark import perturb as neutral
from engines.free_benchmark import structure
from engines.free_benchmark.perturb import Cancelled, Perturbed
from engines.free_benchmark.thresholds import epsilon
from engines.native import fb_compare as native

LOW_PRECISION = (torch.float16, torch.bfloat16)
_INT_VIEWS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
              torch.float64: torch.int64}


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, torch.Tensor)


def _eligible(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_meta


def first_eligible_index(args: tuple) -> Optional[int]:
    """msprobe's ``valid_input_index``: the first positional argument that is a floating (non-meta) tensor or any
    list/tuple/dict. None: the call cannot be checked."""
    return neutral.first_eligible_index(args, _is_tensor, _eligible)


#: read the refusal rule with the step's ratios on the CPU too (a CPU read is no sync, and a deferred refusal
#: re-runs the call for nothing: off but for tests)
DEFER_REFUSAL_ON_CPU = False


def _noise_precheck(x: torch.Tensor, mode: str, refusals: Optional[List[Tuple[torch.Tensor, str]]] = None
                    ) -> Tuple[float, torch.Tensor]:
    """(eps, ``|x|``): the magnitudes serve the perturbation too (one pass fewer). With ``refusals``, on an
    accelerator, the rule ``max(abs(x)) < eps`` is not read here (a host sync per call): its flag (a 0-d tensor)
    and reason are appended, and the caller reads it with the step's ratios."""
    eps = epsilon(str(x.dtype))
    if eps is None:
        raise Cancelled("%s: dtype %s unsupported" % (mode, x.dtype))
    if x.numel() == 0:
        raise Cancelled("%s: empty tensor" % mode)
    try:
        magnitude = x.abs()
        top = magnitude.max()
    except RuntimeError:
        magnitude = x.float().abs()
        top = magnitude.max()
    reason = "%s: maximum value is less than the minimum threshold" % mode
    if refusals is not None and (x.device.type != "cpu" or DEFER_REFUSAL_ON_CPU):
        refusals.append((torch.logical_not(top.double() >= eps), reason))  # compared in float64, as on the host
    elif not top.item() >= eps:
        raise Cancelled(reason)
    return eps, magnitude


#: from this many elements ``_select`` picks bits with integer operations: ``torch.where`` on the CPU branches per
#: element and costs ~6x as much on a mask that is mostly but not all true (what noise masks are)
SELECT_BITS_FROM = 4096


def _select(mask: torch.Tensor, new: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``torch.where(mask, new, x)`` bit for bit (``new`` is a fresh tensor of x's dtype and shape, used up)."""
    view = _INT_VIEWS.get(x.dtype)
    if view is None or x.numel() < SELECT_BITS_FROM or not (x.is_contiguous() and new.is_contiguous()) \
            or new.shape != x.shape or mask.shape != x.shape:
        return torch.where(mask, new, x)
    bits = x.view(view)
    return new.view(view).bitwise_xor_(bits).mul_(mask).bitwise_xor_(bits).view(x.dtype)


_NATIVE_CODES = {torch.float32: native.FLOAT32, torch.float16: native.FLOAT16, torch.bfloat16: native.BFLOAT16}
_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: off: the noise by torch's operations always (tests)
USE_NATIVE = True
_thresholds: Dict[Tuple[torch.dtype, str], float] = {}


def _threshold(dtype: torch.dtype, mode: str) -> float:
    """The value ``|x|`` must exceed, as torch compares it: the Python number converted to x's dtype."""
    key = (dtype, mode)
    got = _thresholds.get(key)
    if got is None:
        value = (epsilon(str(dtype)) or 0.0) ** 0.5 if mode == "add_noise" else torch.finfo(dtype).tiny
        got = _thresholds[key] = float(torch.tensor(value, dtype=dtype))
    return got


def _native_noise(x: torch.Tensor, mode: str, refusals: Optional[list]) -> Optional[torch.Tensor]:
    """add_noise / bit_noise of a dense CPU float32/float16/bfloat16 tensor by the native kernel in one read (the
    same bits as the operations below; ``engines/native/fb_compare.c``), the refusal rule read at once from the
    maximum magnitude it returns; None when the tensor is not for it or the kernel is unavailable."""
    code = _NATIVE_CODES.get(x.dtype)
    if not USE_NATIVE or code is None or (refusals is not None and DEFER_REFUSAL_ON_CPU) or x.device.type != "cpu" \
            or type(x) not in _PLAIN or x.numel() == 0 or not x.is_contiguous() or x.is_neg() or x.is_conj():
        return None
    kernel = native.fused_compare()
    if kernel is None:
        return None
    try:
        ptr = x.data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    if ptr % x.element_size():
        return None
    eps = epsilon(str(x.dtype)) or 0.0  # (every dtype taken has one)
    out = torch.empty_like(x)
    top = kernel.noise(ptr, code, x.numel(), native.ADD_NOISE if mode == "add_noise" else native.BIT_NOISE,
                       eps, _threshold(x.dtype, mode), out.data_ptr())
    if not top >= eps:
        raise Cancelled("%s: maximum value is less than the minimum threshold" % mode)
    return out


def add_noise(x: torch.Tensor, refusals: Optional[List[Tuple[torch.Tensor, str]]] = None) -> torch.Tensor:
    fused = _native_noise(x, "add_noise", refusals)
    if fused is not None:
        return fused
    eps, magnitude = _noise_precheck(x, "add_noise", refusals)
    return _select(magnitude > eps ** 0.5, x + eps, x)


def bit_noise(x: torch.Tensor, refusals: Optional[List[Tuple[torch.Tensor, str]]] = None) -> torch.Tensor:
    fused = _native_noise(x, "bit_noise", refusals)
    if fused is not None:
        return fused
    _, magnitude = _noise_precheck(x, "bit_noise", refusals)
    view = _INT_VIEWS.get(x.dtype)
    if view is None:
        raise Cancelled("bit_noise: dtype %s unsupported" % x.dtype)
    flipped = (x.contiguous().view(view) ^ 1).view(x.dtype)
    return _select(magnitude > torch.finfo(x.dtype).tiny, flipped, x)


def change_value(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0:
        raise Cancelled("change_value: 0-d tensor unsupported")
    y = x.clone()
    if x.dim() == 1:
        if x.size(0) < 2:
            raise Cancelled("change_value: fewer than 2 elements")
        y[0], y[-1] = x[-1].clone(), x[0].clone()
        return y
    if x.size(1) == 0 or (x.size(1) < 2 and x.size(0) < 2):
        raise Cancelled("change_value: first two dimensions too small")
    first, last = x[0][0].clone(), x[-1][-1].clone()
    y[0][0], y[-1][-1] = last, first
    return y


TENSOR_PERTURBATIONS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "add_noise": add_noise, "bit_noise": bit_noise, "change_value": change_value,
}


def _detached(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: fn(t.detach())  # the perturbed tensor is computed outside the graph


_DETACHED = {mode: _detached(fn) for mode, fn in TENSOR_PERTURBATIONS.items()}


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return structure.map_tensors(obj, _is_tensor, fn)


_NOISE = {"add_noise": add_noise, "bit_noise": bit_noise}


def perturb(mode: str, args: tuple, kwargs: Dict[str, Any], index: int, autocast_dtype: Optional[torch.dtype] = None,
            keep_graph: bool = False, defer_refusal: bool = False) -> Perturbed:
    """Perturbed arguments for ``mode``. ``index`` is the eligible argument (``first_eligible_index``).

    improve_precision when autocast lowered the call (the caller passes ``autocast_dtype`` then): its float32
    inputs are first rounded to the autocast dtype, so the check measures the op's own error, not its inputs'
    rounding, and the call counts as changed (it re-runs with autocast off). ``keep_graph`` (fix mode) keeps the
    perturbed tensors in the autograd graph and skips that rounding: the fix is the full float32 call."""
    whole = {"improve_precision": lambda a, k: _improve_precision(a, k, autocast_dtype, keep_graph), "to_cpu": _to_cpu}
    if not (defer_refusal and mode in _NOISE):
        return neutral.perturbed(mode, args, kwargs, index, _DETACHED, _eligible, whole)
    # ``defer_refusal``: add_noise/bit_noise do not read max(abs(x)) on the host (``Perturbed.refusal``)
    refusals: List[Tuple[torch.Tensor, str]] = []
    noise = _NOISE[mode]
    p = neutral.perturbed(mode, args, kwargs, index, {mode: lambda t: noise(t.detach(), refusals)}, _eligible, whole)
    if refusals:
        p.refusal = refusals[0]
    return p


def _improve_precision(args: tuple, kwargs: Dict[str, Any], autocast_dtype: Optional[torch.dtype],
                       keep_graph: bool) -> Perturbed:
    def up(t: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        if t.dtype in LOW_PRECISION:
            return (t.to(torch.float32) if keep_graph else t.detach().to(torch.float32)), True
        if autocast_dtype is not None and t.dtype is torch.float32 and not keep_graph:
            return t.detach().to(autocast_dtype).to(torch.float32), True
        return (t if keep_graph else t.detach()), False

    p = neutral.mapped(args, kwargs, _map_tensors, up)
    p.changed = p.changed or autocast_dtype is not None
    return p


def _to_cpu(args: tuple, kwargs: Dict[str, Any]) -> Perturbed:
    cpu = torch.device("cpu")

    def move(t: torch.Tensor) -> torch.Tensor:
        x = t.detach().to(cpu)
        return x.to(torch.float32) if x.dtype in LOW_PRECISION else x

    new_args = _map_tensors(args, move)
    new_kwargs = {k: (cpu if k == "device" else v) for k, v in _map_tensors(kwargs, move).items()}
    return Perturbed(new_args, new_kwargs, True, cpu)
