"""free_benchmark's per-call processor: the capture's L1 function mode hands it every API call.

For a selected call (``list`` substrings or ``scope`` names) it runs the real call, then, forward stage: builds
the perturbed arguments, re-runs the same callable (without autocast for improve_precision and to_cpu, without
grad unless it fixes), compares each output (``free_benchmark_compare``) and, with the fix handler, returns the
perturbed output in place of the original. Backward stage: ``free_benchmark_backward``. Calls the check cannot
re-run safely are passed through and counted by reason: collectives, in-place calls, random ones, calls whose
output is a view of an input (nothing is computed), calls without a floating input.

Ratios stay on the device until the step ends (``finish_step``): no host sync per call, except during preheat.
"""

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import torch

from engines.adapters.torch import free_benchmark_compare as cmp
from engines.adapters.torch.free_benchmark_perturb import (
    LOW_PRECISION,
    Cancelled,
    first_eligible_index,
    perturb,
)
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.preheat import Preheat, pure_name
from engines.free_benchmark.results import CheckRow

# Calls whose result is random by design: re-running them proves nothing.
RANDOM_APIS = frozenset("""
rand rand_like randn randn_like randint randint_like randperm bernoulli multinomial normal poisson rrelu
gumbel_softmax native_dropout fused_dropout
""".split())
DROPOUT_APIS = frozenset(("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"))

SKIP_COLLECTIVE = "skipped: collective"
SKIP_INPLACE = "skipped: in-place call (re-running it would write its input again)"
SKIP_RANDOM = "skipped: random call"
SKIP_INPUT = "skipped: no floating tensor in the first tensor argument (unsupported input type)"
SKIP_VIEW = "skipped: the output is a view of an input (nothing computed)"
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


