"""The training-state monitor's session, framework-neutral: steps, the config, collection and commit.

``MonitorSession(section, writer, ...)`` (the adapter's subclass) keeps one contract for both frameworks, so the
monitor engine, the writer, the alerts and ``start_monitor`` drive either:

- the first optimizer that steps is the primary one, and each of its steps ends a monitor step (other optimizers
  record into the current step);
- everything measured during a step stays where it was computed until the step ends; then the adapter's
  ``StepMetrics.collect()`` makes the single device-to-host copy, the writer stores the values, judges them
  (alerts) and commits the step;
- the schedule (``start_step``, ``step_interval``, ``collect_times``, ranks) says which steps are collected;
  a watched config file that changes applies from the next step.

The adapter brings its hooks (optimizer pre/post, activations), how it measures, and what its loss is.
"""

import contextlib
import logging
import weakref
from typing import Any, Callable, Dict, List, Optional, Protocol

from engines.monitor.alerts import Alert, RuleSpec
from engines.monitor.config_watch import ConfigWatcher
from engines.monitor.metrics import normalise_ops
from engines.monitor.naming import module_filter, name_filter, squash, strip_wrappers
from engines.monitor.schedule import Schedule

log = logging.getLogger("engines.monitor")


def targets_of(section: Any) -> Dict[str, Dict[str, Any]]:
    """The section's ``targets``: module or parameter name -> its selectors (None values left out)."""
    out = {}
    for name, spec in (getattr(section, "targets", None) or {}).items():
        if hasattr(spec, "model_dump"):
            spec = spec.model_dump()
        out[str(name)] = {k: v for k, v in dict(spec or {}).items() if v is not None}
    return out


def alert_rules(section: Any) -> List[RuleSpec]:
    alert = getattr(section, "alert", None)
    rules = getattr(alert, "rules", None) if alert is not None else None
    if rules is None and isinstance(alert, dict):
        rules = alert.get("rules")
    return [RuleSpec.from_config(rule) for rule in (rules or [])]


class RootFinder(Protocol):
    """What an adapter's model finder gives the session (it finds the model's root modules/cells)."""

    def remove(self) -> None: ...


