"""Replay a recorded call from its saved tensors and JSON arguments (analyze-overflow).

A record name gives the callable (``Torch.exp`` -> ``torch.exp``, ``Tensor.add`` -> ``torch.Tensor.add``,
``Functional.softmax`` -> ``torch.nn.functional.softmax``, ``Aten.mm`` / ``NPU.x`` / ``Demo.x`` -> ``torch.ops``),
the record's ``args`` skeleton gives the arguments with each tensor position marked by its slot. The call runs
twice under ``no_grad``: with the tensors as saved (does the overflow reproduce here?), and with every floating
tensor and floating dtype argument raised to the replay dtype (float32 or float64).
"""

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from engines.overflow import origin as og

_STORED_DTYPES = {
    "torch.float16": torch.float16, "torch.bfloat16": torch.bfloat16, "torch.float32": torch.float32,
    "torch.float64": torch.float64, "torch.int8": torch.int8, "torch.int16": torch.int16,
    "torch.int32": torch.int32, "torch.int64": torch.int64, "torch.uint8": torch.uint8, "torch.bool": torch.bool,
    "torch.complex64": torch.complex64, "torch.complex128": torch.complex128,
}
_REPLAY_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class ReplayError(Exception):
    """The call cannot be rebuilt or run; the message says why in one line."""


class OutputFacts:
    """Finiteness of a replay's floating outputs: kinds of non-finite values and the largest finite |value|."""

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
    """The callable of a record name (``Torch.exp.0.forward`` or just ``Torch.exp``)."""
    parts = name.split(".")
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        parts = parts[:-2]
    if len(parts) < 2:
        raise ReplayError("%s: not an API record name" % name)
    prefix, api = parts[0], ".".join(parts[1:])
    if prefix == "Distributed":
        raise ReplayError("%s: collectives are not replayed" % name)
    candidates: List[Any] = []
    if prefix == "Torch":
        candidates.append(_dotted(torch, api))
    elif prefix == "Tensor":
        candidates.append(getattr(torch.Tensor, api, None))
    elif prefix == "Functional":
        candidates.append(getattr(torch.nn.functional, api, None))
    elif prefix == "VF":
        candidates.append(getattr(torch._VF, api, None))
    else:
        namespace = {"Aten": "aten", "NPU": "npu"}.get(prefix, prefix[:1].lower() + prefix[1:])
        candidates.append(_op(namespace, api))
        if prefix == "NPU":
            import sys

            npu = sys.modules.get("torch_npu")
            if npu is not None:
                candidates.append(getattr(npu, api, None))
    for c in candidates:
        if c is not None and callable(c):
            return c
    raise ReplayError("%s: no such callable in this torch (%s)" % (name, torch.__version__))


def _dotted(root: Any, path: str) -> Any:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _op(namespace: str, api: str) -> Any:
    try:
        packet = getattr(getattr(torch.ops, namespace), api)
    except (AttributeError, RuntimeError):
        return None
    return packet


def tensor_from_saved(data: np.ndarray, dtype_name: str, shape: List[int]) -> torch.Tensor:
    """Rebuild a tensor from its stored array (bfloat16 arrives as uint16 bits)."""
    dtype = _STORED_DTYPES.get(dtype_name)
    if dtype is None:
        raise ReplayError("a saved tensor has dtype %s, which replay does not rebuild" % dtype_name)
    arr = np.ascontiguousarray(data)
    if dtype is torch.bfloat16:
        t = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(arr)
        if t.dtype != dtype:
            t = t.to(dtype)
    return t.reshape(shape).clone()


def _decode(obj: Any, tensors: Dict[str, torch.Tensor]) -> Any:
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
    if kind == "torch.dtype":
        return getattr(torch, str(value).replace("torch.", ""))
    if kind == "torch.device":
        return torch.device(value)
    if kind == "torch.Size":
        return torch.Size(value)
    if kind == "slice":
        return slice(*[_decode(v, tensors) for v in value])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "complex":
        return complex(value[0], value[1])
    if kind == "torch.memory_format":
        return getattr(torch, str(value).replace("torch.", ""))
    if isinstance(kind, str) and kind.startswith("numpy."):
        return value
    if kind is not None:
        raise ReplayError("an argument of type %s cannot be rebuilt" % kind)
    return {k: _decode(v, tensors) for k, v in obj.items()}


