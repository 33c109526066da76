"""Moves the monitor's store writes off the training thread.

At a step end the training thread only copies the step's metrics to the host; a daemon thread then appends them,
judges the alert rules and writes the exports. Commits (the HDF5 writes, milliseconds each, during which h5py
holds the GIL and so stalls the training thread too) happen at most once per ``commit_interval`` seconds and
whenever the queue has been idle that long: a follower sees a step at most about a second after it ends, and
fast training pays for one write per interval, not one per step. Alerts come back through ``drain_alerts`` so
that the training thread reports them. The queue is bounded: if the disk falls behind, training waits rather
than memory growing.
"""

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

import numpy as np

from engines.monitor.alerts import Alert, RuleSpec

if TYPE_CHECKING:
    from engines.monitor.writer import MetricsWriter, SeriesKey

log = logging.getLogger(__name__)
_STOP = object()
COMMIT_INTERVAL_S = 1.0


class BackgroundWriter:
    """Wraps a MetricsWriter; same ``write_step`` / ``write_late`` / ``close`` interface."""

    def __init__(self, writer: "MetricsWriter", max_pending: int = 64,
                 commit_interval: float = COMMIT_INTERVAL_S) -> None:
        self.writer = writer
        self.commit_interval = float(commit_interval)
        self._queue: "queue.Queue" = queue.Queue(maxsize=max_pending)
        self._alerts: List[Alert] = []
        self._lock = threading.Lock()
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="probe-tui-monitor-writer", daemon=True)
        self._thread.start()

    def __getattr__(self, name: str) -> Any:  # counters and settings of the wrapped writer
        return getattr(self.writer, name)

    def set_rules(self, rules: Sequence[RuleSpec]) -> None:
        self._queue.put(("rules", rules))

    def write_step(self, step: int, keys: Sequence["SeriesKey"], values: np.ndarray,
                   shapes: Optional[Sequence[str]] = None, dtypes: Optional[Sequence[str]] = None) -> None:
        self._queue.put(("step", step, list(keys), values, shapes and list(shapes), dtypes and list(dtypes)))

    def write_late(self, step: int, keys: Sequence["SeriesKey"], values: np.ndarray) -> None:
        self._queue.put(("late", step, list(keys), values))

    def drain_alerts(self) -> List[Alert]:
        with self._lock:
            alerts, self._alerts = self._alerts, []
        return alerts

    def flush(self) -> None:
        """Wait until everything queued so far is stored and committed."""
        done = threading.Event()
        self._queue.put(("flush", done))
        done.wait()

    def _commit(self) -> None:
        try:
            self.writer.commit()
        except Exception:
            self.errors += 1
            log.exception("probe-tui monitor: committing to the store failed")
        self._last_commit = time.monotonic()

    def _run(self) -> None:
        self._last_commit = time.monotonic()
        pending = False
        while True:
            timeout = None
            if pending:
                timeout = max(0.0, self.commit_interval - (time.monotonic() - self._last_commit))
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._commit()
                pending = False
                continue
            try:
                if item is _STOP:
                    self._commit()
                    return
                kind = item[0]
                if kind == "rules":
                    self.writer.set_rules(item[1])
                elif kind == "flush":
                    self._commit()
                    pending = False
                    item[1].set()
                else:
                    append = self.writer.append_step if kind == "step" else self.writer.append_late
                    alerts = append(*item[1:])
                    pending = True
                    if alerts:
                        with self._lock:
                            self._alerts.extend(alerts)
                    if time.monotonic() - self._last_commit >= self.commit_interval:
                        self._commit()
                        pending = False
            except Exception:  # a failed write loses that step, never the run
                self.errors += 1
                log.exception("probe-tui monitor: storing a step failed")
            finally:
                self._queue.task_done()

    def close(self, status: str = "finished") -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self.writer.close(status)
