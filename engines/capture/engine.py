"""What the ``statistics`` and ``tensor`` runs report, and the bytes a step writes.

The task object is ``engines.capture.task.CaptureTask``; this module holds its summary (``summary_for_cli``), the
check that no second process writes a rank of the run, and ``estimate_step_bytes(job)``, which runs the target for
one step with a counting sink and returns bytes per step.
"""

from typing import Any, Dict, List

from engines.capture.options import CaptureOptions
from engines.capture.summary import CaptureSummary, compact_steps
from engines.task import adapter_module, declared_steps, resolve_framework, target_dict


def refuse_a_second_writer(run: Any, rank: Any, message: str = "") -> None:
    """Two processes for one rank folder of a run (a launch that started a rank twice): the second is bad
    environment, one line and exit code 2 (``JobError``). Checked before the target runs when the rank is known."""
    from engines.errors import JobError

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

    def spill(self, data: Any, into: Any) -> None:
        """A step's full tensors handed over early (output.memory_budget): counted, not kept."""
        self.bytes += sum(int(a.nbytes) for a, _ in data.values())

    def close(self, status: str = "finished") -> None:
        return None


def estimate_step_bytes(job: Any) -> int:
    """Bytes one step writes on one rank: the target runs for one optimizer step with nothing written."""
    from engines.targets import run_target

    options = CaptureOptions.from_job(job).replace(steps=(), ranks=(), async_dump=False)
    target = target_dict(getattr(job, "target", None))
    if target is None:
        raise ValueError("target: --estimate runs the target for one step; the config has none")
    if declared_steps(target) is not None:
        target["demo"] = dict(target["demo"] or {}, steps=1)
    framework = resolve_framework(job, target)
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
