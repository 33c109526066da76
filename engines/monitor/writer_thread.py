"""Moves the monitor's store writes off the training thread.

At a step end the training thread only copies the step's metrics to the host; a daemon thread then stores them,
judges the alert rules, commits the step and writes the exports (HDF5 writes cost milliseconds a step, as much
as all the metrics together). Alerts come back through ``drain_alerts`` so that the training thread reports
them. The queue is bounded: if the disk falls behind, training waits rather than memory growing.
"""

import logging
import queue
import threading
from typing import List

from engines.monitor.alerts import Alert

log = logging.getLogger(__name__)
_STOP = object()


class BackgroundWriter:
    """Wraps a MetricsWriter; same ``write_step`` / ``write_late`` / ``close`` interface."""

    def __init__(self, writer, max_pending: int = 64):
        self.writer = writer
        self._queue: "queue.Queue" = queue.Queue(maxsize=max_pending)
        self._alerts: List[Alert] = []
        self._lock = threading.Lock()
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="probe-tui-monitor-writer", daemon=True)
        self._thread.start()

    def __getattr__(self, name):  # counters and settings of the wrapped writer
        return getattr(self.writer, name)

    def set_rules(self, rules) -> None:
        self._queue.put(("rules", rules))

    def write_step(self, step, keys, values, shapes=None, dtypes=None) -> None:
        self._queue.put(("step", step, list(keys), values, shapes and list(shapes), dtypes and list(dtypes)))

    def write_late(self, step, keys, values) -> None:
        self._queue.put(("late", step, list(keys), values))

    def drain_alerts(self) -> List[Alert]:
        with self._lock:
            alerts, self._alerts = self._alerts, []
        return alerts

    def flush(self) -> None:
        """Wait until everything queued so far is stored."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                kind = item[0]
                if kind == "rules":
                    self.writer.set_rules(item[1])
                    continue
                if kind == "step":
                    alerts = self.writer.write_step(*item[1:])
                else:
                    alerts = self.writer.write_late(*item[1:])
                if alerts:
                    with self._lock:
                        self._alerts.extend(alerts)
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
