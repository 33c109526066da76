"""Run one validated job: the single code path behind ``probe-tui --run``, the shorthand commands and the app.

Collection jobs get a run folder (docs/decisions/0002-run-folders.md) and run their target under the task's engine; analysis jobs run
their engine on existing dumps. The runner owns the run's lifecycle events (``run_started``/``run_finished``) and
the run folder's final status; engines emit ``step`` and ``message`` events.
"""

import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from engines import registry
from engines.errors import (  # noqa: F401 (EXIT_BAD_INPUT, JobError: re-exported, the runner's interface)
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_NOT_CAPTURED,
    EXIT_OK,
    EXIT_TARGET_FAILED,
    BadInputError,
    JobError,
    signal_exit_code,
)
from engines.events import EventSink, NullSink
from engines.signals import deliver

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class RunStopped(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGHUP) raised as a KeyboardInterrupt, so that every ``except KeyboardInterrupt``
    of the target and of the engines stops as cleanly as on Ctrl-C; ``signum`` says which signal came."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def stop_exit_code(exc: BaseException) -> int:
    """The exit code of a run a KeyboardInterrupt (or a ``RunStopped``) ended: 128 + the signal's number."""
    return signal_exit_code(int(getattr(exc, "signum", signal.SIGINT)))


@dataclass
class RunOutcome:
    exit_code: int
    status: str
    run_dir: Optional[str] = None
    summary: Dict[str, Any] = field(default_factory=dict)
    #: a launch of several processes: this rank, whether it owns run.json and, in the owner, ``per_rank`` and
    #: ``totals`` (engines.run_ranks); None for a single process
    launch: Optional[Dict[str, Any]] = None


def _normalise_result(result: Any) -> Tuple[int, Dict[str, Any]]:
    if isinstance(result, int):
        return result, {}
    exit_code = int(getattr(result, "exit_code", EXIT_OK))
    summary = dict(getattr(result, "summary", {}) or {})
    return exit_code, summary


def _status_for(exit_code: int, summary: Optional[Dict[str, Any]] = None) -> str:
    if exit_code in (EXIT_OK, EXIT_FINDINGS, EXIT_NOT_CAPTURED):
        # the target ran to its end, but the disk filled and the dump stopped early (docs/CAPTURE.md)
        return "disk_full" if (summary or {}).get("dump_stopped") == "disk_full" else "finished"
    if exit_code == EXIT_INTERRUPTED or exit_code - 128 in STOP_SIGNALS:
        return "stopped"
    return "failed"


class _TerminateAsInterrupt:
    """Turn SIGTERM and SIGHUP into ``RunStopped`` (a KeyboardInterrupt) for the duration of a headless run, so a
    stop is clean and run.json says ``stopped``; SIGINT into a KeyboardInterrupt as usual. All three wait for a
    store commit in progress to end (``engines.signals``). SIGINT is handled even when it arrives ignored: a shell
    starts background jobs (``cmd &`` in a script, nohup) with SIGINT ignored, and Python then never installs its
    handler, so the app's stop key (SIGINT first) would wait for SIGTERM. A SIGHUP that arrives ignored
    (``nohup``) stays ignored; a SIGINT handler the target's caller installed is kept."""

    def __enter__(self) -> "_TerminateAsInterrupt":
        self._previous: Dict[int, Any] = {}
        try:
            for signum in STOP_SIGNALS:
                if signum != getattr(signal, "SIGHUP", None) or signal.getsignal(signum) != signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._raise)
            if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.default_int_handler):
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._interrupt)
        except ValueError:  # not the main thread
            self._restore()
        return self

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        deliver(RunStopped(signum))  # at once, or when a store commit in progress has ended (engines.signals)

    @staticmethod
    def _interrupt(signum: int, frame: Any) -> None:
        deliver(KeyboardInterrupt())

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def __exit__(self, *exc: Any) -> None:
        self._restore()


def run_job(job: Any, *, events: Optional[EventSink] = None, fail_on_findings: bool = False) -> RunOutcome:
    from schemas import ANALYSIS_TASKS

    events = events or NullSink()
    if job.task in ANALYSIS_TASKS:
        return _run_analysis(job, events, fail_on_findings)
    return _run_collection(job, events, fail_on_findings)


