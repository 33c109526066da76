"""overflow_check's per-call processor, framework-neutral (``engines.capture.processor``).

The records are the capture's own (L1 API capture, L0 module/cell capture, backward hooks, names, filters, args),
but each tensor gets a finiteness test instead of statistics (the adapter's ``OverflowEntries``), and each
finished call is classified (``engines.overflow.origin``) in the order the calls finished. Calls are classified
as soon as their facts are on the host: at once on the CPU; on an accelerator in batches, at step end or when the
tensors held for a batch pass ``hold_bytes`` (one transfer per batch, docs/decisions/0017-overflow-and-syncing.md).
Flagged calls, up to ``overflow_nums`` in the run, are kept with their tensors (inputs as they were before the
call); everything else is dropped, so the dump holds only the overflowing calls. Once the limit is reached capture
stops, for good after that step.

``build_session`` joins it to a framework: the adapter's capture session (``<adapter>.session.Session``) with its
finiteness tests (``<adapter>.overflow_entries``) plugged in.
"""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from engines.capture import naming
from engines.capture.options import CaptureOptions
from engines.capture.processor import CallProcessor
from engines.capture.records import StepBuffer
from engines.capture.session import CaptureSession
from engines.capture.summary import CaptureSummary
from engines.overflow import origin as og
from engines.overflow.entries import OverflowEntriesBase
from engines.overflow.report import FlaggedCall, StepFindings, code_line

DEFAULT_HOLD_BYTES = int(float(os.environ.get("PROBE_TUI_OVERFLOW_HOLD_MB", "512")) * (1 << 20))
DEFAULT_BATCH_RECORDS = 4096


def build_session(adapter: Callable[[str], Any], options: CaptureOptions,
                  sink_factory: Optional[Callable[[int], Any]], summary: Optional[CaptureSummary] = None,
                  overflow_nums: int = 1, on_step: Optional[Callable[[StepFindings], None]] = None,
                  rank: Optional[int] = None, batched: bool = False, hold_bytes: int = DEFAULT_HOLD_BYTES,
                  batch_records: int = DEFAULT_BATCH_RECORDS) -> CaptureSession:
    """The overflow_check session of the framework whose adapter modules ``adapter(name)`` returns."""
    session: CaptureSession = adapter("session").Session(options, sink_factory, summary=summary, rank=rank)
    tests = adapter("overflow_entries")
    entries = tests.OverflowEntries(session.summary, batched=batched)
    return session.plug(OverflowProcessor(entries, tests.requires_grad_flag, overflow_nums, on_step, hold_bytes,
                                          batch_records))


