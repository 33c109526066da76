"""Replay a recorded MindSpore call from its saved tensors and JSON arguments (analyze-overflow).

The interface of ``engines.adapters.torch.overflow_replay``: a record name gives the callable
(``Mint.exp`` -> ``mindspore.mint.exp``, ``Functional.gelu`` -> ``mindspore.ops.gelu``, ``MintFunctional.softmax``
-> ``mindspore.mint.nn.functional.softmax``, ``Tensor.add`` -> ``mindspore.Tensor.add``, ``Demo.x`` -> the demo's
operators); the record's ``args`` skeleton gives the arguments. The call runs twice outside any gradient graph:
with the tensors as saved, and with every floating tensor and floating dtype argument raised to the replay dtype.
Primitive calls are not replayed (a primitive's attributes, such as LayerNorm's epsilon, are not recorded).
"""

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor

from engines.adapters.mindspore import api_table
from engines.overflow import origin as og
from engines.store.dtypes import as_float32, is_bfloat16

try:
    from mindspore.graph.api import _no_grad as no_grad
except ImportError:  # older MindSpore
    from mindspore.common.api import _no_grad as no_grad  # type: ignore[no-redef]

_STORED_DTYPES = {
    "Float16": ms.float16, "BFloat16": ms.bfloat16, "Float32": ms.float32, "Float64": ms.float64,
    "Int8": ms.int8, "Int16": ms.int16, "Int32": ms.int32, "Int64": ms.int64, "UInt8": ms.uint8, "Bool": ms.bool_,
    "Complex64": ms.complex64, "Complex128": ms.complex128,
}
_FLOATING = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
_REPLAY_DTYPES = {"float32": ms.float32, "float64": ms.float64}
_FINFO_MAX = {"Float16": 65504.0, "BFloat16": 3.3895313892515355e38, "Float32": float(np.finfo(np.float32).max),
              "Float64": float(np.finfo(np.float64).max)}


class ReplayError(Exception):
    """The call cannot be rebuilt or run; the message says why in one line."""


class OutputFacts:
    __slots__ = ("kinds", "max_abs", "dtype")

    def __init__(self, kinds: int, max_abs: float, dtype: str) -> None:
        self.kinds = kinds
        self.max_abs = max_abs
        self.dtype = dtype


class ReplayResult:
    __slots__ = ("as_saved", "high", "dtype")

    def __init__(self, as_saved: OutputFacts, high: OutputFacts, dtype: str) -> None:
        self.as_saved = as_saved
        self.high = high
        self.dtype = dtype


def resolve_callable(name: str) -> Callable:
    """The callable of a record name (``Mint.exp.0.forward`` or just ``Mint.exp``)."""
    parts = name.split(".")
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        parts = parts[:-2]
    if len(parts) < 2:
        raise ReplayError("%s: not an API record name" % name)
    prefix, api = parts[0], ".".join(parts[1:])
    if prefix == api_table.PREFIX_PRIMITIVE:
        raise ReplayError("%s: primitives are not replayed (their attributes are not recorded)" % name)
    if prefix in ("Distributed", api_table.PREFIX_MINT_DISTRIBUTED):
        raise ReplayError("%s: collectives are not replayed" % name)
    if prefix == "Tensor":
        found = getattr(Tensor, api, None)
    else:
        modules = {"Functional": "mindspore.ops", "Mint": "mindspore.mint",
                   "MintFunctional": "mindspore.mint.nn.functional",
                   api_table.PREFIX_DEMO: "engines.adapters.mindspore.demo_ops"}
        module = modules.get(prefix)
        found = getattr(__import__(module, fromlist=["_"]), api, None) if module else None
    while hasattr(found, "__wrapped__"):
        found = found.__wrapped__
    if found is None or not callable(found):
        raise ReplayError("%s: no such callable in this MindSpore (%s)" % (name, ms.__version__))
    return found


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


