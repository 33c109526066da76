"""What a monitor run writes and reports (its task object: ``engines.monitor.task``).

Each rank writes ``<run>/rank<R>/``: the metrics store (``metrics.h5``, or per-step files on NFS/Lustre), the
anomaly file ``anomalies.jsonl`` and, on request, ``monitor_csv/`` and ``tensorboard/``. Another process can
follow the store while training runs (``engines.monitor.reader``). When the job came from a file, the file is
watched: a valid edit applies from the next step.
"""

import logging
from pathlib import Path
from typing import Any, Dict, Optional

log = logging.getLogger(__name__)


def config_path_of(job: Any) -> Optional[Path]:
    """The file the job was loaded from (None for a dict or a JSON string)."""
    from schemas import config_source

    source = config_source(job)
    return Path(source) if source else None


def writer_options(section: Any) -> Dict[str, Any]:
    formats = getattr(section, "format", None) or ["hdf5"]
    if isinstance(formats, str):
        formats = [formats]
    return {
        "formats": list(formats),
        "ndigits": int(getattr(section, "ndigits", 6) or 6),
        "step_count_per_record": int(getattr(section, "step_count_per_record", 1) or 1),
    }


def section_meta(section: Any) -> Dict[str, Any]:
    if hasattr(section, "model_dump"):
        return {"monitor": section.model_dump(mode="json")}
    return {}


def summarise(writer: Any, session: Any, watcher: Any, rank: int, rank_dir: Path) -> Dict[str, Any]:
    """The run summary of one rank's monitor."""
    summary: Dict[str, Any] = {
        "rank": rank,
        "steps_collected": writer.steps,
        "series": writer.series_count,
        "alerts": writer.alerts,
        "store": str(rank_dir / "metrics.h5") if writer.store.mode == "swmr" else str(rank_dir),
    }
    if writer.first_alert is not None:
        first = writer.first_alert
        summary["first_alert"] = (f"step {first.step}: {first.name} {first.tag} {first.metric} = {first.value:.4g} "
                                  f"({first.rule}, {first.kind})")
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
    return summary


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
