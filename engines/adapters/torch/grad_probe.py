"""grad_probe for PyTorch: a global optimizer-step pre-hook that records every parameter's gradient.

``step`` counts optimizer steps (reference §9.1): the first optimizer that steps is the primary one and each of
its ``step()`` calls is a new step; other optimizers (a GAN's second one) record into the current step. A step
skipped by a GradScaler (inf/NaN found) calls no ``optimizer.step`` and so is not counted. The gradient read is
``param.main_grad`` when the parameter has one (Megatron), else ``param.grad``; a parameter without a gradient is
skipped and listed once.
"""

import logging
import weakref
from typing import Callable, Optional, Sequence

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from engines.adapters.torch.grad_probe_stats import compute_grad_stats
from engines.adapters.torch.monitor_models import ModelFinder, ParamNamer
from engines.grad_probe.records import GradStepStats
from engines.monitor.naming import name_filter

log = logging.getLogger(__name__)


def _grad_of(param: torch.Tensor) -> Optional[torch.Tensor]:
    grad = getattr(param, "main_grad", None)
    return grad if grad is not None else param.grad


class GradProbeHook:
    """Installs the hooks; ``sink(stats)`` receives a GradStepStats for every selected step.

    ``steps`` selects steps (None = all); ``param_list`` filters parameter names (names, globs, regexes or
    dotted prefixes). ``model`` names the parameters directly (the in-script API); without it the model is
    found through global module hooks.
    """

    def __init__(
        self,
        sink: Callable[[GradStepStats], None],
        *,
        level: str = "L1",
        bounds: Sequence[float] = (-1.0, 0.0, 1.0),
        param_list: Optional[Sequence[str]] = None,
        steps: Optional[Sequence[int]] = None,
        model: Optional[torch.nn.Module] = None,
    ):
        self._sink = sink
        self.level = level
        self.bounds = [float(b) for b in bounds]
        self._select = name_filter(param_list)
        self._steps = None if not steps else set(int(s) for s in steps)
        self._finder = None if model is not None else ModelFinder()
        self._namer = ParamNamer(self._finder, [model] if model is not None else None)
        self._primary = None
        self.step = -1
        self._handles = []
        self._warned_missing = set()
        self.failures = 0

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

    def _advance(self, optimizer) -> None:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
            primary = optimizer
        if optimizer is primary:
            self.step += 1
        elif self.step < 0:
            self.step = 0

    def _pre_step(self, optimizer, args, kwargs):
        self._advance(optimizer)
        if self._steps is not None and self.step not in self._steps:
            return None
        try:
            self._record(optimizer)
        except Exception:  # training must never crash because of the tool
            self.failures += 1
            log.exception("probe-tui grad_probe: recording step %d failed; the step is skipped", self.step)
        return None

    def _record(self, optimizer) -> None:
        named = []
        skipped = []
        for name, param in self._namer.optimizer_params(optimizer):
            if not self._select(name):
                continue
            grad = _grad_of(param)
            if grad is None:
                skipped.append(name)
                continue
            named.append((name, grad))
        new_missing = [n for n in skipped if n not in self._warned_missing]
        if new_missing:
            self._warned_missing.update(new_missing)
            log.info("probe-tui grad_probe: no gradient for %d parameter(s), e.g. %s", len(new_missing), new_missing[0])
        with torch.no_grad():
            stats = compute_grad_stats(self.step, named, self.level, self.bounds)
        stats.skipped = skipped
        self._sink(stats)


class GradProbeRun:
    """The hook and the store writer of one rank, started together (the engine and in-script APIs use it)."""

    def __init__(self, section, rank_dir, *, steps: Optional[Sequence[int]] = None, rank: int = 0,
                 world_size: int = 1, model: Optional[torch.nn.Module] = None, store_options=None,
                 on_step: Optional[Callable[[int], None]] = None):
        from engines.grad_probe.writer import GradStoreWriter

        self.writer = GradStoreWriter(
            rank_dir, level=section.grad_level, bounds=section.bounds, param_list=section.param_list, rank=rank,
            world_size=world_size, framework="pytorch",
            csv_dir=rank_dir if getattr(section, "export_csv", False) else None, store_options=store_options)

        def sink(stats: GradStepStats) -> None:
            self.writer.write(stats)
            if on_step is not None:
                on_step(stats.step)

        self.hook = GradProbeHook(sink, level=section.grad_level, bounds=section.bounds,
                                  param_list=section.param_list, steps=steps, model=model).install()
        self._stopped = False

    def stop(self, status: str = "finished") -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.hook.remove()
        finally:
            self.writer.close(status)


def start_grad_probe(section, rank_dir, **kwargs) -> GradProbeRun:
    """Record gradients into ``rank_dir`` until ``stop()``; ``section`` is a GradProbeSection."""
    return GradProbeRun(section, rank_dir, **kwargs)
