"""free_benchmark's backward stage (docs/reference/msprobe-tasks.md §8.2, F6): compare each input's gradient with and without the
perturbation, through the call's vector-Jacobian product.

At the forward call the inputs that require grad are *referenced* (not copied) with their version counters, and
a hook waits for the gradients of the call's outputs. When they arrive, the call runs again on detached copies
of the inputs twice, once as it ran and once perturbed, each followed by ``torch.autograd.grad`` with the same
output gradients; each input's two gradients are compared (tolerance floor 1e-3). The training's own gradients
are untouched.

Memory: the references keep the checked calls' inputs alive from their forward to their backward (most are kept
by autograd anyway); a call whose inputs would take the referenced bytes past ``hold_bytes`` (default 1 GiB,
``PROBE_TUI_FB_BACKWARD_HOLD_MB``) is not checked, and says so. The re-runs build one call's graph at a time.
An input changed in place between forward and backward cannot be re-run: that call is skipped and counted.
Which calls are checked, the cap and the rows are framework-neutral (``engines.free_benchmark.backward``).
"""

from typing import Any, Dict, List, Optional, Tuple

import torch

from engines.adapters.torch import free_benchmark_compare as cmp
from engines.adapters.torch.free_benchmark_perturb import LOW_PRECISION, perturb
from engines.free_benchmark import structure
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.backward import (
    DEFAULT_HOLD_BYTES,
    SKIP_CHANGED,
    SKIP_NO_OUTPUT,
    BackwardChecksBase,
)
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, torch.Tensor)


def _paths(obj: Any, prefix: Tuple, out: List[Tuple[Tuple, torch.Tensor]]) -> None:
    structure.paths(obj, _is_tensor, prefix, out)


def _has_float32(obj: Any) -> bool:
    return any(t.dtype is torch.float32 for t in structure.tensors_of(obj, _is_tensor, []))


class _Held:
    __slots__ = ("name", "func", "args", "kwargs", "paths", "versions", "nbytes", "state", "lowered", "handle")

    def __init__(self, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], paths: List[Tuple],
                 versions: List[int], nbytes: int, state: Optional[Tuple[str, torch.dtype]],
                 lowered: Optional[torch.dtype]) -> None:
        self.name = name
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.paths = paths
        self.versions = versions
        self.nbytes = nbytes
        self.state = state
        self.lowered = lowered
        self.handle: Any = None  # torch's RemovableHandle, once the gradient hook is registered


