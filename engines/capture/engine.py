"""Entry points the runner and the CLI call for the ``statistics`` and ``tensor`` tasks.

``run_collection(job, run, events)`` runs ``job.target`` in-process inside a capture session of the job's
framework (zero code change: steps are counted by optimizer steps) and writes ``<run>/rank<R>/``.
``estimate_step_bytes(job)`` runs the target for one step with a counting sink and returns bytes per step.
"""

import importlib
import time
from typing import Any, Dict, List, Optional

from engines.capture.options import CaptureOptions
from engines.capture.sink import dump_sink_factory
from engines.capture.summary import CaptureSummary, compact_steps, human_bytes

EXIT_OK = 0
EXIT_TARGET_FAILED = 1
EXIT_BAD_INPUT = 2


class CollectionResult:
    """The exit code and the summary for ``run_finished`` (``int(result)`` is the exit code)."""

    def __init__(self, exit_code: int, summary: Dict[str, Any]) -> None:
        self.exit_code = int(exit_code)
        self.summary = summary

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


def _target_dict(target: Any) -> Any:
    if target is None or isinstance(target, (str, dict)):
        return target
    if hasattr(target, "model_dump"):
        return {k: v for k, v in target.model_dump(mode="json").items() if v is not None}
    return dict(target)


def _framework(job: Any, target: Any) -> str:
    framework = getattr(job, "framework", "auto") or "auto"
    if framework != "auto":
        return framework
    try:
        from engines.targets import detect_framework

        return detect_framework(target)
    except Exception:
        return "pytorch"


def _demo_steps(target: Any) -> Optional[int]:
    if target == "demo":
        return 5
    if isinstance(target, dict) and isinstance(target.get("demo"), dict):
        return target["demo"].get("steps", 5)
    return None


def _config_of(job: Any) -> Dict[str, Any]:
    try:
        from schemas import dump_config

        return dump_config(job)
    except Exception:
        if hasattr(job, "model_dump"):
            return job.model_dump(mode="json")
        return dict(job) if isinstance(job, dict) else {}


_ADAPTER_PACKAGES = {"pytorch": "engines.adapters.torch", "mindspore": "engines.adapters.mindspore"}


def _adapter(framework: str):
    package = _ADAPTER_PACKAGES.get(framework)
    return importlib.import_module(package + ".zero_code") if package else None


def _environment(framework: str):
    return importlib.import_module(_ADAPTER_PACKAGES[framework] + ".environment")


def run_meta(job: Any, framework: str, options: CaptureOptions) -> Dict[str, Any]:
    env: Dict[str, Any] = {}
    if framework in _ADAPTER_PACKAGES:
        env = _environment(framework).describe()
    return {"framework": framework, "run_meta": {"config": _config_of(job), "task": options.task,
                                                 "level": options.level, "environment": env,
                                                 "seed": options.seed}}


def run_collection(job: Any, run: Any, events: Any) -> CollectionResult:
    """Run ``job.target`` under capture; emits ``step`` events; returns the exit code with a summary."""
    from engines.targets import run_target

    options = CaptureOptions.from_job(job)
    target = _target_dict(getattr(job, "target", None))
    framework = _framework(job, target)
    adapter = _adapter(framework)
    if adapter is None:
        text = "%s capture is not available in this build (framework %r)" % (options.task, framework)
        events.emit("message", level="error", text=text)
        return CollectionResult(EXIT_BAD_INPUT, {"error": text})
    if options.seed is not None:
        _environment(framework).seed_all(options.seed)

    summary = CaptureSummary()
    started = time.monotonic()
    total_steps = _demo_steps(target)
    is_demo = total_steps is not None
    written: Dict[int, Any] = {}

    def emit_step(step: int, loss: Optional[float] = None) -> None:
        fields: Dict[str, Any] = {"step": step, "total_steps": total_steps, "loss": loss,
                                  "elapsed_s": round(time.monotonic() - started, 3)}
        if step in written:
            fields["records"], fields["bytes"] = written[step]
        events.emit("step", **fields)

    def on_written(step: int, records: int, nbytes: int) -> None:
        written[step] = (records, nbytes)

    def on_step_end(step: int, _records: int) -> None:
        if not is_demo:
            emit_step(step)

    meta = run_meta(job, framework, options)
    sinks = dump_sink_factory(run.rank_dir, options, meta, summary, on_written)
    capture = adapter.ZeroCodeCapture(options, sinks, summary=summary, on_step_end=on_step_end)
    with capture:
        result = run_target(target, framework=framework, on_step=emit_step if is_demo else None)
    exit_code = EXIT_OK if result.ok else EXIT_TARGET_FAILED
    out = summary_for_cli(summary, run)
    if not result.ok:
        out["error"] = result.error
    if summary.bytes == 0 and summary.records == 0:
        events.emit("message", level="warning",
                    text="nothing was captured: no selected step ran (check rank/step filters and the target)")
    return CollectionResult(exit_code, out)


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
    out["size"] = human_bytes(summary.bytes)  # the exact count: capture.bytes
    out["non_finite"] = summary.highlights.describe()
    tables: List[Dict[str, Any]] = list(summary.highlights.tables())
    if summary.missing:
        rows = [[reason, n] for reason, n in sorted(summary.missing.items(), key=lambda kv: (-kv[1], kv[0]))]
        tables.append({"title": "records not written, and why", "columns": ["reason", "count"], "rows": rows})
    if summary.notes:
        tables.append({"title": "notes", "columns": ["note"], "rows": [[n] for n in summary.notes]})
    if tables:
        out["tables"] = tables
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
    target = _target_dict(getattr(job, "target", None))
    if target is None:
        raise ValueError("target: --estimate runs the target for one step; the config has none")
    if isinstance(target, dict) and isinstance(target.get("demo"), dict):
        target = dict(target)
        target["demo"] = dict(target["demo"], steps=1)
    elif target == "demo":
        target = {"demo": {"steps": 1}}
    framework = _framework(job, target)
    adapter = _adapter(framework)
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
