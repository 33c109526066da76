"""The part of ``StoreWriter`` that keeps a store within its disk budget and the free space, and stops it (never
the training) when a step does not fit or a write fails (docs/FORMAT.md, "When the disk fills")."""

import os
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from engines import safe_fs

from . import space
from .errors import StoreWarning
from .fs import SWMR
from .segment import COMMIT_CHUNK_ROWS, STRING_CHUNK_BYTES, SegmentFile
from .spec import TableSpec, table_key
from .staging import PoolStage, StringTable, TableStage


class SpaceGuard:
    """Mixed into ``StoreWriter``; uses its staging (``_stages``, ``_strings``, ``_pools``), segment and counters."""

    # Set by ``StoreWriter.__init__`` (declared here so that the type checker knows the mixin's state).
    directory: Path
    kind: str
    mode: str
    tables: List[TableSpec]
    disk_budget: Optional[int]
    commits: int
    stopped: Optional[str]
    stop_message: str
    on_stop: Optional[Callable[[str, str], None]]
    _compression: Dict[str, Any]
    _chunk_rows: int
    _pool_chunk_bytes: int
    _arrays: List[str]
    _stages: Dict[str, TableStage]
    _strings: StringTable
    _pools: Dict[str, PoolStage]
    _column_sizes_cache: Dict[str, List[Tuple[str, int]]]
    _segment: Optional[SegmentFile]
    _last_step: Optional[int]
    _closed_bytes: int
    _abandoned: bool

    def fits_budget(self, rows: Dict[str, int], elements: Dict[str, int]) -> bool:
        """Would a step adding ``rows`` (per table) and tensor ``elements`` (per pool) to what is staged stay
        within ``disk_budget``? Asks, changes nothing (callers drop a step's tensors before the store stops)."""
        room = self.room_left()
        return room is None or self._growth(True, self._pending_writes(None, True, rows, elements)) <= room

    def _growth(self, final: bool, writes: List[space.Write]) -> int:
        seg = self._segment
        grow = space.growth(writes, seg.extents() if seg is not None else {}, swmr=self.mode == SWMR,
                            compressed=bool(self._compression), final=final)
        return grow + (space.NEW_FILE_BYTES if seg is None and self.mode != SWMR else 0)

    def _room(self, final: bool, extra: Optional[Tuple[str, np.ndarray]]) -> bool:
        """Does what is staged (and ``extra``) fit in the budget and on the disk? If not, stop the store."""
        writes = self._pending_writes(extra, final)
        if not writes:
            return True
        grow = self._growth(final, writes)
        size = space.size_text
        room = self.room_left()
        if room is not None and grow > room:
            self._stop("disk_budget", f"{self.directory}: disk_budget of {size(self.disk_budget or 0)} reached: the next "
                                      f"step ({size(grow)}) would pass it, so the {self.kind} store "
                                      f"stopped{self._kept()}")
            return False
        free = space.free_bytes(self.directory)
        if free is not None and grow + space.RESERVE_BYTES > free:
            self._stop("disk_full", f"{self.directory}: the disk is full ({size(free)} free, the next step needs "
                                    f"{size(grow)}): the {self.kind} store stopped{self._kept()}")
            return False
        return True

    def _pending_writes(self, extra: Optional[Tuple[str, np.ndarray]], final: bool,
                        more_rows: Optional[Dict[str, int]] = None,
                        more_elements: Optional[Dict[str, int]] = None) -> List[space.Write]:
        writes: List[space.Write] = []
        for t in self.tables:
            n = self._stages[t.name].staged_rows + (more_rows or {}).get(t.name, 0)
            if n:
                chunk = self._chunk_rows
                writes += [(path, n, row_bytes, chunk) for path, row_bytes in self._column_sizes(t)]
        n = self._strings.staged
        if n:
            writes += [("/strings/data", self._strings.staged_bytes, 1, STRING_CHUNK_BYTES),
                       ("/strings/offset", n, 8, self._chunk_rows), ("/strings/length", n, 8, self._chunk_rows)]
        for name, pool in self._pools.items():
            n = pool.fill + (extra[1].size if extra is not None and extra[0] == name else 0)
            n += (more_elements or {}).get(name, 0)
            if n:
                size = pool.dtype.itemsize
                writes.append((f"/pools/{name}", n, size, max(1, self._pool_chunk_bytes // size)))
        if final:  # the commit row
            writes.append(("/commits/counts", 1, 8 * len(self._arrays), COMMIT_CHUNK_ROWS))
        return writes

    def _column_sizes(self, table: TableSpec) -> List[Tuple[str, int]]:
        """``(dataset path, bytes a row)`` of each column of ``table``, worked out once (checked at every commit)."""
        sizes = self._column_sizes_cache.get(table.name)
        if sizes is None:
            sizes = self._column_sizes_cache[table.name] = [(f"/{table_key(table.name)}/{c.name}",
                                          c.storage_dtype.itemsize * (c.width or 1)) for c in table.columns]
        return sizes

    def _kept(self) -> str:
        if not self.commits:
            return "; no step is complete"
        return f"; the {self.commits} committed step(s), up to step {self._last_step}, stay readable"

    def _failed(self, exc: BaseException) -> None:
        """A write failed: HDF5's handle of the file is no longer usable. Let go of it and stop."""
        code = space.errno_of(exc)
        detail = os.strerror(code) if code is not None else space.one_line(exc)
        if isinstance(exc, safe_fs.UnsafePathError):  # a planted link: say which path, not just the errno
            detail = space.one_line(exc)
        if space.is_no_space(exc):
            reason, what = "disk_full", "the disk is full"
        else:
            reason, what = "write_failed", "writing failed"
        self._stop(reason, f"{self.directory}: {what} ({detail}): the {self.kind} store stopped{self._kept()}",
                   abandon=True)

    def _stop(self, reason: str, message: str, abandon: bool = False) -> None:
        if self.stopped:
            return
        self.stopped, self.stop_message = reason, message
        self._discard_staged()
        seg, self._segment = self._segment, None
        if seg is not None:
            self._let_go(seg, abandon)
        if self.on_stop is not None:
            self.on_stop(reason, message)
        else:
            warnings.warn(message, StoreWarning, stacklevel=4)

    def _let_go(self, seg: SegmentFile, abandon: bool) -> None:
        """Close ``seg`` (without writing to it when ``abandon``); a per-step file in progress is removed."""
        if not abandon:
            try:
                seg.close()
            except Exception:  # its closing flush failed: the disk filled meanwhile
                abandon = True
        if abandon:
            seg.abandon()
            self._abandoned = self._abandoned or self.mode == SWMR
        if seg.path.name.endswith(".partial"):  # a per-step segment never announced: nothing committed in it
            unlink(seg.path)

    def _discard_staged(self) -> None:
        for stage in self._stages.values():
            if stage.staged_rows:
                stage.take()
        if self._strings.staged:
            self._strings.take()
        for pool in self._pools.values():
            pool.fill = 0

    def room_left(self) -> Optional[int]:
        """Bytes ``disk_budget`` still allows the store's files (None: no budget)."""
        if self.disk_budget is None:
            return None
        seg = self._segment
        return self.disk_budget - self._closed_bytes - ((seg.size_on_disk() or 0) if seg is not None else 0)

    @property
    def budget_exhausted(self) -> bool:
        return self.stopped == "disk_budget"


def unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
