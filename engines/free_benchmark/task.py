"""The ``free_benchmark`` task object (``engines.task``): every selected API call re-run perturbed (check) or
replaced (fix); its checks in ``free_benchmark.h5`` and the inconsistent ones in ``free_benchmark.csv``.

The rank's results store is made when the first step reports (the session knows its rank by then).
"""

from collections import Counter
from typing import Any, Dict, List

from engines.capture.check_options import capture_options
from engines.capture.task import RankLazy, SessionTask
from engines.collection import EXIT_FINDINGS, EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.free_benchmark.engine import Tally, fix_line, summarise
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CheckRow
from engines.free_benchmark.session import FreeBenchmarkProcessor, build_session
from engines.steps import StepReporter
from engines.task import Say, TaskContext, run_meta


class FreeBenchmarkTask(SessionTask):
    task = "free_benchmark"

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        super().__init__(ctx, run, reporter, say)
        self.options = capture_options(ctx.job)
        self.fb = FreeBenchmarkOptions.from_job(ctx.job)
        meta = run_meta(ctx, self.options, "free_benchmark")
        self.tally = RankLazy(lambda: self.session.rank,
                              lambda rank: Tally(run.rank_dir(rank), rank, meta, self.options.store_mode))
        self.session = build_session(ctx.adapter, self.options, self.fb, on_step=self._on_step,
                                     summary=self.summary)
        self.checks: FreeBenchmarkProcessor = self.session.processor

    def _on_step(self, step: int, rows: List[CheckRow]) -> None:
        tally = self.tally.get()
        before = len(tally.bad)
        tally(step, rows)
        found = len(tally.bad) - before
        if found:
            self.say("warning", "free_benchmark step %d: %d inconsistent call%s, e.g. %s" % (
                step, found, "" if found == 1 else "s", tally.bad[before].name))

    def close_results(self, status: str) -> None:
        if self.tally.value is not None:
            self.tally.value.close(status)

    def _summary(self, losses: Any) -> Dict[str, Any]:
        tally = self.tally.get()
        checks = self.checks.checks
        backward = self.checks.backward_checks
        skipped = checks.skipped + (backward.skipped if backward else Counter())
        out = summarise(tally, self.fb, skipped, checks.replaced, self.summary, self.run, tally.rank)
        if losses:
            out["losses"] = losses
        if self.fb.fix:
            out["verdict"] = fix_line(checks.replaced, losses or None, tally.replaced_max)
        return out

    def result_summary(self) -> Dict[str, Any]:
        return self._summary(None)

    def outcome(self, result: Any) -> CollectionResult:
        out = self._summary(self.reporter.sorted_losses())
        if not result.ok:
            out["error"] = result.error
            return CollectionResult(EXIT_TARGET_FAILED, out)
        return CollectionResult(EXIT_FINDINGS if self.tally.get().bad else EXIT_OK, out)
