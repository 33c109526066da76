"""``DumpWriter``: the capture engines' writer for the dump schema, one per rank folder.

Engines call it once per step with batches (hundreds to thousands of rows); tensors go through ``put_tensor``,
which only stages them in memory until the step is committed.
"""

import json
from types import TracebackType
from typing import Any, Dict, Optional, Sequence

import numpy as np

from engines.safe_fs import PathLike

from .dump_schema import DUMP_KIND, DUMP_SCHEMA_VERSION, DUMP_TABLES
from .errors import StoreError
from .spec import TensorRef, shape_json
from .writer import StoreWriter

_STR_ONLY = frozenset((str,))


class DumpWriter:
    def __init__(self, rank_dir: PathLike, *, meta: Optional[Dict[str, Any]] = None, mode: str = "auto",
                 compression: str = "none", compression_level: Optional[int] = None,
                 disk_budget: Optional[int] = None, **store_options: Any):
        meta = dict(meta or {})
        meta.setdefault("schema_version", DUMP_SCHEMA_VERSION)
        self.store = StoreWriter(rank_dir, DUMP_KIND, DUMP_TABLES, meta=meta, mode=mode, compression=compression,
                                 compression_level=compression_level, disk_budget=disk_budget, **store_options)
        self._stacks: Dict[tuple, int] = {}
        self._modules: Dict[str, int] = {}
        self._seq: Dict[int, int] = {}

    @property
    def mode(self) -> str:
        return self.store.mode

    # -- rows ----------------------------------------------------------------------------------------------
    def add_records(self, **columns: Any) -> np.ndarray:
        """Append records (columns of the ``records`` table; ``seq`` defaults to the order within the step).
        Returns their row numbers, which ``add_tensors(record=...)`` refers to."""
        if "seq" not in columns:
            if "step" not in columns:
                raise StoreError("table 'records': column 'step' missing (it has no default)")
            steps = np.atleast_1d(np.asarray(columns["step"], dtype=np.int64))
            n = _batch_len(columns)
            steps = np.broadcast_to(steps, (n,)) if steps.size == 1 else steps
            columns["seq"] = self._next_seq(steps)
        return self.store.append("records", **columns)

    def _next_seq(self, steps: np.ndarray) -> np.ndarray:
        seq = np.empty(len(steps), dtype=np.int64)
        for i, step in enumerate(steps.tolist()):
            seq[i] = self._seq.get(step, 0)
            self._seq[step] = seq[i] + 1
        return seq

    def add_tensors(self, refs: Optional[Sequence[Optional[TensorRef]]] = None, **columns: Any) -> np.ndarray:
        """Append tensor rows. ``shape`` takes one shape (tuple or JSON text) per row; ``refs`` (from
        ``put_tensor``, None where nothing was stored) fill ``pool``, ``offset`` and ``numel``."""
        shapes = columns.get("shape")
        if isinstance(shapes, tuple) and all(isinstance(s, (int, np.integer)) for s in shapes):
            raise StoreError("table 'tensors': column 'shape' takes one shape per row (a list of shapes)")
        if "numel" not in columns and isinstance(shapes, (list, tuple)):
            columns["numel"] = [_numel(s) for s in shapes]
        if refs is not None:
            refs = list(refs)
            columns.setdefault("pool", [r.pool if r is not None else "" for r in refs])
            columns.setdefault("offset", [r.offset if r is not None else -1 for r in refs])
            # a stored tensor's element count comes from its reference
            try:
                given = np.broadcast_to(np.asarray(columns.get("numel", -1), dtype=np.int64), (len(refs),))
            except ValueError:
                raise StoreError(f"table 'tensors': column 'numel' does not match {len(refs)} refs") from None
            columns["numel"] = [r.numel if r is not None else int(given[i]) for i, r in enumerate(refs)]
        if isinstance(shapes, (list, tuple)) and not set(map(type, shapes)) <= _STR_ONLY:  # text already: as is
            columns["shape"] = [s if isinstance(s, str) else shape_json(s) for s in shapes]
        return self.store.append("tensors", **columns)

    def intern_stack(self, frames: Sequence[str]) -> int:
        """Row of ``frames`` (a call stack, innermost last) in ``stacks``, appending it the first time."""
        key = tuple(str(f) for f in frames)
        row = self._stacks.get(key)
        if row is None:
            row = int(self.store.append("stacks", frames=[json.dumps(list(key))])[0])
            self._stacks[key] = row
        return row

    def add_modules(self, name: Sequence[str], cls: Sequence[str], parent: Optional[Sequence[str]] = None) -> int:
        """Add module hierarchy rows; names already added are skipped. Returns how many were new."""
        names, classes = list(name), list(cls)
        parents = list(parent) if parent is not None else [""] * len(names)
        if not len(names) == len(classes) == len(parents):
            raise StoreError("table 'modules': name, cls and parent need the same length")
        keep = [i for i, n in enumerate(names) if n not in self._modules]
        if keep:
            rows = self.store.append("modules", name=[names[i] for i in keep], cls=[classes[i] for i in keep],
                                     parent=[parents[i] for i in keep])
            for i, row in zip(keep, rows.tolist()):
                self._modules.setdefault(names[i], row)
        return len(keep)

    def put_tensor(self, array: np.ndarray, dtype_name: Optional[str] = None) -> Optional[TensorRef]:
        return self.store.put_array(array, dtype_name)

    # -- steps ---------------------------------------------------------------------------------------------
    def commit_step(self, step: int, **info: Any) -> None:
        self.store.commit(step, **info)
        self._seq.pop(int(step), None)

    def close(self, status: str = "finished") -> None:
        self.store.close(status)

    @property
    def bytes_written(self) -> int:
        return self.store.bytes_written

    @property
    def rows(self) -> Dict[str, int]:
        return self.store.rows

    def __enter__(self) -> "DumpWriter":
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close("failed" if exc_type is not None else "finished")


def _batch_len(columns: Dict[str, Any]) -> int:
    for value in columns.values():
        if isinstance(value, (list, tuple, range)) or (isinstance(value, np.ndarray) and value.ndim >= 1):
            return len(value)
    return 1


def _numel(shape: Any) -> int:
    if isinstance(shape, str):
        shape = json.loads(shape)
    n = 1
    for s in shape:
        n *= int(s)
    return n
