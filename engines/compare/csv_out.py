"""The CSV report (msprobe 26.2's default format): its columns, then ours (RelErr, Rank, Step).

Formatting a million rows cell by cell is the slow part of a compare, so the report is built column-wise:
numbers through numpy's float-to-text conversion, text quoted once per distinct value, rows joined in C. Large
reports are cut into row ranges formatted by forked worker processes (they share the parent's columns without
copying) into part files that are then concatenated.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path
from typing import Dict, List

import numpy as np

from engines.compare.columns import report_headers
from engines.compare.report_cells import NumCells, report_columns

PARALLEL_ROWS = 200_000  # below this one process is faster than starting workers
_SPECIAL = (",", '"', "\n", "\r")


def _quote(text: str) -> str:
    if any(c in text for c in _SPECIAL):
        return '"' + text.replace('"', '""') + '"'
    return text


def _column_text(cells) -> List[str]:
    """A column's cells as CSV field texts."""
    if isinstance(cells, NumCells):
        return cells.texts()
    # every other column is a list of str (report_cells builds them so)
    joined = "".join(cells)
    if not any(c in joined for c in _SPECIAL):
        return cells
    quoted: Dict[str, str] = {}
    return [quoted[c] if c in quoted else quoted.setdefault(c, _quote(c)) for c in cells]


def _format_rows(cols: Dict[str, np.ndarray], mode: str, stack: bool, classic: bool, lo: int, hi: int) -> str:
    part = {k: v[lo:hi] for k, v in cols.items()}
    cells = report_columns(part, mode, stack=stack, classic=classic)
    headers = report_headers(mode, stack=stack, classic=classic)
    texts = [_column_text(cells[h]) for h in headers]
    if hi <= lo:
        return ""
    return "\n".join(map(",".join, zip(*texts))) + "\n"


_FORK_STATE: Dict[str, object] = {}


def _write_part(args) -> str:
    lo, hi, path = args
    st = _FORK_STATE
    text = _format_rows(st["cols"], st["mode"], st["stack"], st["classic"], lo, hi)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return path


def write_csv(path: Path, cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool,
              workers: int = 0) -> Path:
    """Write atomically (a temporary file renamed into place): a reader never sees half a report."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    n = int(cols["verdict"].shape[0])
    header = ",".join(_quote(h) for h in report_headers(mode, stack=stack, classic=classic)) + "\n"
    workers = workers or min(os.cpu_count() or 1, 16)
    can_fork = "fork" in multiprocessing.get_all_start_methods()
    if n < PARALLEL_ROWS or workers < 2 or not can_fork:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(header)
            step = 100_000
            for lo in range(0, n, step):
                fh.write(_format_rows(cols, mode, stack, classic, lo, min(n, lo + step)))
    else:
        bounds = np.linspace(0, n, workers * 2 + 1).astype(int)
        jobs = [(int(a), int(b), "{}.{}".format(tmp, k)) for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        _FORK_STATE.update(cols=cols, mode=mode, stack=stack, classic=classic)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                parts = pool.map(_write_part, jobs)
        finally:
            _FORK_STATE.clear()
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(header)
            fh.flush()
            with open(tmp, "ab") as out:
                for p in parts:
                    with open(p, "rb") as src:
                        shutil.copyfileobj(src, out, 16 << 20)
                    os.unlink(p)
    tmp.replace(path)
    return path
