"""The ``--run`` driver of every collection task: build the task object, run the target under it.

``run_collection(ctx, run, events)`` is what the runner calls for a collection job, with the job resolved once
(``engines.task.resolve``). It builds the task's object (``engines.registry.task_class``: one class per task in
``engines/<task>/task.py``, the same object ``PrecisionDebugger`` drives in a script) with the one step reporter,
seeds, then ``run_task``: ``begin()`` (the process-wide instrumentation), the target, ``end(status)`` whatever
happens, ``outcome(result)``.
"""

from typing import Any, Dict, Optional

from engines.events import EventSink
from engines.steps import StepReporter
from engines.task import Task, TaskContext

EXIT_OK = 0
EXIT_TARGET_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_FINDINGS = 3
EXIT_NOT_CAPTURED = 4


class CollectionResult:
    """The exit code and the summary for ``run_finished`` (``int(result)`` is the exit code)."""

    def __init__(self, exit_code: int, summary: Optional[Dict[str, Any]] = None) -> None:
        self.exit_code = int(exit_code)
        self.summary = summary if summary is not None else {}

    def __int__(self) -> int:
        return self.exit_code

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.exit_code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.exit_code)

    def __repr__(self) -> str:
        return "CollectionResult(exit_code=%d)" % self.exit_code


def build_task(ctx: TaskContext, run: Any, events: EventSink) -> Task:
    """The task object of ``ctx.job.task`` for a ``--run``: step events and messages go to ``events``."""
    from engines import registry

    reporter = StepReporter(events, ctx.total_steps, target_reports_steps=ctx.is_demo)

    def say(level: str, text: str) -> None:
        events.emit("message", level=level, text=text)

    task_class = registry.task_class(ctx.job.task, getattr(ctx.job, "level", None))
    seed = getattr(ctx.job, "seed", None) if getattr(task_class, "seeds", False) else None
    if seed is not None:
        ctx.adapter("environment").seed_all(seed)
    return task_class(ctx, run, reporter, say)


def run_collection(ctx: TaskContext, run: Any, events: EventSink) -> CollectionResult:
    return run_task(build_task(ctx, run, events), ctx)


def run_task(task: Task, ctx: TaskContext) -> CollectionResult:
    """Run the target under ``task``; ``end(status)`` runs whatever happens; a stop carries the summary so far."""
    from engines.targets import run_target

    task.begin()
    status = "failed"
    ended = False
    try:
        result = run_target(ctx.target, framework=ctx.framework, on_step=task.target_on_step())
        status = "finished" if result.ok else "failed"
    except KeyboardInterrupt as exc:  # a stop: run.json still gets the steps and records written before it
        ended = True
        task.end("stopped")
        try:
            exc.summary = task.partial_summary()  # type: ignore[attr-defined]
        except Exception:
            pass
        raise
    finally:
        if not ended:
            task.end(status)
    return task.outcome(result)