class MonitorSessionBase:
    _finder: RootFinder  # set by the adapter's ``__init__``

    def __init__(self, section: Any, writer: Any, *, rank: int = 0, loss_from_target: bool = False,
                 watcher: Optional["ConfigWatcher"] = None,
                 on_message: Optional[Callable[[str, str], None]] = None,
                 on_step: Optional[Callable[[int], None]] = None, on_alerts: Optional[Callable] = None) -> None:
        """The adapter's ``__init__`` calls this, sets up its own state, then ``self._configure(section, 0)``."""
        self.writer = writer
        self.rank = rank
        self._loss_from_target = loss_from_target
        self._watcher = watcher
        self._on_message = on_message or (lambda level, text: log.warning(text))
        self._on_step = on_step
        self._on_alerts = on_alerts
        self._primary: Optional[weakref.ref] = None
        self._handles: List[Any] = []
        self.step = 0
        self.failures = 0
        self.last_collected: Optional[int] = None
        self.last_values = 0  # values collected at the last collected step
        self._loss_step: Optional[int] = None  # the last step whose loss is recorded
        self._given_loss: Any = None
        self._metrics = self._new_metrics()
        self._collecting = False
        self._activations: Any = None
        self.rank_dir = getattr(writer, "rank_dir", None)

    # -- what the adapter brings -----------------------------------------------------------------------------
    def _configure(self, section: Any, not_before: int) -> None:
        """Apply ``section`` (at start and when the watched config changes), collecting from ``not_before`` on."""
        raise NotImplementedError

    def _new_metrics(self) -> Any:
        """An empty ``StepMetrics`` of the adapter."""
        raise NotImplementedError

    def _no_grad(self) -> Any:
        """The context measurements run in (torch's ``no_grad``)."""
        return contextlib.nullcontext()

    def _take_loss(self) -> Any:
        """The loss of the step that ends now, if known (given by the script, or seen by the adapter)."""
        loss, self._given_loss = self._given_loss, None
        return loss

    def _loss_value(self, loss: Any) -> float:
        """A loss reported after the step, as a Python float."""
        return float(loss)

    def _step_begun(self) -> None:
        """Extension point: a step begins (the adapter's per-step hooks)."""
        return None

    def _step_collected(self) -> None:
        """Extension point: the step was collected (the adapter's one-off outputs)."""
        return None

    def _schedule_finished(self) -> None:
        """Extension point: no step is collected any more: hooks that only measure can go."""
        return None

    def _remove_extras(self) -> None:
        return None

    # -- configuration -----------------------------------------------------------------------------------------
    def _configure_common(self, section: Any, not_before: int) -> bool:
        """The section's ops, eps, targets, names and schedule; returns whether activations are monitored
        (``xy_distribution``), after removing the previous activation hooks."""
        self.section = section
        ops, _unknown = normalise_ops(getattr(section, "ops", None) or ["norm"])
        if "nans" in ops and "infs" not in ops:
            ops.insert(ops.index("nans") + 1, "infs")  # the NaN count comes with the inf count
        self.ops = ops
        self.eps = float(getattr(section, "eps", 1e-8))
        targets = targets_of(section)
        self._targets = targets
        self._select_params = name_filter(list(targets))
        self._squash = bool(getattr(section, "squash_name", False))
        xy = bool(getattr(section, "xy_distribution", False))
        self._all_modules = xy and (not targets or bool(getattr(section, "all_xy", False)))
        self._select_modules = module_filter(None if self._all_modules else list(targets))
        self.schedule = Schedule.from_section(section, not_before=not_before)
        if self._activations is not None:
            self._activations.remove()
            self._activations = None
        return xy

    def _name(self, name: str) -> str:
        name = strip_wrappers(name)
        return squash(name) if self._squash else name

    # -- installation ------------------------------------------------------------------------------------------
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
        self._remove_extras()

    def start_at(self, step: int) -> None:
        """Number the steps from ``step`` (msprobe's ``start_iteration``: a resumed run); before training."""
        self.step = int(step)
        self._begin_step()

    # -- per step ----------------------------------------------------------------------------------------------
    def _begin_step(self) -> None:
        self._metrics = self._new_metrics()
        self._collecting = self.schedule.wants(self.step, self.rank)
        if self._activations is not None:
            self._activations.new_step()
        self._step_begun()

    def _measure(self, tag: str, name: str, tensor: Any) -> None:
        try:
            with self._no_grad():
                self._metrics.add_tensor(tag, name, tensor, self.ops, self.eps)
        except Exception:
            self.failures += 1
            log.debug("probe-tui monitor: measuring %s %s failed", tag, name, exc_info=True)

    def _is_primary(self, optimizer: Any) -> bool:
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
            return True
        return optimizer is primary

    def _end_step(self) -> None:
        step = self.step
        loss = self._take_loss()
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
            self._step_collected()
            if self.schedule.finished:
                if self._activations is not None:
                    self._activations.remove()
                    self._activations = None
                self._schedule_finished()
        if self._on_step is not None:
            self._on_step(step)
        self.step += 1
        self._poll_config()
        self._begin_step()

    def _report(self, alerts: Optional[List[Alert]] = None) -> None:
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
            self._on_message("warning", "monitor: the reloaded config could not be applied (%s); keeping the old one"
                             % exc)
            return
        self._on_message("info", "monitor: config reloaded from %s; it applies from step %d"
                         % (self._watcher.path, self.step))

    # -- values the target reports -----------------------------------------------------------------------------
    def set_primary(self, optimizer: Any) -> None:
        """Name the optimizer whose steps are the monitor's steps (the in-script API knows it)."""
        self._primary = weakref.ref(optimizer)

    def record_loss(self, loss: Any, step: Optional[int] = None) -> None:
        """A loss reported after the optimizer step (the demo's on_step, the in-script API)."""
        ended = self.step - 1  # the step that just ended; its loss arrives after the optimizer step
        if step is None:
            step = ended
        if self.last_collected is None or step != self.last_collected or step == self._loss_step:
            return  # not collected, or its loss was already read with the step's metrics
        self._loss_step = step
        value = self._loss_value(loss)
        try:
            self.writer.write_late(step, [("train", "loss", "value")], [value])
        except Exception:
            self.failures += 1
            log.exception("probe-tui monitor: recording the loss of step %d failed", step)