def _decode(obj: Any, tensors: Dict[str, Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "tensor" in obj and len(obj) == 1:
        slot = obj["tensor"]
        if slot not in tensors:
            raise ReplayError("tensor %s was not saved" % slot)
        return tensors[slot]
    kind = obj.get("type")
    value = obj.get("value")
    if kind == "float":
        return float(value)
    if kind == "mindspore.dtype":
        return _dtype_of(value)
    if kind == "slice":
        return slice(*[_decode(v, tensors) for v in value])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "complex":
        return complex(value[0], value[1])
    if isinstance(kind, str) and kind.startswith("numpy."):
        return value
    if kind is not None:
        raise ReplayError("an argument of type %s cannot be rebuilt" % kind)
    return {k: _decode(v, tensors) for k, v in obj.items()}


def build_call(args_json: str, tensors: Dict[str, Tensor]) -> Tuple[list, dict]:
    skeleton = json.loads(args_json) if args_json else {}
    if not isinstance(skeleton, dict) or "args" not in skeleton:
        raise ReplayError("the record keeps no arguments")
    args = _decode(skeleton.get("args") or [], tensors)
    kwargs = _decode(skeleton.get("kwargs") or {}, tensors)
    if not isinstance(kwargs, dict):
        raise ReplayError("keyword arguments cannot be rebuilt")
    kwargs.pop("output", None)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    return list(args), kwargs


def _raise(obj: Any, dtype: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.astype(dtype) if obj.dtype in _FLOATING else obj
    if isinstance(obj, ms.dtype.Type) and obj in _FLOATING:
        return dtype
    if isinstance(obj, list):
        return [_raise(v, dtype) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_raise(v, dtype) for v in obj)
    if isinstance(obj, dict):
        return {k: _raise(v, dtype) for k, v in obj.items()}
    return obj


def _facts(out: Any) -> OutputFacts:
    kinds = 0
    max_abs = 0.0
    dtype = ""
    stack = [out]
    while stack:
        obj = stack.pop()
        if isinstance(obj, Tensor):
            if obj.dtype not in _FLOATING or int(obj.size) == 0:
                continue
            x = obj.asnumpy()
            if x.dtype.name == "bfloat16":
                x = x.astype(np.float32)
            dtype = dtype or str(obj.dtype)
            if np.isnan(x).any():
                kinds |= og.NAN
            if np.isposinf(x).any():
                kinds |= og.POSINF
            if np.isneginf(x).any():
                kinds |= og.NEGINF
            finite = x[np.isfinite(x)]
            if finite.size:
                max_abs = max(max_abs, float(np.abs(finite.astype(np.float64)).max()))
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, float):
            kinds |= og.kinds_of_value(obj)
    return OutputFacts(kinds, max_abs, dtype)


def replay(name: str, args_json: str, saved: Dict[str, Tuple[np.ndarray, str, List[int]]], dtype: str = "float64",
           device: str = "cpu") -> ReplayResult:
    """Run the call as saved and in ``dtype`` (MindSpore's current device; ``device`` is PyTorch's notion)."""
    func = resolve_callable(name)
    if dtype not in _REPLAY_DTYPES:
        raise ReplayError("dtype %r: replay runs in float32 or float64" % dtype)
    tensors = {slot: tensor_from_saved(arr, dt, shape) for slot, (arr, dt, shape) in saved.items()}
    args, kwargs = build_call(args_json, tensors)
    high = _REPLAY_DTYPES[dtype]
    with no_grad():
        try:
            as_saved = _facts(func(*args, **kwargs))
        except Exception as exc:
            raise ReplayError("%s failed as saved: %s: %s" % (name, type(exc).__name__, _one_line(exc))) from None
        try:
            raised = _facts(func(*_raise(args, high), **_raise(kwargs, high)))
        except Exception as exc:
            raise ReplayError("%s failed in %s: %s: %s" % (name, dtype, type(exc).__name__, _one_line(exc))) \
                from None
    return ReplayResult(as_saved, raised, dtype)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def finfo_max(dtype_name: str) -> Optional[float]:
    return _FINFO_MAX.get(dtype_name)