class BackwardChecks(BackwardChecksBase):
    is_tensor = staticmethod(_is_tensor)

    def __init__(self, session: Any, options: FreeBenchmarkOptions, hold_bytes: int = DEFAULT_HOLD_BYTES) -> None:
        super().__init__(session, options, hold_bytes)
        self.open: Dict[int, _Held] = {}
        self.rows: List[CheckRow] = []

    def call(self, name: str, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        from engines.adapters.torch.free_benchmark_call import autocast_state

        admitted = self.differentiable(args, kwargs, lambda t: t.requires_grad and t.is_floating_point(),
                                       lambda t: t.numel() * t.element_size(), torch.is_grad_enabled())
        if admitted is None:
            return func(*args, **kwargs)
        diff, nbytes = admitted
        state = autocast_state(args, kwargs)
        out = func(*args, **kwargs)
        outs = [t for t in _tensor_list(out) if t.requires_grad and t.grad_fn is not None]
        if not outs:
            self.skipped[SKIP_NO_OUTPUT] += 1
            return out
        lowered = None
        if state is not None and outs[0].dtype is state[1] and _has_float32((args, kwargs)):
            lowered = state[1]  # autocast ran this call in its dtype
        held = _Held(name, func, tuple(args), dict(kwargs), [p for p, _ in diff], [t._version for _, t in diff],
                     nbytes, state, lowered)
        self.held_bytes += nbytes
        key = id(held)
        self.open[key] = held
        try:
            held.handle = torch.autograd.graph.register_multi_grad_hook(
                outs, lambda grads: self._on_grads(key, outs, grads), mode="all")
        except Exception as exc:
            self._release(key)
            self.session.summary.failed("free_benchmark backward hook of %s" % name, exc)
        return out

    def _release(self, key: int) -> Optional[_Held]:
        held = self.open.pop(key, None)
        if held is not None:
            self.held_bytes -= held.nbytes
            if held.handle is not None:
                try:
                    held.handle.remove()
                except Exception:
                    pass
        return held

    def _on_grads(self, key: int, outs: List[torch.Tensor], grads: Any) -> None:
        held = self._release(key)
        if held is None or not self.session.backward_open():
            return None
        try:
            with self.session.busy():
                self._check(held, outs, list(grads))
        except Exception as exc:  # never break training
            self.session.summary.failed("free_benchmark backward check of %s" % held.name, exc)
        return None

    def _inputs(self, held: _Held) -> Optional[List[torch.Tensor]]:
        found: List[Tuple[Tuple, torch.Tensor]] = []
        _paths((held.args, held.kwargs), (), found)
        by_path = dict(found)
        out = []
        for path, version in zip(held.paths, held.versions):
            t = by_path[path]
            if t._version != version:
                return None
            out.append(t)
        return out

    def _run(self, held: _Held, inputs: List[torch.Tensor], grads: List[torch.Tensor],
             args: Any, kwargs: Dict[str, Any]) -> Tuple:
        leaves = [x.detach().requires_grad_(True) for x in inputs]
        call = (args, kwargs)
        for path, leaf in zip(held.paths, leaves):
            call = structure.put(call, path, leaf)
        with torch.enable_grad():
            out = held.func(*call[0], **call[1])
        outs = [t for t in _tensor_list(out) if t.requires_grad]
        pairs = [(o, g.to(o.dtype) if g is not None else torch.zeros_like(o)) for o, g in zip(outs, grads)]
        got = torch.autograd.grad([o for o, _ in pairs], leaves, grad_outputs=[g for _, g in pairs],
                                  allow_unused=True)
        return got

    def _check(self, held: _Held, outs: List[torch.Tensor], grads: List[Any]) -> None:
        from engines.adapters.torch.free_benchmark_call import _NoAutocast

        inputs = self._inputs(held)
        if inputs is None:
            self.skipped[SKIP_CHANGED] += 1
            return
        fb = self.fb
        grads = [g.detach() if g is not None else None for g in grads]
        ctx = torch.autocast(held.state[0], dtype=held.state[1]) if held.state is not None else _NoAutocast(None)
        with ctx:
            original = self._run(held, inputs, grads, held.args, held.kwargs)
        whole = fb.pert_mode in ("improve_precision", "to_cpu")
        lowered = held.lowered if fb.pert_mode == "improve_precision" else None
        p = self.perturbed(perturb, tuple(inputs), autocast_dtype=lowered)
        if p is None:
            return
        new_inputs = list(p.args)
        new_grads = grads
        if whole:
            dev = p.device
            new_grads = [None if g is None else
                         (g.to(dev) if dev is not None else g).to(torch.float32 if g.dtype in LOW_PRECISION else g.dtype)
                         for g in grads]
            # every other tensor argument moves with them (a weight that needs no grad, a mask...)
            moved = perturb(fb.pert_mode, held.args, held.kwargs, 0, autocast_dtype=lowered)
            with _NoAutocast(held.state):
                perturbed = self._run(held, new_inputs, new_grads, moved.args, moved.kwargs)
        else:
            with ctx:
                perturbed = self._run(held, new_inputs, new_grads, held.args, held.kwargs)
        self.checked += 1
        for i, (a, b) in enumerate(zip(original, perturbed)):
            if a is None or b is None:
                continue
            # under autocast the gradient was computed in the autocast dtype, whatever dtype it is stored in
            threshold_dtype = str(held.lowered or a.dtype)
            if fb.pert_mode == "to_cpu":
                row = self.row(held.name, i, a, threshold_dtype)
                row.consistent, row.detail = cmp.single_compare(a, b)
                self.rows.append(row)
            else:
                self.compared(held.name, i, a, cmp.tensor_ratio(a, b, th.BACKWARD_ABS_TOL), threshold_dtype)

    def finish_step(self) -> List[CheckRow]:
        for key in list(self.open):
            self._release(key)
        rows = self.rows
        self.rows = []
        return rows + self.judged(cmp.resolve)


def _tensor_list(out: Any) -> List[torch.Tensor]:
    found: List[Tuple[Tuple, torch.Tensor]] = []
    _paths(out, (), found)
    return [t for _, t in found]
