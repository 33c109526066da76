"""Run one validated job: the single code path behind ``probe-tui --run``, the shorthand commands and the app.

Collection jobs get a run folder (DECISIONS 2) and run their target under the task's engine; analysis jobs run
their engine on existing dumps. The runner owns the run's lifecycle events (``run_started``/``run_finished``) and
the run folder's final status; engines emit ``step`` and ``message`` events.
"""

import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from engines import registry
from engines.errors import BadInputError
from engines.events import EventSink, NullSink

EXIT_OK = 0
EXIT_TARGET_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_FINDINGS = 3
EXIT_INTERRUPTED = 130


class JobError(BadInputError):
    """Bad input discovered while starting a job (exit code 2): a missing target, a path that does not exist."""


@dataclass
class RunOutcome:
    exit_code: int
    status: str
    run_dir: Optional[str] = None
    summary: Dict[str, Any] = field(default_factory=dict)


def _normalise_result(result) -> "tuple[int, Dict[str, Any]]":
    if isinstance(result, int):
        return result, {}
    exit_code = int(getattr(result, "exit_code", EXIT_OK))
    summary = dict(getattr(result, "summary", {}) or {})
    return exit_code, summary


def _status_for(exit_code: int) -> str:
    return {EXIT_OK: "finished", EXIT_FINDINGS: "finished", EXIT_INTERRUPTED: "stopped"}.get(exit_code, "failed")


class _TerminateAsInterrupt:
    """Turn SIGTERM into KeyboardInterrupt for the duration of a headless run, so a stop is clean. SIGINT too
    when it arrives ignored: a shell starts background jobs (``cmd &`` in a script, nohup) with SIGINT ignored,
    and Python then never installs its handler, so the app's stop key (SIGINT first) would wait for SIGTERM."""

    def __enter__(self):
        self._previous = None
        self._previous_int = None
        try:
            self._previous = signal.signal(signal.SIGTERM, self._raise)
            if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
                self._previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        if self._previous_int is not None:
            signal.signal(signal.SIGINT, self._previous_int)
        return False


def resolve_framework(job) -> str:
    from engines.targets import detect_framework

    framework = getattr(job, "framework", "auto") or "auto"
    if framework != "auto":
        return framework
    if getattr(job, "target", None) is None:
        return "pytorch"
    return detect_framework(_target_dict(job.target))


def _target_dict(target) -> Dict[str, Any]:
    if hasattr(target, "model_dump"):
        return {k: v for k, v in target.model_dump(mode="json").items() if v is not None}
    return dict(target)


def run_job(job, *, events: Optional[EventSink] = None, fail_on_findings: bool = False) -> RunOutcome:
    from schemas import ANALYSIS_TASKS

    events = events or NullSink()
    if job.task in ANALYSIS_TASKS:
        return _run_analysis(job, events, fail_on_findings)
    return _run_collection(job, events, fail_on_findings)


def _run_analysis(job, events: EventSink, fail_on_findings: bool) -> RunOutcome:
    engine = registry.analysis_engine(job.task)
    if engine is None:
        raise JobError(f"task {job.task!r}: this build of probe-tui has no engine for it")
    started = time.monotonic()
    events.emit("run_started", run_dir=None, task=job.task, total_steps=None)
    with _TerminateAsInterrupt():
        try:
            result = engine(job, events)
        except KeyboardInterrupt:
            events.emit("run_finished", status="stopped", exit_code=EXIT_INTERRUPTED, run_dir=None, summary={})
            return RunOutcome(EXIT_INTERRUPTED, "stopped")
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


def _run_collection(job, events: EventSink, fail_on_findings: bool) -> RunOutcome:
    from engines.launch import LaunchError, apply_rank_env
    from engines.runs import create_run
    from schemas import dump_config

    if job.target is None:
        raise JobError("target: --run needs a target (\"demo\", {\"script\": ...} or {\"callable\": ...})")
    try:
        job = apply_rank_env(job)  # PROBE_TUI_RANKS when the config's rank is empty
    except LaunchError as exc:
        raise JobError(str(exc)) from None
    framework = resolve_framework(job)
    engine = registry.collection_engine(job.task)
    if engine is None:
        raise JobError(f"task {job.task!r}: this build of probe-tui has no engine for it")
    run = create_run(job.dump_path, task=job.task, config=dump_config(job), framework=framework)
    events = _StepCounter(events)
    total_steps = _declared_steps(job)
    started = time.monotonic()
    events.emit("run_started", run_dir=str(run.path), task=job.task, total_steps=total_steps)
    summary: Dict[str, Any] = {}
    with _TerminateAsInterrupt():
        try:
            exit_code, summary = _normalise_result(engine(job, run, events))
        except KeyboardInterrupt:
            exit_code = EXIT_INTERRUPTED
        except BaseException:
            # A fault of the tool itself (engines catch the target's own failures): leave the run marked failed,
            # not "running" forever, and let the traceback reach the user.
            if run.owner:
                run.finish(status="failed", exit_code=EXIT_TARGET_FAILED, summary={"error": traceback.format_exc()})
            raise
    if exit_code == EXIT_FINDINGS and not fail_on_findings:
        exit_code = EXIT_OK
    status = _status_for(exit_code)
    summary.setdefault("elapsed_s", round(time.monotonic() - started, 3))
    if run.owner:  # the other ranks of a launch joined this run; its run.json has one writer
        if events.steps:
            run.update(steps=len(events.steps))
        run.finish(status=status, exit_code=exit_code, summary=summary)
    events.emit("run_finished", status=status, exit_code=exit_code, run_dir=str(run.path), summary=summary)
    return RunOutcome(exit_code, status, str(run.path), summary)


class _StepCounter:
    """Passes events through and counts the training steps the run reported (for run.json's ``steps``)."""

    def __init__(self, inner: EventSink) -> None:
        self.inner = inner
        self.steps: set = set()

    def emit(self, kind: str, **fields: Any) -> None:
        if kind == "step" and isinstance(fields.get("step"), int):
            self.steps.add(fields["step"])
        self.inner.emit(kind, **fields)


def _declared_steps(job) -> Optional[int]:
    target = getattr(job, "target", None)
    demo = getattr(target, "demo", None)
    return getattr(demo, "steps", None) if demo is not None else None

