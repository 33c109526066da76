"""The training-state monitor for PyTorch: hooks installed for the whole process, one host copy per step.

``MonitorSession(section, writer, ...)`` works on any torch model and optimizer with no code change:

- the optimizer is seen through torch's global optimizer-step hooks; the first one that steps is the primary
  one, and each of its ``step()`` calls ends a monitor step (other optimizers record into the current step);
- the model is found through global module hooks (``ModelFinder``), or given (the in-script API); activation
  hooks go only on the selected modules;
- everything measured during a step stays on the device until the step ends, then ``StepMetrics.collect()``
  makes the single device-to-host copy, the writer stores the values, judges them and commits the step
  (steps, the config, collection and commit are framework-neutral: ``engines.monitor.session``).

The loss: the value the target reports (the demo's ``on_step``) when it does; otherwise the last 0-dim tensor
that requires grad returned by a top-level module call before the optimizer step (a model that returns its
loss, or an ``nn`` loss module), read in the same copy as the metrics. A loss computed by a plain function
outside any module is not seen; the in-script API takes it explicitly (``record_loss``).
"""

import logging
from typing import Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from engines.adapters.torch import monitor_optim as optim_metrics
from engines.adapters.torch.monitor_extras import MicroBatchGrads, StructureRecorder
from engines.adapters.torch.monitor_hooks import ActivationHooks
from engines.adapters.torch.monitor_models import ModelFinder, ParamNamer
from engines.adapters.torch.monitor_stats import StepMetrics
from engines.monitor.naming import strip_wrappers
from engines.monitor.session import MonitorSessionBase, alert_rules  # noqa: F401 (the engine reads alert_rules here)

log = logging.getLogger(__name__)


