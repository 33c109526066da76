"""free_benchmark's per-call processor for MindSpore: ``CallChecks`` (``engines.free_benchmark.calls``, the control
flow) with ``MindSporeOps``, the tensor operations it needs (``engines.free_benchmark.framework``). The L1 wrappers
hand it every API call. Backward stage: ``free_benchmark_backward``.

The re-run runs outside the gradient graph unless it fixes; the fix handler's output is cast back to the original's
dtype (still differentiable). No autocast to undo, no to_cpu, and no preheat on MindSpore (msprobe's MindSpore
side has none either): ``if_preheat`` is reported and ignored.
"""

from typing import Any, Dict, List, Optional, Tuple

from mindspore import Tensor, ops

from engines.adapters.mindspore import free_benchmark_compare as cmp
from engines.adapters.mindspore.api_capture import ApiCapture, ApiInfo
from engines.adapters.mindspore.free_benchmark_perturb import (
    LOW_PRECISION,
    first_eligible_index,
    is_floating,
    perturb,
)
from engines.adapters.mindspore.tensor_stats import raw
from engines.free_benchmark import structure
from engines.free_benchmark.calls import RANDOM_APIS, CallChecks
from engines.free_benchmark.calls import is_random as _is_random
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.perturb import Perturbed

try:  # PyNative's no-grad region (the check's re-runs stay out of the training's graph)
    from mindspore.graph.api import _no_grad as no_grad
except ImportError:  # older MindSpore
    from mindspore.common.api import _no_grad as no_grad

_cast = raw(ops.cast)

MINDSPORE_RANDOM_APIS = RANDOM_APIS | frozenset(("uniform", "standard_normal", "random_categorical", "gamma",
                                                 "shuffle"))
SKIP_NOTHING = "skipped: improve_precision found nothing to raise (no float16/bfloat16 tensor)"


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def _tensors(obj: Any, out: List[Tensor]) -> List[Tensor]:
    return structure.tensors_of(obj, _is_tensor, out)


def _storage(t: Tensor) -> int:
    try:
        return int(t.data_ptr()) - int(t.storage_offset()) * int(t.itemsize)
    except Exception:
        return -1


def is_view_of_input(out: Any, args: tuple, kwargs: Dict[str, Any]) -> bool:
    return structure.is_view_of_input(out, args, kwargs, _is_tensor, _storage)


def is_random(api: str, args: tuple, kwargs: Dict[str, Any]) -> bool:
    return _is_random(api, args, kwargs, MINDSPORE_RANDOM_APIS)


def _cast_tensor(new: Any, old: Tensor) -> Tensor:
    if not isinstance(new, Tensor) or tuple(new.shape) != tuple(old.shape):
        raise ValueError("the perturbed output does not match the original's shape")
    return new if new.dtype == old.dtype else _cast(new, old.dtype)


def _cast_like(new: Any, old: Any) -> Any:
    """``new`` in ``old``'s structure and dtypes (a cast keeps it differentiable)."""
    return structure.cast_like(new, old, _is_tensor, _cast_tensor)


class MindSporeOps:
    """free_benchmark's ``FrameworkOps`` on MindSpore (``engines.free_benchmark.framework``)."""

    random_apis = MINDSPORE_RANDOM_APIS
    framework = "MindSpore"
    preheat = False
    skip_nothing = SKIP_NOTHING
    is_tensor = staticmethod(_is_tensor)
    is_floating = staticmethod(is_floating)
    first_eligible = staticmethod(first_eligible_index)
    is_view_of_input = staticmethod(is_view_of_input)
    output_items = staticmethod(cmp.output_items)
    tensor_ratio = staticmethod(cmp.tensor_ratio)
    resolve = staticmethod(cmp.resolve)
    cast_like = staticmethod(_cast_like)

    def has_sharded_input(self, args: tuple, kwargs: Dict[str, Any]) -> bool:
        return False  # MindSpore PyNative has no tensor subclass that runs collectives

    def is_inplace(self, info: Any, kwargs: Dict[str, Any]) -> bool:
        return info.inplace or "out" in kwargs or kwargs.get("inplace") is True

    def context(self, args: tuple, kwargs: Dict[str, Any]) -> None:
        return None

    def lowered(self, context: Any, first_output: Any, args: tuple, kwargs: Dict[str, Any]) -> None:
        return None  # no autocast region to undo

    def has_low_precision(self, args: tuple, kwargs: Dict[str, Any]) -> bool:
        return any(t.dtype in LOW_PRECISION for t in _tensors((args, kwargs), []))

    def perturb(self, mode: str, args: tuple, kwargs: Dict[str, Any], index: int, lowered: Any,
                keep_graph: bool) -> Perturbed:
        return perturb(mode, args, kwargs, index)

    def rerun(self, func: Any, perturbed: Perturbed, keep_graph: bool, context: Any) -> Any:
        if keep_graph:
            return func(*perturbed.args, **perturbed.kwargs)
        with no_grad():
            return func(*perturbed.args, **perturbed.kwargs)

    def single_compare(self, actual: Any, golden: Any) -> Tuple[bool, str]:
        raise NotImplementedError("to_cpu is not available on MindSpore")


class FreeBenchmarkCall(CallChecks):
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (``engines.free_benchmark.calls``)."""

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        super().__init__(session, options, MindSporeOps(), backward)
        self._names = ApiCapture(session)  # primitive names, as the capture gives them

    def primitive_info(self, prim: Any) -> Optional[ApiInfo]:
        return self._names.primitive_info(prim)

    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any], collective: Any = None) -> Any:
        """The wrappers' entry."""
        s = self.session
        s.busy_depth += 1  # the wrappers do not pop themselves: nothing the call does inside is checked
        try:
            return super().call(info, func, args, kwargs)
        finally:
            s.busy_depth -= 1
