"""The live monitor's data pipeline (memray's pattern): one plain thread, paced by an Event that the screen's
interval timer sets, reads what the metrics store gained since the last look and hands a
:class:`MonitorSnapshot` to a callback (the screen posts it as a message). Polls never overlap, the UI thread
never touches HDF5, and a slow read only delays the next snapshot.

Each tick reads only the new rows of the selected series (and of a "clock" series that tells the step), plus new
alerts; changing the selection reads those series' history once. A run folder of several ranks is followed rank by
rank (one reader each, rank folders that appear later are picked up): the charted series as their min, mean and
max over the ranks at each step, or one rank's (the drill-down), and every rank's alerts, each naming its rank.
"""

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

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
    """A series over its steps. Across ranks, ``values`` is the mean over the ranks at each step and ``low`` /
    ``high`` the min and max, ``low_rank`` / ``high_rank`` the ranks that hold them, ``count`` how many ranks had
    the step (non-finite values are left out of min, mean and max; ``bad`` counts them)."""

    key: str
    steps: np.ndarray
    values: np.ndarray
    low: Optional[np.ndarray] = None
    high: Optional[np.ndarray] = None
    low_rank: Optional[np.ndarray] = None
    high_rank: Optional[np.ndarray] = None
    count: Optional[np.ndarray] = None
    bad: Optional[np.ndarray] = None


@dataclass
class MonitorSnapshot:
    """What one tick found. ``series`` is the full series list when it changed (else None); ``data`` holds the
    whole history of each selected series (of ``rank``, or across ``ranks`` when ``rank`` is None and there are
    several); ``new_alerts`` the alerts not reported before, each with its ``rank``. ``status`` is the store's
    (running, finished, ...), ``waiting`` while there is no store yet (``error`` says why), or ``error``.
    ``latest``: per rank, (step, value) of the first selected series where it was read. ``selected``: the series
    followed (the default ones until :meth:`MonitorFeed.select` is called)."""

    status: str = "running"
    collected_steps: int = 0
    last_step: Optional[int] = None
    quiet_s: float = 0.0
    series: Optional[List[SeriesInfo]] = None
    data: Dict[str, SeriesData] = field(default_factory=dict)
    new_alerts: List[dict] = field(default_factory=list)
    alerts_total: int = 0
    selection_version: int = 0
    selected: List[str] = field(default_factory=list)
    error: str = ""
    path: str = ""
    ranks: List[int] = field(default_factory=list)
    rank: Optional[int] = None
    latest: Dict[int, Tuple[int, float]] = field(default_factory=dict)


def default_selection(series: Sequence[SeriesInfo]) -> List[str]:
    """The loss and the total gradient norm when the store has them, else the first gradient norm, else the
    first series."""
    keys = [s.key for s in series]
    chosen = [k for k in DEFAULT_SERIES if k in keys]
    if chosen:
        return chosen
    norms = [k for k in keys if k.endswith("/norm")]
    return norms[:1] or keys[:1]


def run_folder(path: Path) -> Optional[Path]:
    """The run folder whose rank folders ``path`` stands for (a dump folder's ``latest`` run), or None when it is
    one rank's store (a rank folder, a ``metrics.h5``)."""
    path = Path(path)
    if path.is_file() or (path / "segments.jsonl").exists() or (path / "metrics.h5").exists():
        return None
    latest = path / "latest"
    if latest.exists() and not (path / "run.json").exists():
        return run_folder(latest if latest.is_dir() else path / latest.read_text().strip())
    return path


