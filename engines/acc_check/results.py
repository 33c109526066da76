"""acc_check's result files: the journal (one JSON line per checked API, written as each API ends: what a resumed
check continues from), msprobe's two CSVs, and the HDF5 result store built from the journal when the check ends.

Files in the output folder (docs/ACC_CHECK.md, "Outputs"):
- ``acc_check.journal``: a header line (timestamp, dump), then one line per API ``{"api": ..., "outputs": [...]}``;
- ``accuracy_checking_result_<ts>.csv``, ``accuracy_checking_details_<ts>.csv``: msprobe's columns;
- ``acc_check.h5`` (store kind ``acc_check``): tables ``apis`` and ``outputs``, committed once, when done.
"""

import csv
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from engines import safe_fs
from engines.acc_check.rules import COLUMNS
from engines.errors import JobError
from engines.store import Column, StoreWriter, TableSpec

KIND = "acc_check"
JOURNAL = "acc_check.journal"
RESULT_PREFIX = "accuracy_checking_result_"
DETAILS_PREFIX = "accuracy_checking_details_"

RESULT_COLUMNS = ("API name", "Forward Test Success", "Backward Test Success", "Message")
DETAILS_COLUMNS = ("API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标",
                   "双千指标", "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比",
                   "相对误差最大值", "相对误差平均值", "inf/nan错误率", "相对误差错误率", "绝对误差错误率",
                   "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比", "Status", "Message")

APIS = TableSpec("apis", (
    Column("rank", "int64"),
    Column("step", "int64"),
    Column("name", "str"),
    Column("forward", "str"),
    Column("backward", "str"),
    Column("status", "str"),
    Column("message", "str", default=""),
))
OUTPUTS = TableSpec("outputs", (
    Column("api", "str"),
    Column("name", "str"),
    Column("direction", "str"),
    Column("bench_dtype", "str", default=""),
    Column("device_dtype", "str", default=""),
    Column("shape", "str", default=""),
    Column("standard", "str", default=""),
    *[Column(c, "float64", default="nan") for c in COLUMNS],
    Column("status", "str"),
    Column("message", "str", default=""),
))


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return " " if math.isnan(value) else "%.14f" % value if abs(value) < 1e15 else repr(value)
    return value


def details_row(out: Dict[str, Any]) -> List[Any]:
    return [out["name"], out["bench_dtype"], out["device_dtype"], out["shape"],
            *[_cell(out["metrics"].get(c, math.nan)) for c in COLUMNS], out["status"], out["message"]]


def result_row(api: Dict[str, Any]) -> List[Any]:
    return [api["name"], api["forward"], api["backward"], api["message"]]


