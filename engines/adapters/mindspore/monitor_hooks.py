"""The MindSpore monitor's cell-side hooks: finding a script's model, and activation hooks on selected cells.

Activations need the model: given (the in-script API), or found as the first cell called at the top level before
the first optimizer call (a temporary ``nn.Cell.__call__`` wrapper, removed then). Forward hooks go on the
selected cells only (the others keep MindSpore's fast path); gradients come from tensor hooks that return the
gradient unchanged, so every number of the training stays as it is.
"""

from typing import Any, Callable, List, Optional, Set

import mindspore as ms
from mindspore import Tensor, nn

from engines.adapters.mindspore.cell_capture import _is_optimizer
from engines.monitor import hooks
from engines.monitor.hooks import ActivationHooksBase


def _tensors(value: Any, limit: int = 64) -> List[Tensor]:
    return hooks.flatten_tensors(value, lambda v: isinstance(v, Tensor), limit)


def _floating(t: Tensor) -> bool:
    return t.dtype in (ms.float16, ms.bfloat16, ms.float32, ms.float64, ms.complex64, ms.complex128)


class RootFinder:
    """Finds the model of a script: the cells called at the top level, until ``remove()``."""

    def __init__(self, on_root: Callable[[Any], None]) -> None:
        self.roots: List[Any] = []
        self._ids: Set[int] = set()
        self._on_root = on_root
        self._depth = 0
        self._previous: Optional[Callable[..., Any]] = None  # nn.Cell.__call__ while installed

    def install(self) -> None:
        if self._previous is not None:
            return
        previous = nn.Cell.__call__
        finder = self

        def __call__(cell: Any, *args: Any, **kwargs: Any) -> Any:
            if finder._depth == 0 and id(cell) not in finder._ids and not _is_optimizer(cell):
                finder.add_root(cell)
            finder._depth += 1
            try:
                return previous(cell, *args, **kwargs)
            finally:
                finder._depth -= 1

        __call__.__wrapped__ = previous  # type: ignore[attr-defined]
        self._previous = previous
        nn.Cell.__call__ = __call__

    def remove(self) -> None:
        if self._previous is not None:
            nn.Cell.__call__ = self._previous
            self._previous = None

    def add_root(self, cell: Any) -> None:
        if id(cell) in self._ids:
            return
        self._ids.add(id(cell))
        self.roots.append(cell)
        self._on_root(cell)


class ActivationHooks(ActivationHooksBase):
    """Forward hooks on the selected cells (``engines.monitor.hooks``)."""

    grad_hook_returns_grad = True

    def attach(self, name: str, cell: Any) -> None:
        self._handles.append(cell.register_forward_hook(self._make_hook(name)))
        self.modules[name] = cell

    def _make_hook(self, name: str) -> Callable[[Any, Any, Any], None]:
        def hook(cell: Any, inputs: Any, output: Any) -> None:
            if not self._is_active() or not cell.training:
                return None
            suffix = self._call_suffix(cell)
            self._measure("%s.input" % name, suffix, _tensors(inputs))
            self._measure("%s.output" % name, suffix, _tensors(output))
            return None

        return hook

    def _measure(self, base: str, suffix: str, tensors: List[Tensor]) -> None:
        for i, tensor in enumerate(tensors):
            slot = (base if len(tensors) == 1 else "%s_%d" % (base, i)) + suffix
            if not _floating(tensor):
                continue
            if self.forward:
                self._sink("actv", slot, tensor)
            if self.backward and getattr(tensor, "_grad_node", None) is not None:
                tensor.register_hook(self._grad_hook(slot))
