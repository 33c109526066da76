"""msprobe's ``grad_summary_{step}.csv`` (docs/reference/msprobe-tasks.md §9.2), written on request next to our HDF5 store.

The header per level is msprobe's (lowercase, as its code writes it); ``MD5`` is the CRC32 of the float32
gradient as 8 hex digits; interval columns and ``=0`` are fractions of elements; ``shape`` is a list.
"""

import csv
from pathlib import Path
from typing import List, Sequence

from engines import safe_fs
from engines.grad_probe.levels import csv_header, has_hash, has_histogram
from engines.grad_probe.records import GradStepStats
from engines.safe_fs import PathLike


def summary_rows(stats: GradStepStats, level: str) -> List[list]:
    rows = []
    crc32, hist, zero_frac = stats.crc32, stats.hist, stats.zero_frac  # set at the levels that record them
    for i, name in enumerate(stats.names):
        shape = list(stats.shapes[i])
        tail = [float(stats.max[i]), float(stats.min[i]), float(stats.norm[i]), shape]
        if has_hash(level) and crc32 is not None:
            rows.append([name, f"{int(crc32[i]) & 0xFFFFFFFF:08x}", *tail])
        elif has_histogram(level) and hist is not None and zero_frac is not None:
            rows.append([name, *[float(v) for v in hist[i]], float(zero_frac[i]), *tail])
        else:
            rows.append([name, *tail])
    return rows


def write_grad_summary(directory: PathLike, stats: GradStepStats, level: str, bounds: Sequence[float]) -> Path:
    """Write ``<directory>/grad_summary_{step}.csv`` atomically (a killed run never leaves half a file)."""
    directory = Path(directory)
    safe_fs.make_dirs(directory)
    path = directory / f"grad_summary_{stats.step}.csv"
    with safe_fs.atomic_file(path, "w", tmp=path.with_suffix(".csv.partial"), newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(csv_header(level, bounds))
        writer.writerows(summary_rows(stats, level))
    return path
