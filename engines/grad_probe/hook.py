"""grad_probe's optimizer hook and run, framework-neutral: which steps and parameters are recorded, and the
hook and the store writer of one rank started together.

``step`` counts optimizer steps (docs/reference/msprobe-tasks.md §9.1): the first optimizer that steps is the primary one and each of
its steps is a new step; other optimizers (a GAN's second one) record into the current step. A parameter without
a gradient is skipped and listed once. The adapter's ``GradProbeHook`` brings the hook on its optimizers, the
(name, gradient) pairs of an optimizer step and the statistics on its device (``compute_grad_stats``).
"""

import logging
import weakref
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from engines.grad_probe.records import GradStepStats
from engines.monitor.naming import name_filter

log = logging.getLogger("engines.grad_probe")


class GradProbeHookBase:
    """``sink(stats)`` receives a GradStepStats for every selected step. ``steps`` selects steps (None = all);
    ``param_list`` filters parameter names (names, globs, regexes or dotted prefixes)."""

    def __init__(self, sink: Callable[[GradStepStats], None], *, level: str = "L1",
                 bounds: Sequence[float] = (-1.0, 0.0, 1.0), param_list: Optional[Sequence[str]] = None,
                 steps: Optional[Sequence[int]] = None) -> None:
        self._sink = sink
        self.level = level
        self.bounds = [float(b) for b in bounds]
        self._select = name_filter(param_list)
        self._steps = None if not steps else set(int(s) for s in steps)
        self._primary: Optional[weakref.ref] = None
        self.step = -1
        self.failures = 0
        self._warned_missing: set = set()

    # -- what the adapter brings -----------------------------------------------------------------------------
    def install(self) -> "GradProbeHookBase":
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError

    def _stats(self, named: List[Tuple[str, Any]]) -> GradStepStats:
        """The statistics of ``[(name, gradient)]`` at ``self.step`` (the adapter's ``compute_grad_stats``)."""
        raise NotImplementedError

    # -- per optimizer step ----------------------------------------------------------------------------------
    def _advance(self, optimizer: Any) -> None:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
            primary = optimizer
        if optimizer is primary:
            self.step += 1
        elif self.step < 0:
            self.step = 0

    def optimizer_step(self, optimizer: Any, grads: Callable[[], Iterable[Tuple[str, Any]]]) -> None:
        """Before an optimizer step: count it and, when selected, record ``grads()`` ((name, gradient or None)
        of the optimizer's parameters). A failure is logged and the step skipped: training never stops."""
        self._advance(optimizer)
        if self._steps is not None and self.step not in self._steps:
            return
        try:
            self._record(grads())
        except Exception:  # training must never crash because of the tool
            self.failures += 1
            log.exception("probe-tui grad_probe: recording step %d failed; the step is skipped", self.step)

    def _record(self, pairs: Iterable[Tuple[str, Any]]) -> None:
        named = []
        skipped = []
        for name, grad in pairs:
            if not self._select(name):
                continue
            if grad is None:
                skipped.append(name)
                continue
            named.append((name, grad))
        new_missing = [n for n in skipped if n not in self._warned_missing]
        if new_missing:
            self._warned_missing.update(new_missing)
            log.info("probe-tui grad_probe: no gradient for %d parameter(s), e.g. %s", len(new_missing), new_missing[0])
        stats = self._stats(named)
        stats.skipped = skipped
        self._sink(stats)


class GradProbeRunBase:
    """The hook and the store writer of one rank, started together (the engine and the in-script API use it)."""

    framework = ""

    def __init__(self, section: Any, rank_dir: Any, *, steps: Optional[Sequence[int]] = None, rank: int = 0,
                 world_size: int = 1, store_options: Any = None, on_step: Optional[Callable[[int], None]] = None,
                 **hook_options: Any) -> None:
        from engines.grad_probe.writer import GradStoreWriter

        self.writer = GradStoreWriter(
            rank_dir, level=section.grad_level, bounds=section.bounds, param_list=section.param_list, rank=rank,
            world_size=world_size, framework=self.framework,
            csv_dir=rank_dir if getattr(section, "export_csv", False) else None, store_options=store_options)

        def sink(stats: GradStepStats) -> None:
            self.writer.write(stats)
            if on_step is not None:
                on_step(stats.step)

        self.hook = self._hook(sink, level=section.grad_level, bounds=section.bounds, param_list=section.param_list,
                               steps=steps, **hook_options).install()
        self._stopped = False

    def _hook(self, sink: Callable[[GradStepStats], None], **options: Any) -> GradProbeHookBase:
        raise NotImplementedError

    def stop(self, status: str = "finished") -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.hook.remove()
        finally:
            self.writer.close(status)
