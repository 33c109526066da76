"""The monitor's activation hooks, framework-neutral: tensors in a module's inputs and outputs, per-step call
counts (a module called twice in a step gives ``name.output:1``), and the gradient hooks that report each
activation's gradient.

Forward hooks go on the selected modules only (the others keep the framework's fast path); gradients come from
tensor hooks that return the gradient unchanged, so every number of the training stays as it is (docs/decisions/0010-capture-does-not-change-numbers.md).
The adapter's ``ActivationHooks`` registers the forward hooks and decides what is measured.
"""

from typing import Any, Callable, Dict, List

Sink = Callable[[str, str, Any], None]


def flatten_tensors(value: Any, is_tensor: Callable[[Any], bool], limit: int = 64) -> List[Any]:
    """Tensors in ``value`` (nested tuples/lists/dicts; dataclass-like outputs with ``__dict__`` skipped)."""
    out: List[Any] = []

    def walk(v: Any) -> None:
        if len(out) >= limit:
            return
        if is_tensor(v):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)

    walk(value)
    return out


class ActivationHooksBase:
    """``sink(tag, name, tensor)`` receives every tensor to measure (``actv``, ``actv_grad``)."""

    grad_hook_returns_grad = False  # MindSpore's tensor hooks return the gradient they pass on

    def __init__(self, sink: Sink, *, forward: bool = True, backward: bool = True,
                 is_active: Callable[[], bool] = lambda: True) -> None:
        self._sink = sink
        self.forward = forward
        self.backward = backward
        self._is_active = is_active
        self._handles: List[Any] = []
        self._calls: Dict[int, int] = {}
        self.modules: Dict[str, Any] = {}

    def new_step(self) -> None:
        self._calls.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.modules = {}

    def _call_suffix(self, module: Any) -> str:
        """``""`` for the module's first call of the step, ``":<n>"`` for the n-th repeat."""
        call = self._calls.get(id(module), 0)
        self._calls[id(module)] = call + 1
        return ":%d" % call if call else ""

    def _grad_hook(self, slot: str) -> Callable[[Any], Any]:
        returns_grad = self.grad_hook_returns_grad

        def on_grad(grad: Any) -> Any:
            if grad is not None:
                self._sink("actv_grad", slot, grad)
            return grad if returns_grad else None

        return on_grad
