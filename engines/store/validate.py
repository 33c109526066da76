"""Structure checks a reader makes before it trusts a store (docs/FORMAT.md, "Damaged and foreign stores").

What cannot be read correctly is refused with a :class:`StoreError` naming the file and the field: a newer or
garbled ``format_version``/``schema_version``, a ``kind`` that disagrees with the announcement, an ``open`` or
``segment`` line of the wrong shape, a segment file named outside its folder, a commit log that is missing or has
the wrong width. Data that is intact but incomplete (commits the writer made that cannot be read back) is a
:class:`StoreWarning` and reading goes on.
"""

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

import h5py
import numpy as np

from .errors import StoreError
from .spec import FORMAT_VERSION, STRINGS_KEY, TableSpec, table_key

MODES = ("swmr", "per_step")
COMMIT_COLUMNS = ("step", "info", "counts", "check")


def _version(meta: Mapping[str, Any], key: str, newest: int, where: str, what: str) -> int:
    raw = meta.get(key, newest)
    if isinstance(raw, (bytes, np.bytes_)):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, np.integer):
        raw = int(raw)
    if isinstance(raw, str) and raw.strip().isdigit() and raw.strip().isascii():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise StoreError(f"{where}: {key} {_short(raw)} is not a version number; not a store this probe-tui "
                         f"can read")
    if raw > newest:
        raise StoreError(f"{where}: {what} {raw} is newer than this probe-tui reads ({newest}); upgrade probe-tui")
    return raw


def format_version(meta: Mapping[str, Any], where: str) -> int:
    """The store layout's version: absent means 1; newer than :data:`FORMAT_VERSION` or not a number is refused."""
    return _version(meta, "format_version", FORMAT_VERSION, where, "store format")


def schema_version(meta: Mapping[str, Any], newest: int, where: str) -> int:
    """A kind's table layout version (``dump``: 1); a reader that knows ``newest`` refuses a newer one."""
    return _version(meta, "schema_version", newest, where, f"{meta.get('kind') or 'store'} schema")


def plain_file_name(name: Any, where: str) -> str:
    """A segment file named by ``segments.jsonl``: a plain name inside the rank folder, never a path."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", "..") \
            or "\0" in name:
        raise StoreError(f"{where}: 'file' {_short(name)} is not a file name in this folder")
    return name


def parse_tables(raw: Any, where: str) -> Dict[str, TableSpec]:
    """Table specs from an ``open`` line (a list) or a file's ``/meta`` ``tables`` attribute (JSON text)."""
    try:
        if isinstance(raw, (bytes, np.bytes_)):
            raw = raw.decode("utf-8")
        if isinstance(raw, str):
            raw = json.loads(raw)
        if not isinstance(raw, list):
            raise TypeError("not a list")
        specs = [TableSpec.from_json(t) for t in raw]
    except (KeyError, TypeError, ValueError, AttributeError, StoreError) as exc:
        raise StoreError(f"{where}: the table specs are damaged ({exc})") from None
    return {t.name: t for t in specs}


def arrays_list(raw: Any, tables: Mapping[str, TableSpec], where: str) -> List[str]:
    """The commit log's array names: a list of distinct names covering every table and the strings."""
    try:
        if isinstance(raw, (bytes, np.bytes_)):
            raw = raw.decode("utf-8")
        if isinstance(raw, str):
            raw = json.loads(raw)
    except ValueError:
        raw = None
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw) or len(set(raw)) != len(raw):
        raise StoreError(f"{where}: 'arrays' {_short(raw)} is not a list of array names")
    missing = [k for k in [table_key(t) for t in tables] + [STRINGS_KEY] if k not in raw]
    if missing:
        raise StoreError(f"{where}: 'arrays' lacks {', '.join(missing)}")
    return raw


def int_list(raw: Any, n: int, where: str, field: str) -> np.ndarray:
    """``n`` non-negative integers (a segment line's ``base``/``counts``, a file's ``base``)."""
    try:
        if isinstance(raw, (bytes, np.bytes_, str)):
            raw = json.loads(raw)
        ok = isinstance(raw, list) and len(raw) == n and all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 62 for x in raw)
    except ValueError:
        ok = False
    if not ok:
        raise StoreError(f"{where}: '{field}' {_short(raw)} is not a list of {n} counts")
    return np.array(raw, dtype=np.int64)