class OverflowProcessor(CallProcessor):
    def __init__(self, entries: OverflowEntriesBase, requires_grad_flag: Callable[[Any], int],
                 overflow_nums: int = 1, on_step: Optional[Callable[[StepFindings], None]] = None,
                 hold_bytes: int = DEFAULT_HOLD_BYTES, batch_records: int = DEFAULT_BATCH_RECORDS) -> None:
        self.entries = entries
        self.requires_grad_flag = requires_grad_flag
        self.overflow_nums = overflow_nums
        self.on_step = on_step
        self.hold_bytes = hold_bytes
        self.batch_records = batch_records
        self.hits = 0
        self.limit_reached = False
        self.syncs = 0  # batches classified (host transfers on an accelerator)
        self._flushed: Optional[StepFindings] = None

    session: CaptureSession

    def attach(self, session: CaptureSession) -> None:
        super().attach(session)
        session.entries = self.entries  # the session's flush and close use the finiteness tests' entries
        self._reset_step()

    def _reset_step(self) -> None:
        self.findings = StepFindings(self.session.step)
        self._done: List[int] = []
        self._processed: set = set()
        self._kept: List[int] = []
        self._rows_of: Dict[int, List[int]] = {}
        self._refs: Dict[int, int] = {}
        self._row_cursor = 0
        self._inplace: Dict[int, bool] = {}
        self._order = 0
        self._bad_forward: set = set()  # forward records of this step whose tensors held bad values
        # forward records of this step that computed on uninitialised memory: their backward does too
        self._uninitialised_forward: set = set()
        self._untraced: set = set()  # entries computed by code no recorded call covers
        self._marks: Dict[int, int] = {}  # record -> collectives issued when it finished (the cross-rank clock)

    # -- rows ------------------------------------------------------------------------------------------------
    def add_row(self, record: int, slot: str, t: Any, save: bool = False, fresh: bool = False) -> None:
        entries = self.entries
        e = entries.entry(t, False, fresh)
        if slot == "input.0" and self._is_inplace(record):
            entries.keep_pre_call(e, t, self.hold_bytes)
        dtype, shape, device = entries.meta[e]
        self.session.buffer.add_row(record, slot, dtype, shape, self.requires_grad_flag(t), e, device, False)

    def _is_inplace(self, record: int) -> bool:
        got = self._inplace.get(record)
        if got is None:
            b = self.session.buffer
            got = False
            if b.rec_kind[record] == naming.KIND_API and b.rec_direction[record] == naming.DIRECTION_FORWARD:
                api = b.rec_name[record].rsplit(".", 2)[0].partition(".")[2]
                args = b.rec_args[record]
                kwargs = args.get("kwargs") if isinstance(args, dict) else None
                got = (api.endswith("_") and not api.endswith("__")) or \
                    bool(isinstance(kwargs, dict) and kwargs.get("inplace") is True)
            self._inplace[record] = got
        return got

    # -- classification --------------------------------------------------------------------------------------
    def record_done(self, record: int) -> None:
        if self.limit_reached:
            return
        self._done.append(record)
        tracker = getattr(self.session, "collectives", None)
        if tracker is not None:
            self._marks[record] = tracker.mark()
        entries = self.entries
        if not entries.pending or len(self._done) >= self.batch_records or entries.held_bytes >= self.hold_bytes:
            try:
                self._process()
            except Exception as exc:  # never break training
                self.session.summary.failed("overflow check", exc)
                self._done = []

    def _index_rows(self) -> None:
        b = self.session.buffer
        n = len(b.row_record)
        if n < self._row_cursor:  # a failed call was rolled back: index again
            self._rows_of = {}
            self._refs = {}
            self._row_cursor = 0
        for i in range(self._row_cursor, n):
            r = b.row_record[i]
            if r in self._processed:
                continue
            self._rows_of.setdefault(r, []).append(i)
            e = b.row_entry[i]
            if e >= 0:
                self._refs[e] = self._refs.get(e, 0) + 1
        self._row_cursor = n

    def _process(self, everything: bool = False) -> None:
        entries = self.entries
        if entries.pending:
            entries.resolve()
            self.syncs += 1
            self.findings.syncs += 1
        self._index_rows()
        todo = self._done
        self._done = []
        if everything:
            seen = set(todo)
            todo = todo + [r for r in range(self.session.buffer.num_records) if r not in seen and r not in self._processed]
        for r in todo:
            if r in self._processed or r >= self.session.buffer.num_records:
                continue
            self._processed.add(r)
            self._classify(r)

    def _classify(self, r: int) -> None:
        b = self.session.buffer
        entries = self.entries
        rows = self._rows_of.pop(r, [])
        self.findings.checked += 1
        suspicious = False
        for i in rows:
            e = b.row_entry[i]
            if e >= 0 and entries.nonfinite_hint(e):
                suspicious = True
                break
        if suspicious and not self.limit_reached:
            self._judge(r, rows)
        for i in rows:
            e = b.row_entry[i]
            if e < 0:
                continue
            left = self._refs.get(e, 1) - 1
            if left <= 0:
                self._refs.pop(e, None)
                entries.release(e)
            else:
                self._refs[e] = left

    def _judge(self, r: int, rows: List[int]) -> None:
        # First with the kinds the sums tell (no sync: most suspicious calls are masks); a call that comes out
        # flagged is judged again on the exact kinds (a step that overflows may sync more, docs/decisions/0017-overflow-and-syncing.md).
        verdict, facts = self._verdict(r, rows, exact=False)
        if verdict.flagged:
            verdict, facts = self._verdict(r, rows, exact=True)
        ins, outs, out_entries, in_entries = facts
        b = self.session.buffer
        entries = self.entries
        kind = b.rec_kind[r]
        backward = b.rec_direction[r] == naming.DIRECTION_BACKWARD
        for f, e in zip(outs, out_entries):
            entries.set_taint(e, verdict.output_taint if f.kinds else og.FINITE)
        if verdict.origin == og.MASKED and (naming.allocates_uninitialised(b.rec_name[r]) or any(
                f.kinds and e in entries.uninitialised_entries for f, e in zip(ins, in_entries))):
            # non-finite values from uninitialised memory, passed on: remembered so that what is computed from
            # them, and the backward of this call, are not taken for an overflow either
            entries.uninitialised_entries.update(e for f, e in zip(outs, out_entries) if f.kinds)
            if not backward:
                self._uninitialised_forward.add(b.rec_name[r])
        if verdict.origin == og.MASKED:
            self.findings.masks += 1
        if verdict.flagged and not backward:
            self._bad_forward.add(b.rec_name[r])
        if not verdict.flagged:
            return
        self.hits += 1
        self.findings.flagged += 1
        keep = self.overflow_nums < 0 or self.hits <= self.overflow_nums
        slots = {f.slot: og.kinds_text(f.kinds) for f in ins + outs if f.kinds}
        lost: Dict[str, str] = {}
        if keep:
            self._kept.append(r)
            for i in rows:
                e = b.row_entry[i]
                if e < 0:
                    continue
                if entries.save(e):
                    b.row_save[i] = True
                else:
                    lost[b.row_slot[i]] = entries.lost.get(e, "not saved")
        call = FlaggedCall(self._order, b.rec_name[r], kind, b.rec_direction[r], verdict.origin, verdict.reason,
                           b.rec_parent[r], keep, slots, lost, self._where(r))
        self._link(call, r)
        self.findings.add(call)
        self._order += 1
        if self.overflow_nums >= 0 and self.hits >= self.overflow_nums:
            self.limit_reached = True
            self.findings.stopped = True
            self.session.running = False  # the function mode and module hooks pass calls through from now on

    def _link(self, call: FlaggedCall, r: int) -> None:
        """The call's place among its rank's collectives (``clock``), and the collective it is, if one."""
        args = self.session.buffer.rec_args[r]
        coll = args.get("collective") if isinstance(args, dict) else None
        if isinstance(coll, dict):
            call.collective = coll
        tracker = getattr(self.session, "collectives", None)
        mark = self._marks.get(r)
        if tracker is not None and mark is not None:
            call.clock = tracker.clock(mark)

    def _verdict(self, r: int, rows: List[int], exact: bool
                 ) -> Tuple[og.Verdict, Tuple[List[og.TensorFacts], List[og.TensorFacts], List[int], List[int]]]:
        b = self.session.buffer
        entries = self.entries
        kind = b.rec_kind[r]
        backward = b.rec_direction[r] == naming.DIRECTION_BACKWARD
        kinds_of = entries.kinds_of if exact else entries.approx_kinds
        ins: List[og.TensorFacts] = []
        outs: List[og.TensorFacts] = []
        in_entries: List[int] = []
        out_entries: List[int] = []
        untraced = False
        for i in rows:
            e = b.row_entry[i]
            if e < 0:
                continue
            slot = b.row_slot[i]
            facts = og.TensorFacts(slot, kinds_of(e))
            if kind != naming.KIND_PARAM_GRAD and og.is_input_slot(slot):
                if facts.kinds:
                    taint = entries.taint_of(e)
                    if taint is None:
                        if backward:
                            taint = og.BAD
                        elif e in entries.computed:
                            # computed this step by code the level does not record (functional code between
                            # modules at L0): bad, and where it appeared is worth saying
                            taint = og.BAD
                            untraced = True
                            self._untraced.add(e)
                        else:
                            taint = og.external_taint(facts.kinds, entries.grad.get(e))
                        entries.set_taint(e, taint)
                    elif e in self._untraced:
                        untraced = True
                    facts.taint = taint
                ins.append(facts)
                in_entries.append(e)
            else:
                outs.append(facts)
                out_entries.append(e)
        if kind == naming.KIND_PARAM_GRAD:
            verdict = _gradient_verdict(outs)
        elif naming.allocates_uninitialised(b.rec_name[r]):
            verdict = og.uninitialised(outs)
        elif backward and forward_of(b.rec_name[r]) in self._uninitialised_forward and \
                not any(f.kinds and f.taint == og.BAD for f in ins):
            verdict = og.Verdict(og.MASKED, og.MASK, "its forward call computed on uninitialised memory")
        elif backward and forward_of(b.rec_name[r]) in self._bad_forward:
            # A backward computation also reads what its forward saved: if that held bad values, so did it.
            verdict = og.Verdict(og.INPUTS, og.BAD, "its forward call's tensors were non-finite")
        else:
            args = b.rec_args[r]
            fills = og.fill_kinds(args)
            verdict = og.classify(ins, outs, fills)
            if isinstance(args, dict) and "collective" in args:
                verdict = og.received(verdict, args["collective"])
            if untraced and verdict.origin == og.INPUTS:
                where = b.rec_parent[r]
                verdict.reason += (", made by code this level does not record%s (L1 or mix names the op)"
                                   % (" in " + where if where else ""))
            if exact and verdict.origin == og.PRODUCED and not fills and not any(f.kinds for f in ins):
                for f, e in zip(ins, in_entries):
                    f.extremes = entries.extremes_of(e)
                if any(f.extremes for f in ins):
                    verdict = og.classify(ins, outs, fills)
        return verdict, (ins, outs, out_entries, in_entries)

    def _where(self, r: int) -> str:
        sid = self.session.buffer.rec_stack[r]
        if sid is None or sid < 0:
            return ""
        try:
            frames = self.session.stacks.frames(sid)
        except IndexError:
            return ""
        return code_line(frames[0]) if frames else ""

    # -- step end --------------------------------------------------------------------------------------------
    def before_flush(self) -> None:
        self._flushed = None
        try:
            with self.session._busy:
                self.session.complete_pending_backward()
                if not self.limit_reached or self._done:
                    self._process(everything=not self.limit_reached)
                self._keep_only(self._kept)
            self._flushed = self.findings
            if self.entries.deferred:
                self._flushed.syncs += self.entries.reads
        except Exception as exc:  # never break training: drop the step's records
            self.session.summary.failed("overflow check of step %d" % self.session.step, exc)
            self._keep_only([])

    def after_flush(self) -> None:
        findings = self._flushed
        if findings is not None and (findings.checked or findings.calls) and self.on_step is not None:
            try:
                self.on_step(findings)
            except Exception as exc:
                self.session.summary.failed("writing the overflow results of step %d" % findings.step, exc)
        self._reset_step()

    def _keep_only(self, records: List[int]) -> None:
        """Replace the step's buffer by the kept records (in dump order) and their rows."""
        old = self.session.buffer
        new = StepBuffer()
        mapping: Dict[int, int] = {}
        for r in sorted(records):
            mapping[r] = new.add_record(old.rec_name[r], old.rec_kind[r], old.rec_direction[r], old.rec_parent[r],
                                        old.rec_stack[r], old.rec_args[r], old.rec_flags[r])
        if mapping:
            for i, r in enumerate(old.row_record):
                nr = mapping.get(r)
                if nr is not None:
                    new.add_row(nr, old.row_slot[i], old.row_dtype[i], old.row_shape[i], old.row_requires_grad[i],
                                old.row_entry[i], old.row_device[i], old.row_save[i])
        self.session.buffer = new

    def before_step_end(self) -> None:
        self.findings.step = self.session.step

    def after_step_end(self) -> None:
        if self.limit_reached and not self.session.finished:
            self.session._finish_for_good()

    def backward_open(self) -> bool:
        return not self.limit_reached

    def may_start(self) -> bool:
        self.findings.step = self.session.step
        return not self.limit_reached

    def before_close(self) -> None:
        self.findings.step = self.session.step


def _gradient_verdict(outs: List[og.TensorFacts]) -> og.Verdict:
    bad = [f for f in outs if f.kinds]
    if not bad:
        return og.Verdict(og.CLEAN, og.FINITE, "")
    slots = ", ".join("%s (%s)" % (f.slot, og.kinds_text(f.kinds)) for f in bad[:3])
    return og.Verdict(og.INPUTS, og.BAD, "parameter gradients non-finite: %s" % slots)


def forward_of(backward_name: str) -> str:
    """``X.3.backward`` -> ``X.3.forward``; ``Module.a.Linear.backward.0`` -> ``Module.a.Linear.forward.0``."""
    if backward_name.endswith(".backward"):
        return backward_name[: -len("backward")] + "forward"
    head, sep, tail = backward_name.rpartition(".backward.")
    return head + ".forward." + tail if sep else backward_name
