"""The monitor collection engine: run the job's target with the monitor installed for the whole process.

Each rank writes ``<run>/rank<R>/``: the metrics store (``metrics.h5``, or per-step files on NFS/Lustre), the
anomaly file ``anomalies.jsonl`` and, on request, ``monitor_csv/`` and ``tensorboard/``. Another process can
follow the store while training runs (``engines.monitor.reader``). When the job came from a file, the file is
watched: a valid edit applies from the next step.
"""

import logging
from pathlib import Path
from typing import Any, Dict, Optional

from engines.collection import CollectionResult, hook_adapter
from engines.grad_probe.engine import declared_steps, process_rank, store_options, target_dict

log = logging.getLogger(__name__)


def config_path_of(job) -> Optional[Path]:
    """The file the job was loaded from (None for a dict or a JSON string)."""
    from schemas import config_source

    source = config_source(job)
    return Path(source) if source else None


def writer_options(section) -> Dict[str, Any]:
    formats = getattr(section, "format", None) or ["hdf5"]
    if isinstance(formats, str):
        formats = [formats]
    return {
        "formats": list(formats),
        "ndigits": int(getattr(section, "ndigits", 6) or 6),
        "step_count_per_record": int(getattr(section, "step_count_per_record", 1) or 1),
    }


def section_meta(section) -> Dict[str, Any]:
    if hasattr(section, "model_dump"):
        return {"monitor": section.model_dump(mode="json")}
    return {}


def run_collection(job, run, events) -> CollectionResult:
    from engines.monitor.config_watch import ConfigWatcher
    from engines.monitor.progress import StepReporter
    from engines.monitor.writer import MetricsWriter
    from engines.monitor.writer_thread import BackgroundWriter
    from engines.targets import run_target

    section = job.monitor
    got = hook_adapter(job, events, "monitor", "monitor")
    if isinstance(got, CollectionResult):
        return got
    framework, adapter = got
    MonitorSession, alert_rules = adapter.MonitorSession, adapter.alert_rules

    target = target_dict(job.target)
    rank, world_size = process_rank()
    rank_dir = Path(run.rank_dir(rank))
    from_demo = "demo" in target

    def on_alerts(alerts):
        by_step = {}
        for alert in alerts:
            by_step.setdefault(alert.step, []).append(alert)
        for step, found in sorted(by_step.items()):
            more = f" (+{len(found) - 1} more in anomalies.jsonl)" if len(found) > 1 else ""
            events.emit("message", level="warning", text=f"alert at step {step}: {found[0].message}{more}")

    writer = MetricsWriter(rank_dir, rank=rank, world_size=world_size, framework=framework,
                           rules=alert_rules(section), store_options=store_options(job),
                           run_meta=section_meta(section), **writer_options(section))
    background = BackgroundWriter(writer)
    reporter = StepReporter(events, declared_steps(target), target_reports_steps=from_demo,
                            extra=lambda: {"records": session.last_values, "bytes": writer.bytes_written})
    path = config_path_of(job)
    watcher = None
    if path is not None and path.is_file():
        watcher = ConfigWatcher(path, on_error=lambda text: events.emit("message", level="warning", text=text))
    session = MonitorSession(section, background, rank=rank, loss_from_target=from_demo, watcher=watcher,
                             on_message=lambda level, text: events.emit("message", level=level, text=text),
                             on_step=reporter.from_hook, on_alerts=on_alerts)
    session.install()

    def on_step(step, loss=None):
        if loss is not None:
            session.record_loss(loss)
        reporter.from_target(step, loss)

    status = "failed"
    result = None
    try:
        result = run_target(target, framework=framework, on_step=on_step)
        status = "finished" if result.ok else "failed"
    finally:
        session.remove()
        background.close(status)
    summary: Dict[str, Any] = {
        "rank": rank,
        "steps_collected": writer.steps,
        "series": writer.series_count,
        "alerts": writer.alerts,
        "store": str(rank_dir / "metrics.h5") if writer.store.mode == "swmr" else str(rank_dir),
    }
    if writer.first_alert is not None:
        first = writer.first_alert
        summary["first_alert"] = f"step {first.step}: {first.name} {first.tag} {first.metric} = {first.value:.4g} ({first.rule}, {first.kind})"
        summary["anomalies"] = str(rank_dir / "anomalies.jsonl")
    if writer.alerts:
        summary["tables"] = [_alerts_table(rank_dir)]
    if writer.csv is not None:
        summary["csv"] = str(rank_dir / "monitor_csv")
    if writer.tensorboard is not None:
        summary["tensorboard"] = str(rank_dir / "tensorboard")
    if watcher is not None and watcher.reloads:
        summary["config_reloads"] = watcher.reloads
    if session.failures:
        summary["hook_failures"] = session.failures
    if result is None or not result.ok:
        summary["error"] = getattr(result, "error", "the target failed")
        return CollectionResult(1, summary)
    return CollectionResult(3 if writer.alerts else 0, summary)


def _alerts_table(rank_dir: Path, limit: int = 50) -> Dict[str, Any]:
    from engines.monitor.reader import open_metrics

    with open_metrics(rank_dir) as metrics:
        alerts = metrics.alerts()
    rows = [[a["step"], a["name"], f"{a['tag']} {a['metric']}", a["value"], _why(a)] for a in alerts[:limit]]
    return {"title": f"alerts ({len(alerts)}; all in anomalies.jsonl and the store)",
            "columns": ["step", "series", "metric", "value", "why"], "rows": rows}


def _why(alert: Dict[str, Any]) -> str:
    baseline = alert.get("baseline")
    if alert["kind"] in ("up", "down") and baseline:
        return f"{alert['kind']} x{alert['value'] / baseline:.3g} of the mean"
    return alert["kind"]
