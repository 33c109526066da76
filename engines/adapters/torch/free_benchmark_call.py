"""free_benchmark's per-call processor on PyTorch: ``CallChecks`` (``engines.free_benchmark.calls``, the control
flow) with ``TorchOps``, the tensor operations it needs (``engines.free_benchmark.framework``). The capture's L1
function mode hands it every API call. Backward stage: ``free_benchmark_backward``.

What is torch's here: autocast (the re-run leaves it for improve_precision and to_cpu, and its dtype is what
improve_precision raises from), grad mode (the re-run runs under ``no_grad``, with grad when it fixes), storages,
and writing a to_cpu result into the original output.
"""

from typing import Any, Dict, List, Optional, Tuple

import torch

from engines.adapters.torch import free_benchmark_compare as cmp
from engines.adapters.torch.free_benchmark_perturb import (
    LOW_PRECISION,
    first_eligible_index,
    perturb,
)
from engines.free_benchmark import structure
from engines.free_benchmark.calls import RANDOM_APIS, CallChecks
from engines.free_benchmark.calls import is_random as _is_random
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.perturb import Perturbed

TORCH_RANDOM_APIS = RANDOM_APIS | frozenset(("rrelu", "native_dropout", "fused_dropout"))
SKIP_NOTHING = "skipped: improve_precision found nothing to raise (no float16/bfloat16 tensor, no autocast)"


def autocast_state(args: tuple, kwargs: Dict[str, Any]) -> Optional[Tuple[str, torch.dtype]]:
    """(device type, dtype) of the autocast region the call runs in, None when off."""
    device_type = "cpu"
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            device_type = a.device.type
            break
    try:
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
    except TypeError:  # torch < 2.4
        if device_type == "cpu":
            enabled = torch.is_autocast_cpu_enabled()
            dtype = torch.get_autocast_cpu_dtype() if enabled else None
        else:
            enabled = torch.is_autocast_enabled()
            dtype = torch.get_autocast_gpu_dtype() if enabled else None
    return (device_type, dtype) if enabled else None


class _NoAutocast:
    """Autocast off for one device type (a no-op when it was off)."""

    def __init__(self, state: Optional[Tuple[str, torch.dtype]]) -> None:
        self.ctx = torch.autocast(state[0], enabled=False) if state is not None else None

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, torch.Tensor)


def _tensors(obj: Any, out: List[torch.Tensor]) -> List[torch.Tensor]:
    return structure.tensors_of(obj, _is_tensor, out)


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def is_view_of_input(out: Any, args: tuple, kwargs: Dict[str, Any]) -> bool:
    return structure.is_view_of_input(out, args, kwargs, _is_tensor, _storage)


def is_inplace(api: str, kwargs: Dict[str, Any]) -> bool:
    return (api.endswith("_") and not api.endswith("__")) or "out" in kwargs or kwargs.get("inplace") is True


def is_random(api: str, args: tuple, kwargs: Dict[str, Any]) -> bool:
    return _is_random(api, args, kwargs, TORCH_RANDOM_APIS)


def _has_low(args: tuple, kwargs: Dict[str, Any]) -> bool:
    return any(t.dtype in LOW_PRECISION for t in _tensors((args, kwargs), []))


def _has_float32(args: tuple, kwargs: Dict[str, Any]) -> bool:
    return any(t.dtype is torch.float32 for t in _tensors((args, kwargs), []))


def _cast_tensor(new: Any, old: torch.Tensor) -> torch.Tensor:
    if not isinstance(new, torch.Tensor) or new.shape != old.shape:
        raise ValueError("the perturbed output does not match the original's shape")
    value = new.to(device=old.device, dtype=old.dtype)
    if old.requires_grad and value.grad_fn is None:
        old.data = value.detach()
        return old
    return value


def _cast_like(new: Any, old: Any) -> Any:
    """``new`` in ``old``'s structure, dtypes and devices. A tensor computed outside the graph (to_cpu) is written
    into the original output (``.data``), so the original backward still runs."""
    return structure.cast_like(new, old, _is_tensor, _cast_tensor)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


class TorchOps:
    """free_benchmark's ``FrameworkOps`` on PyTorch (``engines.free_benchmark.framework``)."""

    random_apis = TORCH_RANDOM_APIS
    framework = "PyTorch"
    preheat = True
    skip_nothing = SKIP_NOTHING
    is_tensor = staticmethod(_is_tensor)
    first_eligible = staticmethod(first_eligible_index)
    is_view_of_input = staticmethod(is_view_of_input)
    output_items = staticmethod(cmp.output_items)
    tensor_ratio = staticmethod(cmp.tensor_ratio)
    resolve = staticmethod(cmp.resolve)
    single_compare = staticmethod(cmp.single_compare)
    cast_like = staticmethod(_cast_like)

    def is_floating(self, tensor: Any) -> bool:
        return bool(tensor.is_floating_point())

    def is_inplace(self, info: Any, kwargs: Dict[str, Any]) -> bool:
        return is_inplace(info.api, kwargs)

    def has_sharded_input(self, args: tuple, kwargs: Dict[str, Any]) -> bool:
        """Any tensor argument (nested one level in a list or tuple) of a subclass other than Parameter: a DTensor
        or an AsyncCollectiveTensor runs collectives (or waits on one) inside the call."""
        for value in list(args) + list(kwargs.values()):
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, torch.Tensor) and type(item) not in _PLAIN_TENSORS:
                    return True
        return False

    def context(self, args: tuple, kwargs: Dict[str, Any]) -> Optional[Tuple[str, torch.dtype]]:
        return autocast_state(args, kwargs)

    def lowered(self, context: Optional[Tuple[str, torch.dtype]], first_output: Any, args: tuple,
                kwargs: Dict[str, Any]) -> Optional[torch.dtype]:
        """Autocast's dtype when it ran the call in it (its output has that dtype and some input is float32)."""
        if context is not None and first_output is not None and first_output.dtype is context[1] \
                and _has_float32(args, kwargs):
            return context[1]
        return None

    def has_low_precision(self, args: tuple, kwargs: Dict[str, Any]) -> bool:
        return _has_low(args, kwargs)

    def perturb(self, mode: str, args: tuple, kwargs: Dict[str, Any], index: int, lowered: Optional[torch.dtype],
                keep_graph: bool) -> Perturbed:
        return perturb(mode, args, kwargs, index, autocast_dtype=lowered, keep_graph=keep_graph, defer_refusal=True)

    def rerun(self, func: Any, perturbed: Perturbed, keep_graph: bool,
              context: Optional[Tuple[str, torch.dtype]]) -> Any:
        grad = torch.enable_grad() if keep_graph else torch.no_grad()
        with grad, _NoAutocast(context):
            return func(*perturbed.args, **perturbed.kwargs)


class FreeBenchmarkCall(CallChecks):
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (``engines.free_benchmark.calls``)."""

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        super().__init__(session, options, TorchOps(), backward)
