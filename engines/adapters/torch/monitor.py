"""The training-state monitor for PyTorch: hooks installed for the whole process, one host copy per step.

``MonitorSession(section, writer, ...)`` works on any torch model and optimizer with no code change:

- the optimizer is seen through torch's global optimizer-step hooks; the first one that steps is the primary
  one, and each of its ``step()`` calls ends a monitor step (other optimizers record into the current step);
- the model is found through global module hooks (``ModelFinder``), or given (the in-script API); activation
  hooks go only on the selected modules;
- everything measured during a step stays on the device until the step ends, then ``StepMetrics.collect()``
  makes the single device-to-host copy, the writer stores the values, judges them and commits the step.

The loss: the value the target reports (the demo's ``on_step``) when it does; otherwise the last 0-dim tensor
that requires grad returned by a top-level module call before the optimizer step (a model that returns its
loss, or an ``nn`` loss module), read in the same copy as the metrics. A loss computed by a plain function
outside any module is not seen; the in-script API takes it explicitly (``record_loss``).
"""

import logging
import weakref
from typing import Callable, List, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from engines.adapters.torch import monitor_optim as optim_metrics
from engines.adapters.torch.monitor_extras import MicroBatchGrads, StructureRecorder
from engines.adapters.torch.monitor_hooks import ActivationHooks
from engines.adapters.torch.monitor_models import ModelFinder, ParamNamer
from engines.adapters.torch.monitor_stats import StepMetrics
from engines.monitor.alerts import RuleSpec
from engines.monitor.metrics import normalise_ops
from engines.monitor.naming import module_filter, name_filter, squash, strip_wrappers
from engines.monitor.schedule import Schedule

log = logging.getLogger(__name__)


def _targets(section) -> dict:
    targets = getattr(section, "targets", None) or {}
    out = {}
    for name, spec in targets.items():
        if hasattr(spec, "model_dump"):
            spec = spec.model_dump()
        out[str(name)] = {k: v for k, v in dict(spec or {}).items() if v is not None}
    return out


def alert_rules(section) -> List[RuleSpec]:
    alert = getattr(section, "alert", None)
    rules = getattr(alert, "rules", None) if alert is not None else None
    if rules is None and isinstance(alert, dict):
        rules = alert.get("rules")
    return [RuleSpec.from_config(rule) for rule in (rules or [])]


