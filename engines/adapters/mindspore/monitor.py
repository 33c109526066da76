"""The training-state monitor for MindSpore: the PyTorch monitor's series from MindSpore's hooks.

``MonitorSession(section, writer, ...)`` keeps the PyTorch session's contract (steps, the config, collection and
commit are ``engines.monitor.session``'s), so the monitor engine, the writer, the alerts and ``start_monitor``
drive both:

- steps are optimizer calls (``optimizer_hooks``): the first optimizer called is the primary one, each of its
  calls ends a monitor step; the gradients are the call's argument, named by ``optimizer.parameters``
  (full paths: ``blocks.0.attn.qkv.weight``), so weight gradients and parameters need no model handle;
- activations (``xy_distribution``) need the model: given (the in-script API), or the first cell called at the
  top level before the first optimizer call (a temporary ``nn.Cell.__call__`` wrapper finds it); forward hooks
  go on the selected cells only, gradients come from tensor hooks that return the gradient unchanged;
- Adam state (``mv_distribution``, ``ur_distribution``, ``mg_direction``) is read from the optimizer's moment
  tuples: ``exp_avg``/``exp_avg_sq`` (``mindspore.experimental.optim.AdamW``/``Adam``, ``mint.optim``) or
  ``moment1``/``moment2`` (``nn.Adam``), ``moments1``/``moments2`` (``nn.AdamWeightDecay``).

The loss is what the target reports (the demo's ``on_step``) or what the script passes to ``record_loss``.
Not on MindSpore (a message says so once): ``monitor_mbs_grad``, ``print_struct`` and ``stack_info``.
"""

import logging
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from engines.adapters.mindspore.monitor_hooks import ActivationHooks, RootFinder
from engines.adapters.mindspore.monitor_stats import StepMetrics
from engines.adapters.mindspore.optimizer_hooks import (
    named_parameters,
    register_optimizer_post_hook,
    register_optimizer_pre_hook,
)
from engines.adapters.mindspore.tensor_stats import raw
from engines.monitor.config_watch import ConfigWatcher
from engines.monitor.session import MonitorSessionBase, alert_rules  # noqa: F401 (the engine reads alert_rules here)

log = logging.getLogger(__name__)

_sign, _mul, _sum, _sqrt, _cast = raw(mint.sign), raw(mint.mul), raw(mint.sum), raw(mint.sqrt), raw(ops.cast)
_MOMENTS = (("exp_avg", "exp_avg_sq"), ("moment1", "moment2"), ("moments1", "moments2"))
_UNSUPPORTED = ("monitor_mbs_grad", "print_struct", "stack_info")
_Moments = Tuple[Dict[str, Tensor], Dict[str, Tensor]]  # first and second moments by parameter name


