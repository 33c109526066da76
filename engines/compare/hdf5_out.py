"""The compare result store (kind ``compare``, docs/FORMAT.md "Compare results"): what the app reads.

Tables: ``results`` (one row per target row), ``divergence`` (first-divergence ranking), ``tree`` (module
roll-up), ``golden_only`` (golden rows no target row took), and small code tables ``verdicts``, ``findings``,
``statuses``. Columnar, numbers as numbers, verdicts as uint8 codes. The summary is the store's ``run_meta``.

Text columns of ``results`` other than ``target_name`` are dictionary-encoded: an int32 code per row and a table
``dict_<column>`` whose row ``code`` holds the text (-1: empty; ``golden_name`` -2: same as ``target_name``).
Interning a million strings per column through the string table costs about a second each; the codes cost a
few milliseconds, and each distinct text is stored once. :func:`read_results` decodes them.
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
from engines.parse.rows import factorize

KIND = "compare"
SCHEMA_VERSION = 1
CODE_TABLES = {"verdicts": VERDICTS, "findings": FINDINGS, "statuses": STATUS_NAMES}


SAME_AS_TARGET = -2


def _result_columns(classic: bool):
    cols = RESULT_COLUMNS + (CLASSIC_COLUMNS if classic else ()) + (("matched", "uint8"),)
    return tuple((c, "int32" if t in ("str", "json") and c != "target_name" else t) for c, t in cols)


def encoded_columns(classic: bool):
    """Results columns stored as dictionary codes."""
    cols = RESULT_COLUMNS + (CLASSIC_COLUMNS if classic else ())
    return [c for c, t in cols if t in ("str", "json") and c != "target_name"]


def _specs(classic: bool):
    from engines.store import Column, TableSpec

    def spec(name, cols):
        return TableSpec(name, [Column(c, t) for c, t in cols])

    tables = [spec("results", _result_columns(classic)), spec("divergence", DIVERGENCE_COLUMNS),
              spec("tree", TREE_COLUMNS), spec("golden_only", GOLDEN_ONLY_COLUMNS)]
    tables += [spec(name, (("code", "int64"), ("name", "str"))) for name in CODE_TABLES]
    tables += [spec("dict_" + c, (("text", "str"),)) for c in encoded_columns(classic)]
    return tables


def encode_text(values: np.ndarray, same_as: Optional[np.ndarray] = None):
    """(int32 codes, distinct texts): -1 for ""/None, -2 where equal to ``same_as``. Comparisons run in C; only
    the remaining values go through a dict."""
    n = values.shape[0]
    codes = np.full(n, -1, dtype=np.int32)
    rest = np.not_equal(values, None) & np.not_equal(values, "")
    if same_as is not None:
        same = values == same_as
        codes[same] = SAME_AS_TARGET
        rest &= ~same
    idx = np.flatnonzero(rest)
    if idx.size == 0:
        return codes, []
    sub, texts = factorize(values[idx])
    codes[idx] = sub.astype(np.int32)
    return codes, [t if isinstance(t, str) else json.dumps(t) for t in texts.tolist()]


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
        if len(table.get("verdict", ())):
            values = {}
            for c, t in _result_columns(classic):
                if c in table and c not in encoded_columns(classic):
                    values[c] = _column(table[c], t)
            for c in encoded_columns(classic):
                codes, texts = encode_text(table[c], table["target_name"] if c == "golden_name" else None)
                values[c] = codes
                if texts:
                    w.append("dict_" + c, text=texts)
            w.append("results", **values)
        for name, cols, data in (("divergence", DIVERGENCE_COLUMNS, div), ("tree", TREE_COLUMNS, tree),
                                 ("golden_only", GOLDEN_ONLY_COLUMNS, golden_only)):
            if data and len(next(iter(data.values()))):
                w.append(name, **{c: _column(data[c], t) for c, t in cols})
        for name, names in CODE_TABLES.items():
            w.append(name, code=np.arange(len(names), dtype=np.int64), name=list(names))
        w.commit(0)
    return Path(out_dir) / (KIND + ".h5")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def read_results(path, table: str = "results", columns: Optional[list] = None,
                 decode: bool = True) -> Dict[str, np.ndarray]:
    """A table of a compare result folder (or its ``compare.h5``), as numpy columns; dictionary-coded text
    columns of ``results`` come back as object arrays of str (``decode=False``: their codes)."""
    from engines.store import StoreReader

    with StoreReader(Path(path), KIND) as r:
        out = r.read(table, columns)
        if table != "results" or not decode:
            return out
        for c in list(out):
            if ("dict_" + c) not in r.tables():
                continue
            texts = r.read("dict_" + c, ["text"])["text"]
            lookup = np.empty(len(texts) + 2, dtype=object)
            lookup[:len(texts)] = texts
            lookup[-1] = ""  # code -1
            codes = out[c].astype(np.int64)
            if c == "golden_name":
                same = codes == SAME_AS_TARGET
                codes = np.where(same, -1, codes)
                decoded = lookup[codes]
                target = out["target_name"] if "target_name" in out else r.read("results", ["target_name"])[
                    "target_name"]
                decoded[same] = target[same]
            else:
                decoded = lookup[codes]
            out[c] = decoded
        return out


def read_summary(path) -> Dict[str, Any]:
    from engines.store import StoreReader

    with StoreReader(Path(path), KIND) as r:
        meta = r.meta.get("run_meta") or {}
    return meta.get("summary", {}) if isinstance(meta, dict) else {}
