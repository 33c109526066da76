"""The compare result store (kind ``compare``, docs/FORMAT.md "Compare results"): what the app reads.

Tables: ``results`` (one row per target row), ``divergence`` (first-divergence ranking), ``tree`` (module
roll-up), ``golden_only`` (golden rows no target row took), and small code tables ``verdicts``, ``findings``,
``statuses``. Columnar, numbers as numbers, verdicts as uint8 codes. The summary is the store's ``run_meta``.

Text columns are dictionary-encoded: an int32 code per row into a text table (-1: empty). Record and module
names of every table share the table ``names`` (``results.golden_name`` -2: the same as the target name), the
other text columns of ``results`` each have ``dict_<column>``. ``results.target_name`` is not stored: it is
``record + "." + slot``. Interning a million strings through the store's string table costs about a second a
column; codes cost milliseconds and each distinct text is stored once. :func:`read_results` decodes everything.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

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
from engines.dumps.rows import factorize, object_ids

KIND = "compare"
SCHEMA_VERSION = 1
CODE_TABLES = {"verdicts": VERDICTS, "findings": FINDINGS, "statuses": STATUS_NAMES}
SAME_AS_TARGET = -2
NAME_COLUMNS = {"results": ("record", "parent", "golden_name"),
                "divergence": ("record", "parent", "last_op", "link"),
                "tree": ("node", "parent"), "golden_only": ("golden_name",)}
DERIVED = ("target_name",)
_UNKNOWN = -3  # not yet coded
DICT_INDEX = 1 << 18  # distinct texts a dictionary indexes before it starts afresh


def _layout(classic: bool):
    """Stored columns of each table: (name, type, dictionary) with dictionary None for plain columns."""
    out = {}
    base = RESULT_COLUMNS + (CLASSIC_COLUMNS if classic else ()) + (("matched", "uint8"),)
    for table, cols in (("results", base), ("divergence", DIVERGENCE_COLUMNS), ("tree", TREE_COLUMNS),
                        ("golden_only", GOLDEN_ONLY_COLUMNS)):
        spec = []
        for c, t in cols:
            if table == "results" and c in DERIVED:
                continue
            if c in NAME_COLUMNS.get(table, ()):
                spec.append((c, "int32", "names"))
            elif t in ("str", "json"):
                spec.append((c, "int32", "dict_" + c if table == "results" else "dict_{}_{}".format(table, c)))
            else:
                spec.append((c, t, None))
        out[table] = spec
    return out


def _specs(layout):
    from engines.store import Column, TableSpec

    tables = [TableSpec(t, [Column(c, typ) for c, typ, _ in cols]) for t, cols in layout.items()]
    tables += [TableSpec(name, [Column("code", "int64"), Column("name", "str")]) for name in CODE_TABLES]
    dicts = sorted({d for cols in layout.values() for _, _, d in cols if d})
    # "json": each text stored as given; "str" would intern it again in the writer, whose index then grows with
    # every distinct text of the result (a per-row hash column has millions)
    tables += [TableSpec(d, [Column("text", "json")]) for d in dicts]
    return tables


class TextDictionary:
    """Distinct texts in first-seen order; :meth:`encode` gives int32 codes (-1 for ""/None), code = row of the
    text in its dictionary table.

    Tables share objects (the divergence and tree tables name the same record strings as the results), so the
    codes of objects already seen are remembered by object id (the dictionary keeps those objects alive, so
    their ids stay theirs) and found again with one vectorised search instead of a dict lookup per row.

    Memory stays bounded on any result size: :meth:`take_new` hands out the texts coded since its last call (the
    store appends them as they come), and past :data:`DICT_INDEX` distinct texts the text index starts afresh
    (codes go on counting; a text seen again after that gets a second code, which decodes the same).
    """

    def __init__(self):
        self.index: Dict[str, int] = {}
        self._base = 0  # codes handed out before the current index
        self._taken = 0  # codes whose texts take_new has handed out
        self._keep: List[object] = []
        self._ids = np.empty(0, dtype=np.int64)  # sorted
        self._codes = np.empty(0, dtype=np.int32)

    def encode(self, values: np.ndarray, same_as: Optional[np.ndarray] = None) -> np.ndarray:
        values = np.asarray(values, dtype=object)
        if same_as is None:
            return self._codes_of(values)
        codes = np.full(values.shape[0], SAME_AS_TARGET, dtype=np.int32)
        rest = np.flatnonzero(values != same_as)
        if rest.size:
            codes[rest] = self._codes_of(values[rest])
        return codes

    def _code(self, value) -> int:
        if value is None or value == "":
            return -1
        return self._base + self.index.setdefault(value if isinstance(value, str) else json.dumps(value),
                                                  len(self.index))

    def _codes_of(self, values: np.ndarray) -> np.ndarray:
        n = values.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        ids = object_ids(values)
        codes = np.full(n, _UNKNOWN, dtype=np.int32)
        if self._ids.size:
            pos = np.minimum(np.searchsorted(self._ids, ids), self._ids.size - 1)
            hit = self._ids[pos] == ids
            codes[hit] = self._codes[pos[hit]]
        miss = np.flatnonzero(codes == _UNKNOWN)
        if miss.size:
            sub, uniques = factorize(values[miss])
            index, code, base = self.index, self._code, self._base
            setdefault = index.setdefault
            mapped = np.fromiter((base + setdefault(u, len(index)) if type(u) is str and u else code(u)
                                  for u in uniques.tolist()), dtype=np.int32, count=len(uniques))
            codes[miss] = mapped[sub]
            objs = uniques.tolist()
            self._keep.extend(objs)
            ids = np.concatenate([self._ids, np.fromiter(map(id, objs), dtype=np.int64, count=len(objs))])
            order = np.argsort(ids, kind="stable")
            self._ids = ids[order]
            self._codes = np.concatenate([self._codes, mapped])[order]
        return codes

    def take_new(self) -> List[str]:
        """Texts coded since the last call, in code order (the rows to append to the dictionary table)."""
        start = self._taken - self._base
        new = list(itertools.islice(self.index, start, None)) if start else list(self.index)
        self._taken = self._base + len(self.index)
        if len(self.index) > DICT_INDEX:
            self._base += len(self.index)
            self.index = {}
        return new

    def forget_objects(self) -> None:
        """Drop the objects remembered by id (their codes stay known by text)."""
        self._keep = []
        self._ids = np.empty(0, dtype=np.int64)
        self._codes = np.empty(0, dtype=np.int32)


def _plain(values: np.ndarray, kind: str):
    return np.asarray(values).astype(kind, copy=False)


class ResultStore:
    """The result store being written: tables appended a chunk at a time (:meth:`append`, text columns coded
    through dictionaries shared by every chunk), then the dictionaries and code tables and one commit
    (:meth:`finish`). ``summary`` known up front goes to ``run_meta``; one known only at the end (a compare
    written chunk by chunk) goes to the commit's info, where :func:`summary_of` finds it."""

    def __init__(self, out_dir: Path, mode: str, classic: bool, summary: Optional[Dict[str, Any]] = None):
        from engines.store import StoreWriter

        self.layout = _layout(classic)
        meta = {"framework": "", "schema_version": SCHEMA_VERSION,
                "run_meta": {"mode": mode, "summary": _jsonable(summary or {})}}
        self.dicts: Dict[str, TextDictionary] = {}
        self.path = Path(out_dir) / (KIND + ".h5")
        self.writer = StoreWriter(out_dir, KIND, _specs(self.layout), meta=meta)

    def append(self, name: str, data: Dict[str, np.ndarray]) -> None:
        if not data or not len(next(iter(data.values()))):
            return
        values = {}
        for c, kind, d in self.layout[name]:
            if d is None:
                values[c] = _plain(data[c], kind)
                continue
            same = data["target_name"] if (name == "results" and c == "golden_name") else None
            values[c] = self.dicts.setdefault(d, TextDictionary()).encode(data[c], same)
        self.writer.append(name, **values)

    def _append_texts(self) -> None:
        for d, dictionary in self.dicts.items():
            texts = dictionary.take_new()
            if texts:
                self.writer.append(d, text=texts)

    def forget_objects(self) -> None:
        """After a chunk: append the texts it coded to their dictionary tables and let its strings go."""
        self._append_texts()
        for dictionary in self.dicts.values():
            dictionary.forget_objects()

    def finish(self, summary: Optional[Dict[str, Any]] = None) -> Path:
        w = self.writer
        self._append_texts()
        for name, names in CODE_TABLES.items():
            w.append(name, code=np.arange(len(names), dtype=np.int64), name=list(names))
        if summary is None:
            w.commit(0)
        else:
            w.commit(0, summary=_jsonable(summary))
        w.close()
        return self.path

    def abort(self) -> None:
        self.writer.close("failed")


