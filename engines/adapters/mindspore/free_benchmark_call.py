"""free_benchmark's per-call processor for MindSpore: the L1 wrappers hand it every API call.

For a selected call (``list`` substrings or ``scope`` names) it runs the real call, then, forward stage: builds
the perturbed arguments, re-runs the same callable (outside the gradient graph unless it fixes), compares each
output (``free_benchmark_compare``) and, with the fix handler, returns the perturbed output cast back to the
original's dtype in place of the original (still differentiable). Backward stage: ``free_benchmark_backward``.
Calls the check cannot re-run safely pass through, counted by reason: collectives, in-place calls, random ones,
calls whose output is a view of an input, calls without a floating input. No preheat on MindSpore (msprobe's
MindSpore side has none either): ``if_preheat`` is reported and ignored.
"""

from typing import Any, Dict, List, Optional

from mindspore import Tensor, ops

from engines.adapters.mindspore import free_benchmark_compare as cmp
from engines.adapters.mindspore.api_capture import ApiCapture
from engines.adapters.mindspore.free_benchmark_perturb import (
    LOW_PRECISION,
    Cancelled,
    first_eligible_index,
    perturb,
)
from engines.adapters.mindspore.tensor_stats import raw
from engines.free_benchmark import structure
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.calls import RANDOM_APIS, SKIP_VIEW, CallChecks, Pending
from engines.free_benchmark.calls import is_random as _is_random
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow

try:  # PyNative's no-grad region (the check's re-runs stay out of the training's graph)
    from mindspore.graph.api import _no_grad as no_grad
except ImportError:  # older MindSpore
    from mindspore.common.api import _no_grad as no_grad  # type: ignore[no-redef]

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


class FreeBenchmarkCall(CallChecks):
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (``engines.free_benchmark.calls``)."""

    random_apis = MINDSPORE_RANDOM_APIS

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        super().__init__(session, options, backward)
        self._names = ApiCapture(session)  # primitive names, as the capture gives them

    def primitive_info(self, prim: Any) -> Any:
        return self._names.primitive_info(prim)

    # -- the wrappers' entry ---------------------------------------------------------------------------------
    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        s = self.session
        s.busy_depth += 1  # the wrappers do not pop themselves: nothing the call does inside is checked
        try:
            return super().call(info, func, args, kwargs)
        finally:
            s.busy_depth -= 1

    def _is_inplace(self, info: Any, kwargs: Dict[str, Any]) -> bool:
        return info.inplace or "out" in kwargs or kwargs.get("inplace") is True

    def _first_eligible(self, args: tuple) -> Optional[int]:
        return first_eligible_index(args)

    def _resolve(self, ratios: List[Any]) -> List[float]:
        return cmp.resolve(ratios)

    def _cast_like(self, new: Any, old: Any) -> Any:
        return _cast_like(new, old)

    # -- forward stage ---------------------------------------------------------------------------------------
    def _forward(self, info: Any, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any,
                 context: Any) -> Any:
        fb = self.fb
        if is_view_of_input(out, args, kwargs):
            self.skipped[SKIP_VIEW] += 1
            return None
        if fb.pert_mode == "improve_precision" and not any(t.dtype in LOW_PRECISION
                                                           for t in _tensors((args, kwargs), [])):
            self.skipped[SKIP_NOTHING] += 1
            return None
        try:
            p = perturb(fb.pert_mode, args, kwargs, first_eligible_index(args))
        except Cancelled as exc:
            self.skipped["skipped: %s" % exc] += 1
            return None
        if fb.fix:
            new = func(*p.args, **p.kwargs)
        else:
            with no_grad():
                new = func(*p.args, **p.kwargs)
        self.checked += 1
        self._compare(name, cmp.output_items(out), cmp.output_items(new))
        if fb.fix:
            return self._replacement(name.rsplit(".", 2)[0], out, new)
        return None

    def _compare(self, name: str, items: List, new_items: List) -> None:
        fb = self.fb
        step = self.session.step
        for (i, a), (_, b) in zip(items, new_items):
            if isinstance(a, Tensor) and isinstance(b, Tensor):
                row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, str(a.dtype),
                               str(list(a.shape)), threshold=th.ratio_threshold(str(a.dtype), fb.pert_mode),
                               replaced=fb.fix)
                self.pending.append(Pending(row, cmp.tensor_ratio(a, b, th.forward_abs_tol(str(b.dtype)))))
                continue
            ratio = cmp.scalar_ratio(a, b)
            if ratio is None:
                continue
            row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, type(a).__name__, "[]",
                           threshold=th.ratio_threshold("float32", fb.pert_mode), replaced=fb.fix)
            self.pending.append(Pending(row, ratio))


def _cast_tensor(new: Any, old: Tensor) -> Tensor:
    if not isinstance(new, Tensor) or tuple(new.shape) != tuple(old.shape):
        raise ValueError("the perturbed output does not match the original's shape")
    return new if new.dtype == old.dtype else _cast(new, old.dtype)


def _cast_like(new: Any, old: Any) -> Any:
    """``new`` in ``old``'s structure and dtypes (a cast keeps it differentiable)."""
    return structure.cast_like(new, old, _is_tensor, _cast_tensor)
