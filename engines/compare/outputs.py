"""Write a compare's results: a fresh output folder with the HDF5 result store, CSV, xlsx and summary.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import numpy as np

from engines import safe_fs
from engines.compare.csv_out import CsvJob, start_csv
from engines.compare.options import CompareError, CompareOptions
from engines.compare.xlsx_out import XlsxRefused, write_xlsx
from engines.events import EventSink

if TYPE_CHECKING:
    from engines.runs import Run

RESULT_FILE = "compare.h5"


def output_folder(opts: CompareOptions, job: Any, framework: str) -> Tuple[Path, Optional[Run]]:
    """Where results go: ``output_path`` (created; refused if it already holds results, nothing is overwritten),
    else a new run folder ``<dump_path>/<run-id>/`` with run.json and ``latest`` (engines.runs). Returns
    (folder, run or None)."""
    if opts.output_path is not None:
        out = opts.output_path
        if out.exists() and not out.is_dir():
            raise CompareError("compare.output_path: {} is a file, not a folder".format(out))
        if (out / "summary.json").exists() or (out / RESULT_FILE).exists():
            raise CompareError("compare.output_path: {} already holds compare results; give a new folder (results "
                               "are never overwritten)".format(out))
        try:
            safe_fs.make_dirs(out)
        except OSError as exc:
            raise CompareError("compare.output_path: {}".format(safe_fs.describe_os_error(out, exc))) from None
        return out, None
    from engines.runs import RunError, create_run

    config = _config_of(job)
    try:
        run = create_run(opts.dump_path, task="compare", config=config, framework=framework or "none")
    except (RunError, OSError) as exc:
        raise CompareError("dump_path: {}".format(exc)) from None
    return run.path, run


def _config_of(job: Any) -> Dict[str, Any]:
    if isinstance(job, dict):
        return job
    try:
        from schemas import dump_config

        return dump_config(job)
    except Exception:  # a job object that is not a schemas model: keep what can be shown
        return {"task": "compare"}


def write_summary(out: Path, summary: Dict[str, Any], files: Dict[str, str]) -> str:
    """``summary.json`` beside the reports (the summary, the folder, the files written), atomically; its path."""
    path = out / "summary.json"
    safe_fs.write_atomic(path, json.dumps(dict(summary, output_dir=str(out), files=files), indent=2, default=str),
                         tmp=out / "summary.json.partial")
    return str(path)


class ReportWriter:
    """The reports of one compare. Created as soon as the result rows exist: a large CSV starts in a background
    process then (it needs only the rows), while the caller ranks and the HDF5 store is written; :meth:`finish`
    writes the rest and waits for it, :meth:`abort` removes what was begun."""

    def __init__(self, out: Path, opts: CompareOptions, mode: str, table: Dict[str, np.ndarray]):
        self.out, self.opts, self.mode, self.table = out, opts, mode, table
        self.stamp = time.strftime("%Y%m%d%H%M%S")
        self.stack = bool(np.any(table["stack"] != "")) if len(table["stack"]) else False
        self.classic = opts.highlight == "classic"
        self.csv: Optional[CsvJob] = None
        if "csv" in opts.formats:
            self.csv = start_csv(out / "compare_result_{}.csv".format(self.stamp), table, mode, stack=self.stack,
                                 classic=self.classic)

    def finish(self, div: Dict[str, np.ndarray], tree: Dict[str, np.ndarray], golden_only: Dict[str, np.ndarray],
               summary: Dict[str, Any], events: Optional[EventSink]) -> Dict[str, str]:
        files: Dict[str, str] = {}
        out, table = self.out, self.table
        if "hdf5" in self.opts.formats:
            from engines.compare.hdf5_out import write_hdf5

            files["hdf5"] = str(write_hdf5(out, self.mode, table, div, tree, golden_only, summary))
        if "xlsx" in self.opts.formats:
            try:
                files["xlsx"] = str(write_xlsx(out / "compare_result_{}.xlsx".format(self.stamp), table, self.mode,
                                               stack=self.stack, classic=self.classic))
            except XlsxRefused as exc:
                summary.setdefault("notes", []).append(str(exc))
                if events is not None:
                    events.emit("message", level="warning", text=str(exc))
        if self.csv is not None:
            csv, self.csv = self.csv, None
            files["csv"] = str(csv.wait())
        files["summary"] = write_summary(out, summary, files)
        return files

    def abort(self) -> None:
        if self.csv is not None:
            self.csv.abort()
            self.csv = None
