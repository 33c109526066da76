"""The reader API of monitor metrics: open a store, list series, read a step window, follow new rows.

Works on a finished run, on a run in progress (another process is writing it: SWMR, or per-step files on
NFS/Lustre) and on what a killed run left. Needs numpy and h5py only. The app's live view calls it from a thread::

    from engines.monitor.reader import open_metrics
    metrics = open_metrics("probe_dump/latest")           # a dump folder, run folder, rank folder or store file
    loss = metrics.read("train/loss/value", steps=(0, 100))
    for update in metrics.follow(poll_s=0.5):              # each newly committed step, until the run ends
        print(update.step, update.values.get("train/loss/value"), update.alerts)
"""

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from engines.monitor.metrics import series_key
from engines.monitor.store_layout import ALERTS, KIND, SERIES, VALUES
from engines.safe_fs import PathLike
from engines.store.closing import Closing


class MetricsError(Exception):
    """No metrics store where one was expected (one line naming the path)."""


@dataclass(frozen=True)
class SeriesInfo:
    id: int
    tag: str
    name: str
    metric: str
    module: str
    shape: str = ""
    dtype: str = ""

    @property
    def key(self) -> str:
        return series_key(self.tag, self.name, self.metric)


@dataclass
class Series:
    info: SeriesInfo
    steps: np.ndarray
    values: np.ndarray


@dataclass
class StepUpdate:
    """One newly committed step while following: ``values`` maps series keys to values."""

    step: int
    values: Dict[str, float]
    alerts: List[dict] = field(default_factory=list)


SeriesRef = Union[str, int, SeriesInfo]


def _resolve_rank_dir(path: Path, rank: Optional[int]) -> Path:
    path = Path(path)
    if path.is_file():
        if path.suffix == ".h5":
            return path
        if path.name == "latest":  # a text file holding the run id where symlinks fail
            return _resolve_rank_dir(path.parent / path.read_text().strip(), rank)
        raise MetricsError(f"{path}: not a metrics store (expected a folder or a .h5 file)")
    if not path.is_dir():
        raise MetricsError(f"{path}: no such folder")
    if (path / "segments.jsonl").exists() or (path / f"{KIND}.h5").exists():
        return path
    if (path / "latest").exists() and not (path / "run.json").exists():
        return _resolve_rank_dir(path / "latest", rank)
    ranks = sorted((int(p.name[4:]), p) for p in path.glob("rank*") if p.is_dir() and p.name[4:].isdigit())
    if not ranks:
        raise MetricsError(f"{path}: no rank folder with a metrics store (is it a monitor run?)")
    if rank is None:
        return ranks[0][1]
    for r, p in ranks:
        if r == rank:
            return p
    raise MetricsError(f"{path}: no rank{rank} folder (ranks: {', '.join(str(r) for r, _ in ranks)})")


def open_metrics(path: PathLike, rank: Optional[int] = None) -> "MetricsReader":
    """Open the metrics store of ``path``: a dump folder (its ``latest`` run), a run folder (``rank`` or the
    lowest rank), a rank folder or a ``metrics.h5`` file."""
    return MetricsReader(_resolve_rank_dir(Path(path), rank))


