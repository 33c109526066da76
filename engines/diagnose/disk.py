"""What stage 2 wrote against what a full tensor dump would hold.

The full dump is estimated from the stage-1 statistics records: every tensor row's element count times its
dtype's size, over every rank and step stage 1 saw (the data alone: a real dump adds its file overhead).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

import numpy as np

_SIZES = (("complex128", 16), ("complex64", 8), ("float64", 8), ("double", 8), ("int64", 8), ("long", 8),
          ("uint64", 8), ("bfloat16", 2), ("float16", 2), ("half", 2), ("int16", 2), ("uint16", 2),
          ("float8", 1), ("uint8", 1), ("int8", 1), ("bool", 1), ("float32", 4), ("int32", 4), ("uint32", 4),
          ("float", 4), ("int", 4))


def itemsize(dtype: str) -> int:
    base = str(dtype).lower().rsplit(".", 1)[-1]
    for name, size in _SIZES:
        if base.startswith(name):
            return size
    return 4


def full_dump_bytes(path: str) -> Dict[str, int]:
    """``{"all_steps": bytes, "one_step": bytes of the largest step}`` of a full tensor dump of the run at
    ``path``, from its statistics rows."""
    from engines.dumps.opener import open_dump

    source = open_dump(Path(path))
    total, one = 0, 0
    try:
        for rank in source.ranks():
            for step in source.steps(rank):
                rows = source.rows(rank, step)
                sizes = np.array([itemsize(d) for d in rows.dtype.tolist()], dtype=np.int64) if len(rows) else \
                    np.zeros(0, np.int64)
                ok = rows.is_tensor & (rows.numel > 0)
                step_bytes = int((rows.numel[ok] * sizes[ok]).sum())
                total += step_bytes
                one = max(one, step_bytes)
    finally:
        source.close()
    return {"all_steps": total, "one_step": one}


def folder_bytes(paths: Iterable[Optional[str]]) -> int:
    """Bytes the files under ``paths`` take on disk (allocated blocks, as ``du``)."""
    total = 0
    for root in paths:
        if not root:
            continue
        for folder, _, files in os.walk(root):
            for name in files:
                try:
                    st = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue
                total += int(getattr(st, "st_blocks", 0) * 512 or st.st_size)
    return total


def data_bytes(run_dirs: Iterable[Optional[str]]) -> int:
    """The tensor and row data the runs say they wrote (``size_bytes`` in their run.json summaries)."""
    from engines.runs import open_run

    total = 0
    for run_dir in run_dirs:
        if not run_dir:
            continue
        try:
            summary = open_run(run_dir).read().get("summary") or {}
        except Exception:  # a run folder that cannot be read: its data is not counted
            continue
        total += int(summary.get("size_bytes") or 0)
    return total


def disk_report(stage1_dumps: Iterable[Optional[str]], stage2_runs: Iterable[Optional[str]]) -> Dict[str, Any]:
    runs = [r for r in stage2_runs if r]
    full = {"all_steps": 0, "one_step": 0}
    for dump in stage1_dumps:
        if dump:
            try:
                f = full_dump_bytes(dump)
            except Exception:  # an unreadable dump: no estimate from it
                continue
            full["all_steps"] += f["all_steps"]
            full["one_step"] += f["one_step"]
    written = folder_bytes(runs)
    data = data_bytes(runs)
    out: Dict[str, Any] = {"stage2_disk_bytes": written, "stage2_data_bytes": data,
                           "full_dump_bytes": full["all_steps"], "full_step_bytes": full["one_step"]}
    out["fraction_of_full_dump"] = (written / full["all_steps"]) if full["all_steps"] else None
    out["data_fraction_of_full_dump"] = (data / full["all_steps"]) if full["all_steps"] else None
    return out