class MonitorSession:
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
        self.writer = writer
        self.rank = rank
        self._loss_from_target = loss_from_target
        self._watcher = watcher
        self._on_message = on_message or (lambda level, text: log.log(logging.WARNING, text))
        self._on_step = on_step
        self._on_alerts = on_alerts
        self._finder = ModelFinder(on_root=self._attach_root)
        self._explicit = [model] if model is not None else []
        self._namer = ParamNamer(self._finder, self._explicit)
        self._primary = None
        self._handles = []
        self.step = 0
        self.failures = 0
        self.last_collected: Optional[int] = None
        self.last_values = 0  # values collected at the last collected step
        self._loss_step: Optional[int] = None  # the last step whose loss is recorded
        self._given_loss: Optional[torch.Tensor] = None
        self._metrics = StepMetrics()
        self._collecting = False
        self._activations: Optional[ActivationHooks] = None
        self._micro: Optional[MicroBatchGrads] = None
        self._structure: Optional[StructureRecorder] = None
        self._structure_done = False
        self._module_names = {}
        self.rank_dir = getattr(writer, "rank_dir", None)
        self._configure(section, not_before=0)

    # -- configuration -----------------------------------------------------------------------------------------
    def _configure(self, section, not_before: int) -> None:
        self.section = section
        ops, _unknown = normalise_ops(getattr(section, "ops", None) or ["norm"])
        if "nans" in ops and "infs" not in ops:
            ops.insert(ops.index("nans") + 1, "infs")  # the NaN count comes with the inf count
        self.ops = ops
        self.eps = float(getattr(section, "eps", 1e-8))
        targets = _targets(section)
        self._targets = targets
        self._select_params = name_filter(list(targets))
        self._param_cache = {}
        self._squash = bool(getattr(section, "squash_name", False))
        xy = bool(getattr(section, "xy_distribution", False))
        self._all_modules = xy and (not targets or bool(getattr(section, "all_xy", False)))
        self._select_modules = module_filter(None if self._all_modules else list(targets))
        self._xy = xy
        self.schedule = Schedule.from_section(section, not_before=not_before)
        if self._activations is not None:
            self._activations.remove()
            self._activations = None
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

    def _name(self, name: str) -> str:
        name = strip_wrappers(name)
        return squash(name) if self._squash else name

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

    def remove(self) -> None:
        flush = getattr(self.writer, "flush", None)
        if flush is not None:
            flush()
            self._report()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._finder.remove()
        if self._activations is not None:
            self._activations.remove()
        if self._micro is not None:
            self._micro.remove()
        if self._structure is not None:
            self._structure.finish()
            self._structure = None

    # -- per step ----------------------------------------------------------------------------------------------
    def _begin_step(self) -> None:
        self._metrics = StepMetrics()
        self._collecting = self.schedule.wants(self.step, self.rank)
        if self._activations is not None:
            self._activations.new_step()
        if self._micro is not None:
            self._micro.new_step()
        section = self.section
        wants_structure = getattr(section, "print_struct", False) or getattr(section, "stack_info", False)
        if wants_structure and self._collecting and not self._structure_done and self._structure is None \
                and self.rank_dir is not None:
            self._structure = StructureRecorder(self.rank_dir, lambda m: self._module_names.get(id(m)),
                                                struct=bool(getattr(section, "print_struct", False)),
                                                stacks=bool(getattr(section, "stack_info", False)))

    def _measure(self, tag: str, name: str, tensor: torch.Tensor) -> None:
        try:
            with torch.no_grad():
                self._metrics.add_tensor(tag, name, tensor, self.ops, self.eps)
        except Exception:
            self.failures += 1
            log.debug("probe-tui monitor: measuring %s %s failed", tag, name, exc_info=True)

    def _is_primary(self, optimizer) -> bool:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
            return True
        return optimizer is primary

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

    def _end_step(self) -> None:
        step = self.step
        loss = self._finder.take_loss()
        if self._given_loss is not None:
            loss, self._given_loss = self._given_loss, None
        if self._collecting:
            try:
                if loss is not None and not self._loss_from_target:
                    self._metrics.add_value("train", "loss", "value", loss)
                    self._loss_step = step
                values = self._metrics.collect()
                metrics = self._metrics
                self.last_values = len(values)
                alerts = self.writer.write_step(step, metrics.keys, values, metrics.shapes, metrics.dtypes)
                self.last_collected = step
                self._report(alerts)
            except Exception:
                self.failures += 1
                log.exception("probe-tui monitor: writing step %d failed; the step is skipped", step)
            self.schedule.collected += 1
            if self._structure is not None:
                try:
                    written = self._structure.finish()
                    self._on_message("info", "monitor: wrote " + ", ".join(str(p) for p in written))
                except OSError as exc:
                    self._on_message("warning", f"monitor: could not write the module structure ({exc})")
                self._structure = None
                self._structure_done = True
            if self.schedule.finished:
                if self._activations is not None:
                    self._activations.remove()
                    self._activations = None
                if self._micro is not None:
                    self._micro.remove()
                    self._micro = None
        if self._on_step is not None:
            self._on_step(step)
        self.step += 1
        self._poll_config()
        self._begin_step()

    def _report(self, alerts=None) -> None:
        """Alerts found by the writer (at once, or a step later from the background writer) to ``on_alerts``."""
        found = list(alerts or [])
        drain = getattr(self.writer, "drain_alerts", None)
        if drain is not None:
            found += drain()
        if found and self._on_alerts is not None:
            self._on_alerts(found)

    def _poll_config(self) -> None:
        if self._watcher is None:
            return
        section = self._watcher.poll()
        if section is None:
            return
        try:
            self._configure(section, not_before=self.step)
        except Exception as exc:
            self._on_message("warning", f"monitor: the reloaded config could not be applied ({exc}); keeping the old one")
            return
        self._on_message("info", f"monitor: config reloaded from {self._watcher.path}; it applies from step {self.step}")

    # -- values the target reports -----------------------------------------------------------------------------
    def set_loss(self, loss) -> None:
        """The loss of the step in progress (before ``optimizer.step()``); read in the step's single copy."""
        if isinstance(loss, torch.Tensor):
            self._given_loss = loss.detach()
        elif loss is not None:
            self._given_loss = torch.tensor(float(loss), dtype=torch.float64)
        self._loss_from_target = False

    def set_primary(self, optimizer) -> None:
        """Name the optimizer whose steps are the monitor's steps (the in-script API knows it)."""
        self._primary = weakref.ref(optimizer)

    def record_loss(self, loss, step: Optional[int] = None) -> None:
        """A loss reported after the optimizer step (the demo's on_step, the in-script API)."""
        ended = self.step - 1  # the step that just ended; its loss arrives after optimizer.step()
        if step is None:
            step = ended
        if self.last_collected is None or step != self.last_collected or step == self._loss_step:
            return  # not collected, or its loss was already read with the step's metrics
        self._loss_step = step
        value = float(loss.detach().float().item()) if isinstance(loss, torch.Tensor) else float(loss)
        try:
            self.writer.write_late(step, [("train", "loss", "value")], [value])
        except Exception:
            self.failures += 1
            log.exception("probe-tui monitor: recording the loss of step %d failed", step)
