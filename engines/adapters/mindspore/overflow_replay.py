"""Replay a recorded MindSpore call from its saved tensors and JSON arguments (analyze-overflow).

The interface of ``engines.adapters.torch.overflow_replay``; rebuilding the call, running it twice and reading its
outputs are framework-neutral (``engines.overflow.replay``). A record name gives the callable through the
capture's own API table, never an attribute lookup (``replay_table``: ``Mint.exp`` -> ``mindspore.mint.exp``,
``Functional.gelu`` -> ``mindspore.ops.gelu``, ``MintFunctional.softmax`` -> ``mindspore.mint.nn.functional.softmax``,
``Tensor.add`` -> ``mindspore.Tensor.add``, ``Demo.x`` -> the demo's operators); the record's ``args`` skeleton gives the arguments. The call runs twice outside any gradient graph:
with the tensors as saved, and with every floating tensor and floating dtype argument raised to the replay dtype.
Primitive calls are not replayed here (acc_check rebuilds them from their recorded attributes: ``acc_replay``).
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor

from engines.adapters.mindspore import replay_table
from engines.overflow import origin as og
from engines.overflow import replay as rp
from engines.overflow.replay import OutputFacts, ReplayError, ReplayResult  # noqa: F401 (this module's interface)
from engines.store.dtypes import as_float32, is_bfloat16

try:
    from mindspore.graph.api import _no_grad as no_grad
except ImportError:  # older MindSpore
    from mindspore.common.api import _no_grad as no_grad

_STORED_DTYPES = {
    "Float16": ms.float16, "BFloat16": ms.bfloat16, "Float32": ms.float32, "Float64": ms.float64,
    "Int8": ms.int8, "Int16": ms.int16, "Int32": ms.int32, "Int64": ms.int64, "UInt8": ms.uint8, "Bool": ms.bool_,
    "Complex64": ms.complex64, "Complex128": ms.complex128,
}
_FLOATING = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_REPLAY_DTYPES = {"float32": ms.float32, "float64": ms.float64}
_FINFO_MAX = {"Float16": 65504.0, "BFloat16": 3.3895313892515355e38, "Float32": float(np.finfo(np.float32).max),
              "Float64": float(np.finfo(np.float64).max)}


def resolve_callable(name: str) -> Callable:
    """The callable of a record name (``Mint.exp.0.forward`` or just ``Mint.exp``), from the capture's own API table only."""
    return rp.resolve_named(name, replay_table.resolve, replay_table.NotReplayable)


def tensor_from_saved(data: np.ndarray, dtype_name: str, shape: List[int]) -> Tensor:
    """Rebuild a tensor from its stored array (bfloat16 arrives as uint16 bits)."""
    dtype = _STORED_DTYPES.get(dtype_name)
    if dtype is None:
        raise ReplayError("a saved tensor has dtype %s, which replay does not rebuild" % dtype_name)
    arr = np.ascontiguousarray(data)
    if is_bfloat16(dtype_name):
        return Tensor(as_float32(arr.view(np.uint16)).reshape(shape)).astype(ms.bfloat16)
    return Tensor(arr.reshape(shape), dtype=dtype)


def _dtype_of(text: str) -> Any:
    dtype = _STORED_DTYPES.get(str(text))
    if dtype is None:
        raise ReplayError("an argument of dtype %s cannot be rebuilt" % text)
    return dtype


def _mindspore_value(kind: str, value: Any) -> Any:
    return _dtype_of(value) if kind == "mindspore.dtype" else rp.UNKNOWN


def _raise(obj: Any, dtype: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.astype(dtype) if obj.dtype in _FLOATING else obj
    if isinstance(obj, ms.dtype.Type) and obj in _FLOATING:
        return dtype
    return obj


def _tensor_facts(t: Tensor) -> Optional[Tuple[int, float, str]]:
    if t.dtype not in _FLOATING or int(t.size) == 0:
        return None
    x = t.asnumpy()
    if x.dtype.name == "bfloat16":
        x = x.astype(np.float32)
    kinds = 0
    if np.isnan(x).any():
        kinds |= og.NAN
    if np.isposinf(x).any():
        kinds |= og.POSINF
    if np.isneginf(x).any():
        kinds |= og.NEGINF
    finite = x[np.isfinite(x)]
    max_abs = float(np.abs(finite.astype(np.float64)).max()) if finite.size else 0.0
    return kinds, max_abs, str(t.dtype)


def _facts(out: Any) -> OutputFacts:
    return rp.output_facts(out, Tensor, _tensor_facts)


def replay(name: str, args_json: str, saved: Dict[str, Tuple[np.ndarray, str, List[int]]], dtype: str = "float64",
           device: str = "cpu") -> ReplayResult:
    """Run the call as saved and in ``dtype`` (MindSpore's current device; ``device`` is PyTorch's notion)."""
    func = resolve_callable(name)
    rp.check_dtype(dtype)
    tensors = {slot: tensor_from_saved(arr, dt, shape) for slot, (arr, dt, shape) in saved.items()}
    args, kwargs = rp.build_call(args_json, tensors, _mindspore_value, "output")
    high = _REPLAY_DTYPES[dtype]
    return rp.run_twice(name, func, args, kwargs, dtype, lambda v: v, lambda v: _raise(v, high), _facts, no_grad)


def finfo_max(dtype_name: str) -> Optional[float]:
    return _FINFO_MAX.get(dtype_name)
