"""Table and column specifications, tensor references, format constants.

The store keeps every table as a set of global, append-only arrays (one per column), plus a string table and
typed tensor pools. Segment files cut these arrays at commit boundaries; the layout is in docs/FORMAT.md.
"""

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import StoreError

FORMAT_VERSION = 1

#: Rows per chunk of a table column. Chosen by benchmarks/store_write.py (docs/FORMAT.md, "Figures").
TABLE_CHUNK_ROWS = 16384
#: Bytes per chunk of a tensor pool.
POOL_CHUNK_BYTES = 256 << 10
#: Staged (not yet written) pool bytes that trigger an early write within a step.
POOL_STAGE_BYTES = 8 << 20
#: Staged table rows that trigger an early write within a step (SWMR files).
TABLE_STAGE_ROWS = 1 << 16
#: The same for per-step files, which write a step's rows at its commit, in chunks sized to fit, unless the
#: step grows past this.
PER_STEP_STAGE_ROWS = 1 << 20

#: Storage dtypes of the tensor pools. bfloat16 (and other dtypes numpy lacks) arrive as their bit pattern in an
#: unsigned integer array; the logical dtype name travels in the row that references the tensor.
POOL_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)

STR = "str"
JSON = "json"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KIND_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise StoreError(f"{what} {name!r}: use letters, digits and '_' (not starting with a digit)")
    return name


def check_kind(kind: str) -> str:
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise StoreError(f"store kind {kind!r}: use lower-case letters, digits and '_'")
    return kind


@dataclass(frozen=True)
class Column:
    """One column: a fixed numeric numpy dtype, ``"str"`` (interned) or ``"json"`` (text, not interned).

    ``width`` makes an ``n x width`` array column (e.g. histogram bins fixed for the run). ``default`` fills the
    column when an append leaves it out; a column without a default must always be given.
    """

    name: str
    dtype: str
    width: Optional[int] = None
    default: Any = None

    def __post_init__(self) -> None:
        check_name("column", self.name)
        if self.dtype not in (STR, JSON):
            try:
                dt = np.dtype(self.dtype)
            except TypeError:
                raise StoreError(f"column {self.name!r}: unknown dtype {self.dtype!r}") from None
            if dt.kind not in "biufc":
                raise StoreError(f"column {self.name!r}: dtype {self.dtype!r} is not a fixed numeric dtype")
            object.__setattr__(self, "dtype", dt.name)
        elif self.width is not None:
            raise StoreError(f"column {self.name!r}: width is only for numeric columns")
        if self.width is not None and (not isinstance(self.width, int) or self.width < 1):
            raise StoreError(f"column {self.name!r}: width must be a positive integer")

    @property
    def is_text(self) -> bool:
        return self.dtype in (STR, JSON)

    @property
    def storage_dtype(self) -> np.dtype:
        return np.dtype("int64") if self.is_text else np.dtype(self.dtype)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": self.name, "dtype": self.dtype}
        if self.width is not None:
            out["width"] = self.width
        if self.default is not None:
            out["default"] = _jsonable(self.default)
        return out

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Column":
        return cls(obj["name"], obj["dtype"], obj.get("width"), obj.get("default"))


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: Tuple[Column, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_name("table", self.name)
        cols = tuple(self.columns)
        if not cols:
            raise StoreError(f"table {self.name!r}: no columns")
        seen = set()
        for c in cols:
            if not isinstance(c, Column):
                raise StoreError(f"table {self.name!r}: columns must be Column objects, got {c!r}")
            if c.name in seen:
                raise StoreError(f"table {self.name!r}: column {c.name!r} given twice")
            seen.add(c.name)
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "_by_name", {c.name: c for c in cols})  # not a field: no part of eq, repr

    def column(self, name: str) -> Column:
        col = self._by_name.get(name)  # type: ignore[attr-defined]
        if col is None:
            raise StoreError(f"table {self.name!r} has no column {name!r}")
        return col

    @property
    def column_names(self) -> List[str]:
        return [c.name for c in self.columns]

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "columns": [c.to_json() for c in self.columns]}

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "TableSpec":
        return cls(obj["name"], tuple(Column.from_json(c) for c in obj["columns"]))


@dataclass(frozen=True)
class TensorRef:
    """Where ``put_array`` stored a tensor: pool (storage dtype), global element offset, element count, shape and
    the logical dtype name the framework uses (``torch.bfloat16`` for a pool of ``uint16`` bits)."""

    pool: str
    offset: int
    numel: int
    shape: Tuple[int, ...]
    dtype: str

    def columns(self) -> Dict[str, Any]:
        """The dump ``tensors`` columns this reference fills."""
        return {"pool": self.pool, "offset": self.offset, "numel": self.numel,
                "shape": shape_json(self.shape), "dtype": self.dtype}


def shape_json(shape: Sequence[int]) -> str:
    """A shape as JSON text, ``[2, 3]`` (shapes repeat: the text is cached)."""
    return _shape_text(tuple(int(s) for s in shape))


@functools.lru_cache(maxsize=8192)
def _shape_text(shape: Tuple[int, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def table_key(table: str) -> str:
    return f"tables/{table}"


def pool_key(dtype: str) -> str:
    return f"pools/{dtype}"


STRINGS_KEY = "strings"


def array_keys(tables: Sequence[TableSpec]) -> List[str]:
    """The counted arrays, in the order of the commit log's ``counts`` columns."""
    return [table_key(t.name) for t in tables] + [STRINGS_KEY] + [pool_key(d) for d in POOL_DTYPES]


def tables_to_json(tables: Sequence[TableSpec]) -> str:
    return json.dumps([t.to_json() for t in tables], separators=(",", ":"))


def tables_from_json(text: str) -> List[TableSpec]:
    return [TableSpec.from_json(t) for t in json.loads(text)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return "nan"
    return value


def column_default(col: Column) -> Any:
    d = col.default
    if d == "nan" and not col.is_text:
        return float("nan")
    return d
