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
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, NoReturn, Optional, Tuple

import numpy as np

from engines import safe_fs
from engines.signals import critical

from . import h5io, space
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
from .writer_space import SpaceGuard, unlink

_META_KEYS = ("rank", "world_size", "framework", "schema_version")


class StoreWriter(SpaceGuard):
    """Write one store of ``kind`` into ``directory`` (a rank folder).

    ``mode``: ``"auto"`` (SWMR on local file systems, per-step files on network ones), ``"swmr"`` or
    ``"per_step"``; the ``PROBE_TUI_STORE_MODE`` environment variable overrides it.

    Before staged data goes to HDF5 the writer checks that it fits: in ``disk_budget`` (bytes of the store's files)
    and in the free space of the file system (less ``space.RESERVE_BYTES``). Data that would not fit is not
    written: the store stops (``stopped`` says why: ``disk_budget``, ``disk_full`` or ``write_failed``), says so
    once (``on_stop(reason, message)``, else a ``StoreWarning``), keeps every committed step readable and ignores
    later appends and commits; ``close`` records the reason as the store's status. Training code never sees an
    exception from a full disk.
    """

    def __init__(self, directory: safe_fs.PathLike, kind: str, tables: Iterable[TableSpec], *,
                 meta: Optional[Dict[str, Any]] = None, mode: str = "auto", compression: str = "none",
                 compression_level: Optional[int] = None, disk_budget: Optional[int] = None,
                 chunk_rows: int = TABLE_CHUNK_ROWS, pool_chunk_bytes: int = POOL_CHUNK_BYTES,
                 detector: Optional[Callable[[Path], str]] = None) -> None:
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
        if disk_budget is not None:  # a small budget must not go on first chunks that are mostly empty
            chunk_rows, pool_chunk_bytes = space.budget_chunks(disk_budget, self.tables, chunk_rows, pool_chunk_bytes)
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
        self._column_sizes_cache: Dict[str, List[Tuple[str, int]]] = {}  # SpaceGuard._column_sizes
        self._meta_attrs = self._build_meta(meta or {})
        self._committed = np.zeros(len(self._arrays), dtype=np.int64)
        self._segment: Optional[SegmentFile] = None
        self._segment_index = 0
        self._last_step: Optional[int] = None
        self._closed = False
        self._bytes_written = 0
        self._closed_bytes = 0  # bytes of the per-step segments closed so far
        self.stopped: Optional[str] = None  # why the store stopped taking data (see the class docstring)
        self.stop_message = ""
        self.on_stop: Optional[Callable[[str, str], None]] = None
        self._abandoned = False  # the SWMR file was let go of without its closing flush (space.abandon)
        self.commits = 0
        open_event = {"event": "open", "kind": self.kind, "mode": self.mode, "pid": os.getpid(),
                      "host": socket.gethostname(), "time": time.time(), "arrays": self._arrays,
                      "meta": self._meta_attrs, "tables": [t.to_json() for t in self.tables]}
        if self.mode == SWMR:
            final = self.directory / f"{self.kind}.h5"
            partial = final.with_name(final.name + ".partial")
            if partial.exists():
                partial.unlink()  # a writer killed before its file was announced: it holds nothing committed
            try:
                self._segment = self._new_segment(partial)
                self._segment.start_swmr()
                os.replace(partial, final)  # readers only ever see a file already in SWMR mode
            except (OSError, RuntimeError) as exc:
                self._give_up_opening(partial, exc)
            self._segment.path = final
            open_event["file"] = final.name
        try:
            announce(self.directory, open_event)
        except OSError as exc:
            self._give_up_opening(self.directory / f"{self.kind}.h5", exc)

    def _give_up_opening(self, path: Path, exc: BaseException) -> NoReturn:
        if self._segment is not None:
            self._segment.abandon()
            self._segment = None
        try:
            os.unlink(path)
        except OSError:
            pass
        full, code = space.is_no_space(exc), space.errno_of(exc)
        detail = os.strerror(code) if code is not None else space.one_line(exc)
        raise StoreError(f"{path}: {'the disk is full' if full else 'cannot create it'} ({detail})",
                         reason="disk_full" if full else "") from None

    # -- set-up --------------------------------------------------------------------------------------------
    def _refuse_existing(self) -> None:
        try:  # before anything is created: a planted link or FIFO here is refused, never followed
            safe_fs.check_regular_or_absent(self.directory / SEGMENTS_FILE)
        except OSError as exc:
            raise StoreError(safe_fs.describe_os_error(self.directory / SEGMENTS_FILE, exc)) from None
        events, _ = read_events(self.directory)
        if any(ev.get("event") == "open" and ev.get("kind") == self.kind for ev in events) or \
                (self.directory / f"{self.kind}.h5").exists():
            raise StoreError(f"{self.directory}: already holds a {self.kind!r} store (runs are never overwritten; "
                             f"is another process writing this rank?)", reason="exists")

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
        """Raises the OSError/RuntimeError of h5py (the caller decides what a failure means)."""
        return SegmentFile(path, swmr=self.mode == SWMR, locking=self._locking, tables=self.tables,
                           arrays=self._arrays, meta_attrs=self._meta_attrs, base=self._committed.copy(),
                           chunk_rows=self._chunk_rows, pool_chunk_bytes=self._pool_chunk_bytes,
                           compression=self._compression)

    def _open_segment(self) -> SegmentFile:
        if self._segment is None:
            partial = self.directory / f"{self.kind}-seg{self._segment_index}.h5.partial"
            if partial.exists():
                partial.unlink()  # left by an earlier writer that was killed; it was never announced
            try:
                self._segment = self._new_segment(partial)
            except BaseException:
                unlink(partial)
                raise
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
        if self.stopped:
            self._discard_staged()
            return rows
        limit = TABLE_STAGE_ROWS if self.mode == SWMR else PER_STEP_STAGE_ROWS
        if stage.staged_rows >= limit or self._strings.staged >= limit:
            self._write_staged()
        return rows

    def put_array(self, array: np.ndarray, dtype_name: Optional[str] = None) -> Optional[TensorRef]:
        """Pack a tensor into the pool of its storage dtype. bfloat16 (and other dtypes numpy lacks) arrive as
        their bits in an unsigned array, with ``dtype_name`` naming the logical dtype. Returns None once the
        store has stopped (disk budget reached, disk full)."""
        self._check_open()
        if self.stopped:
            return None
        arr = np.asarray(array)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        pool_name = arr.dtype.name
        pool = self._pools.get(pool_name)
        if pool is None:
            raise StoreError(f"put_array: dtype {arr.dtype} has no pool (pools: {', '.join(POOL_DTYPES)})")
        flat = np.ascontiguousarray(arr).reshape(-1)
        offset = pool.count
        if flat.size > pool.capacity // 2:  # large: write it straight from the caller's memory
            if not self._write_staged(extra=(pool_name, flat)):
                return None
            pool.count += flat.size
        else:
            if not pool.fits(flat.size) and not self._write_staged():
                return None
            pool.stage(flat)
        return TensorRef(pool_name, int(offset), int(flat.size), tuple(int(s) for s in arr.shape),
                         dtype_name or pool_name)

    # -- writes and commits --------------------------------------------------------------------------------
    def _write_staged(self, final: bool = False, extra: Optional[Tuple[str, np.ndarray]] = None) -> bool:
        """Hand staged rows, strings and tensors (and ``extra``, ``(pool, elements)`` written straight from the
        caller's memory) to HDF5; ``final`` at commit (sizes per-step chunks to fit). False when they do not fit
        or the write failed: the store has stopped and dropped them. A stop signal waits for it to end."""
        with critical():
            return self._write_staged_now(final, extra)

    def _write_staged_now(self, final: bool, extra: Optional[Tuple[str, np.ndarray]]) -> bool:
        if self.stopped or not self._room(final, extra):
            self._discard_staged()
            return False
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
            for name, pool in self._pools.items():
                if pool.fill:
                    data = pool.take()
                    self._open_segment().write_pool(name, data, final)
                    self._bytes_written += data.nbytes
            if extra is not None:
                self._open_segment().write_pool(extra[0], extra[1])
                self._bytes_written += extra[1].nbytes
        except (OSError, RuntimeError) as exc:
            self._failed(exc)
            return False
        return True

    def _counts(self) -> np.ndarray:
        counts = [self._stages[t.name].count for t in self.tables] + [self._strings.count]
        counts += [self._pools[d].count for d in POOL_DTYPES]
        return np.array(counts, dtype=np.int64)

    def commit(self, step: int, **info: Any) -> None:
        """End ``step``: write what is staged and make it visible and durable. ``info`` (JSON-able) is kept
        with the commit."""
        self._check_open()
        with critical():  # a stop signal waits for the commit to end: never half a step under a commit row
            self._commit(int(step), info)

    def _commit(self, step: int, info: Dict[str, Any]) -> None:
        if self.stopped:
            self._discard_staged()
            return
        info_id = self._strings.add(json.dumps(info, sort_keys=True, default=str)) if info else -1
        if not self._write_staged(final=True):
            return
        counts = self._counts()
        try:
            seg = self._open_segment()
            if self.mode == SWMR:
                seg.flush()  # data first, then the commit row that makes it visible
                seg.write_commit(step, info_id, counts)
                seg.flush()
            else:
                seg.write_commit(step, info_id, counts)
                self._finish_segment(seg, step, counts, info)
        except (OSError, RuntimeError) as exc:
            self._failed(exc)
            return
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
        try:
            announce(self.directory, {
                "event": "segment", "kind": self.kind, "file": final.name, "index": self._segment_index,
                "step": step, "base": [int(x) for x in self._committed], "counts": [int(x) for x in counts],
                "info": json.loads(json.dumps(info, default=str)), "time": time.time()})
        except OSError:
            unlink(final)  # never announced, so never committed: give its space back
            raise
        self._segment_index += 1
        try:
            self._closed_bytes += final.stat().st_size
        except OSError:
            pass

    def close(self, status: str = "finished") -> None:
        """Commit what is pending (under the last committed step, 0 if none), close the file and announce
        ``status`` (``finished``, ``failed``, ``interrupted``, ...)."""
        if self._closed:
            return
        try:
            pending = any(s.staged_rows for s in self._stages.values()) or self._strings.staged or \
                any(p.fill for p in self._pools.values()) or not np.array_equal(self._counts(), self._committed)
            if pending and not self.stopped:
                self.commit(self._last_step if self._last_step is not None else 0)
        finally:
            self._closed = True
            seg, self._segment = self._segment, None
            if seg is not None:
                self._let_go(seg, abandon=False)
            event: Dict[str, Any] = {"event": "close", "kind": self.kind, "status": self.stopped or str(status),
                                     "commits": self.commits, "bytes": self.bytes_written, "time": time.time()}
            if self.stopped:
                event["stopped"] = self.stop_message
            if self._abandoned:
                event["unclosed"] = True  # the file keeps HDF5's "open for SWMR write" flag: read it with swmr=True
            try:
                announce(self.directory, event)
            except OSError as exc:
                warnings.warn(f"{self.directory}: could not record that the {self.kind} store closed "
                              f"({space.one_line(exc)})", StoreWarning, stacklevel=2)

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

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close("failed" if exc_type is not None else "finished")

    def __repr__(self) -> str:
        return f"StoreWriter({str(self.directory)!r}, kind={self.kind!r}, mode={self.mode!r})"

