"""The in-script monitor (DECISIONS 12): attach the training-state monitor to a model and optimizer you hold.

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

from pathlib import Path
from typing import Any, Optional


class TrainingMonitor:
    """A running monitor. ``stop()`` removes the hooks and closes the store (idempotent)."""

    def __init__(self, model, optimizer, config: Any, *, rank: Optional[int] = None):
        import importlib

        framework = "mindspore" if _is_mindspore(model, optimizer) else "pytorch"
        adapter = importlib.import_module("engines.adapters.%s.monitor" % (
            "mindspore" if framework == "mindspore" else "torch"))
        MonitorSession, alert_rules = adapter.MonitorSession, adapter.alert_rules
        from engines.task import process_rank, store_options
        from engines.monitor.config_watch import ConfigWatcher
        from engines.monitor.engine import section_meta, writer_options
        from engines.monitor.writer import MetricsWriter
        from engines.monitor.writer_thread import BackgroundWriter
        from engines.runs import create_run
        from schemas import dump_config, load_config

        job = config if hasattr(config, "monitor") and hasattr(config, "task") else load_config(config)
        if getattr(job, "task", None) != "monitor":
            raise ValueError(f"config: task is {getattr(job, 'task', None)!r}; start_monitor needs a monitor config")
        section = job.monitor
        env_rank, world_size = process_rank()
        self.rank = env_rank if rank is None else int(rank)
        self.run = create_run(job.dump_path, task="monitor", config=dump_config(job), framework=framework)
        self.run_dir = Path(self.run.path)
        self.rank_dir = Path(self.run.rank_dir(self.rank))
        writer = MetricsWriter(self.rank_dir, rank=self.rank, world_size=world_size, framework=framework,
                               rules=alert_rules(section), store_options=store_options(job),
                               run_meta=section_meta(section), **writer_options(section))
        self._writer = BackgroundWriter(writer)
        watcher = None
        if isinstance(config, (str, Path)) and Path(config).is_file():
            watcher = ConfigWatcher(Path(config))
        self.alerts = []
        self._session = MonitorSession(section, self._writer, rank=self.rank, model=model, watcher=watcher,
                                       on_alerts=self.alerts.extend)
        if optimizer is not None:
            self._session.set_primary(optimizer)
        self._session.install()
        self._stopped = False

    def record_loss(self, loss) -> None:
        """The loss of the current step; call before ``optimizer.step()``. A tensor is read without a sync."""
        self._session.set_loss(loss)

    @property
    def step(self) -> int:
        """The step in progress (steps count the optimizer's ``step()`` calls)."""
        return self._session.step

    def stop(self, status: str = "finished") -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._session.remove()
        finally:
            self._writer.close(status)
            summary = {"steps_collected": self._writer.steps, "series": self._writer.series_count,
                       "alerts": self._writer.alerts}
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


def start_monitor(model, optimizer, config: Any, *, rank: Optional[int] = None) -> TrainingMonitor:
    """Start monitoring ``model`` trained by ``optimizer`` with a monitor ``config`` (file, dict or job)."""
    return TrainingMonitor(model, optimizer, config, rank=rank)


def _is_mindspore(*objects) -> bool:
    """A MindSpore model or optimizer (a ``mindspore.nn.Cell``), told apart without importing MindSpore."""
    for obj in objects:
        if obj is not None and any(c.__module__.split(".")[0] == "mindspore" for c in type(obj).__mro__):
            return True
    return False