def _tensors(obj: Any, out: List[torch.Tensor]) -> List[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    return out


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def is_view_of_input(out: Any, args: tuple, kwargs: Dict[str, Any]) -> bool:
    outs = _tensors(out, [])
    if not outs:
        return False
    ins = {_storage(t) for t in _tensors((args, kwargs), [])}
    ins.discard(-1)
    ins.discard(0)
    return all(_storage(t) in ins for t in outs)


def is_inplace(api: str, kwargs: Dict[str, Any]) -> bool:
    return (api.endswith("_") and not api.endswith("__")) or "out" in kwargs or kwargs.get("inplace") is True


def is_random(api: str, args: tuple, kwargs: Dict[str, Any]) -> bool:
    if api in RANDOM_APIS:
        return True
    if api in DROPOUT_APIS:
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        return bool(training) and not (isinstance(p, (int, float)) and p == 0)
    return False


class _Pending:
    __slots__ = ("row", "ratio", "strict")

    def __init__(self, row: CheckRow, ratio: Any, strict: bool = False) -> None:
        self.row = row
        self.ratio = ratio
        self.strict = strict  # the threshold is an inconsistent preheat sample's ratio: reaching it fails


class FreeBenchmarkCall:
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (same ``call`` signature)."""

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        self.session = session
        self.fb = options
        self.backward = backward
        self.pending: List[_Pending] = []
        self.done: List[CheckRow] = []
        self.skipped: Counter = Counter()
        self.replaced: Counter = Counter()
        self.checked = 0
        self.preheat = Preheat(options.preheat_step, options.max_sample) if options.preheat else None
        self.call_numbers: Counter = Counter()

    # -- the function mode's entry ---------------------------------------------------------------------------
    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        s = self.session
        index = s.api_counter.next(info.base)
        name = "%s.%d.forward" % (info.base, index)
        if not self.fb.selected(name):
            return func(*args, **kwargs)
        reason = self._ineligible(info, args, kwargs)
        if reason is not None:
            self.skipped[reason] += 1
            return func(*args, **kwargs)
        if self.fb.backward:
            return self.backward.call(name, func, args, kwargs)
        state = autocast_state(args, kwargs)
        out = func(*args, **kwargs)
        try:
            with s.busy():
                replacement = self._forward(info, name, func, args, kwargs, out, state)
        except Exception as exc:  # never break training
            s.summary.failed("free_benchmark check of %s" % info.base, exc)
            return out
        return out if replacement is None else replacement

    def _ineligible(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[str]:
        if info.distributed:
            return SKIP_COLLECTIVE
        api = info.api
        if is_inplace(api, kwargs):
            return SKIP_INPLACE
        if is_random(api, args, kwargs):
            return SKIP_RANDOM
        if first_eligible_index(args) is None:
            return SKIP_INPUT
        return None

    # -- forward stage ---------------------------------------------------------------------------------------
    def _forward(self, info: Any, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any,
                 state: Optional[Tuple[str, torch.dtype]]) -> Any:
        fb = self.fb
        if is_view_of_input(out, args, kwargs):
            self.skipped[SKIP_VIEW] += 1
            return None
        step = self.session.step
        api = pure_name(name)
        items = cmp.output_items(out)
        first = next((v for _, v in items if isinstance(v, torch.Tensor)), None)
        out_dtype = str(first.dtype) if first is not None else ""
        sample = False
        if self.preheat is not None and self.preheat.in_preheat(step):
            self.preheat.count(step, api)
            self.call_numbers[api] += 1
            sample = self.call_numbers[api] in self.preheat.sample_numbers(step, api)
            if not sample:
                return None
        index = first_eligible_index(args)
        lowered = None
        if fb.pert_mode == "improve_precision" and state is not None and first is not None \
                and first.dtype is state[1] and _has_float32(args, kwargs):
            lowered = state[1]
        if fb.pert_mode == "improve_precision" and lowered is None and not _has_low(args, kwargs):
            self.skipped[SKIP_NOTHING] += 1
            return None
        try:
            p = perturb(fb.pert_mode, args, kwargs, index, autocast_dtype=lowered, keep_graph=fb.fix)
        except Cancelled as exc:
            self.skipped["skipped: %s" % exc] += 1
            return None
        off = fb.pert_mode in ("improve_precision", "to_cpu")
        grad = torch.enable_grad() if fb.fix else torch.no_grad()
        with grad, _NoAutocast(state if off else None):
            new = func(*p.args, **p.kwargs)
        self.checked += 1
        if sample:
            self._preheat_sample(api, func, args, kwargs, out, new, out_dtype)
            return None
        self._compare(name, api, items, cmp.output_items(new), out_dtype, step)
        if fb.fix:
            return self._replacement(api, out, new)
        return None

    def _compare(self, name: str, api: str, items: List, new_items: List, out_dtype: str, step: int) -> None:
        fb = self.fb
        threshold = th.ratio_threshold(out_dtype, fb.pert_mode)
        strict = False
        if self.preheat is not None:
            learned = self.preheat.threshold(api, out_dtype)
            if learned is not None and fb.pert_mode != "no_change":
                threshold = learned
                strict = (api, out_dtype) in self.preheat.frozen
        for (i, a), (_, b) in zip(items, new_items):
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, str(a.dtype),
                               str(list(a.shape)), threshold=threshold, replaced=fb.fix)
                if fb.pert_mode == "to_cpu":
                    row.consistent, row.detail = cmp.single_compare(a, b)
                    self.done.append(row)
                    continue
                tol = th.forward_abs_tol(str(b.dtype))
                self.pending.append(_Pending(row, cmp.tensor_ratio(a, b, tol), strict))
                continue
            ratio = cmp.scalar_ratio(a, b)
            if ratio is None:
                continue
            row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, type(a).__name__, "[]",
                           threshold=threshold, replaced=fb.fix)
            self.pending.append(_Pending(row, ratio, strict))

    def _preheat_sample(self, api: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any, new: Any,
                        out_dtype: str) -> None:
        """A preheat sample: the perturbation ratio, and whether the call agrees with a CPU float32 re-run."""
        cpu = perturb("to_cpu", args, kwargs, 0)
        with torch.no_grad():
            golden = func(*cpu.args, **cpu.kwargs)
        for (_, a), (_, b), (_, g) in zip(cmp.output_items(out), cmp.output_items(new), cmp.output_items(golden)):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(g, torch.Tensor)):
                continue
            if not a.is_floating_point():
                continue
            ratio = cmp.resolve([cmp.tensor_ratio(a, b, th.forward_abs_tol(str(b.dtype)))])[0]
            ok, _ = cmp.single_compare(a, g)
            self.preheat.add(api, out_dtype, ratio, ok)
            break

    def _replacement(self, api: str, out: Any, new: Any) -> Any:
        try:
            replaced = _cast_like(new, out)
        except (TypeError, ValueError, RuntimeError) as exc:
            self.session.summary.note("free_benchmark fix: %s kept its original output (%s)" % (api, exc))
            return None
        self.replaced[api] += 1
        return replaced

    # -- step end --------------------------------------------------------------------------------------------
    def finish_step(self, step: int) -> List[CheckRow]:
        """Every row of the step with its ratio on the host and its verdict (one transfer per device)."""
        if self.backward is not None:
            self.done.extend(self.backward.finish_step())
        pending, self.pending = self.pending, []
        values = cmp.resolve([p.ratio for p in pending])
        rows = list(self.done)
        self.done = []
        for p, v in zip(pending, values):
            p.row.ratio = v
            p.row.consistent = th.consistent(v, p.row.threshold) and not (p.strict and v >= p.row.threshold)
            rows.append(p.row)
        for r in rows:
            r.step = step
        if self.preheat is not None and self.preheat.in_preheat(step):
            self.preheat.end_step(lambda dtype: th.ratio_threshold(dtype, self.fb.pert_mode))
        self.call_numbers = Counter()
        return rows


def _has_low(args: tuple, kwargs: Dict[str, Any]) -> bool:
    return any(t.dtype in LOW_PRECISION for t in _tensors((args, kwargs), []))


def _has_float32(args: tuple, kwargs: Dict[str, Any]) -> bool:
    return any(t.dtype is torch.float32 for t in _tensors((args, kwargs), []))


def _cast_like(new: Any, old: Any) -> Any:
    """``new`` in ``old``'s structure, dtypes and devices. A tensor computed outside the graph (to_cpu) is written
    into the original output (``.data``), so the original backward still runs."""
    if isinstance(old, torch.Tensor):
        if not isinstance(new, torch.Tensor) or new.shape != old.shape:
            raise ValueError("the perturbed output does not match the original's shape")
        value = new.to(device=old.device, dtype=old.dtype)
        if old.requires_grad and value.grad_fn is None:
            old.data = value.detach()
            return old
        return value
    if isinstance(old, (list, tuple)):
        if not isinstance(new, (list, tuple)) or len(new) != len(old):
            raise ValueError("the perturbed output has another structure")
        items = [_cast_like(n, o) for n, o in zip(new, old)]
        if isinstance(old, list):
            return items
        return tuple(items) if type(old) is tuple else _same_tuple(old, items)
    if isinstance(old, dict):
        if not isinstance(new, dict) or set(new) != set(old):
            raise ValueError("the perturbed output has other keys")
        return {k: _cast_like(new[k], old[k]) for k in old}
    return old


def _same_tuple(old: Any, items: List[Any]) -> Any:
    """A namedtuple or a torch.return_types structseq of ``old``'s type holding ``items``."""
    try:
        return type(old)(*items)
    except TypeError:
        return type(old)(items)

