"""The compare result store (kind ``compare``, docs/FORMAT.md "Compare results"): what the app reads.

Tables: ``results`` (one row per target row), ``divergence`` (first-divergence ranking), ``tree`` (module
roll-up), ``golden_only`` (golden rows no target row took), and small code tables ``verdicts``, ``findings``,
``statuses``. Columnar, numbers as numbers, verdicts as uint8 codes. The summary is the store's ``run_meta``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from engines.compare.columns import (
    CLASSIC_COLUMNS,
    DIVERGENCE_COLUMNS,
    GOLDEN_ONLY_COLUMNS,
    RESULT_COLUMNS,
    TREE_COLUMNS,
)
from engines.compare.tensor_metrics import STATUS_NAMES
from engines.compare.verdicts import FINDINGS, VERDICTS

KIND = "compare"
SCHEMA_VERSION = 1
CODE_TABLES = {"verdicts": VERDICTS, "findings": FINDINGS, "statuses": STATUS_NAMES}


def _specs(classic: bool):
    from engines.store import Column, TableSpec

    def spec(name, cols):
        return TableSpec(name, [Column(c, t) for c, t in cols])

    results = RESULT_COLUMNS + (CLASSIC_COLUMNS if classic else ()) + (("matched", "uint8"),)
    tables = [spec("results", results), spec("divergence", DIVERGENCE_COLUMNS), spec("tree", TREE_COLUMNS),
              spec("golden_only", GOLDEN_ONLY_COLUMNS)]
    tables += [spec(name, (("code", "int64"), ("name", "str"))) for name in CODE_TABLES]
    return tables


def _column(values: np.ndarray, kind: str):
    if kind in ("str", "json"):
        if values.dtype != object:
            values = values.astype(object)
        if kind == "json":
            return ["" if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in values.tolist()]
        return values
    return np.asarray(values).astype(kind, copy=False)


def write_hdf5(out_dir: Path, mode: str, table: Dict[str, np.ndarray], div: Dict[str, np.ndarray],
               tree: Dict[str, np.ndarray], golden_only: Dict[str, np.ndarray], summary: Dict[str, Any]) -> Path:
    """Write ``<out_dir>/compare.h5`` (or its per-step segment on a network file system)."""
    from engines.store import StoreWriter

    classic = "classic_colour" in table
    meta = {"framework": "", "schema_version": SCHEMA_VERSION,
            "run_meta": {"mode": mode, "summary": _jsonable(summary)}}
    with StoreWriter(out_dir, KIND, _specs(classic), meta=meta) as w:
        results = RESULT_COLUMNS + (CLASSIC_COLUMNS if classic else ()) + (("matched", "uint8"),)
        for name, cols, data in (("results", results, table), ("divergence", DIVERGENCE_COLUMNS, div),
                                 ("tree", TREE_COLUMNS, tree), ("golden_only", GOLDEN_ONLY_COLUMNS, golden_only)):
            if data and len(next(iter(data.values()))):
                w.append(name, **{c: _column(data[c], t) for c, t in cols})
        for name, names in CODE_TABLES.items():
            w.append(name, code=np.arange(len(names), dtype=np.int64), name=list(names))
        w.commit(0)
    return Path(out_dir) / (KIND + ".h5")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def read_results(path, table: str = "results", columns: Optional[list] = None) -> Dict[str, np.ndarray]:
    """A table of a compare result folder (or its ``compare.h5``), as numpy columns."""
    from engines.store import StoreReader

    with StoreReader(Path(path), KIND) as r:
        return r.read(table, columns)


def read_summary(path) -> Dict[str, Any]:
    from engines.store import StoreReader

    with StoreReader(Path(path), KIND) as r:
        meta = r.meta.get("run_meta") or {}
    return meta.get("summary", {}) if isinstance(meta, dict) else {}
