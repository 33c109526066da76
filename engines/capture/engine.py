"""Entry points the runner and the CLI call for the ``statistics`` and ``tensor`` tasks.

``run_collection(job, run, events)`` runs ``job.target`` in-process inside a capture session of the job's
framework (zero code change: steps are counted by optimizer steps) and writes ``<run>/rank<R>/``.
``estimate_step_bytes(job)`` runs the target for one step with a counting sink and returns bytes per step.
"""

from typing import Any, Dict, List

from engines.capture.options import CaptureOptions
from engines.capture.sink import dump_sink_factory
from engines.capture.summary import CaptureSummary, compact_steps
from engines.collection import (  # noqa: F401 (CollectionResult, run_meta: this module's interface)
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_TARGET_FAILED,
    CollectionResult,
    CollectionRun,
    adapter_module,
    framework_of,
    run_meta,
    target_of,
)


def run_collection(job: Any, run: Any, events: Any) -> CollectionResult:
    """Run ``job.target`` under capture; emits ``step`` events; returns the exit code with a summary."""
    options = CaptureOptions.from_job(job)
    collection = CollectionRun(job, events)
    framework = collection.framework
    if not collection.available:
        return collection.refuse("%s capture is not available in this build (framework %r)" % (options.task,
                                                                                               framework))
    collection.seed(options.seed)
    summary = collection.summary
    written: Dict[int, Any] = {}

    def on_written(step: int, records: int, nbytes: int) -> None:
        written[step] = (records, nbytes)

    def step_details(step: int) -> Dict[str, Any]:
        if step not in written:
            return {}
        return {"records": written[step][0], "bytes": written[step][1]}

    collection.step_details = step_details
    collection.run_folder = run
    sinks = dump_sink_factory(run.rank_dir, options, run_meta(job, framework, options), summary, on_written)
    capture = collection.adapter("zero_code").ZeroCodeCapture(options, sinks, summary=summary,
                                                              on_step_end=collection.on_step_end)
    _refuse_a_second_writer(run, getattr(getattr(capture, "session", None), "rank", None))
    result = collection.run(capture)
    if summary.store_refused:  # the same, found at the first step (the rank known only then): after training
        _refuse_a_second_writer(run, None, summary.store_refused)
    exit_code = EXIT_OK if result.ok else EXIT_TARGET_FAILED
    out = summary_for_cli(summary, run)
    if not result.ok:
        out["error"] = result.error
    if summary.bytes == 0 and summary.records == 0 and not summary.dump_stopped:
        events.emit("message", level="warning",
                    text="nothing was captured: no selected step ran (check rank/step filters and the target)")
    return CollectionResult(exit_code, out)


def _refuse_a_second_writer(run: Any, rank: Any, message: str = "") -> None:
    """Two processes for one rank folder of a run (a launch that started a rank twice): the second is bad
    environment, one line and exit code 2 (``JobError``). Checked before the target runs when the rank is known."""
    from engines.runner import JobError

    if not message and isinstance(rank, int) and getattr(run, "joined", False):
        from engines.store import store_kinds

        folder = run.path / ("rank%d" % rank)
        if folder.is_dir() and "dump" in store_kinds(folder):
            message = "%s: already holds a 'dump' store: another process writes rank %d of this run" % (folder,
                                                                                                      rank)
    if message:
        raise JobError(message)


def summary_for_cli(summary: CaptureSummary, run: Any = None) -> Dict[str, Any]:
    """Scalars for the CLI's grid, a table of missing records, and the machine-readable detail."""
    detail = summary.as_dict()
    out: Dict[str, Any] = {}
    if run is not None:
        out["dump"] = str(getattr(run, "path", run))
    out["steps_written"] = len(summary.steps)
    if summary.steps:
        out["steps"] = compact_steps(summary.steps)
    if summary.steps_skipped:
        out["steps_left_out"] = compact_steps(summary.steps_skipped)
    out["records"] = summary.records
    out["tensor_rows"] = summary.rows
    out["size_bytes"] = summary.bytes  # a number: the CLI and the app format it
    out["non_finite"] = summary.highlights.describe()
    tables: List[Dict[str, Any]] = list(summary.highlights.tables())
    if summary.missing:
        rows = [[reason, n] for reason, n in sorted(summary.missing.items(), key=lambda kv: (-kv[1], kv[0]))]
        tables.append({"title": "records not written, and why", "columns": ["reason", "count"], "rows": rows})
    if summary.notes:
        tables.append({"title": "notes", "columns": ["note"], "rows": [[n] for n in summary.notes]})
    if tables:
        out["tables"] = tables
    if summary.dump_stopped:
        out["dump_stopped"] = summary.dump_stopped
    out["capture"] = detail
    return out


class _StopAfterFirstStep(BaseException):
    """Raised from the optimizer hook to end an estimate run after one step (BaseException: user code that
    catches Exception does not swallow it)."""


class _CountingSink:
    def __init__(self) -> None:
        self.bytes = 0
        self.budget_reached = False

    def write(self, payload: Any) -> None:
        rows = payload.buffer.num_rows
        records = payload.buffer.num_records
        data = sum(int(a.nbytes) for a, _ in payload.host_data.values())
        # Row sizes as the store writes them: ~19 numeric columns of 8 bytes and four interned strings a row.
        self.bytes += data + rows * 160 + records * 96 + sum(len(str(a)) for a in payload.buffer.rec_args)

    def close(self, status: str = "finished") -> None:
        return None


def estimate_step_bytes(job: Any) -> int:
    """Bytes one step writes on one rank: the target runs for one optimizer step with nothing written."""
    from engines.targets import run_target

    options = CaptureOptions.from_job(job).replace(steps=(), ranks=(), async_dump=False)
    target = target_of(job)
    if target is None:
        raise ValueError("target: --estimate runs the target for one step; the config has none")
    if isinstance(target, dict) and isinstance(target.get("demo"), dict):
        target = dict(target)
        target["demo"] = dict(target["demo"], steps=1)
    elif target == "demo":
        target = {"demo": {"steps": 1}}
    framework = framework_of(job, target)
    adapter = adapter_module(framework, "zero_code")
    if adapter is None:
        raise ValueError("framework: no %s estimate in this build" % framework)
    sink = _CountingSink()
    capture = adapter.ZeroCodeCapture(options, lambda rank: sink)

    def stop(step: int, _records: int) -> None:
        raise _StopAfterFirstStep()

    capture.on_step_end = stop
    try:
        with capture:
            run_target(target, framework=framework)
    except _StopAfterFirstStep:
        pass
    return int(sink.bytes)
