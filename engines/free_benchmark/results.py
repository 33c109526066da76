"""free_benchmark results: the ``free_benchmark`` store of a rank folder and msprobe's ``free_benchmark.csv``.

Store (kind ``free_benchmark``, schema version 1), table ``checks``: one row per compared output (forward) or
input gradient (backward) of every checked call, consistent or not: ``step``, ``name`` (the API call,
``Torch.matmul.0.forward``), ``stage``, ``pert_mode``, ``handler``, ``output_index``, ``dtype``/``shape`` (of that
output or gradient), ``ratio`` (inf for a sign flip; NaN for to_cpu, which is judged on tolerances), ``threshold``,
``consistent``, ``replaced`` (fix: the call's output was replaced), ``detail``.

CSV: ``<run>/rank<R>/free_benchmark.csv``, msprobe's columns ``rank, pert_mode, stage, step, api_name, max_rel,
dtype, shape, output_index``, inconsistent rows only, appended each step (``max_rel`` = ratio - 1, or
``symbol_flipping``; empty for to_cpu).
"""

import csv
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from engines import safe_fs
from engines.free_benchmark.thresholds import max_rel
from engines.store import Column, StoreReader, StoreWriter, TableSpec

KIND = "free_benchmark"
SCHEMA_VERSION = 1
CSV_NAME = "free_benchmark.csv"
CSV_COLUMNS = ("rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index")

CHECKS = TableSpec("checks", (
    Column("step", "int64"),
    Column("name", "str"),
    Column("stage", "str"),
    Column("pert_mode", "str"),
    Column("handler", "str"),
    Column("output_index", "int64", default=0),
    Column("dtype", "str", default=""),
    Column("shape", "str", default=""),
    Column("ratio", "float64", default="nan"),
    Column("threshold", "float64", default="nan"),
    Column("consistent", "bool", default=True),
    Column("replaced", "bool", default=False),
    Column("detail", "json", default=""),
))


class CheckRow:
    """One compared output (or input gradient) of one checked call."""

    __slots__ = ("step", "name", "stage", "pert_mode", "handler", "output_index", "dtype", "shape", "ratio",
                 "threshold", "consistent", "replaced", "detail")

    def __init__(self, step: int, name: str, stage: str, pert_mode: str, handler: str, output_index: int,
                 dtype: str, shape: str, ratio: float = float("nan"), threshold: float = float("nan"),
                 consistent: bool = True, replaced: bool = False, detail: str = "") -> None:
        self.step = step
        self.name = name
        self.stage = stage
        self.pert_mode = pert_mode
        self.handler = handler
        self.output_index = output_index
        self.dtype = dtype
        self.shape = shape
        self.ratio = ratio
        self.threshold = threshold
        self.consistent = consistent
        self.replaced = replaced
        self.detail = detail

    def as_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def csv_row(self, rank: int) -> List[Any]:
        value = "" if self.pert_mode == "to_cpu" else max_rel(self.ratio)
        return [rank, self.pert_mode, self.stage, self.step, self.name, value, self.dtype, self.shape,
                self.output_index]


class ResultWriter:
    """Writes one rank's rows: the store (every row, committed per step) and the CSV (inconsistent rows)."""

    def __init__(self, rank_dir: Any, rank: int, meta: Dict[str, Any], mode: str = "auto") -> None:
        meta = dict(meta)
        meta.setdefault("schema_version", SCHEMA_VERSION)
        meta.setdefault("rank", rank)
        self.rank = rank
        self.store = StoreWriter(rank_dir, KIND, (CHECKS,), meta=meta, mode=mode)
        self.csv_path = Path(rank_dir) / CSV_NAME
        self.csv_rows = 0

    def write(self, step: int, rows: List[CheckRow]) -> None:
        if rows:
            cols: Dict[str, List[Any]] = {name: [getattr(r, name) for r in rows] for name in CheckRow.__slots__}
            self.store.append("checks", **cols)
        self.store.commit(step, checks=len(rows), inconsistent=sum(1 for r in rows if not r.consistent))
        bad = [r for r in rows if not r.consistent]
        if bad:
            self._append_csv(bad)

    def _append_csv(self, rows: List[CheckRow]) -> None:
        new = not self.csv_path.exists()
        fd = safe_fs.append_fd(self.csv_path)
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            if new:
                w.writerow(CSV_COLUMNS)
            for r in rows:
                w.writerow(r.csv_row(self.rank))
        self.csv_rows += len(rows)

    def close(self, status: str = "finished") -> None:
        self.store.close(status)


def read_checks(rank_dir: Any, step: Optional[int] = None) -> List[Dict[str, Any]]:
    with StoreReader(rank_dir, KIND) as r:
        cols = r.read("checks", steps=None if step is None else [int(step)])
    names = list(cols)
    n = len(cols[names[0]]) if names else 0
    return [{k: (cols[k][i].item() if hasattr(cols[k][i], "item") else cols[k][i]) for k in names}
            for i in range(n)]
