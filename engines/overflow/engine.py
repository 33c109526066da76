"""What an ``overflow_check`` run writes and reports (its task object: ``engines.overflow.task``).

Writes ``<run>/rank<R>/dump.h5`` (the flagged calls, with their tensors) and ``overflow.h5`` (per step: what was
found and where it started; ``engines.overflow.results``). Exit code 3 when something was flagged (the runner
turns it into 0 without ``--fail-on-findings``).
"""

from typing import Any, Dict, List, Optional

from engines.capture.check_options import capture_options  # noqa: F401 (this module's interface)
from engines.capture.options import field_of as _get
from engines.capture.summary import CaptureSummary
from engines.overflow.report import StepFindings
from engines.overflow.results import OverflowWriter


def overflow_nums(job: Any) -> int:
    return int(_get(_get(job, "overflow_check", None), "overflow_nums", 1))


class OverflowTally:
    """Collects each step's findings for the run summary and writes them to the rank's ``overflow`` store."""

    def __init__(self, rank_dir: Any, meta: Dict[str, Any], store_mode: str) -> None:
        self.rank_dir = rank_dir
        self.meta = meta
        self.store_mode = store_mode
        self.writer: Optional[OverflowWriter] = None
        self.steps: List[StepFindings] = []

    def __call__(self, findings: StepFindings) -> None:
        self.steps.append(findings)
        if self.writer is None:
            self.writer = OverflowWriter(self.rank_dir, self.meta, mode=self.store_mode)
        self.writer.write(findings)

    def close(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close(status)
            self.writer = None

    @property
    def flagged(self) -> int:
        return sum(s.flagged for s in self.steps)


def summarise(steps: List[StepFindings], capture: CaptureSummary, run: Any, limit: int,
              limit_reached: bool) -> Dict[str, Any]:
    """The run summary: a verdict line, per-step first origins, the kept calls, and the detail for --json."""
    out: Dict[str, Any] = {}
    if run is not None:
        out["dump"] = str(getattr(run, "path", run))
    flagged_steps = [s for s in steps if s.flagged]
    kept = [(s.step, c) for s in steps for c in s.calls if c.kept]
    out["verdict"] = verdict_line(steps, limit, limit_reached)
    out["steps_checked"] = len(steps)
    out["flagged_calls"] = sum(s.flagged for s in steps)
    out["calls_kept"] = len(kept)
    out["masked_calls"] = sum(s.masks for s in steps)
    out["size_bytes"] = capture.bytes
    tables: List[Dict[str, Any]] = []
    if flagged_steps:
        tables.append({
            "title": "first non-finite value of each step",
            "columns": ["step", "call", "origin", "at", "what happened"],
            "rows": [[s.step, s.first.name, s.first.origin_name,
                      s.first.where.split(" ")[0] if s.first.where else (s.first.parent or "-"), s.first.reason]
                     for s in flagged_steps if s.first is not None],
        })
    if kept:
        tables.append({
            "title": "flagged calls kept in the dump (tensors saved for analyze-overflow)",
            "columns": ["step", "call", "origin", "non-finite tensors"],
            "rows": [[step, c.name, c.origin_name, "; ".join("%s: %s" % kv for kv in sorted(c.slots.items()))]
                     for step, c in kept],
        })
    notes = list(capture.notes)
    failures = [k for k in capture.missing if k.startswith("failed")]
    if failures:
        notes.append("some hooks failed (training went on): " + "; ".join(failures[:3]))
    if notes:
        tables.append({"title": "notes", "columns": ["note"], "rows": [[n] for n in notes]})
    if tables:
        out["tables"] = tables
    out["overflow"] = {"steps": [s.as_dict() for s in steps], "overflow_nums": limit,
                       "limit_reached": limit_reached}
    return out


def verdict_line(steps: List[StepFindings], limit: int, limit_reached: bool) -> str:
    flagged = [s for s in steps if s.flagged]
    if not steps:
        return "no step was checked (check the rank/step filters and the target)"
    if not flagged:
        masks = sum(s.masks for s in steps)
        extra = " (%d calls carried mask values, not counted)" % masks if masks else ""
        return "no overflow in %d checked step%s%s" % (len(steps), "" if len(steps) == 1 else "s", extra)
    s = flagged[0]
    first = s.first
    if first is None:  # a flagged step always has its first call
        return "overflow at step %d" % s.step
    where = " in %s" % first.parent if first.parent else ""
    text = "overflow at step %d: %s%s %s" % (s.step, first.name, where, first.reason)
    if first.where:
        text += " (%s)" % first.where
    if limit_reached:
        text += "; stopped after %d flagged call%s (overflow_nums %d)" % (limit, "" if limit == 1 else "s", limit)
    return text
