"""In-memory staging of rows and strings between HDF5 writes.

Appends only convert and stage; the writer hands staged data to HDF5 in one resize and one write per column at
commit (or early, when a step's data grows large), so no HDF5 call is made per row or per tensor.
"""

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import StoreError
from .spec import JSON, STR, Column, TableSpec, column_default


class StringTable:
    """Global string ids: ``str`` values are interned (one id per distinct value for the whole run), ``json``
    values get a fresh id each."""

    def __init__(self) -> None:
        self._ids: Dict[str, int] = {}
        self.count = 0
        self._blobs: List[bytes] = []  # staged UTF-8 text, one blob per value or per batch
        self._lengths: List[int] = []  # byte length of each staged value
        self.staged_bytes = 0

    def intern(self, value: str) -> int:
        sid = self._ids.get(value)
        if sid is None:
            sid = self._new(value)
            self._ids[value] = sid
        return sid

    def intern_batch(self, values: Sequence[Any], where: str) -> np.ndarray:
        """Ids of a batch of ``str`` values: the run's names repeat step after step, so the known ones are looked
        up in one pass at C speed and only new (or non-str) values take the per-value path."""
        try:  # every value known (the usual step): straight into the array; a new one (None) raises
            return np.fromiter(map(self._ids.get, values), dtype=np.int64, count=len(values))
        except TypeError:  # a new value, or an unhashable one (a list: the per-value path says what is wrong)
            pass
        try:
            ids: List[Any] = list(map(self._ids.get, values))
        except TypeError:
            ids = [None] * len(values)
        if None in ids:
            for i, sid in enumerate(ids):
                if sid is None:
                    v = values[i]
                    ids[i] = self.intern(v if type(v) is str else _text(where, v, False))
        return np.array(ids, dtype=np.int64)

    def add(self, value: str) -> int:
        return self._new(value)

    def add_batch(self, values: Sequence[str]) -> np.ndarray:
        """``add`` of every value of a batch of ``str`` (a step's record arguments, JSON text already): fresh
        ids in order, without a Python call per value."""
        joined = "".join(values)
        blob = joined.encode("utf-8", "surrogatepass")
        if len(blob) == len(joined):  # ASCII (JSON text from ensure_ascii): a value's bytes are its characters
            lengths = list(map(len, values))
        else:
            lengths = [len(v.encode("utf-8", "surrogatepass")) for v in values]
        self._blobs.append(blob)
        self._lengths.extend(lengths)
        self.staged_bytes += len(blob)
        start = self.count
        self.count += len(lengths)
        return np.arange(start, self.count, dtype=np.int64)

    def _new(self, value: str) -> int:
        encoded = value.encode("utf-8", "surrogatepass")
        self._blobs.append(encoded)
        self._lengths.append(len(encoded))
        self.staged_bytes += len(encoded)
        sid = self.count
        self.count += 1
        return sid

    @property
    def staged(self) -> int:
        return len(self._lengths)

    def take(self) -> Tuple[bytes, np.ndarray]:
        """Staged strings as one UTF-8 blob and their byte lengths; clears the stage."""
        blobs, lengths = self._blobs, self._lengths
        self._blobs, self._lengths = [], []
        self.staged_bytes = 0
        return b"".join(blobs), np.array(lengths, dtype=np.int64)


