"""The CSV report (msprobe 26.2's default format): its columns, then ours (RelErr, Rank, Step)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict

import numpy as np

from engines.compare.report_cells import report_rows


def write_csv(path: Path, cols: Dict[str, np.ndarray], mode: str, *, stack: bool, classic: bool) -> Path:
    """Write atomically (a temporary file renamed into place): a reader never sees half a report."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerows(report_rows(cols, mode, stack=stack, classic=classic))
    tmp.replace(path)
    return path
