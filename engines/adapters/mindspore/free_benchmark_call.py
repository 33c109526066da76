"""free_benchmark's per-call processor for MindSpore: the L1 wrappers hand it every API call.

For a selected call (``list`` substrings or ``scope`` names) it runs the real call, then, forward stage: builds
the perturbed arguments, re-runs the same callable (outside the gradient graph unless it fixes), compares each
output (``free_benchmark_compare``) and, with the fix handler, returns the perturbed output cast back to the
original's dtype in place of the original (still differentiable). Backward stage: ``free_benchmark_backward``.
Calls the check cannot re-run safely pass through, counted by reason: collectives, in-place calls, random ones,
calls whose output is a view of an input, calls without a floating input. No preheat on MindSpore (msprobe's
MindSpore side has none either): ``if_preheat`` is reported and ignored.
"""

from collections import Counter
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
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow

try:  # PyNative's no-grad region (the check's re-runs stay out of the training's graph)
    from mindspore.graph.api import _no_grad as no_grad
except ImportError:  # older MindSpore
    from mindspore.common.api import _no_grad as no_grad  # type: ignore[no-redef]

_cast = raw(ops.cast)

RANDOM_APIS = frozenset("""
rand rand_like randn randn_like randint randint_like randperm bernoulli multinomial normal poisson uniform
standard_normal random_categorical gamma shuffle gumbel_softmax
""".split())
DROPOUT_APIS = frozenset(("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                          "feature_alpha_dropout"))

SKIP_COLLECTIVE = "skipped: collective"
SKIP_INPLACE = "skipped: in-place call (re-running it would write its input again)"
SKIP_RANDOM = "skipped: random call"
SKIP_INPUT = "skipped: no floating tensor in the first tensor argument (unsupported input type)"
SKIP_VIEW = "skipped: the output is a view of an input (nothing computed)"
SKIP_NOTHING = "skipped: improve_precision found nothing to raise (no float16/bfloat16 tensor)"


def _tensors(obj: Any, out: List[Tensor]) -> List[Tensor]:
    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    return out


def _storage(t: Tensor) -> int:
    try:
        return int(t.data_ptr()) - int(t.storage_offset()) * int(t.itemsize)
    except Exception:
        return -1


def is_view_of_input(out: Any, args: tuple, kwargs: Dict[str, Any]) -> bool:
    outs = _tensors(out, [])
    if not outs:
        return False
    ins = {_storage(t) for t in _tensors((args, kwargs), [])}
    ins.discard(-1)
    ins.discard(0)
    return all(_storage(t) in ins for t in outs)


def is_random(api: str, args: tuple, kwargs: Dict[str, Any]) -> bool:
    if api in RANDOM_APIS:
        return True
    if api in DROPOUT_APIS:
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        return bool(training) and not (isinstance(p, (int, float)) and p == 0)
    return False


class FreeBenchmarkCall:
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (the same ``call`` signature)."""

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        self.session = session
        self.fb = options
        self.backward = backward
        self.pending: List = []
        self.done: List[CheckRow] = []
        self.skipped: Counter = Counter()
        self.replaced: Counter = Counter()
        self.checked = 0
        self._names = ApiCapture(session)  # primitive names, as the capture gives them

    def primitive_info(self, prim: Any) -> Any:
        return self._names.primitive_info(prim)

    # -- the wrappers' entry ---------------------------------------------------------------------------------
    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        s = self.session
        index = s.api_counter.next(info.base)
        name = "%s.%d.forward" % (info.base, index)
        s.busy_depth += 1
        try:
            if not self.fb.selected(name):
                return func(*args, **kwargs)
            reason = self._ineligible(info, args, kwargs)
            if reason is not None:
                self.skipped[reason] += 1
                return func(*args, **kwargs)
            if self.fb.backward:
                return self.backward.call(name, func, args, kwargs)
            out = func(*args, **kwargs)
            try:
                replacement = self._forward(name, func, args, kwargs, out)
            except Exception as exc:  # never break training
                s.summary.failed("free_benchmark check of %s" % info.base, exc)
                return out
            return out if replacement is None else replacement
        finally:
            s.busy_depth -= 1

    def _ineligible(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[str]:
        if info.distributed:
            return SKIP_COLLECTIVE
        if info.inplace or "out" in kwargs or kwargs.get("inplace") is True:
            return SKIP_INPLACE
        if is_random(info.api, args, kwargs):
            return SKIP_RANDOM
        if first_eligible_index(args) is None:
            return SKIP_INPUT
        return None

    # -- forward stage ---------------------------------------------------------------------------------------
    def _forward(self, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any) -> Any:
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
                self.pending.append((row, cmp.tensor_ratio(a, b, th.forward_abs_tol(str(b.dtype)))))
                continue
            ratio = cmp.scalar_ratio(a, b)
            if ratio is None:
                continue
            row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, type(a).__name__, "[]",
                           threshold=th.ratio_threshold("float32", fb.pert_mode), replaced=fb.fix)
            self.pending.append((row, ratio))

    def _replacement(self, api: str, out: Any, new: Any) -> Any:
        try:
            replaced = _cast_like(new, out)
        except (TypeError, ValueError) as exc:
            self.session.summary.note("free_benchmark fix: %s kept its original output (%s)" % (api, exc))
            return None
        self.replaced[api] += 1
        return replaced

    # -- step end --------------------------------------------------------------------------------------------
    def finish_step(self, step: int) -> List[CheckRow]:
        """Every row of the step with its ratio on the host and its verdict (one transfer on a device)."""
        if self.backward is not None:
            self.done.extend(self.backward.finish_step())
        pending, self.pending = self.pending, []
        values = cmp.resolve([r for _, r in pending])
        rows = list(self.done)
        self.done = []
        for (row, _), v in zip(pending, values):
            row.ratio = v
            row.consistent = th.consistent(v, row.threshold)
            rows.append(row)
        for r in rows:
            r.step = step
        return rows


def _cast_like(new: Any, old: Any) -> Any:
    """``new`` in ``old``'s structure and dtypes (a cast keeps it differentiable)."""
    if isinstance(old, Tensor):
        if not isinstance(new, Tensor) or tuple(new.shape) != tuple(old.shape):
            raise ValueError("the perturbed output does not match the original's shape")
        return new if new.dtype == old.dtype else _cast(new, old.dtype)
    if isinstance(old, (list, tuple)):
        if not isinstance(new, (list, tuple)) or len(new) != len(old):
            raise ValueError("the perturbed output has another structure")
        items = [_cast_like(n, o) for n, o in zip(new, old)]
        return items if isinstance(old, list) else tuple(items)
    if isinstance(old, dict):
        if not isinstance(new, dict) or set(new) != set(old):
            raise ValueError("the perturbed output has other keys")
        return {k: _cast_like(new[k], old[k]) for k in old}
    return old

