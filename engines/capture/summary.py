"""What a capture wrote, and for the records it did not write, why.

Reasons fall in three families: *filtered* (the config asked for it: scope, list, data_mode, apis, step, rank),
*failed* (a hook raised: logged once per reason, the record skipped, training untouched) and *unsupported* (a value
the tool cannot summarise, such as a meta or sparse tensor). ``as_dict()`` is the ``run_finished`` summary, in raw
numbers (bytes as an int): the CLI and the app format them (``probe_tui.formatting``).
"""

import logging
import threading
import traceback
from collections import Counter
from typing import Any, Dict, List, Optional, Set

from engines.capture.highlights import TensorHighlights

log = logging.getLogger("engines.capture")

FAILED = "failed"
UNSUPPORTED = "unsupported"


class CaptureSummary:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records = 0
        self.rows = 0
        self.bytes = 0
        self.tensor_bytes = 0
        self.steps: List[int] = []
        self.steps_skipped: List[int] = []
        self.records_per_step: Dict[int, int] = {}
        self.missing: Counter = Counter()
        self.failure_detail: Dict[str, str] = {}
        self.notes: List[str] = []
        self._noted: Set[str] = set()
        self.dump_stopped: Optional[str] = None  # why the store stopped taking steps: disk_full, disk_budget, ...
        self.store_refused: Optional[str] = None  # the store could not be opened: why (exit code 2)
        self.highlights = TensorHighlights()
        self.not_captured: Dict[str, str] = {}  # what ran but could not be recorded (a compiled graph) -> why

    # -- counting --------------------------------------------------------------------------------------------
    def skipped(self, reason: str, n: int = 1) -> None:
        self.missing[reason] += n

    def failed(self, where: str, exc: BaseException) -> None:
        """A hook raised: count it, and log the first occurrence of each (place, exception type) once."""
        key = "%s: %s in %s" % (FAILED, type(exc).__name__, where)
        with self._lock:
            first = key not in self.failure_detail
            self.missing[key] += 1
            if first:
                self.failure_detail[key] = "%s: %s" % (type(exc).__name__, exc)
        if first:
            log.warning("probe-tui: %s failed (%s: %s); the record is skipped, training continues. %s",
                        where, type(exc).__name__, exc, _last_frame(exc))

    def unsupported(self, type_name: str, n: int = 1) -> None:
        self.missing["%s: %s" % (UNSUPPORTED, type_name)] += n

    def note(self, text: str, level: int = logging.WARNING) -> None:
        """A one-time remark (budget reached, compiled region not captured...), logged once and kept."""
        if text in self._noted:
            return
        self._noted.add(text)
        self.notes.append(text)
        log.log(level, "probe-tui: %s", text)

    def not_captured_region(self, what: str, why: str) -> None:
        """Something ran that the capture cannot see (a compiled graph): named once in the notes, with why."""
        if what in self.not_captured:
            return
        self.not_captured[what] = why
        self.note("not captured: %s (%s)" % (what, why))

    def step_skipped(self, step: int) -> None:
        """A whole step the step filter left out (nothing installed, nothing counted)."""
        if not self.steps_skipped or self.steps_skipped[-1] != step:
            self.steps_skipped.append(step)

    def step_written(self, step: int, records: int, rows: int, nbytes: int) -> None:
        self.steps.append(step)
        self.records += records
        self.rows += rows
        self.bytes += nbytes
        self.records_per_step[step] = records

    # -- reporting -------------------------------------------------------------------------------------------
    def as_dict(self) -> Dict[str, Any]:
        return {
            "records": self.records,
            "tensor_rows": self.rows,
            "bytes": self.bytes,
            "steps": list(self.steps),
            "steps_skipped": list(self.steps_skipped),
            "records_per_step": {str(k): v for k, v in self.records_per_step.items()},
            "missing": dict(sorted(self.missing.items())),
            "failures": dict(self.failure_detail),
            "notes": list(self.notes),
            "dump_stopped": self.dump_stopped,
            "highlights": self.highlights.as_dict(),
        }


def compact_steps(steps: List[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    return _compact_steps(steps)


def _compact_steps(steps: List[int]) -> str:
    if not steps:
        return ""
    steps = sorted(set(steps))
    parts = []
    start = prev = steps[0]
    for s in steps[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if s is not None:
            start = prev = s
    return ",".join(parts)


def _last_frame(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return "(at %s:%s)" % (f.filename, f.lineno)