def open_event(ev: Mapping[str, Any], where: str) -> Tuple[List[str], Dict[str, Any], Dict[str, TableSpec]]:
    """(arrays, meta, tables) of a store's ``open`` line, each checked."""
    meta = ev.get("meta")
    if not isinstance(meta, dict):
        raise StoreError(f"{where}: 'meta' {_short(meta)} is not an object")
    tables = parse_tables(ev.get("tables"), where + " tables")
    arrays = arrays_list(ev.get("arrays"), tables, where)
    mode = ev.get("mode")
    if mode not in MODES:
        raise StoreError(f"{where}: 'mode' {_short(mode)} is not one of {', '.join(MODES)}")
    if mode == "swmr":
        plain_file_name(ev.get("file"), where)
    kind = meta.get("kind", ev.get("kind"))
    if kind != ev.get("kind"):
        raise StoreError(f"{where}: meta kind {_short(kind)} disagrees with the line's kind {_short(ev.get('kind'))}")
    format_version(meta, where)
    return arrays, meta, tables


def segment_event(ev: Mapping[str, Any], n_arrays: int, where: str) -> Tuple[str, int, np.ndarray, np.ndarray, Any]:
    """(file, step, base, counts, info) of a per-step ``segment`` line, each checked."""
    name = plain_file_name(ev.get("file"), where)
    step = ev.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise StoreError(f"{where}: 'step' {_short(step)} is not an integer")
    base = int_list(ev.get("base"), n_arrays, where, "base")
    counts = int_list(ev.get("counts"), n_arrays, where, "counts")
    if (counts < base).any():
        raise StoreError(f"{where}: 'counts' are below 'base'")
    return name, step, base, counts, ev.get("info") or {}


def file_meta(f: h5py.File, kind: Optional[str], path: Any, announced: Optional[Mapping[str, Any]] = None) -> None:
    """A segment file's ``/meta`` checked: its format version; its kind against ``kind`` (the kind the
    announcement or the caller names); its schema version against the ``announced`` meta. A file without
    ``/meta`` passes (the announcement describes it)."""
    try:
        try:
            attrs = f["meta"].attrs
        except KeyError:
            return
        meta = {k: _plain(v) for k, v in ((k, attrs.get(k)) for k in ("format_version", "kind", "schema_version"))
                if v is not None}
    except (KeyError, OSError, ValueError, RuntimeError) as exc:  # h5py says a broken checksum several ways
        raise StoreError(f"{path}: /meta is damaged ({exc})") from None
    format_version(meta, f"{path} /meta")
    own = meta.get("kind")
    if kind is not None and own is not None and own != kind:
        raise StoreError(f"{path}: /meta kind {_short(own)} but it is read as a {kind!r} store")
    said = (announced or {}).get("schema_version")
    if said is not None and meta.get("schema_version", said) != said:
        raise StoreError(f"{path}: /meta schema_version {_short(meta['schema_version'])} but segments.jsonl "
                         f"announces {_short(said)}")


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8", "replace")
    return value.item() if isinstance(value, np.generic) else value


def commit_log(f: h5py.File, n_arrays: int, path: Any) -> List[h5py.Dataset]:
    """The four commit-log datasets of a SWMR file (step, info, counts, check), checked for presence and width."""
    try:
        parts = [f["commits"][name] for name in COMMIT_COLUMNS]
    except (KeyError, OSError, ValueError, RuntimeError) as exc:
        raise StoreError(f"{path}: the commit log /commits is missing or damaged ({exc})") from None
    counts = parts[2]
    if counts.ndim != 2 or counts.shape[1] != n_arrays or any(d.ndim != 1 for d in parts[:2] + parts[3:]):
        raise StoreError(f"{path}: the commit log /commits/counts has shape {counts.shape}, not (n, {n_arrays})")
    return parts


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
