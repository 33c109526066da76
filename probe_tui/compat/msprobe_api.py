"""What ``probe_tui.compat.msprobe.pytorch`` and ``.mindspore`` export: msprobe's in-script calls on probe-tui.

- ``PrecisionDebugger``: ``probe_tui.PrecisionDebugger`` with msprobe's process-wide singleton (constructing it
  again while one is open returns that one, as msprobe's does) and the framework its import names.
- ``seed_all``, ``module_dump``/``module_dump_end``: as in ``probe_tui.debugger``.
- ``TrainerMon``: msprobe's training-state monitor on probe-tui's (``probe_tui.monitor``).
- ``MsprobeStep`` (MindSpore): the ``Model.train`` callback, from the MindSpore adapter.

Importing this module imports no framework.
"""

import atexit
import json
import os
from typing import Any, Dict, Optional

from probe_tui import debugger as _debugger


def _debugger_class(framework: str) -> type:
    base = _debugger.PrecisionDebugger

    class PrecisionDebugger(base):  # type: ignore[misc, valid-type]
        __doc__ = base.__doc__
        default_framework = framework
        class_calls_without_debugger = "ignore"  # msprobe 26: start/stop/step before the debugger do nothing

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            current = base._current
            if current is not None and isinstance(current, cls) and not current._closed:
                return current  # msprobe: one debugger per process; a second construction changes nothing
            return super().__new__(cls)

    PrecisionDebugger.__qualname__ = "PrecisionDebugger"
    PrecisionDebugger.__module__ = "probe_tui.compat.msprobe." + framework
    return PrecisionDebugger


TorchPrecisionDebugger = _debugger_class("pytorch")
MindSporePrecisionDebugger = _debugger_class("mindspore")


def seed_all_for(framework: str, seed: int = 1234, mode: bool = False, rm_dropout: bool = False,
                 is_enhanced: bool = False) -> Dict[str, Any]:
    return _debugger.seed_all(seed, mode, rm_dropout, is_enhanced, framework=framework)


def monitor_output_dir() -> str:
    """msprobe's monitor writes under ``$MONITOR_OUTPUT_DIR`` (default ``./monitor_output``)."""
    return os.environ.get("MONITOR_OUTPUT_DIR") or "./monitor_output"


def _monitor_job(config_file_path: Any) -> Any:
    """The monitor job of msprobe's monitor JSON; with no ``dump_path`` of its own, runs go under
    ``$MONITOR_OUTPUT_DIR``, as msprobe's output does."""
    from schemas import dump_config, load_config

    job = load_config(config_file_path)
    try:
        with open(config_file_path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError, TypeError):
        raw = {}
    if isinstance(raw, dict) and "dump_path" not in raw:
        data = dump_config(job)
        data["dump_path"] = monitor_output_dir()
        job = load_config(data)
    if getattr(job, "task", None) != "monitor":
        raise ValueError("config: %s is a %s config; TrainerMon needs a monitor config"
                         % (config_file_path, getattr(job, "task", None)))
    return job


class TrainerMon:
    """msprobe's ``TrainerMon(config_file_path, process_group=None, params_have_main_grad=True)``: build it, then
    ``set_monitor(model, grad_acc_steps, optimizer, ...)``; each ``optimizer.step()`` is a step. The config is
    checked when it is built (a bad one raises here); results go to a probe-tui run folder (``run_dir``)."""

    def __init__(self, config_file_path: str, process_group: Any = None, params_have_main_grad: bool = True,
                 opt_ty: Any = None) -> None:
        self.config_file_path = config_file_path
        self.process_group = process_group
        self.params_have_main_grad = params_have_main_grad
        self.job = _monitor_job(config_file_path)
        self.monitor: Any = None
        self._optimizer: Any = None

    def set_wrapped_optimizer(self, optimizer: Any) -> None:
        """msprobe's older two-call form: the optimizer first, then ``monitor_gnorm_with_ad(model, ...)``."""
        self._optimizer = optimizer

    def set_monitor(self, model: Any, grad_acc_steps: int = 1, optimizer: Any = None, dp_group: Any = None,
                    tp_group: Any = None, start_iteration: int = 0) -> Any:
        """Monitor ``model`` trained by ``optimizer`` from now on; steps count from ``start_iteration``.
        ``grad_acc_steps``, ``dp_group`` and ``tp_group`` are not needed (docs/MSPROBE.md)."""
        from probe_tui.monitor import TrainingMonitor

        optimizer = optimizer if optimizer is not None else self._optimizer
        if optimizer is None:
            raise ValueError("set_monitor: the optimizer is missing (pass optimizer=... or call "
                             "set_wrapped_optimizer first)")
        if self.monitor is not None:
            self.monitor.stop()
        if isinstance(model, (list, tuple)):  # Megatron's list of model chunks
            if len(model) != 1:
                raise ValueError("set_monitor: a list of %d model chunks (virtual pipeline stages) is not supported; "
                                 "pass the model" % len(model))
            model = model[0]
        self.monitor = TrainingMonitor(model, optimizer, self.job)
        start = int(start_iteration) if isinstance(start_iteration, int) and start_iteration > 0 else 0
        if start:
            self.monitor.start_at(start)
        atexit.register(self.stop)
        return self.monitor

    def monitor_gnorm_with_ad(self, model: Any, grad_acc_steps: int = 1, optimizer: Any = None, dp_group: Any = None,
                              tp_group: Any = None, start_iteration: int = 0) -> Any:
        """msprobe's older name of ``set_monitor``."""
        return self.set_monitor(model, grad_acc_steps, optimizer, dp_group, tp_group, start_iteration)

    @property
    def run_dir(self) -> Optional[Any]:
        return self.monitor.run_dir if self.monitor is not None else None

    def stop(self) -> None:
        """Remove the hooks and close the store (at interpreter exit too)."""
        if self.monitor is not None:
            self.monitor.stop()


def msprobe_step_class() -> type:
    """MindSpore's ``MsprobeStep`` callback class (imports MindSpore)."""
    return _debugger.adapter("mindspore", "train_callback").MsprobeStep
