"""The live monitor's data pipeline (memray's pattern): one plain thread, paced by an Event that the screen's
interval timer sets, reads what the metrics store gained since the last look and hands a
:class:`MonitorSnapshot` to a callback (the screen posts it as a message). Polls never overlap, the UI thread
never touches HDF5, and a slow read only delays the next snapshot.

Each tick reads only the new rows of the selected series (and of a "clock" series that tells the step), plus new
alerts; changing the selection reads those series' history once.
"""

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from engines.monitor.reader import MetricsError, SeriesInfo, open_metrics

DEFAULT_SERIES = ("train/loss/value", "train/grad_norm/value")


def is_monitor_run(path: Path) -> bool:
    """A run folder, rank folder or store file holding monitor metrics."""
    path = Path(path)
    try:
        from engines.store import open_rank_dirs, store_kinds

        if path.is_file():
            return path.suffix == ".h5" and path.stem.startswith("metrics")
        if "metrics" in store_kinds(path):
            return True
        return any("metrics" in store_kinds(p) for p in open_rank_dirs(path).values())
    except Exception:
        return False
    return False


@dataclass
class SeriesData:
    key: str
    steps: np.ndarray
    values: np.ndarray


@dataclass
class MonitorSnapshot:
    """What one tick found. ``series`` is the full series list when it changed (else None); ``data`` holds the
    whole history of each selected series; ``new_alerts`` the alerts not reported before. ``status`` is the
    store's (running, finished, ...), ``waiting`` while there is no store yet (``error`` says why), or ``error``."""

    status: str = "running"
    collected_steps: int = 0
    last_step: Optional[int] = None
    quiet_s: float = 0.0
    series: Optional[List[SeriesInfo]] = None
    data: Dict[str, SeriesData] = field(default_factory=dict)
    new_alerts: List[dict] = field(default_factory=list)
    alerts_total: int = 0
    selection_version: int = 0
    error: str = ""
    path: str = ""


def default_selection(series: Sequence[SeriesInfo]) -> List[str]:
    """The loss and the total gradient norm when the store has them, else the first gradient norm, else the
    first series."""
    keys = [s.key for s in series]
    chosen = [k for k in DEFAULT_SERIES if k in keys]
    if chosen:
        return chosen
    norms = [k for k in keys if k.endswith("/norm")]
    return norms[:1] or keys[:1]


class MonitorFeed(threading.Thread):
    """Reads ``path``'s metrics (``engines.monitor.reader``) on each :meth:`schedule`; calls ``deliver`` with a
    :class:`MonitorSnapshot` from this thread."""

    def __init__(self, path, deliver: Callable[[MonitorSnapshot], None], *, rank: Optional[int] = None) -> None:
        super().__init__(name="probe-tui-monitor-feed", daemon=True)
        self.path = Path(path)
        self.rank = rank
        self.deliver = deliver
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._selected: Optional[List[str]] = None
        self._selection_version = 0
        self._loaded_version = -1
        self._data: Dict[str, SeriesData] = {}
        self._clock: Optional[str] = None
        self._clock_steps = 0
        self._last_step: Optional[int] = None
        self._last_news = time.monotonic()
        self._series_count = 0
        self._alerts_seen = 0

    # ---- control (any thread) -----------------------------------------------------------------------------
    def schedule(self) -> None:
        """Ask for a look at the store (the screen's interval timer calls this)."""
        self._wake.set()

    def select(self, keys: Sequence[str]) -> int:
        """Follow these series from now on (their history is read at the next tick). Returns the selection's
        version, which the snapshot that carries it repeats."""
        with self._lock:
            self._selected = list(keys)
            self._selection_version += 1
            version = self._selection_version
        self._wake.set()
        return version

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    # ---- the thread ---------------------------------------------------------------------------------------
    def run(self) -> None:
        reader = None
        while reader is None:  # a run that has just started may not have written its store yet
            try:
                reader = open_metrics(self.path, self.rank)
            except (MetricsError, OSError) as exc:
                self.deliver(MonitorSnapshot(status="waiting", error=str(exc), path=str(self.path)))
                self._wake.wait()
                self._wake.clear()
                if self._stopped.is_set():
                    return
        try:
            while not self._stopped.is_set():
                self._wake.wait()
                self._wake.clear()
                if self._stopped.is_set():
                    break
                try:
                    snapshot = self._tick(reader)
                except Exception as exc:  # a torn read of a store being written: report, try again next tick
                    snapshot = MonitorSnapshot(status="error", error=f"{self.path}: {exc}", path=str(self.path))
                self.deliver(snapshot)
        finally:
            reader.close()

    def _tick(self, reader) -> MonitorSnapshot:
        reader.refresh()
        series = reader.series()
        changed_series = len(series) != self._series_count
        self._series_count = len(series)
        with self._lock:
            if self._selected is None and series:
                self._selected = default_selection(series)
                self._selection_version += 1
            selected = [k for k in (self._selected or []) if _has(reader, k)]
            version = self._selection_version
        if self._clock is None and series:
            self._clock = series[0].key
        reload = version != self._loaded_version
        keys = list(dict.fromkeys(([self._clock] if self._clock else []) + selected))
        if reload:
            fresh = reader.read_many(keys) if keys else {}
            self._data = {k: SeriesData(k, s.steps, s.values) for k, s in fresh.items()}
            self._loaded_version = version
        elif keys:
            since = None if self._last_step is None else self._last_step + 1
            fresh = reader.read_many(keys, steps=(since, None))
            for k, s in fresh.items():
                old = self._data.get(k)
                if old is None:
                    self._data[k] = SeriesData(k, s.steps, s.values)
                elif len(s.steps):
                    self._data[k] = SeriesData(k, np.concatenate([old.steps, s.steps]),
                                               np.concatenate([old.values, s.values]))
        self._update_clock()
        # by count, not by step: a value reported late (the loss) can add an alert to a step already seen
        alerts = reader.alerts(since=self._alerts_seen)
        self._alerts_seen += len(alerts)
        status = reader.status
        return MonitorSnapshot(
            status=status, collected_steps=self._clock_steps, last_step=self._last_step,
            quiet_s=time.monotonic() - self._last_news, series=list(series) if changed_series else None,
            data={k: v for k, v in self._data.items() if k in selected}, new_alerts=alerts,
            alerts_total=self._alerts_seen, selection_version=version, path=str(reader.path))

    def _update_clock(self) -> None:
        latest = None
        for data in self._data.values():
            if len(data.steps):
                step = int(data.steps[-1])
                latest = step if latest is None else max(latest, step)
        if latest is not None and (self._last_step is None or latest > self._last_step):
            self._last_step = latest
            self._last_news = time.monotonic()
        clock = self._data.get(self._clock) if self._clock else None
        if clock is not None:
            self._clock_steps = int(len(np.unique(clock.steps)))


def _has(reader, key: str) -> bool:
    try:
        reader.info(key)
        return True
    except KeyError:
        return False
