"""The perturbations of free_benchmark for MindSpore (docs/reference/msprobe-tasks.md §8.3), bit for bit as the PyTorch side's.

- ``add_noise``: ``where(|x| > sqrt(eps), x + eps, x)`` in x's dtype, eps = bf16 1e-4, fp16 1e-6, fp32 1e-8,
  fp64 1e-16;
- ``bit_noise``: the lowest mantissa bit flipped where ``|x| > finfo.smallest_normal`` (bfloat16 too: msprobe's
  MindSpore side has none there);
- ``change_value``: ``x[0]``/``x[-1]`` swapped (1-D) or the sub-tensors ``x[0][0]``/``x[-1][-1]``;
- ``no_change``: the inputs as they are;
- ``improve_precision``: every float16/bfloat16 tensor of the arguments raised to float32.

``to_cpu`` has no MindSpore counterpart (msprobe's MindSpore side has none either): it is refused with a reason.
The three tensor perturbations compute on a host copy (MindSpore lacks half-precision kernels on the CPU) and
perturb only the first eligible tensor (the first floating tensor of the first positional argument that is a
tensor or a container).
"""

from typing import Any, Callable, Dict, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops

from engines.adapters.mindspore.tensor_stats import raw
from engines.free_benchmark import perturb as neutral
from engines.free_benchmark import structure
from engines.free_benchmark.perturb import Cancelled, Perturbed
from engines.free_benchmark.thresholds import epsilon

LOW_PRECISION = (ms.float16, ms.bfloat16)
FLOATING = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_cast = raw(ops.cast)
_INT_VIEWS = {"bfloat16": np.int16, "float16": np.int16, "float32": np.int32, "float64": np.int64}
_TINY = {"bfloat16": 1.1754943508222875e-38, "float16": 6.103515625e-05,
         "float32": float(np.finfo(np.float32).tiny), "float64": float(np.finfo(np.float64).tiny)}


def is_floating(t: Any) -> bool:
    return isinstance(t, Tensor) and t.dtype in FLOATING


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def first_eligible_index(args: tuple) -> Optional[int]:
    """msprobe's ``valid_input_index``: the first positional argument that is a floating tensor or any
    list/tuple/dict. None: the call cannot be checked."""
    return neutral.first_eligible_index(args, _is_tensor, is_floating)


def _host(x: Tensor) -> Tuple[np.ndarray, str]:
    arr = np.array(x.asnumpy(), copy=True)
    return arr, arr.dtype.name


def _noise_precheck(arr: np.ndarray, name: str, mode: str) -> float:
    eps = epsilon(name)
    if eps is None:
        raise Cancelled("%s: dtype %s unsupported" % (mode, name))
    if arr.size == 0:
        raise Cancelled("%s: empty tensor" % mode)
    top = float(np.abs(arr.astype(np.float64)).max())
    if not top >= eps:
        raise Cancelled("%s: maximum value is less than the minimum threshold" % mode)
    return eps


def add_noise(x: Tensor) -> Tensor:
    arr, name = _host(x)
    eps = _noise_precheck(arr, name, "add_noise")
    noisy = (arr + np.asarray(eps, dtype=arr.dtype)).astype(arr.dtype)
    out = np.where(np.abs(arr) > np.asarray(eps ** 0.5, dtype=arr.dtype), noisy, arr)
    return Tensor(out, dtype=x.dtype)


def bit_noise(x: Tensor) -> Tensor:
    arr, name = _host(x)
    _noise_precheck(arr, name, "bit_noise")
    view = _INT_VIEWS.get(name)
    if view is None:
        raise Cancelled("bit_noise: dtype %s unsupported" % name)
    flipped = (np.ascontiguousarray(arr).view(view) ^ 1).view(arr.dtype)
    out = np.where(np.abs(arr.astype(np.float64)) > _TINY[name], flipped, arr)
    return Tensor(out, dtype=x.dtype)


def change_value(x: Tensor) -> Tensor:
    arr, _ = _host(x)
    if arr.ndim == 0:
        raise Cancelled("change_value: 0-d tensor unsupported")
    y = arr.copy()
    if arr.ndim == 1:
        if arr.shape[0] < 2:
            raise Cancelled("change_value: fewer than 2 elements")
        y[0], y[-1] = arr[-1], arr[0]
        return Tensor(y, dtype=x.dtype)
    if arr.shape[1] == 0 or (arr.shape[1] < 2 and arr.shape[0] < 2):
        raise Cancelled("change_value: first two dimensions too small")
    y[0][0], y[-1][-1] = arr[-1][-1].copy(), arr[0][0].copy()
    return Tensor(y, dtype=x.dtype)


TENSOR_PERTURBATIONS: Dict[str, Callable[[Tensor], Tensor]] = {
    "add_noise": add_noise, "bit_noise": bit_noise, "change_value": change_value,
}


def map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    return structure.map_tensors(obj, _is_tensor, fn)


def perturb(mode: str, args: tuple, kwargs: Dict[str, Any], index: int) -> Perturbed:
    """Perturbed arguments for ``mode``; ``index`` is the eligible argument (``first_eligible_index``)."""
    return neutral.perturbed(mode, args, kwargs, index, TENSOR_PERTURBATIONS, is_floating, _WHOLE)


def _improve_precision(args: tuple, kwargs: Dict[str, Any]) -> Perturbed:
    return neutral.mapped(args, kwargs, map_tensors,
                          lambda t: (_cast(t, ms.float32), True) if t.dtype in LOW_PRECISION else (t, False))


def _to_cpu(args: tuple, kwargs: Dict[str, Any]) -> Perturbed:
    raise Cancelled("to_cpu is not available on MindSpore (use improve_precision)")


_WHOLE: Dict[str, Callable[[tuple, Dict[str, Any]], Perturbed]] = {"improve_precision": _improve_precision,
                                                                   "to_cpu": _to_cpu}
