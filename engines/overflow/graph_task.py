"""``overflow_check`` at level L2 on MindSpore: the origin of non-finite values among graph-mode kernels.

The kernel dump is set up as for statistics at L2 (``engines.capture.graph_task``); when the target ends, each
dumped iteration is checked kernel by kernel (the adapter's ``graph_overflow``) and written as the overflow
task's usual results: ``overflow.h5`` (each step's findings) and, when something was flagged, ``dump.h5`` with
the first ``overflow_nums`` flagged kernels and their tensors (docs/OVERFLOW.md "Graph mode (MindSpore, L2)").
Once ``overflow_nums`` kernels are flagged the later steps are not checked (as the PyNative check stops).
"""

import os
from typing import Any, Dict, List, Set

from engines.capture.check_options import capture_options as check_capture_options
from engines.capture.graph_task import GraphCaptureTask
from engines.capture.options import CaptureOptions
from engines.collection import EXIT_FINDINGS, EXIT_NOT_CAPTURED, EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.frameworks import adapter_module
from engines.overflow.engine import OverflowTally, overflow_nums, summarise
from engines.overflow.report import StepFindings
from engines.steps import StepReporter
from engines.task import Say, TaskContext, run_meta


class GraphOverflowTask(GraphCaptureTask):
    @staticmethod
    def capture_options(job: Any) -> CaptureOptions:
        return check_capture_options(job)

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        super().__init__(ctx, run, reporter, say)
        self.limit = overflow_nums(ctx.job)
        self.tallies: Dict[int, OverflowTally] = {}
        self.limit_reached = False
        self.kernels_seen = 0

    def _tally(self, rank: int) -> OverflowTally:
        if rank not in self.tallies:
            meta = run_meta(self.ctx, self.options, "overflow_check")
            meta["run_meta"]["level"] = "L2"
            self.tallies[rank] = OverflowTally(self.run.rank_dir(rank), meta={**meta, "rank": rank},
                                               store_mode=self.options.store_mode)
        return self.tallies[rank]

    def _check(self) -> None:
        records = adapter_module(self.ctx.framework, "graph_records")
        checks = adapter_module(self.ctx.framework, "graph_overflow")
        steps = set(self.options.steps) if self.options.steps else None
        memory: Dict[int, Dict[Any, int]] = {}
        kept: Dict[int, int] = {}
        seen: Dict[int, Set[str]] = {}
        for (rank, step), ks in records.grouped_steps(os.path.join(self.raw, "raw"), steps):
            self.kernels_seen += len(ks)
            done = kept.get(rank, 0)
            if self.limit >= 0 and done >= self.limit:
                continue  # overflow_nums reached: the check is off for good on this rank
            left = -1 if self.limit < 0 else self.limit - done
            findings, keep = checks.check_step(step, ks, memory.setdefault(rank, {}), left)
            kept[rank] = done + len(keep)
            if findings.stopped:
                self.limit_reached = True
            if keep:
                writer = self._writer(rank)
                n_records, n_rows = records.write_step(writer, step, ks, save_tensors=True,
                                                       high=self.options.precision == "high",
                                                       seen_modules=seen.setdefault(rank, set()), keep=keep)
                writer.commit_step(step)
                self.summary.step_written(step, n_records, n_rows, 0)
            self._tally(rank)(findings)
            if findings.flagged:
                self.say("warning", findings.line())

    def end(self, status: str) -> None:
        self._restore_env()
        try:
            self._check()
        except Exception as exc:  # never a traceback for the user's run: the summary says what failed
            self.summary.failed("graph kernel overflow check", exc)
        finally:
            self._close(status)
            for tally in self.tallies.values():
                tally.close(status)

    def _steps(self) -> List[StepFindings]:
        return [s for rank in sorted(self.tallies) for s in self.tallies[rank].steps]

    def partial_summary(self) -> Dict[str, Any]:
        return summarise(self._steps(), self.summary, self.run, self.limit, self.limit_reached)

    def outcome(self, result: Any) -> CollectionResult:
        out = self.partial_summary()
        if not result.ok:
            out["error"] = result.error
            return CollectionResult(EXIT_TARGET_FAILED, out)
        if self.kernels_seen == 0:
            self.summary.not_captured_region("the target", "level L2 checks the kernels of graph-mode execution "
                                             "and no graph ran (a PyNative run: use L1 or mix)")
            self.say("warning", "nothing was checked: no graph-mode kernel ran; see the notes")
            return CollectionResult(EXIT_NOT_CAPTURED, self.partial_summary())
        flagged = sum(t.flagged for t in self.tallies.values())
        return CollectionResult(EXIT_FINDINGS if flagged else EXIT_OK, out)