class MonitorSession(MonitorSessionBase):
    _finder: RootFinder

    def __init__(self, section: Any, writer: Any, *, rank: int = 0, model: Any = None,
                 loss_from_target: bool = False, watcher: Optional[ConfigWatcher] = None,
                 on_message: Optional[Callable[[str, str], None]] = None,
                 on_step: Optional[Callable[[int], None]] = None, on_alerts: Optional[Callable] = None) -> None:
        super().__init__(section, writer, rank=rank, loss_from_target=loss_from_target, watcher=watcher,
                         on_message=on_message, on_step=on_step, on_alerts=on_alerts)
        self._explicit = [model] if model is not None else []
        self._finder = RootFinder(self._attach_root)
        self._momentum_before: Dict[str, Tensor] = {}
        self._said: Set[str] = set()
        self._configure(section, not_before=0)

    # -- configuration -----------------------------------------------------------------------------------------
    def _configure(self, section: Any, not_before: int) -> None:
        xy = self._configure_common(section, not_before)
        for key in _UNSUPPORTED:
            if getattr(section, key, False):
                self._say("warning", "monitor: %s is not available on MindSpore; it is ignored" % key)
        if xy:
            self._activations = ActivationHooks(self._measure, forward=not getattr(section, "backward_only", False),
                                                backward=not getattr(section, "forward_only", False),
                                                is_active=lambda: self._collecting)
        for root in self._explicit + self._finder.roots:
            self._attach_root(root)
        self.writer.set_rules(alert_rules(section))

    def _say(self, level: str, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            self._on_message(level, text)

    def _attach_root(self, root: Any) -> None:
        if self._activations is None:
            return
        for raw_name, cell in root.cells_and_names():
            if not raw_name:
                continue
            name = self._name(raw_name)
            if name in self._activations.modules or not self._select_modules(name):
                continue
            self._activations.attach(name, cell)

    # -- installation ------------------------------------------------------------------------------------------
    def install(self) -> "MonitorSession":
        if self._activations is not None and not self._explicit:
            self._finder.install()
        self._handles.append(register_optimizer_pre_hook(self._pre_call))
        self._handles.append(register_optimizer_post_hook(self._post_call))
        self._begin_step()
        return self

    # -- per step ----------------------------------------------------------------------------------------------
    def _new_metrics(self) -> StepMetrics:
        return StepMetrics()

    def _named(self, optimizer: Any) -> List[Tuple[str, Any, int]]:
        """(name, parameter, position) of the selected parameters."""
        return [(self._name(n), p, i) for i, (n, p) in enumerate(named_parameters(optimizer))
                if self._select_params(self._name(n))]

    def _pre_call(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if not self._collecting:
            return
        try:
            self._record_pre(optimizer, args[0] if args else kwargs.get("gradients", ()))
        except Exception:
            self.failures += 1
            log.exception("probe-tui monitor: recording before the optimizer call failed at step %d", self.step)

    def _record_pre(self, optimizer: Any, grads: Iterable[Any]) -> None:
        section = self.section
        named = self._named(optimizer)
        grads = list(grads)
        with_grad = [(n, grads[i]) for n, _, i in named if i < len(grads) and isinstance(grads[i], Tensor)]
        if getattr(section, "wg_distribution", False):
            for n, g in with_grad:
                self._measure("grad_reduced", n, g)
        every = [g for g in grads if isinstance(g, Tensor)]
        if every:
            self._metrics.add_value("train", "grad_norm", "value", _total_norm(every))
        if getattr(section, "param_distribution", False):
            for n, p, _ in named:
                self._measure("param_origin", n, p)
        if getattr(section, "mg_direction", False):
            moments = _moments(optimizer)
            for n, g in with_grad:
                m = moments[0].get(n) if moments else None
                if m is None or int(g.size) == 0:
                    self._metrics.add_value("mg_direction", n, "value", 1.0)
                    continue
                agree = _sum(_cast(_mul(_sign(g), _sign(m)), ms.float64)) / float(g.size)
                self._metrics.add_value("mg_direction", n, "value", (agree + 1.0) / 2.0)

    def _post_call(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        primary = self._is_primary(optimizer)
        if self._collecting:
            try:
                self._record_post(optimizer)
            except Exception:
                self.failures += 1
                log.exception("probe-tui monitor: recording after the optimizer call failed at step %d", self.step)
        if primary:
            self._finder.remove()  # the model is known by now: cell calls go back to MindSpore's fast path
            self._end_step()

    def _record_post(self, optimizer: Any) -> None:
        section = self.section
        named = self._named(optimizer)
        moments = _moments(optimizer)
        if getattr(section, "mv_distribution", False) and moments:
            for tag, table in zip(("exp_avg", "exp_avg_sq"), moments):
                for n, _, _ in named:
                    if n in table:
                        self._measure(tag, n, table[n])
        if getattr(section, "ur_distribution", False) and moments:
            self._record_update(optimizer, named, moments)
        if getattr(section, "param_distribution", False):
            for n, p, _ in named:
                self._measure("param_updated", n, p)

    def _record_update(self, optimizer: Any, named: List[Tuple[str, Any, int]], moments: _Moments) -> None:
        step = getattr(optimizer, "state_step", None)
        groups = getattr(optimizer, "param_groups", None)
        if step is None or not groups:
            self._say("info", "monitor: ur_distribution needs an optimizer with a step counter and param_groups "
                              "(mindspore.experimental.optim / mint.optim); skipped")
            return
        t = float(step.asnumpy())
        group = groups[0]
        beta1, beta2 = group.get("betas", (0.9, 0.999))
        eps = float(group.get("eps", 1e-8))
        lr = float(group.get("lr", 0.0)) if not isinstance(group.get("lr"), Tensor) else float(group["lr"].asnumpy())
        for n, p, _ in named:
            m, v = moments[0].get(n), moments[1].get(n)
            if m is None or v is None:
                continue
            m_hat = m.asnumpy().astype(np.float64) / (1 - beta1 ** t)
            v_hat = v.asnumpy().astype(np.float64) / (1 - beta2 ** t)
            update = m_hat / (np.sqrt(v_hat) + eps)
            self._measure("update", n, Tensor(update.astype(np.float32)))
            pn = np.linalg.norm(p.asnumpy().astype(np.float64))
            self._metrics.add_value("update_ratio", n, "value", lr * float(np.linalg.norm(update)) / pn if pn else
                                    float("nan"))

    # -- values the target reports -----------------------------------------------------------------------------
    def set_loss(self, loss: Any) -> None:
        """The loss of the step in progress (before the optimizer call)."""
        self._given_loss = loss
        self._loss_from_target = False

    def _loss_value(self, loss: Any) -> float:
        return float(loss.asnumpy()) if isinstance(loss, Tensor) else float(loss)


def _total_norm(grads: List[Tensor]) -> Union[float, Tensor]:
    """The L2 norm of all gradients together, in float64 (on the host for CPU tensors, else one device value)."""
    if all(str(getattr(g, "device", "CPU")).upper().startswith("CPU") for g in grads):
        total = 0.0
        for g in grads:
            a = g.asnumpy().astype(np.float64).reshape(-1)
            total += float(np.dot(a, a))
        return float(np.sqrt(total))
    squares = [_sum(_mul(_cast(g, ms.float64), _cast(g, ms.float64))) for g in grads]
    return _sqrt(raw(ops.stack)(squares).sum())


def _moments(optimizer: Any) -> Optional[_Moments]:
    """The optimizer's first and second moments by parameter name, or None for an optimizer without them."""
    names = [n for n, _ in named_parameters(optimizer)]
    for first, second in _MOMENTS:
        a, b = getattr(optimizer, first, None), getattr(optimizer, second, None)
        if a is not None and b is not None and len(a) == len(names) == len(b):
            return dict(zip(names, a)), dict(zip(names, b))
    return None
