"""grad_probe for PyTorch: a global optimizer-step pre-hook that records every parameter's gradient.

``step`` counts optimizer steps (docs/reference/msprobe-tasks.md §9.1): the first optimizer that steps is the primary one and each of
its ``step()`` calls is a new step; other optimizers (a GAN's second one) record into the current step. A step
skipped by a GradScaler (inf/NaN found) calls no ``optimizer.step`` and so is not counted. The gradient read is
``param.main_grad`` when the parameter has one (Megatron), else ``param.grad``; a parameter without a gradient is
skipped and listed once. Steps, selection and the run are framework-neutral (``engines.grad_probe.hook``).
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from engines.adapters.torch.grad_probe_stats import compute_grad_stats
from engines.adapters.torch.monitor_models import ModelFinder, ParamNamer
from engines.grad_probe.hook import GradProbeHookBase, GradProbeRunBase
from engines.grad_probe.records import GradStepStats


def _grad_of(param: torch.Tensor) -> Optional[torch.Tensor]:
    grad = getattr(param, "main_grad", None)
    return grad if grad is not None else param.grad


class GradProbeHook(GradProbeHookBase):
    """A global optimizer-step pre-hook (``engines.grad_probe.hook``). ``model`` names the parameters directly
    (the in-script API); without it the model is found through global module hooks."""

    def __init__(self, sink: Callable[[GradStepStats], None], *, level: str = "L1",
                 bounds: Sequence[float] = (-1.0, 0.0, 1.0), param_list: Optional[Sequence[str]] = None,
                 steps: Optional[Sequence[int]] = None, model: Optional[torch.nn.Module] = None):
        super().__init__(sink, level=level, bounds=bounds, param_list=param_list, steps=steps)
        self._finder = None if model is not None else ModelFinder()
        self._namer = ParamNamer(self._finder, [model] if model is not None else None)
        self._handles: List[Any] = []

    def install(self) -> "GradProbeHook":
        if self._finder is not None:
            self._finder.install()
        self._handles.append(register_optimizer_step_pre_hook(self._pre_step))
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._finder is not None:
            self._finder.remove()

    def _pre_step(self, optimizer, args, kwargs):
        self.optimizer_step(optimizer, lambda: [(name, _grad_of(p))
                                                for name, p in self._namer.optimizer_params(optimizer)])
        return None

    def _stats(self, named: List[Tuple[str, Any]]) -> GradStepStats:
        with torch.no_grad():
            return compute_grad_stats(self.step, named, self.level, self.bounds)


class GradProbeRun(GradProbeRunBase):
    framework = "pytorch"

    def __init__(self, section, rank_dir, *, steps: Optional[Sequence[int]] = None, rank: int = 0,
                 world_size: int = 1, model: Optional[torch.nn.Module] = None, store_options=None,
                 on_step: Optional[Callable[[int], None]] = None):
        super().__init__(section, rank_dir, steps=steps, rank=rank, world_size=world_size,
                         store_options=store_options, on_step=on_step, model=model)

    def _hook(self, sink: Callable[[GradStepStats], None], **options: Any) -> GradProbeHook:
        return GradProbeHook(sink, **options)


def start_grad_probe(section, rank_dir, **kwargs) -> GradProbeRun:
    """Record gradients into ``rank_dir`` until ``stop()``; ``section`` is a GradProbeSection."""
    return GradProbeRun(section, rank_dir, **kwargs)
