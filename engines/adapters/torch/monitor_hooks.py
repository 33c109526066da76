"""Activation hooks of the monitor: forward inputs/outputs of the target modules and their gradients.

Per-module forward hooks (only on the selected modules, so unselected ones keep torch's fast path). Gradients
are taken with tensor hooks on the module's outputs and inputs, not with module backward hooks: tensor hooks
leave the autograd graph as it is, so gradient accumulation order, and so every number, is unchanged
(docs/decisions/0010-capture-does-not-change-numbers.md). ``.output`` gradients equal msprobe's ``output_grad``; an ``.input`` gradient is the gradient
of the input tensor (summed over all its consumers when it feeds several modules, such as a residual stream).

Skipped: modules in eval mode, forwards run without grad enabled (evaluation passes), and forwards recomputed
during backward (activation checkpointing): nothing is counted twice.
"""

import re
from typing import Any, Dict, List, Optional, Tuple

import torch

from engines.monitor import hooks
from engines.monitor.hooks import ActivationHooksBase

_SELECTOR = re.compile(r"^tuple\[(\d+)\]:(\d+)$")


def flatten_tensors(value: Any, limit: int = 64) -> List[torch.Tensor]:
    """Tensors in ``value`` (nested tuples/lists/dicts, dataclass-like outputs with ``__dict__`` skipped)."""
    return hooks.flatten_tensors(value, _is_tensor, limit)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def select(tensors: List[torch.Tensor], selector: Optional[str]) -> List[Tuple[int, torch.Tensor]]:
    """Apply a target selector: ``tuple[n]:i`` keeps element i; ``tensor``/``tuple[n]``/None keep all."""
    if selector:
        match = _SELECTOR.match(selector)
        if match:
            index = int(match.group(2))
            return [(index, tensors[index])] if index < len(tensors) else []
    return list(enumerate(tensors))


def slot_names(base: str, items: List[Tuple[int, torch.Tensor]], total: int) -> List[str]:
    """``module.output`` for a single tensor, ``module.output_1`` when there are several (msprobe's form)."""
    return [base if total == 1 else f"{base}_{i}" for i, _ in items]


def _in_backward() -> bool:
    try:
        return torch._C._current_graph_task_id() != -1
    except AttributeError:  # older torch: no way to tell; recomputation is then monitored too
        return False


class ActivationHooks(ActivationHooksBase):
    """Registers the forward hooks (``engines.monitor.hooks``)."""

    def attach(self, name: str, module: torch.nn.Module, selectors: Optional[Dict[str, Optional[str]]] = None) -> None:
        selectors = dict(selectors or {})
        hook = self._make_hook(name, selectors)
        try:
            handle = module.register_forward_hook(hook, with_kwargs=True)
        except TypeError:  # torch < 2.0
            handle = module.register_forward_hook(lambda m, a, o: hook(m, a, {}, o))
        self._handles.append(handle)
        self.modules[name] = module

    def _make_hook(self, name: str, selectors: Dict[str, Optional[str]]):
        def hook(module, args, kwargs, output):
            if not self._is_active() or not module.training or not torch.is_grad_enabled() or _in_backward():
                return None
            suffix = self._call_suffix(module)
            inputs = flatten_tensors((args, kwargs))
            outputs = flatten_tensors(output)
            self._measure(f"{name}.input", suffix, inputs, selectors.get("input"), selectors.get("input_grad"))
            self._measure(f"{name}.output", suffix, outputs, selectors.get("output"), selectors.get("output_grad"))
            return None

        return hook

    def _measure(self, base: str, suffix: str, tensors: List[torch.Tensor], selector: Optional[str],
                 grad_selector: Optional[str]) -> None:
        if self.forward:
            items = select(tensors, selector)
            for slot, (_, tensor) in zip(slot_names(base, items, len(tensors)), items):
                if tensor.is_floating_point() or tensor.is_complex():
                    self._sink("actv", slot + suffix, tensor)
        if self.backward:
            items = select(tensors, grad_selector)
            for slot, (_, tensor) in zip(slot_names(base, items, len(tensors)), items):
                if tensor.requires_grad:
                    tensor.register_hook(self._grad_hook(slot + suffix))