class TableStage:
    """Rows of one table waiting to be written: per column a list of converted numpy arrays."""

    def __init__(self, spec: TableSpec):
        self.spec = spec
        self.count = 0  # rows appended so far (global row count, written + staged)
        self.staged_rows = 0
        self._parts: Dict[str, List[np.ndarray]] = {c.name: [] for c in spec.columns}
        self.staged_bytes = 0

    def append(self, strings: StringTable, columns: Dict[str, Any]) -> np.ndarray:
        spec = self.spec
        unknown = [k for k in columns if k not in self._parts]
        if unknown:
            raise StoreError(f"table {spec.name!r} has no column {unknown[0]!r} "
                             f"(columns: {', '.join(spec.column_names)})")
        n = _batch_length(spec, columns)
        converted = {}
        for col in spec.columns:
            if col.name in columns:
                value = columns[col.name]
            else:
                value = column_default(col)
                if value is None:
                    raise StoreError(f"table {spec.name!r}: column {col.name!r} missing (it has no default)")
            converted[col.name] = _convert(spec.name, col, value, n, strings)
        for name, arr in converted.items():
            self._parts[name].append(arr)
            self.staged_bytes += arr.nbytes
        start = self.count
        self.count += n
        self.staged_rows += n
        return np.arange(start, start + n, dtype=np.int64)

    def take(self) -> Dict[str, np.ndarray]:
        out = {}
        for name, parts in self._parts.items():
            out[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self._parts[name] = []
        self.staged_rows = 0
        self.staged_bytes = 0
        return out


def _is_batch(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, (list, tuple, range))


def _batch_length(spec: TableSpec, columns: Dict[str, Any]) -> int:
    n: Optional[int] = None
    first = ""
    for name, value in columns.items():
        col = spec.column(name)
        if not _is_batch(value):
            continue
        if col.width is not None:
            arr = np.asarray(value)
            if arr.ndim == 1:  # one row of an array column given as a flat list
                continue
            length = arr.shape[0]
        else:
            length = len(value)
        if n is None:
            n, first = length, name
        elif length != n:
            raise StoreError(f"table {spec.name!r}: column {name!r} has {length} rows, {first!r} has {n}")
    return 1 if n is None else n


_STR_ONLY = frozenset((str,))


def _convert(table: str, col: Column, value: Any, n: int, strings: StringTable) -> np.ndarray:
    where = f"table {table!r} column {col.name!r}"
    if col.dtype == STR:
        if _is_batch(value):
            return strings.intern_batch(value.tolist() if isinstance(value, np.ndarray) else value, where)
        return _text_ids(where, value, n, strings.intern, as_json=False)
    if col.dtype == JSON:
        if type(value) is list and len(value) == n and set(map(type, value)) <= _STR_ONLY:
            return strings.add_batch(value)  # text already (the capture's record arguments): one pass
        return _text_ids(where, value, n, strings.add, as_json=True)
    try:
        arr = np.asarray(value, dtype=col.dtype)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{where}: cannot convert to {col.dtype}: {exc}") from None
    want = (n,) if col.width is None else (n, col.width)
    if arr.shape != want:
        try:
            arr = np.broadcast_to(arr, want)
        except ValueError:
            raise StoreError(f"{where}: shape {arr.shape} does not fit {want}") from None
    return np.array(arr, dtype=col.dtype, order="C", copy=True)


def _text_ids(where: str, value: Any, n: int, new_id: Callable[[str], int], as_json: bool) -> np.ndarray:
    if not _is_batch(value):  # one value for the whole batch: one string, shared by every row
        return np.full(n, new_id(_text(where, value, as_json)), dtype=np.int64)
    values: Sequence[Any] = value.tolist() if isinstance(value, np.ndarray) else value
    return np.fromiter((new_id(v if type(v) is str else _text(where, v, as_json)) for v in values),
                       dtype=np.int64, count=n)


def _text(where: str, value: Any, as_json: bool) -> str:
    if isinstance(value, str):
        return value
    if as_json:
        try:
            return json.dumps(value, separators=(",", ":"), default=_json_fallback)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{where}: value is not JSON-serialisable: {exc}") from None
    if isinstance(value, (np.str_, bytes)):
        return value.decode() if isinstance(value, bytes) else str(value)
    raise StoreError(f"{where}: expected str, got {type(value).__name__}")


def _json_fallback(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return repr(obj)


class PoolStage:
    """One tensor pool's staging buffer. Offsets are global element positions in the pool; the buffer is
    allocated on first use and reused."""

    def __init__(self, dtype: str, capacity_bytes: int):
        self.dtype = np.dtype(dtype)
        self.count = 0  # elements placed so far (written + staged)
        self.fill = 0
        self.capacity = max(1, capacity_bytes // self.dtype.itemsize)
        self._buf: Optional[np.ndarray] = None

    def fits(self, n: int) -> bool:
        return self.fill + n <= self.capacity

    def stage(self, flat: np.ndarray) -> None:
        if self._buf is None:
            self._buf = np.empty(self.capacity, dtype=self.dtype)
        n = flat.size
        self._buf[self.fill:self.fill + n] = flat
        self.fill += n
        self.count += n

    def take(self) -> np.ndarray:
        """The staged elements (a view: write it before staging more)."""
        assert self._buf is not None
        view = self._buf[:self.fill]
        self.fill = 0
        return view
