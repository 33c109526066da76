"""The ``monitor`` task object (``engines.task``): the training-state monitor of the job's framework, installed for
the whole process under ``--run``, or on the model and optimizer a script holds (``probe_tui.start_monitor``).

Each rank writes ``<run>/rank<R>/`` (``engines.monitor.engine``); the session reports each step it collects to the
reporter, alerts and the config watcher's complaints go out as warnings.
"""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from engines.collection import CollectionResult
from engines.monitor.config_watch import ConfigWatcher
from engines.monitor.engine import config_path_of, section_meta, summarise, writer_options
from engines.monitor.writer import MetricsWriter
from engines.monitor.writer_thread import BackgroundWriter
from engines.steps import StepReporter
from engines.task import Say, TaskContext, process_rank, store_options


class MonitorTask:
    task = "monitor"
    seeds = False

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say, *, model: Any = None,
                 optimizer: Any = None, rank: Optional[int] = None, watch: Any = None) -> None:
        """``model``/``optimizer``: what a script monitors (``--run`` finds them by global hooks); ``rank``: instead
        of the launcher's; ``watch``: the config file to follow (None: the job's own file, False: none)."""
        self.ctx = ctx
        self.reporter = reporter
        self.say = say
        self.alerts: List[Any] = []
        section = ctx.job.monitor
        adapter = ctx.adapter("monitor")
        env_rank, world_size = process_rank()
        self.rank = env_rank if rank is None else int(rank)
        self.world_size = world_size
        self.rank_dir = Path(run.rank_dir(self.rank))
        self.writer = MetricsWriter(self.rank_dir, rank=self.rank, world_size=world_size, framework=ctx.framework,
                                    rules=adapter.alert_rules(section), store_options=store_options(ctx.job),
                                    run_meta=section_meta(section), **writer_options(section))
        self.background = BackgroundWriter(self.writer)
        reporter.details = lambda step: {"records": self.session.last_values, "bytes": self.writer.bytes_written}
        path = config_path_of(ctx.job) if watch is None else (Path(watch) if watch else None)
        self.watcher = None
        if path is not None and path.is_file():
            self.watcher = ConfigWatcher(path, on_error=lambda text: say("warning", text))
        self.session = adapter.MonitorSession(section, self.background, rank=self.rank, model=model,
                                              loss_from_target=ctx.is_demo, watcher=self.watcher, on_message=say,
                                              on_step=reporter.from_hook, on_alerts=self._on_alerts)
        if optimizer is not None:
            self.session.set_primary(optimizer)

    @property
    def steps(self) -> int:
        return self.reporter.steps

    def _on_alerts(self, alerts: List[Any]) -> None:
        self.alerts.extend(alerts)
        by_step: Dict[int, List[Any]] = {}
        for alert in alerts:
            by_step.setdefault(alert.step, []).append(alert)
        for step, found in sorted(by_step.items()):
            more = f" (+{len(found) - 1} more in anomalies.jsonl)" if len(found) > 1 else ""
            where = f" on rank {self.rank}" if self.world_size > 1 else ""  # interleaved ranks: say whose
            self.say("warning", f"alert at step {step}{where}: {found[0].message}{more}")

    def _on_target_step(self, step: int, loss: Optional[float] = None) -> None:
        if loss is not None:
            self.session.record_loss(loss)
        self.reporter.from_target(step, loss)

    # -- the zero-code run -----------------------------------------------------------------------------------
    def begin(self) -> None:
        self.session.install()

    def target_on_step(self) -> Optional[Callable[..., None]]:
        return self._on_target_step

    def end(self, status: str) -> None:
        try:
            self.session.remove()
        finally:
            self.background.close(status)

    def partial_summary(self) -> Dict[str, Any]:
        return {}

    def outcome(self, result: Any) -> CollectionResult:
        summary = summarise(self.writer, self.session, self.watcher, self.rank, self.rank_dir)
        if not result.ok:
            summary["error"] = result.error
            return CollectionResult(1, summary)
        return CollectionResult(3 if self.writer.alerts else 0, summary)

    # -- the in-script lifecycle: the monitor's own entry is probe_tui.start_monitor ---------------------------
    def start(self, model: Any = None) -> None:
        raise ValueError("task: the monitor's in-script entry is probe_tui.start_monitor(model, optimizer, config)")

    def stop(self) -> None:
        self.start()

    def step(self) -> None:
        self.start()

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        self.start()

    def monitor(self, target: Any) -> None:
        self.start()

    def close(self, status: str) -> Dict[str, Any]:
        self.end(status)
        return summarise(self.writer, self.session, self.watcher, self.rank, self.rank_dir)