def _run_analysis(job: Any, events: EventSink, fail_on_findings: bool) -> RunOutcome:
    engine = registry.analysis_engine(job.task)
    started = time.monotonic()
    events.emit("run_started", run_dir=None, task=job.task, total_steps=None)
    with _TerminateAsInterrupt():
        try:
            result = engine(job, events)
        except KeyboardInterrupt as exc:
            code = stop_exit_code(exc)
            events.emit("run_finished", status="stopped", exit_code=code, run_dir=None, summary={})
            return RunOutcome(code, "stopped")
        except JobError:
            raise
        except BadInputError as exc:  # a damaged store, dump, mapping file...: the job's bad input (exit code 2)
            raise JobError(str(exc)) from None
    exit_code, summary = _normalise_result(result)
    if exit_code == EXIT_FINDINGS and not fail_on_findings:
        exit_code = EXIT_OK
    run_dir = summary.get("run_dir") or getattr(result, "run_dir", None)
    summary.setdefault("elapsed_s", round(time.monotonic() - started, 3))
    status = _status_for(exit_code)
    events.emit("run_finished", status=status, exit_code=exit_code, run_dir=run_dir and str(run_dir), summary=summary)
    return RunOutcome(exit_code, status, run_dir and str(run_dir), summary)


def _run_collection(job: Any, events: EventSink, fail_on_findings: bool) -> RunOutcome:
    from engines.launch import LaunchError, apply_rank_env
    from engines.run_ranks import RankLifecycle
    from engines.runs import create_run
    from engines.task import resolve

    if job.target is None:
        raise JobError("target: --run needs a target (\"demo\", {\"script\": ...} or {\"callable\": ...})")
    try:
        job = apply_rank_env(job)  # PROBE_TUI_RANKS when the config's rank is empty
    except LaunchError as exc:
        raise JobError(str(exc)) from None
    ctx = resolve(job)  # framework, target, dump config and step count: once, for the runner and the task
    engine = registry.collection_engine(job.task)
    run = create_run(job.dump_path, task=job.task, config=ctx.config, framework=ctx.framework)
    ranks = RankLifecycle(run, getattr(job, "rank", None) or ())  # this process's rank.json (docs/FORMAT.md)
    events = _StepCounter(events)
    started = time.monotonic()
    events.emit("run_started", run_dir=str(run.path), task=job.task, total_steps=ctx.total_steps)
    summary: Dict[str, Any] = {}
    with _TerminateAsInterrupt():
        try:
            exit_code, summary = _normalise_result(engine(ctx, run, events))
        except KeyboardInterrupt as exc:
            exit_code = stop_exit_code(exc)
            summary = dict(getattr(exc, "summary", None) or {})  # what was written before the stop
        except BaseException:
            # A fault of the tool itself (engines catch the target's own failures): leave the run marked failed,
            # not "running" forever, and let the traceback reach the user.
            ranks.end("failed", EXIT_TARGET_FAILED, {})
            if run.owner:
                run.finish(status="failed", exit_code=EXIT_TARGET_FAILED, summary={"error": traceback.format_exc()},
                           **ranks.settle(0.0))
            raise
    if exit_code == EXIT_FINDINGS and not fail_on_findings:
        exit_code = EXIT_OK
    status = _status_for(exit_code, summary)
    summary.setdefault("elapsed_s", round(time.monotonic() - started, 3))
    ranks.end(status, exit_code, summary, len(events.steps))
    launch: Optional[Dict[str, Any]] = None
    if run.owner:  # the other ranks of a launch joined this run; its run.json has one writer
        try:
            with _TerminateAsInterrupt():  # a stop signal ends the wait, not the process: run.json still ends
                launch = ranks.settle()  # waits (bounded) for the launch's other ranks, then totals them
            if events.steps and "steps" not in launch:
                launch["steps"] = len(events.steps)
            run.finish(status=status, exit_code=exit_code, summary=summary, **launch)
        except OSError as exc:  # e.g. the disk is full: say so in one line; the run's exit code stands
            events.emit("message", level="error",
                        text=f"{run.json_path}: could not record the end of the run ({exc.strerror or exc})")
    try:
        events.emit("run_finished", status=status, exit_code=exit_code, run_dir=str(run.path), summary=summary)
    except OSError:  # the terminal went away (SIGHUP): run.json holds the outcome
        pass
    return RunOutcome(exit_code, status, str(run.path), summary, ranks.report(launch))


class _StepCounter:
    """Passes events through and counts the training steps the run reported (for run.json's ``steps``)."""

    def __init__(self, inner: EventSink) -> None:
        self.inner = inner
        self.steps: set = set()

    def emit(self, kind: str, **fields: Any) -> None:
        if kind == "step" and isinstance(fields.get("step"), int):
            self.steps.add(fields["step"])
        self.inner.emit(kind, **fields)

