"""What ``PrecisionDebugger`` runs for each task that goes through a capture session.

One backend per task, all with the lifecycle ``start(model)`` / ``stop()`` / ``step()`` / ``save()`` / ``close()``
(``debugger.py`` forwards msprobe's calls here). Each one builds the same session, sinks and result stores as the
task's ``run_collection`` engine does under ``probe-tui --run``, from the engine's own pieces (options, tallies,
summaries), so an in-script run writes what ``--run`` writes:

- ``statistics`` / ``tensor``: the capture session and its dump sink (``engines.capture``);
- ``overflow_check``: the overflow session, the flagged calls in ``dump.h5`` and each step's findings in
  ``overflow.h5`` (``engines.overflow``);
- ``free_benchmark``: the free_benchmark session, its checks in ``free_benchmark.h5`` and the inconsistent ones in
  ``free_benchmark.csv`` (``engines.free_benchmark``).

The rank is read when the first step is written, not when the debugger is made: a script may initialise its
process group after building the debugger (msprobe resolves it at the first ``start`` too).

Nothing here imports a framework at import time; the adapter is imported when a backend is built.
"""

import importlib
import logging
import sys
from typing import Any, Callable, Dict, Optional

from probe_tui.formatting import format_bytes

log = logging.getLogger("probe_tui.debugger")

ADAPTERS = {"pytorch": "engines.adapters.torch", "mindspore": "engines.adapters.mindspore"}


def adapter(framework: str, module: str):
    """``engines.adapters.<torch|mindspore>.<module>``, imported now."""
    return importlib.import_module("%s.%s" % (ADAPTERS[framework], module))


def say(text: str) -> None:
    """One line for the person running the script (stderr, as msprobe's log lines)."""
    print("probe-tui: " + text, file=sys.stderr)


class SessionTask:
    """A task run by a capture session: msprobe's calls go to the session; subclasses add the results."""

    task = ""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.steps = 0
        self._warned_save = False

    def start(self, model: Any = None) -> None:
        self.session.start(model)

    def stop(self) -> None:
        self.session.stop()

    def step(self) -> None:
        self.session.step_end()
        self.steps += 1

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        if not self._warned_save:  # msprobe: save() belongs to statistics/tensor; elsewhere it is skipped
            self._warned_save = True
            say("save(%r) is skipped: save() records values in statistics and tensor runs, this one is %s"
                % (name, self.task))

    def monitor(self, target: Any) -> None:
        raise ValueError("task: monitor(model) starts grad_probe; this debugger's task is %s (use start/stop/step)"
                         % self.task)

    def close(self, status: str) -> Dict[str, Any]:
        raise NotImplementedError

    def headline(self, summary: Dict[str, Any]) -> str:
        """The line printed when the run closes."""
        return str(summary.get("verdict", ""))


class CaptureTask(SessionTask):
    """``statistics`` and ``tensor``."""

    def __init__(self, job: Any, run: Any, framework: str) -> None:
        from engines.capture.engine import run_meta, summary_for_cli
        from engines.capture.options import CaptureOptions
        from engines.capture.sink import dump_sink_factory
        from engines.capture.summary import CaptureSummary

        self.task = job.task
        self.run = run
        self.options = CaptureOptions.from_job(job)
        self._summary_for_cli = summary_for_cli
        summary = CaptureSummary()
        sinks = dump_sink_factory(run.rank_dir, self.options, run_meta(job, framework, self.options), summary)
        session_class = adapter(framework, "session")
        session_class = getattr(session_class, "MindSporeCaptureSession" if framework == "mindspore"
                                else "TorchCaptureSession")
        super().__init__(session_class(self.options, sinks, summary=summary))

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        self.session.save(name, value, save_backward=save_backward)

    def close(self, status: str) -> Dict[str, Any]:
        return self._summary_for_cli(self.session.close(status), self.run)

    def headline(self, summary: Dict[str, Any]) -> str:
        return "%s records in %d step%s, %s" % (summary.get("records", 0), summary.get("steps_written", 0),
                                                "" if summary.get("steps_written") == 1 else "s",
                                                format_bytes(summary.get("size_bytes", 0)))


