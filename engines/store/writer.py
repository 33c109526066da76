"""``StoreWriter``: append-only columnar tables and typed tensor pools, committed step by step.

One writer per store (one process per rank). Rows and tensors are staged in memory and reach HDF5 in one write
per column and pool at ``commit`` (or early, when a step's data grows large); a commit makes the step's rows
visible to readers and durable against the writer being killed. See docs/FORMAT.md.
"""

import datetime
import json
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from engines import safe_fs

from . import h5io
from .announce import SEGMENTS_FILE, announce, read_events
from .errors import StoreError, StoreWarning
from .fs import SWMR, resolve_mode
from .segment import SegmentFile
from .spec import (
    FORMAT_VERSION,
    PER_STEP_STAGE_ROWS,
    POOL_CHUNK_BYTES,
    POOL_DTYPES,
    POOL_STAGE_BYTES,
    TABLE_CHUNK_ROWS,
    TABLE_STAGE_ROWS,
    TableSpec,
    TensorRef,
    array_keys,
    check_kind,
)
from .staging import PoolStage, StringTable, TableStage

_META_KEYS = ("rank", "world_size", "framework", "schema_version")


class StoreWriter:
    """Write one store of ``kind`` into ``directory`` (a rank folder).

    ``mode``: ``"auto"`` (SWMR on local file systems, per-step files on network ones), ``"swmr"`` or
    ``"per_step"``; the ``PROBE_TUI_STORE_MODE`` environment variable overrides it. ``disk_budget`` (bytes)
    caps what the store holds: past it ``put_array`` returns None (warning once) while rows keep flowing.
    """

    def __init__(self, directory, kind: str, tables: Iterable[TableSpec], *, meta: Optional[Dict[str, Any]] = None,
                 mode: str = "auto", compression: str = "none", compression_level: Optional[int] = None,
                 disk_budget: Optional[int] = None, chunk_rows: int = TABLE_CHUNK_ROWS,
                 pool_chunk_bytes: int = POOL_CHUNK_BYTES, detector=None):
        self.directory = Path(directory)
        self.kind = check_kind(kind)
        self.tables: List[TableSpec] = list(tables)
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise StoreError(f"store {kind!r}: a table name is given twice ({', '.join(names)})")
        self._compression = h5io.compression_args(compression, compression_level)
        self.compression = compression
        if disk_budget is not None and (not isinstance(disk_budget, int) or disk_budget < 0):
            raise StoreError(f"disk_budget {disk_budget!r}: expected a number of bytes >= 0")
        self.disk_budget = disk_budget
        self._chunk_rows = int(chunk_rows)
        self._pool_chunk_bytes = int(pool_chunk_bytes)
        try:
            safe_fs.make_dirs(self.directory)
        except OSError as exc:
            raise StoreError(f"cannot create the store folder {safe_fs.describe_os_error(self.directory, exc)}") \
                from None
        self._refuse_existing()
        self.mode, self.network_fs = resolve_mode(self.directory, mode, detector)
        self._locking = not self.network_fs
        self._arrays = array_keys(self.tables)
        self._stages = {t.name: TableStage(t) for t in self.tables}
        self._strings = StringTable()
        self._pools = {d: PoolStage(d, POOL_STAGE_BYTES) for d in POOL_DTYPES}
        self._meta_attrs = self._build_meta(meta or {})
        self._committed = np.zeros(len(self._arrays), dtype=np.int64)
        self._segment: Optional[SegmentFile] = None
        self._segment_index = 0
        self._last_step: Optional[int] = None
        self._closed = False
        self._bytes_written = 0
        self._budget_hit = False
        self.commits = 0
        open_event = {"event": "open", "kind": self.kind, "mode": self.mode, "pid": os.getpid(),
                      "host": socket.gethostname(), "time": time.time(), "arrays": self._arrays,
                      "meta": self._meta_attrs, "tables": [t.to_json() for t in self.tables]}
        if self.mode == SWMR:
            final = self.directory / f"{self.kind}.h5"
            partial = final.with_name(final.name + ".partial")
            if partial.exists():
                partial.unlink()  # a writer killed before its file was announced: it holds nothing committed
            self._segment = self._new_segment(partial)
            self._segment.start_swmr()
            os.replace(partial, final)  # readers only ever see a file already in SWMR mode
            self._segment.path = final
            open_event["file"] = final.name
        announce(self.directory, open_event)

    # -- set-up --------------------------------------------------------------------------------------------
    def _refuse_existing(self) -> None:
        try:  # before anything is created: a planted link or FIFO here is refused, never followed
            safe_fs.check_regular_or_absent(self.directory / SEGMENTS_FILE)
        except OSError as exc:
            raise StoreError(safe_fs.describe_os_error(self.directory / SEGMENTS_FILE, exc)) from None
        events, _ = read_events(self.directory)
        if any(ev.get("event") == "open" and ev.get("kind") == self.kind for ev in events) or \
                (self.directory / f"{self.kind}.h5").exists():
            raise StoreError(f"{self.directory}: already holds a {self.kind!r} store (runs are never overwritten)")

    def _build_meta(self, meta: Dict[str, Any]) -> Dict[str, Any]:
        run_meta = dict(meta.get("run_meta") or {})
        for key, value in meta.items():
            if key not in _META_KEYS and key != "run_meta":
                run_meta[key] = value
        try:
            run_meta_text = json.dumps(run_meta, sort_keys=True, default=str)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"meta.run_meta: not JSON-serialisable ({exc})") from None
        return {
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "rank": int(meta.get("rank", 0)),
            "world_size": int(meta.get("world_size", 1)),
            "framework": str(meta.get("framework", "")),
            "schema_version": int(meta.get("schema_version", 1)),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "mode": self.mode,
            "run_meta": run_meta_text,
        }

    def _new_segment(self, path: Path) -> SegmentFile:
        try:
            return SegmentFile(path, swmr=self.mode == SWMR, locking=self._locking, tables=self.tables,
                               arrays=self._arrays, meta_attrs=self._meta_attrs, base=self._committed.copy(),
                               chunk_rows=self._chunk_rows, pool_chunk_bytes=self._pool_chunk_bytes,
                               compression=self._compression)
        except OSError as exc:
            raise StoreError(f"{path}: cannot create ({exc})") from None

    def _open_segment(self) -> SegmentFile:
        if self._segment is None:
            partial = self.directory / f"{self.kind}-seg{self._segment_index}.h5.partial"
            if partial.exists():
                partial.unlink()  # left by an earlier writer that was killed; it was never announced
            self._segment = self._new_segment(partial)
        return self._segment

    # -- appends -------------------------------------------------------------------------------------------
    def append(self, table: str, **columns: Any) -> np.ndarray:
        """Append a batch of rows (lists or arrays of equal length; scalars apply to every row). Returns the
        global row numbers of the new rows, which other tables may reference."""
        self._check_open()
        stage = self._stages.get(table)
        if stage is None:
            raise StoreError(f"store {self.kind!r} has no table {table!r} (tables: {', '.join(self._stages)})")
        rows = stage.append(self._strings, columns)
        limit = TABLE_STAGE_ROWS if self.mode == SWMR else PER_STEP_STAGE_ROWS
        if stage.staged_rows >= limit or self._strings.staged >= limit:
            self._write_staged()
        return rows

    def put_array(self, array: np.ndarray, dtype_name: Optional[str] = None) -> Optional[TensorRef]:
        """Pack a tensor into the pool of its storage dtype. bfloat16 (and other dtypes numpy lacks) arrive as
        their bits in an unsigned array, with ``dtype_name`` naming the logical dtype. Returns None once the
        disk budget is reached."""
        self._check_open()
        arr = np.asarray(array)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        pool_name = arr.dtype.name
        pool = self._pools.get(pool_name)
        if pool is None:
            raise StoreError(f"put_array: dtype {arr.dtype} has no pool (pools: {', '.join(POOL_DTYPES)})")
        if self._over_budget(arr.nbytes):
            return None
        flat = np.ascontiguousarray(arr).reshape(-1)
        offset = pool.count
        if flat.size > pool.capacity // 2:  # large: write it straight from the caller's memory
            try:
                self._write_pool(pool_name)
                self._open_segment().write_pool(pool_name, flat)
            except OSError as exc:
                raise StoreError(f"{self.directory}: write failed ({exc})") from None
            pool.count += flat.size
            self._bytes_written += flat.nbytes
        else:
            if not pool.fits(flat.size):
                self._write_pool(pool_name)
            pool.stage(flat)
        return TensorRef(pool_name, int(offset), int(flat.size), tuple(int(s) for s in arr.shape),
                         dtype_name or pool_name)

    def _over_budget(self, nbytes: int) -> bool:
        if self.disk_budget is None:
            return False
        if self._budget_hit:
            return True
        if self.bytes_written + nbytes <= self.disk_budget:
            return False
        self._budget_hit = True
        warnings.warn(f"{self.directory}: disk budget of {self.disk_budget} bytes reached; tensors are no longer "
                      f"stored (statistics continue)", StoreWarning, stacklevel=3)
        return True

    # -- writes and commits --------------------------------------------------------------------------------
    def _write_pool(self, name: str, final: bool = False) -> None:
        pool = self._pools[name]
        if pool.fill:
            data = pool.take()
            self._open_segment().write_pool(name, data, final)
            self._bytes_written += data.nbytes

    def _write_staged(self, final: bool = False) -> None:
        """Hand staged rows, strings and tensors to HDF5; ``final`` at commit (sizes per-step chunks to fit)."""
        try:
            for name, stage in self._stages.items():
                if stage.staged_rows:
                    nbytes = stage.staged_bytes
                    self._open_segment().write_table(name, stage.take(), final)
                    self._bytes_written += nbytes
            if self._strings.staged:
                blob, lengths = self._strings.take()
                self._open_segment().write_strings(blob, lengths, final)
                self._bytes_written += len(blob) + 16 * len(lengths)
            for name in self._pools:
                self._write_pool(name, final)
        except OSError as exc:
            raise StoreError(f"{self.directory}: write failed ({exc})") from None

    def _counts(self) -> np.ndarray:
        counts = [self._stages[t.name].count for t in self.tables] + [self._strings.count]
        counts += [self._pools[d].count for d in POOL_DTYPES]
        return np.array(counts, dtype=np.int64)

    def commit(self, step: int, **info: Any) -> None:
        """End ``step``: write what is staged and make it visible and durable. ``info`` (JSON-able) is kept
        with the commit."""
        self._check_open()
        step = int(step)
        info_id = self._strings.add(json.dumps(info, sort_keys=True, default=str)) if info else -1
        self._write_staged(final=True)
        counts = self._counts()
        seg = self._open_segment()
        try:
            if self.mode == SWMR:
                seg.flush()  # data first, then the commit row that makes it visible
                seg.write_commit(step, info_id, counts)
                seg.flush()
            else:
                seg.write_commit(step, info_id, counts)
                self._finish_segment(seg, step, counts, info)
        except OSError as exc:
            raise StoreError(f"{seg.path}: commit failed ({exc})") from None
        self._committed = counts
        self._last_step = step
        self.commits += 1

    def _finish_segment(self, seg: SegmentFile, step: int, counts: np.ndarray, info: Dict[str, Any]) -> None:
        seg.close()
        self._segment = None
        final = self.directory / f"{self.kind}-s{step}.h5"
        k = 1
        while final.exists():
            final = self.directory / f"{self.kind}-s{step}.{k}.h5"
            k += 1
        os.replace(seg.path, final)
        announce(self.directory, {
            "event": "segment", "kind": self.kind, "file": final.name, "index": self._segment_index,
            "step": step, "base": [int(x) for x in self._committed], "counts": [int(x) for x in counts],
            "info": json.loads(json.dumps(info, default=str)), "time": time.time()})
        self._segment_index += 1

    def close(self, status: str = "finished") -> None:
        """Commit what is pending (under the last committed step, 0 if none), close the file and announce
        ``status`` (``finished``, ``failed``, ``interrupted``, ...)."""
        if self._closed:
            return
        try:
            pending = any(s.staged_rows for s in self._stages.values()) or self._strings.staged or \
                any(p.fill for p in self._pools.values()) or not np.array_equal(self._counts(), self._committed)
            if pending:
                self.commit(self._last_step if self._last_step is not None else 0)
        finally:
            self._closed = True
            if self._segment is not None:
                self._segment.close()
                if self._segment.path.name.endswith(".partial"):
                    os.unlink(self._segment.path)
                self._segment = None
            announce(self.directory, {"event": "close", "kind": self.kind, "status": str(status),
                                      "commits": self.commits, "bytes": self.bytes_written, "time": time.time()})

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.directory}: the {self.kind!r} store is closed")

    # -- counters ------------------------------------------------------------------------------------------
    @property
    def bytes_written(self) -> int:
        """Bytes the store holds so far, uncompressed (written and staged)."""
        staged = sum(s.staged_bytes for s in self._stages.values())
        staged += sum(p.fill * p.dtype.itemsize for p in self._pools.values())
        return self._bytes_written + staged

    @property
    def rows(self) -> Dict[str, int]:
        """Rows appended per table."""
        return {name: stage.count for name, stage in self._stages.items()}

    @property
    def budget_exhausted(self) -> bool:
        return self._budget_hit

    def file_bytes(self) -> int:
        """Bytes on disk of this store's files so far."""
        total = 0
        names = (f"{self.kind}.h5", f"{self.kind}-s*.h5", f"{self.kind}-seg*.h5.partial")
        for p in (p for pattern in names for p in self.directory.glob(pattern)):
            try:
                total += p.stat().st_size
            except OSError:
                pass
        return total

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("failed" if exc_type is not None else "finished")

    def __repr__(self) -> str:
        return f"StoreWriter({str(self.directory)!r}, kind={self.kind!r}, mode={self.mode!r})"
