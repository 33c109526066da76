"""The row table: one dump side as columns, one row per tensor or scalar argument.

Every reader (our HDF5 dumps, msprobe's dump.json) produces a :class:`RowTable`; compare, parse and first
divergence work only on it. A row's ``name`` is msprobe's compare key: the record name plus the slot
(``Functional.linear.3.forward.input.0``). Columns are numpy arrays of equal length; strings are object arrays.
"""

from __future__ import annotations

import ctypes
import json
import platform
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

# io: which part of a record a row belongs to
IO_INPUT, IO_OUTPUT, IO_PARAM, IO_PARAM_GRAD, IO_OTHER = 0, 1, 2, 3, 4
IO_NAMES = ("input", "output", "parameters", "parameters_grad", "other")
# kind of record (docs/FORMAT.md records.kind)
KIND_API, KIND_MODULE, KIND_PARAM_GRAD, KIND_SAVE = 0, 1, 2, 3
KIND_NAMES = ("api", "module", "parameters_grad", "save")
# direction (docs/FORMAT.md records.direction)
DIR_FORWARD, DIR_BACKWARD, DIR_NONE = 0, 1, 2
DIR_NAMES = ("forward", "backward", "none")
# valid bits of the statistics
V_MAX, V_MIN, V_MEAN, V_NORM = 1, 2, 4, 8
STAT_BITS = {"max": V_MAX, "min": V_MIN, "mean": V_MEAN, "norm": V_NORM}

_OBJ = object
_CPYTHON = platform.python_implementation() == "CPython"


@dataclass
class RowTable:
    """Columns of one side. ``data`` locates the full tensor for :class:`TensorStore` (-1: none)."""

    name: np.ndarray
    record: np.ndarray
    slot: np.ndarray
    io: np.ndarray
    kind: np.ndarray
    direction: np.ndarray
    dtype: np.ndarray
    shape: np.ndarray  # JSON list text, e.g. "[2, 3]"
    numel: np.ndarray  # -1 unknown (scalars)
    max: np.ndarray
    min: np.ndarray
    mean: np.ndarray
    norm: np.ndarray
    valid: np.ndarray  # V_* bits
    text: np.ndarray  # text of a non-numeric scalar (device, str, bool, dtype), None elsewhere
    requires_grad: np.ndarray  # -1 unknown, 0, 1
    crc32: np.ndarray  # 8-hex-digit text ("" none)
    nonfinite: np.ndarray  # nan + inf count, -1 unknown
    is_tensor: np.ndarray
    step: np.ndarray
    rank: np.ndarray
    order: np.ndarray  # dump order within the side
    parent: np.ndarray  # enclosing module record ("" none)
    stack: np.ndarray  # call stack text ("" none)
    data: np.ndarray  # int64 locator for the side's TensorStore
    data_name: np.ndarray  # file name or "" (shown in the Data_name column)
    # a shard's placement JSON (docs/FORMAT.md tensors.dist: "" for a plain tensor); None when the dump has none
    dist: Optional[np.ndarray] = None
    args: Dict[str, str] = field(default_factory=dict)  # record -> non-tensor args JSON (our dumps)
    _groups: Optional[Tuple[np.ndarray, np.ndarray]] = field(  # record_codes(), once computed
        default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.name.shape[0])

    def take(self, index: np.ndarray) -> "RowTable":
        """Rows at ``index`` (a bool mask or int positions)."""
        cols = {name: getattr(self, name)[index] for name in FIELDS}
        return RowTable(args=self.args, dist=None if self.dist is None else self.dist[index], **cols)

    @staticmethod
    def concat(tables: List["RowTable"]) -> "RowTable":
        if not tables:
            return empty_rows()
        if len(tables) == 1:
            return tables[0]
        cols = {name: np.concatenate([getattr(t, name) for t in tables]) for name in FIELDS}
        args: Dict[str, str] = {}
        for t in tables:
            args.update(t.args)
        dist = None
        if any(t.dist is not None for t in tables):
            dist = np.concatenate([t.dist if t.dist is not None else np.full(len(t), "", dtype=object)
                                   for t in tables])
        return RowTable(args=args, dist=dist, **cols)

    def record_codes(self) -> Tuple[np.ndarray, np.ndarray]:
        """(code of each row's record, record names in dump order); computed once (tables are not changed in
        place after they are built)."""
        if self._groups is None:
            self._groups = factorize(self.record)
        return self._groups

    def record_order(self) -> List[str]:
        """Record names in dump order, each once."""
        return self.record_codes()[1].tolist()


FIELDS = tuple(f.name for f in fields(RowTable) if f.name not in ("args", "_groups", "dist"))


