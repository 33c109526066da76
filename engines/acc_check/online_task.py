"""``statistics`` and ``tensor`` with the online check (docs/ACC_CHECK.md, "Online check"): the capture task
(``engines.capture.task.CaptureTask``) plus, when the section's ``online_check.enabled`` is set, the online check's
processor plugged into its session, its store, the live warning and the summary's lines. Without the option it is
the capture task unchanged.
"""

from typing import Any, Dict, List

from engines.acc_check import online as oc
from engines.capture.task import CaptureTask, RankLazy
from engines.collection import CollectionResult
from engines.steps import StepReporter
from engines.task import Say, TaskContext, run_meta

MAX_NAMED = 20  # failing APIs named in a step event (the count has them all)


class CheckedCaptureTask(CaptureTask):
    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        super().__init__(ctx, run, reporter, say)
        self.online: Any = None  # the online check's processor, when on
        self.online_store: Any = None
        online = getattr(getattr(ctx.job, self.task, None), "online_check", None)
        if online is not None and online.enabled:
            self._build_online(list(online.api_list), ctx, run, getattr(online, "level", "api"))

    def _build_online(self, patterns: List[str], ctx: TaskContext, run: Any, level: str = "api") -> None:
        meta = run_meta(ctx, self.options, oc.KIND)
        store = self.online_store = RankLazy(
            lambda: self.session.rank,
            lambda rank: oc.OnlineStore(run.rank_dir(rank), rank, meta, self.options.store_mode))
        reported = [0]  # failing APIs announced so far

        def on_step(step: int, rows: List[Dict[str, Any]]) -> None:
            store.get().write(step, rows)
            new = list(processor.failing)[reported[0]:]
            reported[0] = len(processor.failing)
            if new:
                self.say("warning", "online check step %d: %s failed on the reference" % (step, ", ".join(new)))

        details = self.reporter.details

        def with_online(step: int) -> Dict[str, Any]:
            out = details(step)
            out["online_failing"] = len(processor.failing)
            out["online_failing_apis"] = list(processor.failing)[:MAX_NAMED]
            return out

        try:
            processor = oc.build(ctx.adapter, self.session, patterns, on_step, level)
        except ImportError:
            self.say("warning", "online_check is not available on this framework (PyTorch and MindSpore only): "
                                "the run captures without it")
            return
        self.online = processor
        self.reporter.details = with_online
        if self.options.level == "L0" and level == "api":
            self.say("warning", "online_check needs API capture (level L1 or mix); at L0 nothing is checked")

    def close_results(self, status: str) -> None:
        if self.online_store is not None and self.online_store.value is not None:
            self.online_store.value.close(status)

    def _online_summary(self, out: Dict[str, Any]) -> Dict[str, Any]:
        p = self.online
        if p is None:
            return out
        out["online_checked_calls"] = p.calls
        out["online_failing_apis"] = len(p.failing)
        out["online_checked_backward"] = p.backward_calls
        out["online_check"] = {"checked_calls": p.calls, "checked_backward": p.backward_calls, "failing": dict(p.failing), "warning": dict(p.warning),
                               "not_checked": dict(p.not_checked)}
        tables = out.setdefault("tables", [])
        if p.failing:
            tables.append({"title": "online check: failing APIs (first failing call)", "columns": ["api", "call"],
                           "rows": [[k, v] for k, v in p.failing.items()]})
        if p.not_checked:
            tables.append({"title": "online check: APIs not re-run, and why", "columns": ["api", "reason"],
                           "rows": [[k, v] for k, v in sorted(p.not_checked.items())]})
        return out

    def result_summary(self) -> Dict[str, Any]:
        return self._online_summary(super().result_summary())

    def outcome(self, result: Any) -> CollectionResult:
        got = super().outcome(result)
        self._online_summary(got.summary)
        return got
