"""Replay a recorded call from its saved tensors and JSON arguments (analyze-overflow) on PyTorch.

A record name gives the callable through the capture's own API table, compute ops only (``replay_table``:
``Torch.exp`` -> ``torch.exp``, ``Tensor.add`` -> ``torch.Tensor.add``, ``Functional.softmax`` ->
``torch.nn.functional.softmax``, ``Aten.mm`` / ``NPU.x`` / ``Demo.x`` -> a registered ``torch.ops`` packet); a
name is never looked up as an attribute path.
Rebuilding the call, running it twice and reading its outputs are framework-neutral
(``engines.overflow.replay``); here: torch's callables, tensors, dtype and device arguments, and the device the
replay runs on.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from engines.adapters.torch import replay_table
from engines.overflow import origin as og
from engines.overflow import replay as rp
from engines.overflow.replay import OutputFacts, ReplayError, ReplayResult  # noqa: F401 (this module's interface)

_STORED_DTYPES = {
    "torch.float16": torch.float16, "torch.bfloat16": torch.bfloat16, "torch.float32": torch.float32,
    "torch.float64": torch.float64, "torch.int8": torch.int8, "torch.int16": torch.int16,
    "torch.int32": torch.int32, "torch.int64": torch.int64, "torch.uint8": torch.uint8, "torch.bool": torch.bool,
    "torch.complex64": torch.complex64, "torch.complex128": torch.complex128,
}
_REPLAY_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_callable(name: str) -> Callable:
    """The callable of a record name (``Torch.exp.0.forward`` or just ``Torch.exp``), from the capture's own API table only."""
    return rp.resolve_named(name, replay_table.resolve, replay_table.NotReplayable)


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


def _torch_value(kind: str, value: Any) -> Any:
    if kind == "torch.dtype" or kind == "torch.memory_format":
        attr = str(value)[6:] if str(value).startswith("torch.") else str(value)
        found = getattr(torch, attr, None) if attr.isidentifier() else None
        if not isinstance(found, (torch.dtype, torch.memory_format)):
            raise ReplayError("argument %r is not a torch dtype or memory format" % str(value)[:80])
        return found
    if kind == "torch.device":
        return torch.device(value)
    if kind == "torch.Size":
        return torch.Size(value)
    return rp.UNKNOWN


def _raise(obj: Any, dtype: torch.dtype, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.to(device, copy=True)
        return t.to(dtype) if t.is_floating_point() else t
    if isinstance(obj, torch.dtype):
        return dtype if obj.is_floating_point else obj
    return obj


def _to(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, copy=True)  # a replayed in-place call must not change the inputs of the next run
    return obj


def _tensor_facts(t: torch.Tensor) -> Optional[Tuple[int, float, str]]:
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return None
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    kinds = 0
    if bool(torch.isnan(x).any()):
        kinds |= og.NAN
    if bool(torch.isposinf(x).any()):
        kinds |= og.POSINF
    if bool(torch.isneginf(x).any()):
        kinds |= og.NEGINF
    finite = x[torch.isfinite(x)]
    max_abs = float(finite.abs().max().to(torch.float64)) if finite.numel() else 0.0
    return kinds, max_abs, str(t.dtype)


def _facts(out: Any) -> OutputFacts:
    return rp.output_facts(out, torch.Tensor, _tensor_facts)


def replay(name: str, args_json: str, saved: Dict[str, Tuple[np.ndarray, str, List[int]]], dtype: str = "float64",
           device: str = "cpu") -> ReplayResult:
    """Run the call as saved and in ``dtype``; ``saved`` maps slots to (array, dtype name, shape)."""
    func = resolve_callable(name)
    rp.check_dtype(dtype)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ReplayError("device %r: %s" % (device, exc)) from None
    tensors = {slot: tensor_from_saved(arr, dt, shape) for slot, (arr, dt, shape) in saved.items()}
    args, kwargs = rp.build_call(args_json, tensors, _torch_value, "out")
    high = _REPLAY_DTYPES[dtype]
    return rp.run_twice(name, func, args, kwargs, dtype, lambda v: _to(v, dev), lambda v: _raise(v, high, dev), _facts,
                     torch.no_grad)


def finfo_max(dtype_name: str) -> Optional[float]:
    dtype = _STORED_DTYPES.get(dtype_name)
    if dtype is None or not dtype.is_floating_point:
        return None
    return float(torch.finfo(dtype).max)
