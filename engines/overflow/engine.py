"""``run_collection(job, run, events)`` for ``overflow_check``: run the target under the overflow session.

Writes ``<run>/rank<R>/dump.h5`` (the flagged calls, with their tensors) and ``overflow.h5`` (per step: what was
found and where it started; ``engines.overflow.results``). Returns exit code 3 when something was flagged (the
runner turns it into 0 without ``--fail-on-findings``).
"""

from typing import Any, Dict, List, Optional

from engines.capture.options import CaptureOptions
from engines.capture.options import field_of as _get
from engines.capture.sink import dump_sink_factory
from engines.capture.summary import CaptureSummary
from engines.collection import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_TARGET_FAILED,
    CollectionResult,
    CollectionRun,
)
from engines.overflow.report import StepFindings
from engines.overflow.results import OverflowWriter


def capture_options(job: Any) -> CaptureOptions:
    """The capture settings of an overflow_check job (records at its level, no statistics, every data_mode)."""
    output = _get(job, "output", None)
    return CaptureOptions(
        task="statistics",
        level=_get(job, "level", "L1"),
        ranks=tuple(_get(job, "rank", ()) or ()),
        steps=tuple(_get(job, "step", ()) or ()),
        seed=_get(job, "seed", None),
        compression=_get(output, "compression", "none") or "none",
        compression_level=_get(output, "compression_level", None),
        disk_budget=_get(output, "disk_budget", None),
        store_mode=_get(output, "store_mode", "auto") or "auto",
        dump_path=str(_get(job, "dump_path", "./probe_dump") or "./probe_dump"),
    )


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


def run_collection(job: Any, run: Any, events: Any) -> CollectionResult:
    options = capture_options(job)
    collection = CollectionRun(job, events)
    if not collection.available:
        return collection.refuse("overflow_check is not available for %s in this build" % collection.framework)
    session_mod, meta, rank = collection.session_module(options, "overflow_check", "overflow_session")
    summary = collection.summary
    tally = OverflowTally(run.rank_dir(rank), meta={**meta, "rank": rank}, store_mode=options.store_mode)

    def on_findings(findings: StepFindings) -> None:
        tally(findings)
        if findings.flagged:
            events.emit("message", level="warning", text=findings.line())

    sinks = dump_sink_factory(run.rank_dir, options, meta, summary)
    session = session_mod.OverflowSession(options, sinks, summary=summary, overflow_nums=overflow_nums(job),
                                          on_step=on_findings, rank=rank)
    capture = collection.adapter("zero_code").ZeroCodeCapture(options, sinks, summary=summary,
                                                              on_step_end=collection.on_step_end, session=session)
    result = collection.run(capture, on_finish=tally.close)
    out = summarise(tally.steps, summary, run, overflow_nums(job), session.limit_reached)
    if collection.losses:
        out["losses"] = collection.sorted_losses()
    if not result.ok:
        out["error"] = result.error
        return CollectionResult(EXIT_TARGET_FAILED, out)
    return CollectionResult(EXIT_FINDINGS if tally.flagged else EXIT_OK, out)


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
    where = " in %s" % first.parent if first.parent else ""
    text = "overflow at step %d: %s%s %s" % (s.step, first.name, where, first.reason)
    if first.where:
        text += " (%s)" % first.where
    if limit_reached:
        text += "; stopped after %d flagged call%s (overflow_nums %d)" % (limit, "" if limit == 1 else "s", limit)
    return text
