"""free_benchmark's per-call processor on PyTorch (``engines.free_benchmark.calls``): the capture's L1 function
mode hands it every API call.

For a selected call (``list`` substrings or ``scope`` names) it runs the real call, then, forward stage: builds
the perturbed arguments, re-runs the same callable (without autocast for improve_precision and to_cpu, without
grad unless it fixes), compares each output (``free_benchmark_compare``) and, with the fix handler, returns the
perturbed output in place of the original. Backward stage: ``free_benchmark_backward``. Calls the check cannot
re-run safely are passed through and counted by reason: collectives, in-place calls, random ones, calls whose
output is a view of an input (nothing is computed), calls without a floating input.

Ratios stay on the device until the step ends (``finish_step``): no host sync per call, except during preheat.
What is torch's here: autocast (the re-run leaves it for improve_precision and to_cpu, and its dtype is what
improve_precision raises from), grad mode, storages, preheat, and writing a to_cpu result into the original output.
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
from engines.free_benchmark import structure
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.calls import RANDOM_APIS, SKIP_VIEW, CallChecks, Pending
from engines.free_benchmark.calls import is_random as _is_random
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.preheat import Preheat, pure_name
from engines.free_benchmark.results import CheckRow

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


class FreeBenchmarkCall(CallChecks):
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (``engines.free_benchmark.calls``)."""

    random_apis = TORCH_RANDOM_APIS
    replace_errors = (TypeError, ValueError, RuntimeError)

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        super().__init__(session, options, backward)
        self.preheat = Preheat(options.preheat_step, options.max_sample) if options.preheat else None
        self.call_numbers: Counter = Counter()

    def _context(self, args: tuple, kwargs: Dict[str, Any]) -> Optional[Tuple[str, torch.dtype]]:
        return autocast_state(args, kwargs)

    def _is_inplace(self, info: Any, kwargs: Dict[str, Any]) -> bool:
        return is_inplace(info.api, kwargs)

    def _first_eligible(self, args: tuple) -> Optional[int]:
        return first_eligible_index(args)

    def _resolve(self, ratios: List[Any]) -> List[float]:
        return cmp.resolve(ratios)

    def _cast_like(self, new: Any, old: Any) -> Any:
        return _cast_like(new, old)

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
                self.pending.append(Pending(row, cmp.tensor_ratio(a, b, tol), strict))
                continue
            ratio = cmp.scalar_ratio(a, b)
            if ratio is None:
                continue
            row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, type(a).__name__, "[]",
                           threshold=threshold, replaced=fb.fix)
            self.pending.append(Pending(row, ratio, strict))

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

    def _end_step(self, step: int) -> None:
        if self.preheat is not None and self.preheat.in_preheat(step):
            self.preheat.end_step(lambda dtype: th.ratio_threshold(dtype, self.fb.pert_mode))
        self.call_numbers = Counter()


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