class _RankLazy:
    """Builds the results writer of a rank when the first step reports (the session knows its rank by then)."""

    def __init__(self, session_rank: Callable[[], int], make: Callable[[int], Any]) -> None:
        self._session_rank = session_rank
        self._make = make
        self.value: Any = None
        self.rank: Optional[int] = None

    def get(self) -> Any:
        if self.value is None:
            self.rank = int(self._session_rank())
            self.value = self._make(self.rank)
        return self.value


class OverflowTask(SessionTask):
    """``overflow_check``: flagged calls and their tensors in the dump, each step's findings in ``overflow.h5``."""

    task = "overflow_check"

    def __init__(self, job: Any, run: Any, framework: str) -> None:
        from engines.capture.engine import run_meta
        from engines.capture.sink import dump_sink_factory
        from engines.capture.summary import CaptureSummary
        from engines.overflow.engine import OverflowTally, capture_options, overflow_nums

        self.run = run
        self.options = capture_options(job)
        self.limit = overflow_nums(job)
        summary = CaptureSummary()
        meta = run_meta(job, framework, self.options)
        meta["run_meta"]["task"] = "overflow_check"
        self.tally = _RankLazy(lambda: self.session.rank, lambda rank: OverflowTally(
            run.rank_dir(rank), meta={**meta, "rank": rank}, store_mode=self.options.store_mode))
        sinks = dump_sink_factory(run.rank_dir, self.options, meta, summary)
        session_class = adapter(framework, "overflow_session").OverflowSession
        super().__init__(session_class(self.options, sinks, summary=summary, overflow_nums=self.limit,
                                       on_step=self._on_findings))

    def _on_findings(self, findings: Any) -> None:
        self.tally.get()(findings)
        if findings.flagged:
            say(findings.line())

    def close(self, status: str) -> Dict[str, Any]:
        from engines.overflow.engine import summarise

        capture = self.session.close(status)
        tally = self.tally.get()
        tally.close(status)
        return summarise(tally.steps, capture, self.run, self.limit, self.session.limit_reached)


class FreeBenchmarkTask(SessionTask):
    """``free_benchmark``: every selected API call re-run perturbed (check) or replaced (fix)."""

    task = "free_benchmark"

    def __init__(self, job: Any, run: Any, framework: str) -> None:
        from engines.capture.engine import run_meta
        from engines.capture.summary import CaptureSummary
        from engines.free_benchmark.engine import Tally
        from engines.free_benchmark.options import FreeBenchmarkOptions
        from engines.overflow.engine import capture_options

        self.run = run
        self.options = capture_options(job)
        self.fb = FreeBenchmarkOptions.from_job(job)
        meta = run_meta(job, framework, self.options)
        meta["run_meta"]["task"] = "free_benchmark"
        self.tally = _RankLazy(lambda: self.session.rank,
                               lambda rank: Tally(run.rank_dir(rank), rank, meta, self.options.store_mode))
        session_class = adapter(framework, "free_benchmark_session").FreeBenchmarkSession
        super().__init__(session_class(self.options, self.fb, on_step=self._on_step, summary=CaptureSummary()))

    def _on_step(self, step: int, rows: Any) -> None:
        tally = self.tally.get()
        before = len(tally.bad)
        tally(step, rows)
        if len(tally.bad) > before:
            say("free_benchmark step %d: %d inconsistent call%s, e.g. %s" % (
                step, len(tally.bad) - before, "" if len(tally.bad) - before == 1 else "s", tally.bad[before].name))

    def close(self, status: str) -> Dict[str, Any]:
        from collections import Counter

        from engines.free_benchmark.engine import fix_line, summarise

        capture = self.session.close(status)
        tally = self.tally.get()
        tally.close(status)
        checks = self.session.checks
        backward = self.session.backward_checks
        skipped = checks.skipped + (backward.skipped if backward else Counter())
        out = summarise(tally, self.fb, skipped, checks.replaced, capture, self.run, tally.rank)
        if self.fb.fix:
            out["verdict"] = fix_line(checks.replaced, None, tally.replaced_max)
        return out


SESSION_TASKS = {
    "statistics": CaptureTask,
    "tensor": CaptureTask,
    "overflow_check": OverflowTask,
    "free_benchmark": FreeBenchmarkTask,
}