class MetricsReader(Closing):
    def __init__(self, rank_dir: PathLike) -> None:
        from engines.store import StoreError, StoreReader

        try:
            self._store = StoreReader(rank_dir, KIND)
        except StoreError as exc:
            raise MetricsError(str(exc)) from None
        self.path = Path(rank_dir)
        self._series: List[SeriesInfo] = []
        self._by_key: Dict[str, SeriesInfo] = {}
        self._step_col = np.zeros(0, dtype=np.int64)  # the committed values rows' step column, read once
        self._lock = threading.RLock()
        self._load_series()

    # -- what is there -----------------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        return self._store.meta

    @property
    def rank(self) -> int:
        """The rank that wrote this store (0 when its metadata does not say)."""
        try:
            return int(self._store.meta.get("rank") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def status(self) -> str:
        """``running``, ``finished``, ``failed``, ``killed``, ... (see StoreReader.status)."""
        return self._store.status

    def refresh(self) -> bool:
        """Take in steps committed since the last look; True when there are new ones."""
        with self._lock:
            new = self._store.refresh()
            if new:
                self._load_series()
            return new

    def _load_series(self) -> None:
        n = self._store.num_rows(SERIES)
        if n <= len(self._series):
            return
        data = self._store.read(SERIES, rows=slice(len(self._series), n))
        for i in range(len(data["id"])):
            info = SeriesInfo(int(data["id"][i]), str(data["tag"][i]), str(data["name"][i]),
                              str(data["metric"][i]), str(data["module"][i]), str(data["shape"][i]),
                              str(data["dtype"][i]))
            self._series.append(info)
            self._by_key[info.key] = info

    def _load_steps(self) -> np.ndarray:
        """The step of every committed values row (non-decreasing: steps are appended in order)."""
        n = self._store.num_rows(VALUES)
        if n > len(self._step_col):
            new = self._store.read(VALUES, ["step"], rows=slice(len(self._step_col), n))["step"]
            self._step_col = np.concatenate([self._step_col, new.astype(np.int64)])
        return self._step_col

    def steps(self) -> List[int]:
        """The collected steps committed so far, in order."""
        with self._lock:
            return [int(s) for s in np.unique(self._load_steps())]

    def series(self, tag: Optional[str] = None, name: Optional[str] = None,
               metric: Optional[str] = None) -> List[SeriesInfo]:
        """Every series (or those of a tag / name / metric), in the order they first appeared."""
        with self._lock:
            return [s for s in self._series if (tag is None or s.tag == tag) and (name is None or s.name == name)
                    and (metric is None or s.metric == metric)]

    def info(self, series: SeriesRef) -> SeriesInfo:
        if isinstance(series, SeriesInfo):
            return series
        if isinstance(series, (int, np.integer)):
            if 0 <= int(series) < len(self._series):
                return self._series[int(series)]
            raise KeyError(f"series id {series}: the store has {len(self._series)} series")
        info = self._by_key.get(str(series))
        if info is None:
            raise KeyError(f"series {series!r}: not in this store (keys look like 'grad_reduced/fc.weight/norm')")
        return info

    # -- reading -----------------------------------------------------------------------------------------------
    def _window_rows(self, steps: Optional[Tuple[Optional[int], Optional[int]]]) -> Union[slice, np.ndarray]:
        """The committed values rows of a step window: a slice when rows are in step order, else indices."""
        col = self._load_steps()
        if steps is None:
            return slice(0, len(col))
        lo, hi = steps
        lo = np.iinfo(np.int64).min if lo is None else int(lo)
        hi = np.iinfo(np.int64).max if hi is None else int(hi)
        if len(col) < 2 or np.all(col[1:] >= col[:-1]):
            return slice(int(np.searchsorted(col, lo, "left")), int(np.searchsorted(col, hi, "right")))
        return np.flatnonzero((col >= lo) & (col <= hi))

    def read(self, series: SeriesRef, steps: Optional[Tuple[int, int]] = None) -> Series:
        """One series over a step window (inclusive; None for all steps): its steps and values, in step order."""
        return self.read_many([series], steps)[self.info(series).key]

    def read_many(self, series: Sequence[SeriesRef], steps: Optional[Tuple[int, int]] = None) -> Dict[str, Series]:
        with self._lock:
            infos = [self.info(s) for s in series]
            rows = self._window_rows(steps)
            empty = isinstance(rows, slice) and rows.stop <= rows.start or not isinstance(rows, slice) and not rows.size
            if empty:
                data = {"step": np.zeros(0, np.int64), "series": np.zeros(0, np.int64), "value": np.zeros(0)}
            else:
                data = self._store.read(VALUES, rows=rows)
        out = {}
        for info in infos:
            mask = data["series"] == info.id
            order = np.argsort(data["step"][mask], kind="stable")
            out[info.key] = Series(info, data["step"][mask][order], data["value"][mask][order])
        return out

    def alerts(self, steps: Optional[Tuple[int, int]] = None, since: int = 0) -> List[dict]:
        """Alerts (step, series, tag, name, module, metric, value, baseline, rule, kind, message, and the
        ``rank`` that wrote them), in order; ``since``: skip the first ``since`` alerts (a follower reads only what
        is new)."""
        with self._lock:
            total = self._store.num_rows(ALERTS)
            if total <= since:
                return []
            rows = _rows(self._store.read(ALERTS, rows=slice(since, total)))
        rank = self.rank
        for row in rows:
            row["rank"] = rank
        if steps is None:
            return rows
        lo, hi = steps
        return [r for r in rows if (lo is None or r["step"] >= lo) and (hi is None or r["step"] <= hi)]

    # -- following ---------------------------------------------------------------------------------------------
    def follow(self, callback: Optional[Callable[[StepUpdate], None]] = None, *, poll_s: float = 0.5,
               from_start: bool = True, timeout_s: Optional[float] = None,
               stop: Optional[threading.Event] = None) -> Optional[Iterator[StepUpdate]]:
        """New steps as they are committed, until the writer closes (or dies), ``stop`` is set, or ``timeout_s``
        passes without news. With ``callback`` it blocks and calls it per step (run it in a thread); without,
        it returns a generator. ``from_start=False`` skips the steps already committed."""
        updates = self._follow(poll_s, from_start, timeout_s, stop)
        if callback is None:
            return updates
        for update in updates:
            callback(update)
        return None

    def _follow(self, poll_s: float, from_start: bool, timeout_s: Optional[float],
                stop: Optional[threading.Event]) -> Iterator[StepUpdate]:
        with self._lock:
            self._store.refresh()
            self._load_series()
            seen_values = 0 if from_start else self._store.num_rows(VALUES)
            seen_alerts = 0 if from_start else self._store.num_rows(ALERTS)
        last_news = time.monotonic()
        while True:
            with self._lock:
                n_values, n_alerts = self._store.num_rows(VALUES), self._store.num_rows(ALERTS)
                batch = self._updates(seen_values, n_values, seen_alerts, n_alerts)
                seen_values, seen_alerts = n_values, n_alerts
            for update in batch:
                yield update
            if batch:
                last_news = time.monotonic()
            if stop is not None and stop.is_set():
                return
            if self._store.status != "running":
                if not self.refresh():
                    return
                continue
            if timeout_s is not None and time.monotonic() - last_news > timeout_s:
                return
            if stop is not None:
                stop.wait(poll_s)
            else:
                time.sleep(poll_s)
            self.refresh()

    def _updates(self, v0: int, v1: int, a0: int, a1: int) -> List[StepUpdate]:
        if v1 <= v0 and a1 <= a0:
            return []
        self._load_series()
        updates: Dict[int, StepUpdate] = {}
        if v1 > v0:
            data = self._store.read(VALUES, rows=slice(v0, v1))
            for step, sid, value in zip(data["step"].tolist(), data["series"].tolist(), data["value"].tolist()):
                update = updates.setdefault(step, StepUpdate(step, {}))
                update.values[self._series[sid].key] = value
        if a1 > a0:
            for alert in _rows(self._store.read(ALERTS, rows=slice(a0, a1))):
                updates.setdefault(alert["step"], StepUpdate(alert["step"], {})).alerts.append(alert)
        return [updates[s] for s in sorted(updates)]

    def close(self) -> None:
        self._store.close()


def _rows(data: Dict[str, np.ndarray]) -> List[dict]:
    n = len(next(iter(data.values()))) if data else 0
    out = []
    for i in range(n):
        row = {}
        for column, values in data.items():
            value = values[i]
            row[column] = value.item() if isinstance(value, np.generic) else value
        out.append(row)
    return out