class RowBuilder:
    """Collects rows as tuples in :data:`FIELDS` order (one append per row) and freezes them into a
    :class:`RowTable` (a C-level transpose)."""

    _NUM = {"io": np.uint8, "kind": np.uint8, "direction": np.uint8, "numel": np.int64, "max": np.float64,
            "min": np.float64, "mean": np.float64, "norm": np.float64, "valid": np.uint8,
            "requires_grad": np.int8, "nonfinite": np.int64, "is_tensor": bool, "step": np.int64,
            "rank": np.int64, "order": np.int64, "data": np.int64}

    def __init__(self) -> None:
        self.rows: List[tuple] = []
        self.args: Dict[str, str] = {}

    def append(self, row: tuple) -> None:
        self.rows.append(row)

    def add(self, **values: Any) -> None:
        self.rows.append(tuple(values[k] for k in FIELDS))

    def build(self) -> RowTable:
        columns = list(zip(*self.rows)) if self.rows else [()] * len(FIELDS)
        out: Dict[str, np.ndarray] = {}
        for key, col in zip(FIELDS, columns):
            dtype = self._NUM.get(key)
            if dtype is None:
                arr = np.empty(len(col), dtype=_OBJ)
                arr[:] = col
            else:
                arr = np.asarray(col, dtype=dtype)
            out[key] = arr
        return RowTable(args=self.args, **out)


def empty_rows() -> RowTable:
    return RowBuilder().build()


def shape_text(shape: Iterable[int]) -> str:
    """Shapes as msprobe prints them in reports: ``[2, 3]``."""
    return json.dumps(list(shape))


def parse_shape(text: str) -> Optional[Tuple[int, ...]]:
    """Inverse of :func:`shape_text`; None when the text is not a list of ints (scalar rows, torch.Size values)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def object_ids(values: np.ndarray) -> np.ndarray:
    """``id()`` of every element of an object array, as int64.

    In CPython an object array's buffer holds the element pointers, which are their ids: read them in one copy
    (a million elements: ~1 ms, against ~50 ms through ``map(id, ...)``). Elsewhere, ``map(id, ...)``.
    """
    arr = np.ascontiguousarray(values, dtype=object).reshape(-1)
    n = int(arr.shape[0])
    if _CPYTHON and n and arr.itemsize == np.dtype(np.intp).itemsize:
        raw = (ctypes.c_char * (n * arr.itemsize)).from_address(arr.ctypes.data)
        ids = np.frombuffer(memoryview(raw), dtype=np.intp).astype(np.int64)  # a copy, made while ``arr`` is alive
        return ids
    return np.fromiter(map(id, arr.tolist()), dtype=np.int64, count=n)


def factorize(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Integer codes of an object array's values (first-seen order) and the distinct values.

    Values repeat as shared objects in our columns (a reader decodes each distinct string once; a record's rows
    share its name), so rows are grouped by object identity in numpy first (runs of one object collapse to
    their first row) and only one object per group goes through a dict, which also merges equal values held by
    distinct objects.
    """
    n = int(values.shape[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.empty(0, dtype=object)
    ids = object_ids(values)
    head = np.empty(n, dtype=bool)
    head[0] = True
    np.not_equal(ids[1:], ids[:-1], out=head[1:])
    heads = np.flatnonzero(head)
    _, first, inverse = np.unique(ids[heads], return_index=True, return_inverse=True)
    table: Dict[object, int] = {}
    setdefault = table.setdefault
    order = np.argsort(first, kind="stable")
    objs = values[heads[first[order]]].tolist()
    code_of_group = np.empty(first.shape[0], dtype=np.int64)
    code_of_group[order] = np.fromiter((setdefault(o, len(table)) for o in objs), dtype=np.int64,
                                       count=first.shape[0])
    uniques = np.empty(len(table), dtype=object)
    uniques[:] = list(table)
    codes = code_of_group[inverse.reshape(-1)]
    if heads.shape[0] == n:
        return codes, uniques
    return codes[np.cumsum(head) - 1], uniques


def group_reduce(ufunc: np.ufunc, codes: np.ndarray, values: np.ndarray, n_groups: int,
                 initial: Union[float, np.generic]) -> np.ndarray:
    """``ufunc.reduce`` of ``values`` per group code (groups without rows get ``initial``)."""
    out = np.full(n_groups, initial, dtype=np.result_type(values.dtype, type(initial)))
    if codes.size == 0:
        return out
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    reduced = ufunc.reduceat(values[order], starts)
    out[sorted_codes[starts]] = ufunc(out[sorted_codes[starts]], reduced)
    return out