def across_ranks(key: str, per_rank: Dict[int, SeriesData]) -> SeriesData:
    """The min, mean and max over the ranks of one series at each step (see :class:`SeriesData`)."""
    parts = [(r, d) for r, d in sorted(per_rank.items()) if len(d.steps)]
    if not parts:
        empty = np.zeros(0)
        return SeriesData(key, empty.astype(np.int64), empty, empty, empty, empty.astype(np.int64),
                          empty.astype(np.int64), empty.astype(np.int64), empty.astype(np.int64))
    steps = np.concatenate([d.steps for _, d in parts]).astype(np.int64)
    values = np.concatenate([d.values for _, d in parts]).astype(np.float64)
    ranks = np.concatenate([np.full(len(d.steps), r, dtype=np.int64) for r, d in parts])
    finite = np.isfinite(values)
    # lowest finite value first in each step (non-finite last), then the highest first
    up = np.lexsort((np.where(finite, values, np.inf), steps))
    down = np.lexsort((np.where(finite, -values, np.inf), steps))
    starts = np.flatnonzero(np.r_[True, steps[up][1:] != steps[up][:-1]])
    uniq = steps[up][starts]
    count = np.diff(np.r_[starts, steps.size])
    good = np.add.reduceat(finite[up].astype(np.int64), starts)
    total = np.add.reduceat(np.where(finite, values, 0.0)[up], starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(good > 0, total / np.maximum(good, 1), np.nan)
    low = np.where(good > 0, values[up][starts], np.nan)
    high = np.where(good > 0, values[down][starts], np.nan)
    return SeriesData(key, uniq, mean, low, high, ranks[up][starts], ranks[down][starts], count, count - good)


class _Rank:
    """One rank's store as the feed follows it: its reader, the history of the selected series read so far, the
    newest step read and how many of its alerts were reported."""

    def __init__(self, rank: int, reader: Any) -> None:
        self.rank = rank
        self.reader = reader
        self.data: Dict[str, SeriesData] = {}
        self.last_step: Optional[int] = None
        self.alerts_seen = 0
        self.loaded_version = -1

    def read(self, keys: List[str], version: int) -> None:
        """The selected series: their whole history after a selection change, else what is new."""
        keys = [k for k in keys if _has(self.reader, k)]
        if version != self.loaded_version:
            fresh = self.reader.read_many(keys) if keys else {}
            self.data = {k: SeriesData(k, v.steps, v.values) for k, v in fresh.items()}
            self.loaded_version = version
        elif keys:
            since = None if self.last_step is None else self.last_step + 1
            for k, v in self.reader.read_many(keys, steps=(since, None)).items():
                old = self.data.get(k)
                if old is None:
                    self.data[k] = SeriesData(k, v.steps, v.values)
                elif len(v.steps):
                    self.data[k] = SeriesData(k, np.concatenate([old.steps, v.steps]),
                                              np.concatenate([old.values, v.values]))
        for d in self.data.values():
            if len(d.steps):
                step = int(d.steps[-1])
                self.last_step = step if self.last_step is None else max(self.last_step, step)

    def new_alerts(self) -> List[dict]:
        # by count, not by step: a value reported late (the loss) can add an alert to a step already seen
        alerts = self.reader.alerts(since=self.alerts_seen)
        self.alerts_seen += len(alerts)
        for alert in alerts:
            alert.setdefault("rank", self.rank)
        return alerts


class MonitorFeed(threading.Thread):
    """Reads ``path``'s metrics (``engines.monitor.reader``) on each :meth:`schedule`; calls ``deliver`` with a
    :class:`MonitorSnapshot` from this thread. On a run folder of several ranks it follows every rank's store:
    the charted series across ranks (``rank`` None) or of one rank (:meth:`set_rank`), the alerts of all."""

    RESCAN_TICKS = 20

    def __init__(self, path, deliver: Callable[[MonitorSnapshot], None], *, rank: Optional[int] = None) -> None:
        super().__init__(name="probe-tui-monitor-feed", daemon=True)
        self.path = Path(path)
        self.rank = rank
        self.deliver = deliver
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._selected: Optional[List[str]] = None
        self._chosen = False  # the user picked series: the default selection no longer follows the store
        self._selection_version = 0
        self._ranks: Dict[int, _Rank] = {}
        self._run: Optional[Path] = None
        self._ticks = 0
        self._clock: Optional[str] = None
        self._clock_steps = 0
        self._last_step: Optional[int] = None
        self._last_news = time.monotonic()
        self._series: List[SeriesInfo] = []
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
            self._chosen = True
            self._selection_version += 1
            version = self._selection_version
        self._wake.set()
        return version

    def set_rank(self, rank: Optional[int]) -> None:
        """Chart one rank's series (None: across every rank); read at the next tick."""
        with self._lock:
            self.rank = rank
            self._selection_version += 1
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    # ---- the thread ---------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self._open():  # a run that has just started may not have written its store yet
            self._wake.wait()
            self._wake.clear()
            if self._stopped.is_set():
                self._close()
                return
        try:
            while not self._stopped.is_set():
                self._wake.wait()
                self._wake.clear()
                if self._stopped.is_set():
                    break
                try:
                    snapshot = self._tick()
                except Exception as exc:  # a torn read of a store being written: report, try again next tick
                    snapshot = MonitorSnapshot(status="error", error=f"{self.path}: {exc}", path=str(self.path))
                self.deliver(snapshot)
        finally:
            self._close()

    def _open(self) -> bool:
        try:
            self._run = run_folder(self.path)
            if self._run is None or not self._scan():
                self._run = None
                reader = open_metrics(self.path)
                self._ranks = {reader.rank: _Rank(reader.rank, reader)}
            return True
        except (MetricsError, OSError, ValueError) as exc:
            self.deliver(MonitorSnapshot(status="waiting", error=str(exc), path=str(self.path)))
            return False

    def _scan(self) -> bool:
        """Open the rank folders of the run that hold a metrics store and are not open yet; any open?"""
        from engines.store import StoreError, open_rank_dirs, store_kinds

        try:
            folders = open_rank_dirs(self._run)
        except StoreError:
            return bool(self._ranks)
        for rank, folder in folders.items():
            if rank in self._ranks:
                continue
            try:
                if "metrics" in store_kinds(folder):
                    self._ranks[rank] = _Rank(rank, open_metrics(folder))
            except (MetricsError, OSError, Exception):  # a store being created: try again later
                continue
        return bool(self._ranks)

    def _close(self) -> None:
        for track in self._ranks.values():
            try:
                track.reader.close()
            except Exception:
                pass

    def _tick(self) -> MonitorSnapshot:
        self._ticks += 1
        if self._run is not None and self._ticks % self.RESCAN_TICKS == 1:
            self._scan()  # ranks that started late
        tracks = [self._ranks[r] for r in sorted(self._ranks)]
        for track in tracks:
            track.reader.refresh()
        changed_series = self._merge_series(tracks)
        with self._lock:
            if not self._chosen and self._series:
                # until the user picks, follow the default: the loss, written late (after the backward pass),
                # may appear in the store after the gradient norms the first look found
                default = default_selection(self._series)
                if default != self._selected:
                    self._selected = default
                    self._selection_version += 1
            selected = list(self._selected or [])
            version = self._selection_version
            rank = self.rank if self.rank in self._ranks else None
        if self._clock is None and self._series:
            self._clock = self._series[0].key
        keys = list(dict.fromkeys(([self._clock] if self._clock else []) + selected))
        shown = [self._ranks[rank]] if rank is not None else tracks
        for track in shown:
            track.read(keys, version)
        if rank is not None or len(tracks) == 1:
            data = dict(shown[0].data)
        else:
            data = {k: across_ranks(k, {t.rank: t.data[k] for t in tracks if k in t.data}) for k in keys}
        self._update_clock(data)
        alerts: List[dict] = []
        for track in tracks:
            alerts += track.new_alerts()
        alerts.sort(key=lambda a: (a.get("step", 0), a.get("rank", 0)))
        self._alerts_seen += len(alerts)
        latest: Dict[int, Tuple[int, float]] = {}
        for track in shown:
            first = track.data.get(selected[0]) if selected else None
            if first is not None and len(first.steps):
                latest[track.rank] = (int(first.steps[-1]), float(first.values[-1]))
        return MonitorSnapshot(
            status=_status([t.reader.status for t in tracks]), collected_steps=self._clock_steps,
            last_step=self._last_step, quiet_s=time.monotonic() - self._last_news,
            series=list(self._series) if changed_series else None,
            data={k: v for k, v in data.items() if k in selected}, new_alerts=alerts, alerts_total=self._alerts_seen,
            selection_version=version, selected=selected, path=str(self._run or tracks[0].reader.path), ranks=sorted(self._ranks),
            rank=rank, latest=latest)

    def _merge_series(self, tracks: List[_Rank]) -> bool:
        """Every rank's series, in the order first seen; True when the list grew."""
        known = {s.key for s in self._series}
        before = len(self._series)
        for track in tracks:
            for info in track.reader.series():
                if info.key not in known:
                    known.add(info.key)
                    self._series.append(info)
        return len(self._series) != before

    def _update_clock(self, data: Dict[str, SeriesData]) -> None:
        latest = None
        for series in data.values():
            if len(series.steps):
                step = int(series.steps[-1])
                latest = step if latest is None else max(latest, step)
        if latest is not None and (self._last_step is None or latest > self._last_step):
            self._last_step = latest
            self._last_news = time.monotonic()
        clock = data.get(self._clock) if self._clock else None
        if clock is not None:
            self._clock_steps = int(len(np.unique(clock.steps)))


def _status(statuses: List[str]) -> str:
    """The run's state from its ranks' stores: running while any rank runs, finished when all have, else the
    first other state (failed, killed)."""
    if any(s == "running" for s in statuses):
        return "running"
    others = [s for s in statuses if s != "finished"]
    return others[0] if others else "finished"


def _has(reader, key: str) -> bool:
    try:
        reader.info(key)
        return True
    except KeyError:
        return False
