"""Write a compare's results: a fresh output folder with the HDF5 result store, CSV, xlsx and summary.json."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from engines.compare.csv_out import write_csv
from engines.compare.options import CompareError, CompareOptions
from engines.compare.xlsx_out import XlsxRefused, write_xlsx


def new_output_dir(base: Path) -> Path:
    """``<base>/compare-<YYYYmmdd-HHMMSS>-<6 hex>/`` (never reused) and a ``latest`` pointer beside it."""
    if base.exists() and not base.is_dir():
        raise CompareError("compare.output_path: {} is a file, not a folder".format(base))
    base.mkdir(parents=True, exist_ok=True)
    while True:
        name = "compare-{}-{}".format(time.strftime("%Y%m%d-%H%M%S"), secrets.token_hex(3))
        out = base / name
        try:
            out.mkdir()
            break
        except FileExistsError:
            continue
    _point_latest(base, name)
    return out


def _point_latest(base: Path, name: str) -> None:
    link = base / "latest"
    tmp = base / ".latest.{}".format(os.getpid())
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(name, tmp)
        os.replace(tmp, link)
    except OSError:
        (base / "latest").write_text(name + "\n")


def write_outputs(opts: CompareOptions, mode: str, table, div, tree, golden_only, summary,
                  events) -> Tuple[Path, Dict[str, str]]:
    base = opts.output_path or Path("compare_output")
    out = new_output_dir(base)
    stamp = time.strftime("%Y%m%d%H%M%S")
    files: Dict[str, str] = {}
    stack = bool(np.any(table["stack"] != "")) if len(table["stack"]) else False
    classic = opts.highlight == "classic"
    if "hdf5" in opts.formats:
        from engines.compare.hdf5_out import write_hdf5

        files["hdf5"] = str(write_hdf5(out, mode, table, div, tree, golden_only, summary))
    if "csv" in opts.formats:
        files["csv"] = str(write_csv(out / "compare_result_{}.csv".format(stamp), table, mode, stack=stack,
                                     classic=classic))
    if "xlsx" in opts.formats:
        try:
            files["xlsx"] = str(write_xlsx(out / "compare_result_{}.xlsx".format(stamp), table, mode, stack=stack,
                                           classic=classic))
        except XlsxRefused as exc:
            summary.setdefault("notes", []).append(str(exc))
            if events is not None:
                events.emit("message", level="warning", text=str(exc))
    path = out / "summary.json"
    tmp = out / "summary.json.partial"
    tmp.write_text(json.dumps(dict(summary, output_dir=str(out), files=files), indent=2, default=str))
    tmp.replace(path)
    files["summary"] = str(path)
    return out, files