class MonitorSession(MonitorSessionBase):
    def __init__(
        self,
        section,
        writer,
        *,
        rank: int = 0,
        model: Optional[torch.nn.Module] = None,
        loss_from_target: bool = False,
        watcher=None,
        on_message: Optional[Callable[[str, str], None]] = None,
        on_step: Optional[Callable[[int], None]] = None,
        on_alerts: Optional[Callable] = None,
    ):
        super().__init__(section, writer, rank=rank, loss_from_target=loss_from_target, watcher=watcher,
                         on_message=on_message, on_step=on_step, on_alerts=on_alerts)
        self._finder = ModelFinder(on_root=self._attach_root)
        self._explicit = [model] if model is not None else []
        self._namer = ParamNamer(self._finder, self._explicit)
        self._micro: Optional[MicroBatchGrads] = None
        self._structure: Optional[StructureRecorder] = None
        self._structure_done = False
        self._module_names = {}
        self._configure(section, not_before=0)

    # -- configuration -----------------------------------------------------------------------------------------
    def _configure(self, section, not_before: int) -> None:
        xy = self._configure_common(section, not_before)
        self._param_cache = {}
        self._xy = xy
        if self._micro is not None:
            self._micro.remove()
            self._micro = None
        if getattr(section, "monitor_mbs_grad", False):
            self._micro = MicroBatchGrads(lambda name, grad: self._measure("grad_unreduced", name, grad),
                                          is_active=lambda: self._collecting)
        if getattr(section, "print_struct", False) or getattr(section, "stack_info", False):
            self._structure_done = False
        if xy:
            self._activations = ActivationHooks(
                self._measure,
                forward=not getattr(section, "backward_only", False),
                backward=not getattr(section, "forward_only", False),
                is_active=lambda: self._collecting,
            )
        for root in self._explicit + self._finder.roots:
            self._attach_root(root)
        self.writer.set_rules(alert_rules(section))

    def _attach_root(self, root: torch.nn.Module) -> None:
        for raw_name, module in root.named_modules():
            if raw_name:
                self._module_names.setdefault(id(module), self._name(raw_name))
        if self._micro is not None:
            named = [(self._name(n), p) for n, p in root.named_parameters()]
            self._micro.attach([(n, p) for n, p in named if self._select_params(n)])
        if self._activations is None:
            return
        for raw_name, module in root.named_modules():
            if not raw_name:
                continue  # the root itself: its output is the loss or the logits, measured by its children
            name = self._name(raw_name)
            if name in self._activations.modules or not self._select_modules(name):
                continue
            self._activations.attach(name, module, self._targets.get(name) or self._targets.get(strip_wrappers(raw_name)))

    # -- installation ------------------------------------------------------------------------------------------
    def install(self) -> "MonitorSession":
        self._finder.install()
        for model in self._explicit:
            self._finder.add_root(model)
        self._handles.append(register_optimizer_step_pre_hook(self._pre_step))
        self._handles.append(register_optimizer_step_post_hook(self._post_step))
        self._begin_step()
        return self

    def _remove_extras(self) -> None:
        if self._micro is not None:
            self._micro.remove()
        if self._structure is not None:
            self._structure.finish()
            self._structure = None

    # -- per step ----------------------------------------------------------------------------------------------
    def _new_metrics(self) -> StepMetrics:
        return StepMetrics()

    def _no_grad(self):
        return torch.no_grad()

    def _step_begun(self) -> None:
        if self._micro is not None:
            self._micro.new_step()
        section = self.section
        wants_structure = getattr(section, "print_struct", False) or getattr(section, "stack_info", False)
        if wants_structure and self._collecting and not self._structure_done and self._structure is None \
                and self.rank_dir is not None:
            self._structure = StructureRecorder(self.rank_dir, lambda m: self._module_names.get(id(m)),
                                                struct=bool(getattr(section, "print_struct", False)),
                                                stacks=bool(getattr(section, "stack_info", False)))

    def _step_collected(self) -> None:
        if self._structure is not None:
            try:
                written = self._structure.finish()
                self._on_message("info", "monitor: wrote " + ", ".join(str(p) for p in written))
            except OSError as exc:
                self._on_message("warning", f"monitor: could not write the module structure ({exc})")
            self._structure = None
            self._structure_done = True

    def _schedule_finished(self) -> None:
        if self._micro is not None:
            self._micro.remove()
            self._micro = None

    def _params(self, optimizer):
        """``(all named parameters, selected ones)`` of an optimizer, cached until its parameters change."""
        signature = (tuple(len(g["params"]) for g in optimizer.param_groups), len(self._finder.roots))
        cached = self._param_cache.get(id(optimizer))
        if cached is not None and cached[0] == signature:
            return cached[1], cached[2]
        everything = [(self._name(n), p) for n, p in self._namer.optimizer_params(optimizer)]
        selected = [(n, p) for n, p in everything if self._select_params(n)]
        self._param_cache[id(optimizer)] = (signature, everything, selected)
        return everything, selected

    def _pre_step(self, optimizer, args, kwargs):
        if not self._collecting:
            return None
        try:
            with torch.no_grad():
                self._record_pre(optimizer)
        except Exception:
            self.failures += 1
            log.exception("probe-tui monitor: recording before optimizer.step failed at step %d", self.step)
        return None

    def _record_pre(self, optimizer) -> None:
        section = self.section
        everything, named = self._params(optimizer)
        grads = [(n, optim_metrics.grad_of(p)) for n, p in named]
        with_grad = [(n, g) for n, g in grads if g is not None]
        block = None
        if getattr(section, "wg_distribution", False) and with_grad:
            block = self._metrics.add_bulk("grad_reduced", [n for n, _ in with_grad], [g for _, g in with_grad],
                                           self.ops, self.eps)
        if block is not None and "norm" in self.ops and len(named) == len(everything):
            norms = block[:, self.ops.index("norm")]  # every parameter is already measured
            total = torch.linalg.vector_norm(norms)
        else:
            all_grads = [g for _, p in everything if (g := optim_metrics.grad_of(p)) is not None]
            total = None
            if all_grads:
                norms = torch._foreach_norm(all_grads, 2, dtype=torch.float32)
                total = torch.linalg.vector_norm(torch.stack(norms).to(torch.float64))
        if total is not None:
            self._metrics.add_value("train", "grad_norm", "value", total)
        if getattr(section, "param_distribution", False):
            optim_metrics.add_bulk(self._metrics, "param_origin", named, self.ops, self.eps)
        if getattr(section, "mg_direction", False):
            optim_metrics.record_mg_direction(self._metrics, optimizer, named)

    def _post_step(self, optimizer, args, kwargs):
        primary = self._is_primary(optimizer)
        if self._collecting:
            try:
                with torch.no_grad():
                    self._record_post(optimizer)
            except Exception:
                self.failures += 1
                log.exception("probe-tui monitor: recording after optimizer.step failed at step %d", self.step)
        if primary:
            self._end_step()
        return None

    def _record_post(self, optimizer) -> None:
        section = self.section
        _, named = self._params(optimizer)
        if getattr(section, "mv_distribution", False):
            optim_metrics.record_adam_state(self._metrics, optimizer, named, self.ops, self.eps)
        if getattr(section, "ur_distribution", False):
            optim_metrics.record_update(self._metrics, optimizer, named, self.ops, self.eps)
        if getattr(section, "param_distribution", False):
            optim_metrics.add_bulk(self._metrics, "param_updated", named, self.ops, self.eps)

    def _take_loss(self):
        loss = self._finder.take_loss()
        given = super()._take_loss()
        return given if given is not None else loss

    # -- values the target reports -----------------------------------------------------------------------------
    def set_loss(self, loss) -> None:
        """The loss of the step in progress (before ``optimizer.step()``); read in the step's single copy."""
        if isinstance(loss, torch.Tensor):
            self._given_loss = loss.detach()
        elif loss is not None:
            self._given_loss = torch.tensor(float(loss), dtype=torch.float64)
        self._loss_from_target = False

    def _loss_value(self, loss) -> float:
        return float(loss.detach().float().item()) if isinstance(loss, torch.Tensor) else float(loss)
