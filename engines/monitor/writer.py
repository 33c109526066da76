"""Writes one rank's monitor output: the metrics store, the anomaly file and the optional CSV/TensorBoard exports.

The hooks hand over one step at a time (``write_step``): series keys and values already on the host. The
writer gives each new series an id, appends the values, judges them with the alert rules, and commits the step
so that a reader following the store sees it at once. A value reported after the step was committed (the loss
the demo reports after ``optimizer.step()``) goes through ``write_late`` and is committed under the same step.
"""

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines import safe_fs
from engines.monitor.alerts import Alert, AlertEngine, RuleSpec
from engines.monitor.exporters import CsvExporter, TensorBoardExporter
from engines.monitor.metrics import module_of
from engines.monitor.store_layout import ALERTS, KIND, SCHEMA_VERSION, SERIES, VALUES, table_specs

log = logging.getLogger(__name__)
ANOMALY_FILE = "anomalies.jsonl"

SeriesKey = Tuple[str, str, str]  # (tag, name, metric)

if TYPE_CHECKING:
    from engines.store import StoreWriter


class MetricsWriter:
    def __init__(
        self,
        rank_dir: safe_fs.PathLike,
        *,
        rank: int = 0,
        world_size: int = 1,
        framework: str = "pytorch",
        rules: Sequence[RuleSpec] = (),
        formats: Sequence[str] = ("hdf5",),
        ndigits: int = 6,
        step_count_per_record: int = 1,
        store_options: Optional[Dict[str, Any]] = None,
        run_meta: Optional[Dict[str, Any]] = None,
        on_alert: Optional[Callable[[Alert], None]] = None,
    ) -> None:
        from engines.store import StoreWriter

        self.rank_dir = Path(rank_dir)
        self.rank = rank
        meta = {"rank": rank, "world_size": world_size, "framework": framework, "schema_version": SCHEMA_VERSION}
        meta.update(run_meta or {})
        self._store = StoreWriter(self.rank_dir, KIND, table_specs(), meta=meta, **(store_options or {}))
        self._ids: Dict[SeriesKey, int] = {}
        self._keys: List[SeriesKey] = []
        self._modules: List[str] = []
        self.alert_engine = AlertEngine(rules)
        self._on_alert = on_alert
        self._anomaly_path = self.rank_dir / ANOMALY_FILE
        self.csv = CsvExporter(self.rank_dir / "monitor_csv", step_count_per_record=step_count_per_record,
                               ndigits=ndigits) if "csv" in formats else None
        self.tensorboard = None
        if "tensorboard" in formats:
            self.tensorboard = TensorBoardExporter(self.rank_dir / "tensorboard", rank)
            if not self.tensorboard.available:
                log.warning("probe-tui monitor: tensorboard is not installed; the TensorBoard export is skipped "
                            "(pip install 'probe-tui[report]')")
                self.tensorboard = None
        self.steps = 0
        self.commits = 0
        self._pending_step: Optional[int] = None
        self.alerts = 0
        self.first_alert: Optional[Alert] = None

    @property
    def store(self) -> "StoreWriter":
        return self._store

    def set_rules(self, rules: Sequence[RuleSpec]) -> None:
        """New rules (a config reload); the series history is kept."""
        self.alert_engine.rules = list(rules)

    # -- series ----------------------------------------------------------------------------------------------
    def ids_for(self, keys: Sequence[SeriesKey], shapes: Optional[Sequence[str]] = None,
                dtypes: Optional[Sequence[str]] = None) -> np.ndarray:
        out = np.empty(len(keys), dtype=np.int64)
        new_rows: Dict[str, list] = {c: [] for c in ("id", "tag", "name", "metric", "module", "shape", "dtype")}
        for i, key in enumerate(keys):
            sid = self._ids.get(key)
            if sid is None:
                sid = len(self._keys)
                self._ids[key] = sid
                self._keys.append(key)
                module = module_of(key[0], key[1])
                self._modules.append(module)
                for column, value in zip(new_rows, (sid, key[0], key[1], key[2], module,
                                                    shapes[i] if shapes else "", dtypes[i] if dtypes else "")):
                    new_rows[column].append(value)
            out[i] = sid
        if new_rows["id"]:
            self._store.append(SERIES, **new_rows)
        return out

    def _describe(self, sid: int) -> Tuple[str, str, str, str]:
        tag, name, metric = self._keys[sid]
        return tag, name, self._modules[sid], metric

    # -- steps -----------------------------------------------------------------------------------------------
    def write_step(self, step: int, keys: Sequence[SeriesKey], values: np.ndarray,
                   shapes: Optional[Sequence[str]] = None, dtypes: Optional[Sequence[str]] = None) -> List[Alert]:
        """Append one step and commit it (readers see it at once)."""
        alerts = self.append_step(step, keys, values, shapes, dtypes)
        self.commit()
        return alerts

    def append_step(self, step: int, keys: Sequence[SeriesKey], values: np.ndarray,
                    shapes: Optional[Sequence[str]] = None, dtypes: Optional[Sequence[str]] = None) -> List[Alert]:
        """Append one step without committing (a later ``commit`` makes it and any others visible at once)."""
        alerts = self._append(step, keys, values, shapes, dtypes)
        self.steps += 1
        self._pending_step = step
        return alerts

    def write_late(self, step: int, keys: Sequence[SeriesKey], values: np.ndarray) -> List[Alert]:
        """Values of a step already appended (the loss reported after the optimizer step), committed."""
        alerts = self.append_late(step, keys, values)
        self.commit()
        return alerts

    def append_late(self, step: int, keys: Sequence[SeriesKey], values: np.ndarray) -> List[Alert]:
        alerts = self._append(step, keys, values, None, None)
        self._pending_step = max(step, self._pending_step) if self._pending_step is not None else step
        return alerts

    def commit(self) -> None:
        """Make everything appended so far visible to readers; the commit carries the last step appended."""
        if self._pending_step is None:
            return
        self._store.commit(self._pending_step)
        self._pending_step = None
        self.commits += 1

    def _append(self, step: int, keys: Sequence[SeriesKey], values: np.ndarray, shapes: Optional[Sequence[str]],
                dtypes: Optional[Sequence[str]]) -> List[Alert]:
        values = np.asarray(values, dtype=np.float64)
        if shapes is not None:
            keys, values, shapes, dtypes = _without_nonscalar_ids(keys, values, shapes, dtypes)
        if not len(keys):
            return []
        ids = self.ids_for(keys, shapes, dtypes)
        self._store.append(VALUES, step=np.full(len(ids), step, dtype=np.int64), series=ids, value=values)
        alerts = self.alert_engine.check(step, ids, values, self._describe) if self.alert_engine.rules else []
        if alerts:
            self._record_alerts(alerts)
        entries: List[Tuple[str, str, str, float]] = []
        if self.csv is not None or self.tensorboard is not None:
            entries = [(k[0], k[1], k[2], float(v)) for k, v in zip(keys, values)]
        try:
            if self.csv is not None:
                self.csv.write_step(step, entries)
            if self.tensorboard is not None:
                self.tensorboard.write_step(step, entries)
        except OSError as exc:  # an export must not stop the run; the store has the data
            log.warning("probe-tui monitor: export failed at step %d (%s)", step, exc)
        return alerts

    def _record_alerts(self, alerts: List[Alert]) -> None:
        columns: Dict[str, list] = {c: [] for c in ("step", "series", "tag", "name", "module", "metric", "value",
                                                    "baseline", "rule", "kind", "message")}
        lines = []
        for alert in alerts:
            record = alert.to_dict()
            for column in columns:
                columns[column].append(record[column])
            record.update({"rank": self.rank, "micro_step": 0, "pp_stage": 0, "vpp_stage": 0, "call_id": 0,
                           "tag_name": f"{alert.name}/{alert.tag}_{alert.metric}", "group_mates": [self.rank]})
            lines.append(json.dumps(json_safe(record), allow_nan=False))
        self._store.append(ALERTS, **columns)
        with safe_fs.append_file(self._anomaly_path, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        self.alerts += len(alerts)
        if self.first_alert is None:
            self.first_alert = alerts[0]
        if self._on_alert is not None:
            for alert in alerts:
                self._on_alert(alert)

    @property
    def bytes_written(self) -> int:
        return self._store.bytes_written

    @property
    def series_count(self) -> int:
        return len(self._keys)

    def close(self, status: str = "finished") -> None:
        try:
            self.commit()
            if self.tensorboard is not None:
                self.tensorboard.close()
        finally:
            self._store.close(status)


def _without_nonscalar_ids(keys: Sequence[SeriesKey], values: np.ndarray, shapes: Sequence[str],
                           dtypes: Optional[Sequence[str]]) -> Tuple[Sequence[SeriesKey], np.ndarray, Sequence[str],
                                                                     Optional[Sequence[str]]]:
    """Drop the ``id`` series of tensors that are not 0-dim: msprobe's ``id`` is the value of a 0-dim tensor and
    nothing otherwise, so such a series would hold only NaN (and set off AnomalyNan on every one)."""
    keep = [not (key[2] == "id" and shape != "[]") for key, shape in zip(keys, shapes)]
    if all(keep):
        return keys, values, shapes, dtypes
    kept = [i for i, k in enumerate(keep) if k]
    return ([keys[i] for i in kept], values[kept], [shapes[i] for i in kept],
            [dtypes[i] for i in kept] if dtypes is not None else None)


def json_safe(record: Dict[str, Any]) -> Dict[str, Any]:
    """``record`` with NaN and ±inf numbers as null: anomalies.jsonl is strict JSON (the alert's ``kind`` says
    whether the value was nan or inf)."""
    out: Dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, (float, np.floating)):
            value = float(value) if math.isfinite(value) else None
        elif isinstance(value, np.integer):
            value = int(value)
        out[key] = value
    return out
