"""free_benchmark's backward stage for MindSpore (docs/reference/msprobe-tasks.md §8.2, F6): each input's gradient with and without the
perturbation, through the call's vector-Jacobian product.

At the forward call, the inputs that take part in the gradient computation are copied (outside the graph), and
a tensor hook on each output receives the gradient of that output during the training's backward (returning it
unchanged). The re-runs happen when the step ends: the call runs again on the copies, as it ran and perturbed,
each through ``mindspore.vjp`` with the same output gradients, and each input's two gradients are compared
(tolerance floor 1e-3). The training's own gradients are untouched. Deferring the re-runs (the PyTorch side runs
them in the backward hook) keeps them out of MindSpore's running backward pass.

Memory: the copies of the checked calls' inputs are held until the step ends; a call whose inputs would take the
held bytes past ``hold_bytes`` (default 1 GiB, ``PROBE_TUI_FB_BACKWARD_HOLD_MB``) is not checked, and says so.
Which calls are checked, the cap and the rows are framework-neutral (``engines.free_benchmark.backward``).
"""

from typing import Any, Callable, Dict, List, Tuple

import mindspore as ms
from mindspore import Tensor

from engines.adapters.mindspore import free_benchmark_compare as cmp
from engines.adapters.mindspore.free_benchmark_perturb import FLOATING, perturb
from engines.adapters.mindspore.tensor_stats import raw
from engines.free_benchmark import structure
from engines.free_benchmark import thresholds as th
from engines.free_benchmark.backward import (
    DEFAULT_HOLD_BYTES,
    SKIP_NO_GRADS,
    SKIP_NO_OUTPUT,
    BackwardChecksBase,
)
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow

_copy = raw(Tensor.copy)  # a new buffer with the same values (mint.clone has no CPU kernel)


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def _paths(obj: Any, prefix: Tuple, out: List[Tuple[Tuple, Tensor]]) -> None:
    structure.paths(obj, _is_tensor, prefix, out)


def _in_graph(t: Tensor) -> bool:
    try:
        return bool(t._requires_grad) and t._grad_node is not None
    except (AttributeError, RuntimeError):
        return False


class _Held:
    __slots__ = ("name", "func", "args", "kwargs", "paths", "inputs", "nbytes", "grads", "n_outputs")

    def __init__(self, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], paths: List[Tuple],
                 inputs: List[Tensor], nbytes: int, n_outputs: int) -> None:
        self.name = name
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.paths = paths
        self.inputs = inputs
        self.nbytes = nbytes
        self.grads: Dict[int, Tensor] = {}
        self.n_outputs = n_outputs


class BackwardChecks(BackwardChecksBase):
    is_tensor = staticmethod(_is_tensor)

    def __init__(self, session: Any, options: FreeBenchmarkOptions, hold_bytes: int = DEFAULT_HOLD_BYTES) -> None:
        super().__init__(session, options, hold_bytes)
        self.held: List[_Held] = []

    def call(self, name: str, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        from engines.adapters.mindspore.free_benchmark_call import no_grad

        admitted = self.differentiable(args, kwargs, lambda t: t.dtype in FLOATING and _in_graph(t),
                                       lambda t: int(t.size) * int(t.itemsize))
        if admitted is None:
            return func(*args, **kwargs)
        diff, nbytes = admitted
        try:
            with no_grad():
                copies = [_copy(t) for _, t in diff]  # as they are now: a later in-place write cannot change them
        except Exception as exc:  # never break training
            self.session.summary.failed("free_benchmark backward copy of %s" % name, exc)
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        produced: List[Tuple[Tuple, Tensor]] = []
        _paths(out, (), produced)
        outs = [t for _, t in produced if t.dtype in FLOATING and _in_graph(t)]
        if not outs:
            self.skipped[SKIP_NO_OUTPUT] += 1
            return out
        held = _Held(name, func, tuple(args), dict(kwargs), [p for p, _ in diff], copies, nbytes, len(outs))
        try:
            for i, t in enumerate(outs):
                t.register_hook(self._grad_hook(held, i))
        except Exception as exc:  # never break training
            self.session.summary.failed("free_benchmark backward hook of %s" % name, exc)
            return out
        self.held.append(held)
        self.held_bytes += nbytes
        return out

    def _grad_hook(self, held: _Held, index: int) -> Callable[[Any], Any]:
        def hook(grad: Any) -> Any:
            if grad is not None:
                held.grads[index] = grad
            return grad

        return hook

    def _run(self, held: _Held, inputs: List[Tensor], grads: List[Tensor]) -> Tuple:
        def fn(*xs: Tensor) -> Any:
            call = (held.args, held.kwargs)
            for path, x in zip(held.paths, xs):
                call = structure.put(call, path, x)
            found: List[Tuple[Tuple, Tensor]] = []
            _paths(held.func(*call[0], **call[1]), (), found)
            outs = tuple(t for _, t in found if t.dtype in FLOATING)
            return outs[0] if len(outs) == 1 else outs

        _, vjp_fn = ms.vjp(fn, *inputs)
        cotangent = grads[0] if len(grads) == 1 else tuple(grads)
        got = vjp_fn(cotangent)
        return got if isinstance(got, tuple) else (got,)

    def _check(self, held: _Held) -> None:
        if len(held.grads) != held.n_outputs:
            self.skipped[SKIP_NO_GRADS] += 1
            return
        grads = [held.grads[i] for i in range(held.n_outputs)]
        fb = self.fb
        original = self._run(held, held.inputs, grads)
        p = self.perturbed(perturb, tuple(held.inputs))
        if p is None:
            return
        new_grads = grads
        if fb.pert_mode == "improve_precision":
            new_grads = [g.astype(ms.float32) if g.dtype in (ms.float16, ms.bfloat16) else g for g in grads]
        perturbed = self._run(held, list(p.args), new_grads)
        self.checked += 1
        for i, (a, b) in enumerate(zip(original, perturbed)):
            if not isinstance(a, Tensor) or not isinstance(b, Tensor):
                continue
            self.compared(held.name, i, a, cmp.tensor_ratio(a, b, th.BACKWARD_ABS_TOL), str(a.dtype))

    def finish_step(self) -> List[CheckRow]:
        self.pending = []
        held, self.held = self.held, []
        self.held_bytes = 0
        for h in held:
            try:
                self._check(h)
            except Exception as exc:  # never break training
                self.session.summary.failed("free_benchmark backward check of %s" % h.name, exc)
        return self.judged(cmp.resolve)
