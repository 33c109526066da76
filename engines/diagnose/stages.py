"""Running the captures and compares of a diagnose, through the same code paths as ``--run`` and ``compare``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from engines.errors import EXIT_OK


class CaptureFailed(Exception):
    """A capture run diagnose started did not finish: ``exit_code`` is the run's, ``str()`` one line."""

    def __init__(self, text: str, exit_code: int):
        super().__init__(text)
        self.exit_code = exit_code


class _Messages:
    """Forwards a nested run's messages (prefixed with what runs) and nothing else: the diagnose's own progress
    is the one the caller shows."""

    def __init__(self, events: Any, label: str):
        self.events, self.label = events, label

    def emit(self, kind: str, **fields: Any) -> None:
        if self.events is not None and kind == "message":
            fields = dict(fields, text="{}: {}".format(self.label, fields.get("text", "")))
            self.events.emit(kind, **fields)


def say(events: Any, text: str, level: str = "info") -> None:
    if events is not None:
        events.emit("message", level=level, text=text)


def run_capture(job: Dict[str, Any], events: Any, label: str) -> str:
    """Run one capture job (a config dict) to its end; the run folder it wrote. A target that fails raises
    :class:`CaptureFailed`; a config the schemas refuse raises their one-line error as a ``JobError``."""
    from engines.runner import JobError, run_job
    from schemas import ConfigError, load_config

    try:
        parsed = load_config(job)
    except ConfigError as exc:
        raise JobError("{}: {}".format(label, str(exc).splitlines()[0])) from None
    outcome = run_job(parsed, events=_Messages(events, label))
    if outcome.exit_code != EXIT_OK or not outcome.run_dir:
        error = str((outcome.summary or {}).get("error") or outcome.status).strip().splitlines()
        raise CaptureFailed("{}: the run {} (exit code {}{})".format(
            label, outcome.status, outcome.exit_code, ": " + error[-1] if error else ""), outcome.exit_code)
    return outcome.run_dir


def compare(target: str, golden: str, out: Path, mode: str, fuzzy: bool, events: Any, label: str) -> Any:
    """A compare of two dumps into ``out`` (ranked, top 20 suspects kept): its ``CompareOutcome``."""
    from engines.compare.engine import run_compare

    job = {"task": "compare", "compare": {"target_path": target, "golden_path": golden, "mode": mode,
                                          "fuzzy_match": fuzzy, "top": 20, "output_path": str(out),
                                          "formats": ["hdf5", "csv"]}}
    return run_compare(job, _Messages(events, label), fail_on_findings=False)


def results_of(outcome: Any) -> Dict[str, Any]:
    """The compare's result rows (in memory when the compare held them, else read back from its store)."""
    if outcome.results:
        return dict(outcome.results)
    if outcome.output_dir is None:
        return {}
    from engines.compare.hdf5_out import read_results

    try:
        return read_results(outcome.output_dir)
    except Exception:  # an unreadable result store: the verdict goes without the row-level evidence
        return {}


def holds_tensors(path: str) -> bool:
    """Whether an existing dump holds real tensors (a tensor dump, or tensor_list entries)."""
    from engines.dumps.opener import open_dump
    from engines.dumps.source import DumpSourceError

    try:
        source = open_dump(Path(path))
    except (DumpSourceError, OSError):
        return False
    try:
        return bool(source.holds().get("tensor"))
    except (DumpSourceError, OSError):
        return False
    finally:
        source.close()


def dump_of(outcome: Optional[Any]) -> Optional[str]:
    return None if outcome is None else str(outcome.output_dir)
