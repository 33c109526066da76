"""The ``overflow_check`` task object (``engines.task``): the overflow session, the flagged calls in ``dump.h5``
and each step's findings in ``overflow.h5``.

The rank's results store is made when the first step reports (the session knows its rank by then: a script may
initialise its process group after building the debugger).
"""

from typing import Any, Dict

from engines.capture.check_options import capture_options
from engines.capture.sink import dump_sink_factory
from engines.capture.task import RankLazy, SessionTask
from engines.collection import EXIT_FINDINGS, EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.overflow.cross_rank_task import add_cross_rank, launch_ranks, note
from engines.overflow.engine import OverflowTally, overflow_nums, summarise
from engines.overflow.report import StepFindings
from engines.overflow.session import OverflowProcessor, build_session
from engines.steps import StepReporter
from engines.task import Say, TaskContext, run_meta


class OverflowTask(SessionTask):
    task = "overflow_check"

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        super().__init__(ctx, run, reporter, say)
        self.options = capture_options(ctx.job)
        self.limit = overflow_nums(ctx.job)
        meta = run_meta(ctx, self.options, "overflow_check")
        self.tally = RankLazy(lambda: self.session.rank, lambda rank: OverflowTally(
            run.rank_dir(rank), meta={**meta, "rank": rank}, store_mode=self.options.store_mode))
        sinks = dump_sink_factory(run.rank_dir, self.options, meta, self.summary)
        self.session = build_session(ctx.adapter, self.options, sinks, summary=self.summary,
                                     overflow_nums=self.limit, on_step=self._on_findings)
        self.checks: OverflowProcessor = self.session.processor

    def _on_findings(self, findings: StepFindings) -> None:
        self.tally.get()(findings)
        if findings.flagged:
            self.say("warning", findings.line())

    def close_results(self, status: str) -> None:
        if self.tally.value is not None:
            self.tally.value.close(status)

    def result_summary(self) -> Dict[str, Any]:
        steps = self.tally.get().steps
        out = summarise(steps, self.summary, self.run, self.limit, self.checks.limit_reached)
        try:
            add_cross_rank(out, self.run, self.tally.rank, launch_ranks(self.options.ranks))
        except Exception as exc:  # the run's own results stand without it
            note(out, "cross-rank origin not found: %s" % exc)
        return out

    def outcome(self, result: Any) -> CollectionResult:
        out = self.result_summary()
        if self.reporter.losses:
            out["losses"] = self.reporter.sorted_losses()
        if not result.ok:
            out["error"] = result.error
            return CollectionResult(EXIT_TARGET_FAILED, out)
        return CollectionResult(EXIT_FINDINGS if self.tally.get().flagged else EXIT_OK, out)
