"""The in-script monitor (docs/decisions/0012-in-script-apis.md): attach the training-state monitor to a model and optimizer you hold.

::

    from probe_tui import start_monitor

    mon = start_monitor(model, optimizer, "monitor.json")   # a config file, a dict, or a loaded MonitorJob
    for batch in data:
        loss = model(batch).loss
        loss.backward()
        mon.record_loss(loss)        # optional: before optimizer.step(); no host sync
        optimizer.step()
        optimizer.zero_grad()
    mon.stop()                       # or use it as a context manager
    print(mon.run_dir)

Results go to a run folder under the config's ``dump_path`` (``<dump_path>/<run-id>/rank<R>/``), the same
layout ``probe-tui --run`` writes, so the app and ``engines.monitor.reader.open_metrics`` read both. When the
config is a file, editing it applies from the next step (it is never rewritten).

Importing this module imports neither torch nor Textual; ``start_monitor`` imports torch's adapter.
"""

import logging
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger("engines.monitor")


class TrainingMonitor:
    """A running monitor. ``stop()`` removes the hooks and closes the store (idempotent). It drives the monitor's
    task object (``engines.monitor.task.MonitorTask``), the one ``probe-tui --run`` builds."""

    def __init__(self, model, optimizer, config: Any, *, rank: Optional[int] = None):
        from engines.monitor.task import MonitorTask
        from engines.runs import create_run
        from engines.steps import StepReporter
        from engines.task import resolve
        from schemas import load_config

        framework = "mindspore" if _is_mindspore(model, optimizer) else "pytorch"
        job = config if hasattr(config, "monitor") and hasattr(config, "task") else load_config(config)
        if getattr(job, "task", None) != "monitor":
            raise ValueError(f"config: task is {getattr(job, 'task', None)!r}; start_monitor needs a monitor config")
        ctx = resolve(job, framework, with_target=False)  # the script is the target
        self.run = create_run(job.dump_path, task="monitor", config=ctx.config, framework=framework)
        watch = Path(config) if isinstance(config, (str, Path)) and Path(config).is_file() else False
        self._task = MonitorTask(ctx, self.run, StepReporter(), _log, model=model, optimizer=optimizer, rank=rank,
                                 watch=watch)
        self.rank = self._task.rank
        self.run_dir = Path(self.run.path)
        self.rank_dir = self._task.rank_dir
        self.alerts = self._task.alerts
        self._task.begin()
        self._stopped = False

    def record_loss(self, loss) -> None:
        """The loss of the current step; call before ``optimizer.step()``. A tensor is read without a sync."""
        self._task.session.set_loss(loss)

    def start_at(self, step: int) -> None:
        """Number the steps from ``step`` (a resumed run; msprobe's ``start_iteration``), before training."""
        self._task.session.start_at(step)

    @property
    def step(self) -> int:
        """The step in progress (steps count the optimizer's ``step()`` calls)."""
        return self._task.session.step

    def stop(self, status: str = "finished") -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._task.end(status)
        finally:
            writer = self._task.background
            summary = {"steps_collected": writer.steps, "series": writer.series_count, "alerts": writer.alerts}
            try:
                self.run.finish(status=status, exit_code=0, summary=summary)
            except Exception:
                pass

    def reader(self):
        """The metrics of this run (``engines.monitor.reader.MetricsReader``)."""
        from engines.monitor.reader import open_metrics

        return open_metrics(self.rank_dir)

    def __enter__(self) -> "TrainingMonitor":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop("failed" if exc_type is not None else "finished")


def _log(level: str, text: str) -> None:
    """The monitor's messages in a script: the log (as the monitor session does by default)."""
    log.warning("probe-tui monitor: %s", text)


def start_monitor(model, optimizer, config: Any, *, rank: Optional[int] = None) -> TrainingMonitor:
    """Start monitoring ``model`` trained by ``optimizer`` with a monitor ``config`` (file, dict or job)."""
    return TrainingMonitor(model, optimizer, config, rank=rank)


def _is_mindspore(*objects) -> bool:
    """A MindSpore model or optimizer (a ``mindspore.nn.Cell``), told apart without importing MindSpore."""
    for obj in objects:
        if obj is not None and any(c.__module__.split(".")[0] == "mindspore" for c in type(obj).__mro__):
            return True
    return False