def build_call(args_json: str, tensors: Dict[str, torch.Tensor]) -> Tuple[list, dict]:
    skeleton = json.loads(args_json) if args_json else {}
    if not isinstance(skeleton, dict) or "args" not in skeleton:
        raise ReplayError("the record keeps no arguments")
    args = _decode(skeleton.get("args") or [], tensors)
    kwargs = _decode(skeleton.get("kwargs") or {}, tensors)
    if not isinstance(kwargs, dict):
        raise ReplayError("keyword arguments cannot be rebuilt")
    kwargs.pop("out", None)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    return list(args), kwargs


def _raise(obj: Any, dtype: torch.dtype, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.to(device, copy=True)
        return t.to(dtype) if t.is_floating_point() else t
    if isinstance(obj, torch.dtype):
        return dtype if obj.is_floating_point else obj
    if isinstance(obj, list):
        return [_raise(v, dtype, device) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_raise(v, dtype, device) for v in obj)
    if isinstance(obj, dict):
        return {k: _raise(v, dtype, device) for k, v in obj.items()}
    return obj


def _to(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, copy=True)  # a replayed in-place call must not change the inputs of the next run
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _facts(out: Any) -> OutputFacts:
    kinds = 0
    max_abs = 0.0
    dtype = ""
    stack = [out]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            if not (obj.is_floating_point() or obj.is_complex()) or obj.numel() == 0:
                continue
            x = obj.detach()
            if x.is_complex():
                x = torch.view_as_real(x)
            dtype = dtype or str(obj.dtype)
            if bool(torch.isnan(x).any()):
                kinds |= og.NAN
            if bool(torch.isposinf(x).any()):
                kinds |= og.POSINF
            if bool(torch.isneginf(x).any()):
                kinds |= og.NEGINF
            finite = x[torch.isfinite(x)]
            if finite.numel():
                max_abs = max(max_abs, float(finite.abs().max().to(torch.float64)))
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, float):
            kinds |= og.kinds_of_value(obj)
    return OutputFacts(kinds, max_abs, dtype)


def replay(name: str, args_json: str, saved: Dict[str, Tuple[np.ndarray, str, List[int]]], dtype: str = "float64",
           device: str = "cpu") -> ReplayResult:
    """Run the call as saved and in ``dtype``; ``saved`` maps slots to (array, dtype name, shape)."""
    func = resolve_callable(name)
    if dtype not in _REPLAY_DTYPES:
        raise ReplayError("dtype %r: replay runs in float32 or float64" % dtype)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ReplayError("device %r: %s" % (device, exc)) from None
    tensors = {slot: tensor_from_saved(arr, dt, shape) for slot, (arr, dt, shape) in saved.items()}
    args, kwargs = build_call(args_json, tensors)
    high = _REPLAY_DTYPES[dtype]
    with torch.no_grad():
        try:
            as_saved = _facts(func(*_to(args, dev), **_to(kwargs, dev)))
        except Exception as exc:
            raise ReplayError("%s failed as saved: %s: %s" % (name, type(exc).__name__, _one_line(exc))) from None
        try:
            raised = _facts(func(*_raise(args, high, dev), **_raise(kwargs, high, dev)))
        except Exception as exc:
            raise ReplayError("%s failed in %s: %s: %s" % (name, dtype, type(exc).__name__, _one_line(exc))) \
                from None
    return ReplayResult(as_saved, raised, dtype)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def finfo_max(dtype_name: str) -> Optional[float]:
    dtype = _STORED_DTYPES.get(dtype_name)
    if dtype is None or not dtype.is_floating_point:
        return None
    return float(torch.finfo(dtype).max)