def write_hdf5(out_dir: Path, mode: str, table: Dict[str, np.ndarray], div: Dict[str, np.ndarray],
               tree: Dict[str, np.ndarray], golden_only: Dict[str, np.ndarray], summary: Dict[str, Any]) -> Path:
    """Write ``<out_dir>/compare.h5`` (or its per-step segment on a network file system) in one go."""
    store = ResultStore(out_dir, mode, "classic_colour" in table, summary)
    try:
        for name, data in (("results", table), ("divergence", div), ("tree", tree), ("golden_only", golden_only)):
            store.append(name, data)
        return store.finish()
    except BaseException:
        store.abort()
        raise


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def read_results(path, table: str = "results", columns: Optional[list] = None, decode: bool = True,
                 rows=None) -> Dict[str, np.ndarray]:
    """A table of a compare result folder (or its ``compare.h5``), as numpy columns; text columns come back as
    object arrays of str (``decode=False``: their codes), ``results.target_name`` rebuilt from record and slot.
    ``rows``: row numbers or a slice (a page of a large result)."""
    from engines.store import StoreReader

    with StoreReader(Path(path), KIND) as r:
        if not decode or table not in ("results", "divergence", "tree", "golden_only"):
            return r.read(table, columns, rows=rows)
        stored = {c for c in r.table_spec(table).column_names}
        want = list(columns) if columns is not None else None
        read_cols = None
        if want is not None:
            read_cols = [c for c in want if c in stored]
            if "target_name" in want or "golden_name" in want:
                read_cols += [c for c in ("record", "slot") if c not in read_cols]
        out = r.read(table, read_cols, rows=rows)
        cache: Dict[str, np.ndarray] = {}

        def lookup(dict_table: str) -> np.ndarray:
            if dict_table not in cache:
                texts = r.read(dict_table, ["text"])["text"] if dict_table in r.tables() else np.empty(0, object)
                arr = np.empty(len(texts) + 1, dtype=object)
                arr[:len(texts)] = texts
                arr[-1] = ""  # code -1
                cache[dict_table] = arr
            return cache[dict_table]

        layout = {c: d for c, _, d in _layout(False)[table] + _layout(True)[table]}
        for c in list(out):
            d = layout.get(c)
            if d is None:
                continue
            codes = out[c].astype(np.int64)
            same = codes == SAME_AS_TARGET
            out[c] = lookup(d)[np.where(same, -1, codes)]
            if same.any():
                out[c + "__same"] = same
        if table == "results" and (want is None or "target_name" in want or "golden_name" in want):
            target = _join(out["record"], out["slot"])
            if want is None or "target_name" in want:
                out["target_name"] = target
            if "golden_name__same" in out:
                same = out.pop("golden_name__same")
                out["golden_name"][same] = target[same]
        for c in [c for c in out if c.endswith("__same")]:
            del out[c]
        if want is not None:
            out = {c: out[c] for c in want if c in out}
        return out


def _join(records: np.ndarray, slots: np.ndarray) -> np.ndarray:
    out = np.empty(records.shape[0], dtype=object)
    out[:] = [r + "." + s for r, s in zip(records.tolist(), slots.tolist())]
    return out


def summary_of(reader) -> Dict[str, Any]:
    """The summary a result store holds (a ``StoreReader`` of it): its commit's info when the results were written
    chunk by chunk, else ``run_meta``."""
    for commit in reversed(reader.commits()):
        info = commit.get("info")
        if isinstance(info, dict) and isinstance(info.get("summary"), dict):
            return info["summary"]
    meta = reader.meta.get("run_meta") or {}
    summary = meta.get("summary", {}) if isinstance(meta, dict) else {}
    return summary if isinstance(summary, dict) else {}


def read_summary(path) -> Dict[str, Any]:
    from engines.store import StoreReader

    with StoreReader(Path(path), KIND) as r:
        return summary_of(r)