class Journal:
    """The append-only record of checked APIs; reopening it gives what a resumed check skips."""

    def __init__(self, folder: Path, dump: str, stamp: str) -> None:
        self.folder = folder
        self.path = folder / JOURNAL
        self.stamp = stamp
        self.entries: List[Dict[str, Any]] = []
        self.done: set = set()
        if self.path.exists():
            self._load()
        else:
            with safe_fs.atomic_file(self.path, "w", encoding="utf-8") as fh:
                fh.write(json.dumps({"stamp": stamp, "dump": dump}) + "\n")
        self.result_csv = folder / (RESULT_PREFIX + self.stamp + ".csv")
        self.details_csv = folder / (DETAILS_PREFIX + self.stamp + ".csv")
        self._rewrite_csvs()
        self._fh = safe_fs.append_file(self.path, "a", encoding="utf-8")

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                lines = fh.read().split("\n")
            head = json.loads(lines[0])
            stamp = str(head["stamp"])
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise JobError("acc_check.output_path: %s is not a readable acc_check journal (%s: %s); give a new "
                           "folder" % (self.path, type(exc).__name__, exc)) from None
        if not re.fullmatch(r"\d{14}", stamp):
            raise JobError("acc_check.output_path: %s: its timestamp %r is not YYYYmmddHHMMSS" % (
                self.path, stamp[:40]))
        self.stamp = stamp
        kept = [lines[0]]
        for line in lines[1:]:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                name = "" if entry.get("finished") else str(entry["api"]["name"])
                if name and not isinstance(entry["outputs"], list):
                    raise TypeError("outputs")
            except (ValueError, KeyError, TypeError, AttributeError):
                break  # a line cut by the interruption: that API (and any after it) runs again
            self.entries.append(entry)
            kept.append(line)
            if name:
                self.done.add(name)
        with safe_fs.atomic_file(self.path, "w", encoding="utf-8") as fh:  # without a line the interruption cut
            fh.write("\n".join(kept) + "\n")

    @property
    def finished(self) -> bool:
        return any(e.get("finished") for e in self.entries)

    def _rewrite_csvs(self) -> None:
        """The CSVs as the journal says (a line the interruption cut from a CSV is written again)."""
        with safe_fs.atomic_file(self.result_csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(RESULT_COLUMNS)
            for e in self.apis():
                w.writerow(result_row(e["api"]))
        with safe_fs.atomic_file(self.details_csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(DETAILS_COLUMNS)
            for e in self.apis():
                for out in e["outputs"]:
                    w.writerow(details_row(out))

    def apis(self) -> List[Dict[str, Any]]:
        return [e for e in self.entries if "api" in e]

    def add(self, api: Dict[str, Any], outputs: List[Dict[str, Any]]) -> None:
        """One checked API: the CSVs first, then the journal line that makes it count as done."""
        with safe_fs.append_file(self.result_csv, "a", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerow(result_row(api))
        with safe_fs.append_file(self.details_csv, "a", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            for out in outputs:
                w.writerow(details_row(out))
        entry = {"api": api, "outputs": outputs}
        self._fh.write(json.dumps(entry, allow_nan=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.entries.append(entry)
        self.done.add(api["name"])

    def finish(self) -> None:
        self._fh.write(json.dumps({"finished": True}) + "\n")
        self._fh.flush()
        self.entries.append({"finished": True})

    def close(self) -> None:
        self._fh.close()


def write_store(folder: Path, journal: Journal, meta: Dict[str, Any]) -> None:
    writer = StoreWriter(folder, KIND, (APIS, OUTPUTS), meta={"schema_version": 1, **meta})
    status = "failed"
    try:
        entries = journal.apis()
        if entries:
            apis = [e["api"] for e in entries]
            writer.append("apis", rank=[a["rank"] for a in apis], step=[a["step"] for a in apis],
                          name=[a["name"] for a in apis], forward=[a["forward"] for a in apis],
                          backward=[a["backward"] for a in apis], status=[a["status"] for a in apis],
                          message=[a["message"] for a in apis])
            outs = [o for e in entries for o in e["outputs"]]
            if outs:
                cols: Dict[str, List[Any]] = {k: [o[k] for o in outs] for k in (
                    "api", "name", "direction", "bench_dtype", "device_dtype", "shape", "standard", "status",
                    "message")}
                for c in COLUMNS:
                    cols[c] = [float(o["metrics"].get(c, math.nan)) for o in outs]
                writer.append("outputs", **cols)
        writer.commit(0)
        status = "finished"
    finally:
        writer.close(status)


def read_result(folder: Path) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(apis, outputs) of a finished check's store (the app's and reproduce's reader)."""
    from engines.store import StoreReader

    reader = StoreReader(folder, KIND)
    try:
        apis = reader.read("apis", None)
        outs = reader.read("outputs", None)
    finally:
        reader.close()
    return _records(apis), _records(outs)


def _records(cols: Dict[str, Any]) -> List[Dict[str, Any]]:
    keys = [k for k in cols if k != "row"]
    n = len(cols[keys[0]]) if keys else 0
    values = [_python_values(cols[k]) for k in keys]
    return [dict(zip(keys, row)) for row in zip(*values)] if keys else [{} for _ in range(n)]


def _python_values(column: Any) -> List[Any]:
    """A column's values as Python objects (a numpy value as its ``item()``). A numeric or text array converts
    at once (``tolist``: ``item()`` of each value), ~5x faster than a value at a time (a result's 777 rows: 3 ms
    of the acc_check view's read)."""
    if getattr(column, "dtype", None) is not None and column.dtype != object and getattr(column, "ndim", 0) == 1:
        return column.tolist()
    return [value.item() if hasattr(value, "item") else value for value in column]
